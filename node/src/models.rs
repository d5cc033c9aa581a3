//! The nodes' work folder: base models fetched once per CID, and scratch folders for tasks.
//!
//! One cache for the worker and the validator, crash-safe: a model is fetched (every file
//! verified against its CID) into a uniquely named `.partial-…` folder, marked complete, and
//! only then renamed to its CID. A node killed mid-fetch leaves a partial folder nobody reads,
//! never a half-written model under the CID's name. Two fetches of one model in one node race
//! harmlessly: both are the same bytes, the second rename fails and its copy is removed.

use std::path::{Path, PathBuf};

use shardwork_core::protocol::ContentId;

use crate::NodeError;
use crate::content::{Blobs, fetch_bundle};

/// Marks a model folder whose every file was fetched and verified.
const COMPLETE: &str = ".complete";

/// A node's work folder.
#[derive(Debug, Clone)]
pub struct WorkDir {
    root: PathBuf,
}

impl WorkDir {
    /// A work folder at `root`, created on first use rather than here.
    pub fn new(root: impl Into<PathBuf>) -> WorkDir {
        WorkDir { root: root.into() }
    }

    /// The folder, created if missing.
    pub fn ensure(&self) -> Result<&Path, NodeError> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| NodeError::Io(format!("{}: {e}", self.root.display())))?;
        Ok(&self.root)
    }

    /// A scratch folder under the work folder, removed when dropped.
    pub fn scratch(&self, prefix: &str) -> Result<tempfile::TempDir, NodeError> {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(self.ensure()?)
            .map_err(|e| NodeError::Io(format!("{}: {e}", self.root.display())))
    }

    /// A folder of this node's own for `job` (the validator's opened held-out set).
    pub fn job_dir(&self, job: uuid::Uuid) -> Result<PathBuf, NodeError> {
        let dir = self.ensure()?.join("jobs").join(job.to_string());
        std::fs::create_dir_all(&dir)
            .map_err(|e| NodeError::Io(format!("{}: {e}", dir.display())))?;
        Ok(dir)
    }

    /// The base model bundle `cid` as a folder, fetched and verified the first time.
    pub async fn model(&self, blobs: &dyn Blobs, cid: &ContentId) -> Result<PathBuf, NodeError> {
        let models = self.ensure()?.join("models");
        let dir = models.join(cid.to_string());
        if dir.join(COMPLETE).exists() {
            return Ok(dir);
        }
        let partial = models.join(format!("{cid}.partial-{}", uuid::Uuid::new_v4()));
        fetch_bundle(blobs, &cid.to_string(), &partial, None).await?;
        std::fs::write(partial.join(COMPLETE), b"")
            .map_err(|e| NodeError::Io(format!("{}: {e}", partial.display())))?;
        if std::fs::rename(&partial, &dir).is_err() {
            if !dir.join(COMPLETE).exists() {
                // A folder at the CID's name without its mark (left by a node that wrote there
                // directly and was killed mid-fetch) is not trusted: replace it.
                let _ = std::fs::remove_dir_all(&dir);
                if std::fs::rename(&partial, &dir).is_ok() {
                    return Ok(dir);
                }
            }
            // Another fetch of the same model finished first: same bytes, keep its copy.
            let _ = std::fs::remove_dir_all(&partial);
        }
        Ok(dir)
    }
}
