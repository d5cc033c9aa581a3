//! The embedded folder store against the ContentStore conformance suite, plus what only a
//! folder store has: its layout on disk, reopening, and cleaning up after a crash.

use std::sync::Arc;

use bytes::Bytes;
use shardwork_core::store::ContentStore;
use shardwork_core::store::embedded::{ABANDONED_PUT_AGE, EmbeddedConfig, EmbeddedStore};
use shardwork_core::store::unixfs::{self, CHUNK_SIZE};
use shardwork_core::testkit::store_suite::{SUITE_MAX_PUT, StoreHarness, content, damage_file};

async fn open(dir: &std::path::Path, sync_writes: bool) -> EmbeddedStore {
    let config = EmbeddedConfig {
        max_put_size: SUITE_MAX_PUT,
        sync_writes,
        ..EmbeddedConfig::new(dir)
    };
    EmbeddedStore::open(config).await.expect("open store")
}

async fn harness() -> Option<StoreHarness> {
    let dir = tempfile::tempdir().expect("temp dir");
    // Durable writes off: the suite checks behaviour, not fsync, and runs on shared disks.
    let store = open(dir.path(), false).await;
    let blocks = store.clone();
    Some(
        StoreHarness::new(Arc::new(store))
            .with_damage(move |cid, how| damage_file(&blocks.block_path(cid), how))
            .keep(dir),
    )
}

shardwork_core::content_store_conformance!(harness);

#[tokio::test]
async fn content_survives_reopening_the_folder_with_durable_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = content(2 * CHUNK_SIZE + 1, 3);
    let cid = open(dir.path(), true)
        .await
        .put(data.clone())
        .await
        .expect("put");
    let reopened = open(dir.path(), true).await;
    assert_eq!(reopened.get_bytes(&cid, u64::MAX).await.expect("get"), data);
    assert!(reopened.stat(&cid).await.expect("stat").pinned);
}

#[tokio::test]
async fn blocks_live_under_kubo_style_fan_out_folders_named_by_cid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path(), false).await;
    let data = content(CHUNK_SIZE + 10, 5);
    let (_, blocks) = unixfs::import(&data);
    store.put(data).await.expect("put");
    for block in &blocks {
        let name = block.cid.to_string();
        let fan = &name[name.len() - 3..name.len() - 1];
        let path = dir.path().join("blocks").join(fan).join(&name);
        assert_eq!(store.block_path(&block.cid), path);
        assert_eq!(std::fs::read(&path).expect("block file"), block.data);
    }
}

#[tokio::test]
async fn a_cidv0_finds_the_same_dag_pb_block_as_its_cidv1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path(), false).await;
    let cid = store.put(content(CHUNK_SIZE + 1, 6)).await.expect("put");
    let v0 = cid::Cid::new_v0(*cid.hash()).expect("dag-pb sha2-256 has a CIDv0");
    assert!(store.has(&v0).await.expect("has"));
    assert_eq!(
        store.get_bytes(&v0, u64::MAX).await.expect("get").len(),
        CHUNK_SIZE + 1
    );
}

#[tokio::test]
async fn reopening_clears_puts_a_crash_left_half_done_but_not_a_live_put() {
    let dir = tempfile::tempdir().expect("temp dir");
    drop(open(dir.path(), false).await);
    let staging = dir.path().join("staging");
    let leftover = staging.join("crashed-put");
    std::fs::create_dir_all(&leftover).expect("mkdir");
    std::fs::write(leftover.join("junk"), b"half a block").expect("write");
    let abandoned = std::time::SystemTime::now() - ABANDONED_PUT_AGE * 2;
    std::fs::File::open(&leftover)
        .and_then(|d| d.set_modified(abandoned))
        .expect("age the crashed put's folder");
    // Another API replica on the same folder, mid-upload: its folder was touched just now.
    let live = staging.join("another-replicas-put");
    std::fs::create_dir_all(&live).expect("mkdir");
    std::fs::write(live.join("block"), b"a block so far").expect("write");
    let store = open(dir.path(), false).await;
    assert!(
        !leftover.exists(),
        "a crashed put's folder survived reopening"
    );
    assert!(live.join("block").exists(), "reopening removed a live put");
    assert!(
        store
            .put(Bytes::from_static(b"after the crash"))
            .await
            .is_ok()
    );
}
