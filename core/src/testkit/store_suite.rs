//! The conformance suite every ContentStore adapter must pass.
//!
//! Each check is a function over a [`StoreHarness`]; [`crate::content_store_conformance!`]
//! turns them into one `#[tokio::test]` each for a given harness, so every adapter's test file
//! runs the same checks under the same names.

use std::any::Any;
use std::sync::Arc;

use bytes::Bytes;
use cid::Cid;
use futures::StreamExt;

use crate::store::unixfs::{self, CHUNK_SIZE, DAG_PB, RAW};
use crate::store::{ByteStream, ContentStore, StoreError, parse_cid};

/// Largest put the suite's stores must accept; [`StoreHarness::new`] callers configure their
/// store with it, and the oversized-put check goes one byte past it.
pub const SUITE_MAX_PUT: u64 = 8 << 20;

/// How to damage a stored block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Flip one bit in the middle of the block.
    FlipBit,
    /// Cut the block to half its length.
    Truncate,
    /// Delete the block.
    Remove,
}

/// Damages the block file at `path` (for stores whose blocks are files, like the embedded one).
pub fn damage_file(path: &std::path::Path, how: Damage) {
    let describe = |err: std::io::Error| format!("damaging {}: {err}", path.display());
    match how {
        Damage::Remove => std::fs::remove_file(path).map_err(describe).unwrap(),
        Damage::FlipBit | Damage::Truncate => {
            let mut data = std::fs::read(path).map_err(describe).unwrap();
            assert!(
                !data.is_empty(),
                "cannot damage the empty block {}",
                path.display()
            );
            let middle = data.len() / 2;
            if how == Damage::FlipBit {
                data[middle] ^= 0x10;
            } else {
                data.truncate(middle);
            }
            std::fs::write(path, data).map_err(describe).unwrap();
        }
    }
}

type Damager = Box<dyn Fn(&Cid, Damage) + Send + Sync>;

/// A store under test, with what the suite needs around it.
pub struct StoreHarness {
    /// The adapter, configured to accept puts of up to [`SUITE_MAX_PUT`] bytes.
    pub store: Arc<dyn ContentStore>,
    /// Damages a block where the test can reach the storage (a folder); `None` for stores
    /// whose blocks only the server can touch (a real Kubo node).
    damage: Option<Damager>,
    /// Whatever must live as long as the store (temp folders, servers).
    _keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl StoreHarness {
    /// A harness for `store`, with no way to damage its blocks (the damage check is skipped).
    pub fn new(store: Arc<dyn ContentStore>) -> Self {
        StoreHarness {
            store,
            damage: None,
            _keep: Vec::new(),
        }
    }

    /// Lets the suite damage a stored block, by its CID, to check that reads catch it.
    pub fn with_damage(mut self, damage: impl Fn(&Cid, Damage) + Send + Sync + 'static) -> Self {
        self.damage = Some(Box::new(damage));
        self
    }

    /// Keeps `value` (a temp folder, a server) alive as long as the harness.
    pub fn keep(mut self, value: impl Any + Send + Sync) -> Self {
        self._keep.push(Box::new(value));
        self
    }
}

/// Deterministic content that differs at every offset and between sizes, so a misplaced or
/// repeated chunk cannot go unnoticed.
pub fn content(size: usize, seed: u8) -> Bytes {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(seed);
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(size);
    Bytes::from(out)
}

fn pieces(data: &Bytes, piece: usize) -> ByteStream {
    let parts: Vec<Result<Bytes, StoreError>> = (0..data.len())
        .step_by(piece.max(1))
        .map(|start| Ok(data.slice(start..(start + piece).min(data.len()))))
        .collect();
    Box::pin(futures::stream::iter(parts))
}

async fn read_all(store: &dyn ContentStore, cid: &Cid) -> Result<Vec<u8>, StoreError> {
    let mut stream = store.get(cid).await?;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

/// Sizes around every boundary the layout has below a second DAG level.
pub const ROUND_TRIP_SIZES: &[usize] = &[
    0,
    1,
    1000,
    CHUNK_SIZE - 1,
    CHUNK_SIZE,
    CHUNK_SIZE + 1,
    2 * CHUNK_SIZE,
    3 * CHUNK_SIZE + 12_345,
    5 * 1024 * 1024 + 7,
];

/// Content of every size comes back byte for byte, under the CID the importer computes.
pub async fn round_trips_every_size_across_chunk_boundaries(h: &StoreHarness) {
    for (i, &size) in ROUND_TRIP_SIZES.iter().enumerate() {
        let data = content(size, i as u8);
        let cid = h
            .store
            .put(data.clone())
            .await
            .unwrap_or_else(|e| panic!("put {size} bytes: {e}"));
        assert_eq!(cid, unixfs::import(&data).0.root, "CID of {size} bytes");
        let expected_codec = if size <= CHUNK_SIZE { RAW } else { DAG_PB };
        assert_eq!(cid.codec(), expected_codec, "root codec for {size} bytes");
        let back = read_all(h.store.as_ref(), &cid)
            .await
            .unwrap_or_else(|e| panic!("get {size} bytes: {e}"));
        assert!(
            back == data,
            "{size} bytes came back different ({} bytes)",
            back.len()
        );
        let limited = h
            .store
            .get_bytes(&cid, size as u64)
            .await
            .expect("get_bytes at the exact size");
        assert_eq!(limited.len(), size);
    }
}

/// A stream cut into pieces unrelated to the chunk size gets the same CID as one put.
pub async fn put_and_put_stream_give_the_same_cid(h: &StoreHarness) {
    let data = content(3 * CHUNK_SIZE + 999, 7);
    let whole = h.store.put(data.clone()).await.expect("put");
    for piece in [1000, 65_536, CHUNK_SIZE + 3] {
        let streamed = h
            .store
            .put_stream(pieces(&data, piece))
            .await
            .expect("put_stream");
        assert_eq!(streamed, whole, "pieces of {piece} bytes");
    }
    let empty = h
        .store
        .put_stream(Box::pin(futures::stream::empty()))
        .await
        .expect("empty stream");
    assert_eq!(empty, h.store.put(Bytes::new()).await.expect("empty put"));
}

/// After a put the content is present, pinned, and its size and block count are reported.
pub async fn put_content_is_present_pinned_and_sized(h: &StoreHarness) {
    let data = content(2 * CHUNK_SIZE + 5, 9);
    let cid = h.store.put(data).await.expect("put");
    assert!(h.store.has(&cid).await.expect("has"));
    let stat = h.store.stat(&cid).await.expect("stat");
    assert_eq!(stat.cid, cid);
    assert_eq!(stat.size, 2 * CHUNK_SIZE as u64 + 5);
    assert_eq!(stat.blocks, 4, "three leaves and a root");
    assert!(stat.pinned);
    h.store.pin(&cid).await.expect("pinning again is fine");
    h.store.unpin(&cid).await.expect("unpin");
    assert!(!h.store.stat(&cid).await.expect("stat").pinned, "unpinned");
    h.store
        .unpin(&cid)
        .await
        .expect("unpinning what is not pinned is fine");
    h.store.pin(&cid).await.expect("pinned again");
    assert!(h.store.stat(&cid).await.expect("stat").pinned);

    let small = h
        .store
        .put(Bytes::from_static(b"hello world"))
        .await
        .expect("put");
    let stat = h.store.stat(&small).await.expect("stat");
    assert_eq!((stat.size, stat.blocks, stat.pinned), (11, 1, true));
}

/// A CID nobody stored is NotFound (naming it) for every operation, and `has` says false.
pub async fn unknown_content_is_not_found(h: &StoreHarness) {
    let unknown = unixfs::raw_cid(b"shardwork: content that was never stored anywhere 5f1c0d");
    assert!(!h.store.has(&unknown).await.expect("has"));
    let is_not_found = |err: StoreError| matches!(err, StoreError::NotFound(c) if c == unknown);
    assert!(is_not_found(
        h.store.get(&unknown).await.err().expect("get must fail")
    ));
    assert!(is_not_found(
        h.store.stat(&unknown).await.expect_err("stat must fail")
    ));
    assert!(is_not_found(
        h.store.pin(&unknown).await.expect_err("pin must fail")
    ));
}

/// Malformed CID text names the input; CIDs with hashes we cannot verify are refused.
pub async fn malformed_or_unverifiable_cids_are_typed_errors(h: &StoreHarness) {
    for input in [
        "",
        "not-a-cid",
        "bafy",
        "Qm123",
        "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxqu!!",
    ] {
        match parse_cid(input) {
            Err(StoreError::MalformedCid { input: named, .. }) => assert_eq!(named, input),
            other => panic!("{input:?} parsed as {other:?}"),
        }
    }
    let parsed = parse_cid(" bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e\n")
        .expect("valid CID");
    assert_eq!(parsed, unixfs::raw_cid(b"hello world"));
    // An identity-hashed CID carries its data inline; it is not a hash we can check.
    let identity = Cid::new_v1(
        RAW,
        multihash::Multihash::<64>::wrap(0x00, b"inline").expect("fits"),
    );
    assert!(
        matches!(h.store.get(&identity).await.err(), Some(StoreError::Unsupported(c)) if c == identity)
    );
}

/// A damaged block is an error at the block it hits; no damaged byte is ever returned.
pub async fn damaged_blocks_are_detected(h: &StoreHarness) {
    let Some(damage) = &h.damage else {
        crate::testkit::services::record_skip(
            "store conformance: damaged blocks",
            "this store's blocks cannot be reached from the test",
        );
        return;
    };
    for (seed, how) in [
        (1, Damage::FlipBit),
        (2, Damage::Truncate),
        (3, Damage::Remove),
    ] {
        let data = content(3 * CHUNK_SIZE + 100, 40 + seed);
        let (imported, blocks) = unixfs::import(&data);
        let cid = h.store.put(data.clone()).await.expect("put");
        assert_eq!(cid, imported.root);
        // Damage the second leaf, so the first one streams out fine before the error.
        let leaf = blocks[1].cid;
        damage(&leaf, how);
        let mut stream = h.store.get(&cid).await.expect("root is intact");
        let first = stream
            .next()
            .await
            .expect("first chunk")
            .expect("first leaf is intact");
        assert_eq!(first, data.slice(..CHUNK_SIZE));
        let err = stream
            .next()
            .await
            .expect("an item")
            .expect_err("damaged leaf must fail");
        match (how, err) {
            (Damage::Remove, StoreError::NotFound(c)) => assert_eq!(c, leaf),
            (Damage::FlipBit | Damage::Truncate, StoreError::Corrupt { cid: c, .. }) => {
                assert_eq!(c, leaf)
            }
            (how, other) => panic!("{how:?} of a leaf gave {other:?}"),
        }
        // The root itself damaged: get fails before streaming anything.
        if how != Damage::Remove {
            damage(&cid, how);
            match h.store.get(&cid).await.err() {
                Some(StoreError::Corrupt { cid: c, .. }) => assert_eq!(c, cid),
                other => panic!("{how:?} of the root gave {other:?}"),
            }
        }
    }
}

/// A put over the limit is TooLarge, whether its size is known up front or only while
/// streaming, and leaves nothing behind; a put of exactly the limit succeeds.
pub async fn oversized_put_is_rejected_and_leaves_nothing(h: &StoreHarness) {
    let over = content(SUITE_MAX_PUT as usize + 1, 77);
    let over_cid = unixfs::import(&over).0.root;
    match h.store.put(over.clone()).await {
        Err(StoreError::TooLarge { size, limit }) => {
            assert_eq!((size, limit), (SUITE_MAX_PUT + 1, SUITE_MAX_PUT))
        }
        other => panic!("put of limit+1 bytes gave {other:?}"),
    }
    match h.store.put_stream(pieces(&over, 100_000)).await {
        Err(StoreError::TooLarge { size, limit }) => {
            assert_eq!(limit, SUITE_MAX_PUT);
            assert!(
                size > SUITE_MAX_PUT,
                "reported size {size} is within the limit"
            );
        }
        other => panic!("put_stream of limit+1 bytes gave {other:?}"),
    }
    assert!(!h.store.has(&over_cid).await.expect("has"));
    let exact = over.slice(..SUITE_MAX_PUT as usize);
    let cid = h
        .store
        .put(exact)
        .await
        .expect("exactly the limit is allowed");
    let too_small_limit = h.store.get_bytes(&cid, SUITE_MAX_PUT - 1).await;
    assert!(
        matches!(too_small_limit, Err(StoreError::TooLarge { .. })),
        "{too_small_limit:?}"
    );
}

/// One `#[tokio::test]` per conformance check, for the harness that `$make` (an async fn
/// returning `Option<StoreHarness>`, `None` when its server is unavailable) builds.
#[macro_export]
macro_rules! content_store_conformance {
    ($make:path) => {
        $crate::content_store_conformance!(@tests $make;
            round_trips_every_size_across_chunk_boundaries,
            put_and_put_stream_give_the_same_cid,
            put_content_is_present_pinned_and_sized,
            unknown_content_is_not_found,
            malformed_or_unverifiable_cids_are_typed_errors,
            damaged_blocks_are_detected,
            oversized_put_is_rejected_and_leaves_nothing
        );
    };
    (@tests $make:path; $($check:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(harness) = $make().await else { return };
                $crate::testkit::store_suite::$check(&harness).await;
            }
        )*
    };
}
