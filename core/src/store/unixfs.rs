//! The UnixFS file importer: bytes in, blocks and a root CID out, exactly as Kubo computes them
//! with `ipfs add --cid-version=1 --raw-leaves --chunker=size-262144` (Kubo's default chunking
//! and layout, with CIDv1 and raw leaves; also ipfs-unixfs-importer with the options in
//! `core/tests/reference/unixfs-cid.mjs`). Kubo's newer `unixfs-v1-2025` profile uses the same
//! rules with 1 MiB chunks and 1024 links; [`Chunking`] can express it, which lets the tests
//! check our importer against Kubo's own test vectors for that profile too.
//!
//! The layout rules that decide the CID, taken from Kubo's balanced layout
//! (boxo `ipld/unixfs/importer/balanced`):
//!
//! * the input is cut into fixed 256 KiB chunks, the last one shorter;
//! * each chunk is a raw block (CIDv1, codec raw 0x55, sha2-256);
//! * an empty file is one empty raw block, and a one-chunk file is that raw block itself;
//! * otherwise leaves are grouped 174 to a dag-pb node (codec 0x70) whose Data is UnixFS
//!   `{Type: File, filesize, blocksizes}`, and those nodes are grouped 174 to a node again, level
//!   by level, until one root is left. Every group is full except the last one on each level,
//!   and a last group of one still gets its own node (only a whole-file single leaf is special).
//!
//! The importer is incremental: it keeps at most one partial chunk plus one pending node per DAG
//! level (174 links each), so memory does not grow with the file.

use bytes::{Bytes, BytesMut};
use cid::Cid;
use multihash::Multihash;
use sha2::{Digest, Sha256};

use super::dag_pb::{DecodeError, PbLink, PbNode, Reader, put_bytes_field, put_varint_field};

/// Size of every chunk but the last (Kubo's `size-262144`).
pub const CHUNK_SIZE: usize = 262_144;
/// Most links in one node of the balanced layout (Kubo's and js-ipfs's default).
pub const MAX_LINKS: usize = 174;
/// Multicodec of raw blocks.
pub const RAW: u64 = 0x55;
/// Multicodec of dag-pb blocks.
pub const DAG_PB: u64 = 0x70;
/// Multihash code of sha2-256.
pub const SHA2_256: u64 = 0x12;

/// One encoded block and the CID that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The block's CID (CIDv1, sha2-256).
    pub cid: Cid,
    /// The block's encoded bytes.
    pub data: Bytes,
}

/// CIDv1 of a block with the given codec, hashed with sha2-256.
pub fn block_cid(codec: u64, data: &[u8]) -> Cid {
    let digest = Sha256::digest(data);
    let hash = Multihash::<64>::wrap(SHA2_256, &digest).expect("a 32-byte digest fits 64 bytes");
    Cid::new_v1(codec, hash)
}

/// CIDv1 of a raw block.
pub fn raw_cid(data: &[u8]) -> Cid {
    block_cid(RAW, data)
}

/// UnixFS node type (the `Type` field of the UnixFS `Data` message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// Raw bytes.
    Raw,
    /// A directory: its links are its entries.
    Directory,
    /// A file or a piece of one: its links are its chunks; the only type Shardwork writes.
    File,
    /// Metadata wrapping a single link.
    Metadata,
    /// A symbolic link: the data is its target.
    Symlink,
    /// One shard of a large directory's hash array mapped trie (HAMT).
    HamtShard,
}

impl DataType {
    fn code(self) -> u64 {
        match self {
            DataType::Raw => 0,
            DataType::Directory => 1,
            DataType::File => 2,
            DataType::Metadata => 3,
            DataType::Symlink => 4,
            DataType::HamtShard => 5,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => DataType::Raw,
            1 => DataType::Directory,
            2 => DataType::File,
            3 => DataType::Metadata,
            4 => DataType::Symlink,
            5 => DataType::HamtShard,
            _ => return None,
        })
    }
}

/// The UnixFS `Data` message carried in a dag-pb node's Data field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixFsData {
    /// The node's type.
    pub kind: DataType,
    /// Bytes in the node itself; absent from the nodes Shardwork writes (the leaves hold them).
    pub data: Option<Vec<u8>>,
    /// Size of the file under this node, in bytes.
    pub filesize: Option<u64>,
    /// File size under each link, in link order.
    pub blocksizes: Vec<u64>,
}

impl UnixFsData {
    /// Encodes in field order; `blocksizes` unpacked, as proto2 (and so Kubo) writes them.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.blocksizes.len() * 4);
        put_varint_field(&mut out, 1, self.kind.code());
        if let Some(data) = &self.data {
            put_bytes_field(&mut out, 2, data);
        }
        if let Some(size) = self.filesize {
            put_varint_field(&mut out, 3, size);
        }
        for size in &self.blocksizes {
            put_varint_field(&mut out, 4, *size);
        }
        out
    }

    /// Reads the message strictly: an unknown field or a missing `Type` is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(bytes, "UnixFS Data");
        let mut kind = None;
        let mut out = UnixFsData {
            kind: DataType::Raw,
            data: None,
            filesize: None,
            blocksizes: Vec::new(),
        };
        while !reader.done() {
            match reader.key()? {
                (1, 0) => {
                    let code = reader.varint()?;
                    kind = Some(
                        DataType::from_code(code)
                            .ok_or_else(|| reader.error(&format!("unknown Type {code}")))?,
                    );
                }
                (2, 2) => out.data = Some(reader.bytes()?.to_vec()),
                (3, 0) => out.filesize = Some(reader.varint()?),
                (4, 0) => out.blocksizes.push(reader.varint()?),
                // Other encoders may pack repeated varints; both forms mean the same list.
                (4, 2) => {
                    let mut packed = Reader::new(reader.bytes()?, "UnixFS Data blocksizes");
                    while !packed.done() {
                        out.blocksizes.push(packed.varint()?);
                    }
                }
                // hashType, fanout, mode: meaningful for directories and permissions only.
                (5..=7, 0) => {
                    reader.varint()?;
                }
                // mtime: metadata that does not change the bytes of the file.
                (8, 2) => {
                    reader.bytes()?;
                }
                (field, wire) => {
                    return Err(reader.error(&format!("unexpected field {field} wire type {wire}")));
                }
            }
        }
        out.kind = kind.ok_or_else(|| reader.error("missing required Type"))?;
        Ok(out)
    }
}

/// Chunk size and fan-out of the balanced layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunking {
    /// Bytes per chunk (every chunk but the last).
    pub chunk_size: usize,
    /// Most links in one node.
    pub max_links: usize,
}

impl Chunking {
    /// What Shardwork stores with: Kubo's `size-262144` chunker and 174 links per node.
    pub const KUBO: Chunking = Chunking {
        chunk_size: CHUNK_SIZE,
        max_links: MAX_LINKS,
    };
    /// Kubo's `unixfs-v1-2025` profile (IPIP-499): 1 MiB chunks, 1024 links per node.
    pub const UNIXFS_V1_2025: Chunking = Chunking {
        chunk_size: 1 << 20,
        max_links: 1024,
    };
}

/// A finished import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// The root CID: the file's CID.
    pub root: Cid,
    /// File size in bytes.
    pub size: u64,
    /// Blocks in the DAG (leaves and nodes, counting a repeated leaf each time it appears).
    pub blocks: u64,
}

/// A subtree waiting for its parent: what a link to it must record.
#[derive(Debug, Clone, Copy)]
struct Child {
    cid: Cid,
    /// Cumulative encoded size (the link's Tsize).
    tsize: u64,
    /// File bytes under it (the parent's blocksize entry).
    filesize: u64,
}

/// Incremental Kubo-compatible importer. Feed it with [`FileImporter::write`], drain the blocks
/// it made with [`FileImporter::take_blocks`] as you go, and call [`FileImporter::finish`].
#[derive(Debug)]
pub struct FileImporter {
    chunking: Chunking,
    partial: BytesMut,
    /// `levels[0]` holds leaves, `levels[1]` nodes over leaves, and so on.
    levels: Vec<Vec<Child>>,
    leaves: u64,
    blocks: u64,
    size: u64,
    /// Blocks made but not yet taken; `None` when only the CID is wanted.
    made: Option<Vec<Block>>,
}

impl Default for FileImporter {
    fn default() -> Self {
        Self::new()
    }
}

impl FileImporter {
    /// An importer that keeps every block it makes for the caller to store.
    pub fn new() -> Self {
        Self::with_chunking(Chunking::KUBO)
    }

    /// An importer with other chunking (for checks against other profiles' test vectors).
    pub fn with_chunking(chunking: Chunking) -> Self {
        assert!(
            chunking.chunk_size > 0 && chunking.max_links > 1,
            "degenerate chunking {chunking:?}"
        );
        FileImporter {
            chunking,
            partial: BytesMut::new(),
            levels: Vec::new(),
            leaves: 0,
            blocks: 0,
            size: 0,
            made: Some(Vec::new()),
        }
    }

    /// An importer that only computes the CID (`ipfs add --only-hash`): blocks are dropped as
    /// soon as they are hashed.
    pub fn hash_only() -> Self {
        Self::new().without_blocks()
    }

    /// Drops blocks as soon as they are hashed, keeping only what the CID needs.
    pub fn without_blocks(self) -> Self {
        FileImporter { made: None, ..self }
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds the next bytes of the file. Whole chunks of `data` become leaves without a copy.
    pub fn write(&mut self, mut data: Bytes) {
        self.size += data.len() as u64;
        let chunk_size = self.chunking.chunk_size;
        if !self.partial.is_empty() {
            let take = (chunk_size - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data.split_to(take));
            if self.partial.len() == chunk_size {
                let chunk = std::mem::take(&mut self.partial).freeze();
                self.leaf(chunk);
            }
        }
        while data.len() >= chunk_size {
            let chunk = data.split_to(chunk_size);
            self.leaf(chunk);
        }
        if !data.is_empty() {
            self.partial.reserve(chunk_size);
            self.partial.extend_from_slice(&data);
        }
    }

    /// Blocks made since the last call, in the order they were made (children before parents).
    pub fn take_blocks(&mut self) -> Vec<Block> {
        self.made.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Ends the file: emits the last chunk and closes every level up to the root. Returns the
    /// result and the blocks not yet taken, the root last.
    pub fn finish(mut self) -> (Imported, Vec<Block>) {
        if !self.partial.is_empty() || self.leaves == 0 {
            // An empty file is one empty raw leaf, as in Kubo's balanced layout.
            let chunk = std::mem::take(&mut self.partial).freeze();
            self.leaf(chunk);
        }
        let mut level = 0;
        let root = loop {
            let top = self.levels.len() - 1;
            if level == top && self.levels[level].len() == 1 {
                break self.levels[level][0];
            }
            let children = std::mem::take(&mut self.levels[level]);
            let node = self.node(&children);
            self.push(level + 1, node);
            level += 1;
        };
        let imported = Imported {
            root: root.cid,
            size: self.size,
            blocks: self.blocks,
        };
        (imported, self.take_blocks())
    }

    fn leaf(&mut self, chunk: Bytes) {
        let cid = raw_cid(&chunk);
        let len = chunk.len() as u64;
        self.leaves += 1;
        self.blocks += 1;
        if let Some(made) = &mut self.made {
            made.push(Block { cid, data: chunk });
        }
        self.push(
            0,
            Child {
                cid,
                tsize: len,
                filesize: len,
            },
        );
    }

    /// Appends `child` to `level`, first closing that level's node if it is already full.
    fn push(&mut self, level: usize, child: Child) {
        let max_links = self.chunking.max_links;
        if self.levels.len() <= level {
            self.levels.push(Vec::with_capacity(max_links));
        }
        if self.levels[level].len() == max_links {
            let full = std::mem::replace(&mut self.levels[level], Vec::with_capacity(max_links));
            let node = self.node(&full);
            self.push(level + 1, node);
        }
        self.levels[level].push(child);
    }

    /// Encodes the dag-pb file node over `children`.
    fn node(&mut self, children: &[Child]) -> Child {
        let filesize = children.iter().map(|c| c.filesize).sum();
        let unixfs = UnixFsData {
            kind: DataType::File,
            data: None,
            filesize: Some(filesize),
            blocksizes: children.iter().map(|c| c.filesize).collect(),
        };
        let node = PbNode {
            links: children
                .iter()
                .map(|c| PbLink {
                    hash: c.cid,
                    name: String::new(),
                    tsize: c.tsize,
                })
                .collect(),
            data: Some(unixfs.encode()),
        };
        let bytes = Bytes::from(node.encode());
        let cid = block_cid(DAG_PB, &bytes);
        let tsize = bytes.len() as u64 + children.iter().map(|c| c.tsize).sum::<u64>();
        self.blocks += 1;
        if let Some(made) = &mut self.made {
            made.push(Block { cid, data: bytes });
        }
        Child {
            cid,
            tsize,
            filesize,
        }
    }
}

/// CID of everything `reader` yields, as `ipfs add --only-hash` computes it, reading 1 MiB at a
/// time (whole chunks, so the importer never copies). For files on disk: a downloaded model can
/// be checked against its CID without storing it.
pub fn hash_reader(mut reader: impl std::io::Read) -> std::io::Result<Imported> {
    const READ_SIZE: usize = 4 * CHUNK_SIZE;
    let mut importer = FileImporter::hash_only();
    loop {
        let mut buf = BytesMut::zeroed(READ_SIZE);
        let mut filled = 0;
        while filled < READ_SIZE {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        buf.truncate(filled);
        importer.write(buf.freeze());
        if filled < READ_SIZE {
            return Ok(importer.finish().0);
        }
    }
}

/// Imports `data` in one call (convenience for small content and tests).
pub fn import(data: &[u8]) -> (Imported, Vec<Block>) {
    let mut importer = FileImporter::new();
    importer.write(Bytes::copy_from_slice(data));
    importer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(size: usize) -> Imported {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 1000) as u8).collect();
        import(&data).0
    }

    #[test]
    fn empty_file_is_the_empty_raw_block() {
        let (imported, blocks) = import(b"");
        assert_eq!(
            imported.root.to_string(),
            "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
        );
        assert_eq!(blocks.len(), 1);
    }

    #[test]
    fn one_chunk_file_is_its_raw_leaf() {
        let exact = shape(CHUNK_SIZE);
        assert_eq!(exact.root.codec(), RAW);
        assert_eq!(exact.blocks, 1);
        let over = shape(CHUNK_SIZE + 1);
        assert_eq!(over.root.codec(), DAG_PB);
        assert_eq!(over.blocks, 3);
    }

    #[test]
    fn a_175th_chunk_adds_a_second_level() {
        assert_eq!(shape(MAX_LINKS * CHUNK_SIZE).blocks, MAX_LINKS as u64 + 1);
        // 175 leaves, one full node, one node over the last leaf, and the root.
        assert_eq!(
            shape(MAX_LINKS * CHUNK_SIZE + 1).blocks,
            MAX_LINKS as u64 + 1 + 3
        );
    }

    #[test]
    fn chunking_does_not_depend_on_how_the_input_is_split() {
        let data: Vec<u8> = (0..CHUNK_SIZE * 3 + 17).map(|i| (i % 251) as u8).collect();
        let whole = import(&data).0;
        let mut importer = FileImporter::hash_only();
        for piece in data.chunks(9_999) {
            importer.write(Bytes::copy_from_slice(piece));
        }
        assert_eq!(importer.finish().0, whole);
    }

    #[test]
    fn hashing_a_reader_gives_the_import_cid() {
        let data: Vec<u8> = (0..CHUNK_SIZE * 5 + 3).map(|i| (i % 13) as u8).collect();
        let from_reader = hash_reader(std::io::Cursor::new(&data)).unwrap();
        assert_eq!(from_reader, import(&data).0);
        assert_eq!(hash_reader(std::io::empty()).unwrap(), import(b"").0);
    }

    #[test]
    fn file_node_round_trips_through_the_unixfs_decoder() {
        let data = UnixFsData {
            kind: DataType::File,
            data: None,
            filesize: Some(300_000),
            blocksizes: vec![262_144, 37_856],
        };
        assert_eq!(UnixFsData::decode(&data.encode()).unwrap(), data);
        assert!(
            UnixFsData::decode(&[0x08, 0x09])
                .unwrap_err()
                .reason
                .contains("unknown Type 9")
        );
        assert!(
            UnixFsData::decode(&[])
                .unwrap_err()
                .reason
                .contains("missing required Type")
        );
    }
}
