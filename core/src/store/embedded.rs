//! The embedded ContentStore: a blockstore in a local folder, with the CIDs Kubo computes.
//!
//! Layout under the root folder:
//!
//! ```text
//! blocks/<xy>/<cid>   one file per block, named by its CIDv1; <xy> is the two characters before
//!                     the last one of the name (Kubo's flatfs "next-to-last/2" fan-out), so no
//!                     directory grows past ~1k entries per million blocks
//! pins/<cid>          an empty file per pinned root
//! staging/<id>/       blocks of a put in progress
//! ```
//!
//! API replicas may share one store folder, so opening the store clears only staging folders
//! left long enough to be a dead process's ([`ABANDONED_PUT_AGE`]), never another replica's put
//! in progress.
//!
//! A put writes its blocks into its own staging folder and moves them into `blocks/` only once
//! the whole input has been read and accepted, so a rejected or failed put (too large, broken
//! input stream) leaves nothing behind. Each block reaches its final name by `rename`, which is
//! atomic, so readers never see half a block; with `sync_writes` each block is also flushed to
//! disk first. Whatever happens on disk, reads re-hash every block (see [`super::verify`]), so a
//! damaged file is reported as [`StoreError::Corrupt`], never returned.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use cid::Cid;
use futures::{StreamExt, stream};

use super::unixfs::{Block, FileImporter};
use super::verify::{self, BlockSource};
use super::{ByteStream, ContentStat, ContentStore, StoreError};

/// Settings of an [`EmbeddedStore`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmbeddedConfig {
    /// Folder holding the blocks; created if missing.
    pub root: PathBuf,
    /// Largest content a single put accepts, in bytes.
    pub max_put_size: u64,
    /// Flush every block to disk before it becomes visible. Costs a disk round trip per 256 KiB
    /// block; turn off only for stores that can be rebuilt (tests, caches).
    pub sync_writes: bool,
}

impl EmbeddedConfig {
    /// Defaults for a folder: 16 GiB per put (a base model fits), durable writes.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        EmbeddedConfig {
            root: root.into(),
            max_put_size: 16 << 30,
            sync_writes: true,
        }
    }
}

/// A folder blockstore; cheap to clone (shares its state).
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Folders>,
}

#[derive(Debug)]
struct Folders {
    blocks: PathBuf,
    pins: PathBuf,
    staging: PathBuf,
    max_put_size: u64,
    sync_writes: bool,
}

/// A staging folder untouched this long belongs to a put whose process died: a live put adds a
/// block file to its folder (which touches it) for every chunk it reads, so only an upload
/// whose client sent nothing for an hour could lose its folder, and it fails cleanly (its
/// commit finds no folder). Until then a crashed put costs only disk space.
pub const ABANDONED_PUT_AGE: Duration = Duration::from_secs(3600);

impl EmbeddedStore {
    /// Opens (creating if needed) the store at `config.root`, clearing puts a crash left behind.
    pub async fn open(config: EmbeddedConfig) -> Result<Self, StoreError> {
        let folders = Folders {
            blocks: config.root.join("blocks"),
            pins: config.root.join("pins"),
            staging: config.root.join("staging"),
            max_put_size: config.max_put_size,
            sync_writes: config.sync_writes,
        };
        for dir in [&folders.blocks, &folders.pins, &folders.staging] {
            tokio::fs::create_dir_all(dir).await?;
        }
        let staging = folders.staging.clone();
        tokio::task::spawn_blocking(move || clear_abandoned_puts(&staging, SystemTime::now()))
            .await
            .map_err(join_error)??;
        Ok(EmbeddedStore {
            inner: Arc::new(folders),
        })
    }

    /// Path of the file holding block `cid` (whether or not it exists). Public so tests and
    /// operators can inspect or damage blocks deliberately.
    pub fn block_path(&self, cid: &Cid) -> PathBuf {
        self.inner.block_path(cid)
    }

    /// Largest content a single put accepts.
    pub fn max_put_size(&self) -> u64 {
        self.inner.max_put_size
    }

    async fn import(&self, mut input: ByteStream) -> Result<Cid, StoreError> {
        let staging = self.inner.staging.join(uuid::Uuid::new_v4().to_string());
        tokio::fs::create_dir(&staging).await?;
        let result = async {
            let mut importer = FileImporter::new();
            while let Some(chunk) = input.next().await {
                let chunk = chunk?;
                let size = importer.size() + chunk.len() as u64;
                if size > self.inner.max_put_size {
                    return Err(StoreError::TooLarge {
                        size,
                        limit: self.inner.max_put_size,
                    });
                }
                importer.write(chunk);
                self.stage(&staging, importer.take_blocks()).await?;
            }
            let (imported, rest) = importer.finish();
            self.stage(&staging, rest).await?;
            let inner = Arc::clone(&self.inner);
            let dir = staging.clone();
            tokio::task::spawn_blocking(move || inner.commit(&dir))
                .await
                .map_err(join_error)??;
            Ok(imported.root)
        }
        .await;
        // Best effort: a leftover staging folder is removed by a later `open` anyway.
        let _ = tokio::fs::remove_dir_all(&staging).await;
        let root = result?;
        self.write_pin(&root).await?;
        Ok(root)
    }

    async fn stage(&self, staging: &Path, blocks: Vec<Block>) -> Result<(), StoreError> {
        if blocks.is_empty() {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        let staging = staging.to_owned();
        tokio::task::spawn_blocking(move || inner.stage(&staging, &blocks))
            .await
            .map_err(join_error)?
    }

    async fn write_pin(&self, cid: &Cid) -> Result<(), StoreError> {
        tokio::fs::write(self.inner.pins.join(key(cid)), b"").await?;
        Ok(())
    }
}

/// Removes the staging folders under `staging` last touched [`ABANDONED_PUT_AGE`] before `now`.
/// Another replica may clear the same folder at the same moment, which is not an error.
fn clear_abandoned_puts(staging: &Path, now: SystemTime) -> Result<(), StoreError> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    for entry in std::fs::read_dir(staging)? {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        let touched = match entry.metadata().and_then(|m| m.modified()) {
            Ok(touched) => touched,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        // A clock set back makes every folder look fresh: kept, cleared by a later open.
        let age = now.duration_since(touched).unwrap_or_default();
        if age < ABANDONED_PUT_AGE {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Err(e) if !gone(&e) => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

fn join_error(err: tokio::task::JoinError) -> StoreError {
    StoreError::Backend(format!("block writer task failed: {err}"))
}

/// File name of a block: its CIDv1 in base32. Kubo addresses blocks by multihash, so a CIDv0
/// and the CIDv1 of the same dag-pb block must find the same file.
fn key(cid: &Cid) -> String {
    match cid.into_v1() {
        Ok(v1) => v1.to_string(),
        Err(_) => cid.to_string(),
    }
}

impl Folders {
    fn block_path(&self, cid: &Cid) -> PathBuf {
        let name = key(cid);
        let chars: Vec<char> = name.chars().collect();
        let fan = if chars.len() >= 3 {
            chars[chars.len() - 3..chars.len() - 1].iter().collect()
        } else {
            "__".to_owned()
        };
        self.blocks.join(fan).join(name)
    }

    /// Writes blocks the store does not have yet into the staging folder.
    fn stage(&self, staging: &Path, blocks: &[Block]) -> Result<(), StoreError> {
        use std::io::Write;
        for block in blocks {
            let name = key(&block.cid);
            let path = staging.join(&name);
            if path.exists() || self.block_path(&block.cid).exists() {
                continue;
            }
            let mut file = std::fs::File::create(&path)?;
            file.write_all(&block.data)?;
            if self.sync_writes {
                file.sync_all()?;
            }
        }
        Ok(())
    }

    /// Moves every staged block to its final name.
    fn commit(&self, staging: &Path) -> Result<(), StoreError> {
        for entry in std::fs::read_dir(staging)? {
            let entry = entry?;
            let name = entry.file_name();
            let cid = verify_name(&name)?;
            let target = self.block_path(&cid);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::rename(entry.path(), target)?;
        }
        Ok(())
    }
}

fn verify_name(name: &std::ffi::OsStr) -> Result<Cid, StoreError> {
    let text = name.to_string_lossy();
    text.parse::<Cid>().map_err(|err| {
        StoreError::Backend(format!("staged file {text:?} is not named by a CID: {err}"))
    })
}

#[async_trait]
impl BlockSource for EmbeddedStore {
    async fn block(&self, cid: &Cid) -> Result<Option<Bytes>, StoreError> {
        match tokio::fs::read(self.block_path(cid)).await {
            Ok(data) => Ok(Some(Bytes::from(data))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }
}

#[async_trait]
impl ContentStore for EmbeddedStore {
    async fn put(&self, data: Bytes) -> Result<Cid, StoreError> {
        let limit = self.inner.max_put_size;
        if data.len() as u64 > limit {
            return Err(StoreError::TooLarge {
                size: data.len() as u64,
                limit,
            });
        }
        self.import(Box::pin(stream::once(async { Ok(data) })))
            .await
    }

    async fn put_stream(&self, stream: ByteStream) -> Result<Cid, StoreError> {
        self.import(stream).await
    }

    async fn get(&self, cid: &Cid) -> Result<ByteStream, StoreError> {
        verify::read_file(Arc::new(self.clone()), *cid).await
    }

    async fn pin(&self, cid: &Cid) -> Result<(), StoreError> {
        // Walking the DAG's nodes proves the content is here before we promise to keep it.
        verify::stat_file(self, cid).await?;
        self.write_pin(cid).await
    }

    async fn unpin(&self, cid: &Cid) -> Result<(), StoreError> {
        match tokio::fs::remove_file(self.inner.pins.join(key(cid))).await {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    async fn stat(&self, cid: &Cid) -> Result<ContentStat, StoreError> {
        let (size, blocks) = verify::stat_file(self, cid).await?;
        let pinned = tokio::fs::try_exists(self.inner.pins.join(key(cid))).await?;
        Ok(ContentStat {
            cid: *cid,
            size,
            blocks,
            pinned,
        })
    }

    async fn has(&self, cid: &Cid) -> Result<bool, StoreError> {
        Ok(tokio::fs::try_exists(self.block_path(cid)).await?)
    }
}
