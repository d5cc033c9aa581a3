//! The ContentStore port: content-addressed storage for datasets, shards, models and adapters.
//!
//! Everything Shardwork stores is addressed by an IPFS CID, so a job's whole history can be
//! audited from CIDs and any party can re-fetch and re-verify what it was given. Two adapters:
//!
//! * [`kubo::KuboStore`]: a Kubo (go-ipfs) node over its RPC API, for production.
//! * [`embedded::EmbeddedStore`]: a folder blockstore that computes exactly the CIDs Kubo computes
//!   for the same bytes with `ipfs add --cid-version=1 --raw-leaves --chunker=size-262144`
//!   (UnixFS, balanced DAG, 174 links per node), so content moves between the two unchanged.
//!
//! Every read is verified against its CID; see [`StoreError::Corrupt`].

pub mod dag_pb;
pub mod embedded;
pub mod keys;
#[cfg(feature = "kubo")]
pub mod kubo;
pub mod seal;
pub mod unixfs;
pub mod verify;

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use cid::Cid;
use futures::{Stream, StreamExt};

/// A stream of verified content chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send>>;

/// What a store knows about one piece of content.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContentStat {
    /// The content's root CID.
    pub cid: Cid,
    /// Size of the file the CID names, in bytes (the UnixFS file size, not the DAG size).
    pub size: u64,
    /// Number of blocks in the DAG, the root included.
    pub blocks: u64,
    /// Whether the root is pinned, so garbage collection keeps it.
    pub pinned: bool,
}

/// Errors of the ContentStore port. Every variant names the CID or limit at fault.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Text that does not parse as a CID.
    #[error("malformed CID {input:?}: {reason}")]
    MalformedCid {
        /// The text as given.
        input: String,
        /// What the CID parser reported.
        reason: String,
    },
    /// The store holds no content (or misses a block) under this CID.
    #[error("content {0} is not in the store")]
    NotFound(Cid),
    /// A block read back does not match its CID, or the DAG under it is malformed.
    #[error("content {cid} is corrupt: {reason}")]
    Corrupt {
        /// The block or content at fault.
        cid: Cid,
        /// What did not match.
        reason: String,
    },
    /// Content over the store's size limit, or over the caller's.
    #[error("content of {size} bytes exceeds the store's limit of {limit} bytes")]
    TooLarge {
        /// The size in bytes: the content's, or as much of it as was read when it went over.
        size: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// A CID whose codec or hash function the store cannot verify.
    #[error("CID {0} uses a codec or hash this store does not support")]
    Unsupported(Cid),
    /// Sealed data that does not open: a wrong key, or a ciphertext changed or cut short.
    #[error("sealed data could not be opened: wrong key or tampered ciphertext")]
    SealBroken,
    /// An I/O error, such as on the embedded store's files.
    #[error("content store I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Any other failure of the store behind the port (Kubo's RPC API, say).
    #[error("content store backend: {0}")]
    Backend(String),
}

/// Parses a CID from user input, naming the input when it is malformed.
pub fn parse_cid(input: &str) -> Result<Cid, StoreError> {
    input
        .trim()
        .parse::<Cid>()
        .map_err(|err| StoreError::MalformedCid {
            input: input.to_owned(),
            reason: err.to_string(),
        })
}

/// What a CID names, whatever its spelling: the lowercase hex of its multihash's bytes.
///
/// One content has many CIDs: CIDv0 (`Qm…`) and CIDv1 of the same block, CIDv1 in any multibase,
/// and the same hash under another codec (`raw` instead of `dag-pb`), which a store keyed by
/// multihash (Kubo's blockstore) serves as the same block. Any rule over content (who may read
/// it, who owns it) must compare this key, never the CID text, or a second spelling walks past it.
pub fn content_key(cid: &Cid) -> String {
    hex::encode(cid.hash().to_bytes())
}

/// [`content_key`] of a CID given as text, naming the input when it is malformed.
pub fn content_key_of(input: &str) -> Result<String, StoreError> {
    parse_cid(input).map(|cid| content_key(&cid))
}

/// Content-addressed storage. Implementations must return the same CID for the same bytes.
#[async_trait]
pub trait ContentStore: Send + Sync {
    /// Stores `data` and pins it; returns its CID.
    async fn put(&self, data: Bytes) -> Result<Cid, StoreError>;

    /// Stores a stream of bytes and pins it; returns its CID. The stream is chunked as it
    /// arrives, so arbitrarily large content never sits in memory whole.
    async fn put_stream(&self, stream: ByteStream) -> Result<Cid, StoreError>;

    /// Streams the content `cid` names, each block verified against its hash before it is
    /// yielded. A missing or corrupt block ends the stream with an error.
    async fn get(&self, cid: &Cid) -> Result<ByteStream, StoreError>;

    /// Pins `cid` so garbage collection keeps it.
    async fn pin(&self, cid: &Cid) -> Result<(), StoreError>;

    /// Unpins `cid`, so garbage collection may drop it; unpinning what is not pinned is no
    /// error. A store without garbage collection (the embedded one) keeps the blocks on disk,
    /// and other content sharing them is unaffected either way.
    async fn unpin(&self, cid: &Cid) -> Result<(), StoreError>;

    /// Size, block count and pin state of `cid`.
    async fn stat(&self, cid: &Cid) -> Result<ContentStat, StoreError>;

    /// Whether the root block of `cid` is present.
    async fn has(&self, cid: &Cid) -> Result<bool, StoreError>;

    /// Reads the whole content into memory, refusing more than `limit` bytes.
    async fn get_bytes(&self, cid: &Cid, limit: u64) -> Result<Bytes, StoreError> {
        let mut stream = self.get(cid).await?;
        let mut out = bytes::BytesMut::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            let size = (out.len() + chunk.len()) as u64;
            if size > limit {
                return Err(StoreError::TooLarge { size, limit });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_one_content_has_one_key_and_other_content_another() {
        let v0 = parse_cid("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG").unwrap();
        let v1 = Cid::new_v1(0x70, *v0.hash());
        let raw = Cid::new_v1(0x55, *v0.hash());
        let base58 = v1
            .to_string_of_base(cid::multibase::Base::Base58Btc)
            .unwrap();
        assert_ne!(v0.to_string(), v1.to_string());
        let key = content_key(&v0);
        for spelling in [v1.to_string(), raw.to_string(), base58, format!("  {v0} ")] {
            assert_eq!(content_key_of(&spelling).unwrap(), key, "{spelling}");
        }
        // The key is the multihash itself: sha2-256 (0x12), 32 bytes (0x20), then the digest.
        assert!(key.starts_with("1220") && key.len() == 68, "{key}");
        let other =
            content_key_of("bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku").unwrap();
        assert_ne!(other, key);
        assert!(matches!(
            content_key_of("not-a-cid"),
            Err(StoreError::MalformedCid { .. })
        ));
    }
}
