//! Content for the services: the node reads and writes the content store either directly
//! (in-process nodes of `shardwork up`, or a Kubo node) or through the API's `/v1/content`
//! (separate worker processes of an embedded deployment). Either way, every byte read is
//! checked against its CID before use, and folders travel as [`Bundle`]s (an adapter's files
//! sealed to who may read them: `shardwork_core::store::keys`).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use shardwork_core::protocol::Bundle;
use shardwork_core::protocol::adapter::{PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE};
use shardwork_core::protocol::model_files::limits::MAX_MODEL_BYTES;
use shardwork_core::store::keys::BundleSeal;
use shardwork_core::store::{ContentStore, parse_cid, unixfs};

use crate::NodeError;
use shardwork_client::ApiClient;

/// Content access of a node.
#[async_trait]
pub trait Blobs: Send + Sync {
    /// The bytes `cid` names, verified, at most `limit` of them.
    async fn get(&self, cid: &str, limit: u64) -> Result<Bytes, NodeError>;
    /// Stores `data`; returns its CID.
    async fn put(&self, data: Bytes) -> Result<String, NodeError>;
}

/// Straight to a content store (which verifies every block it reads).
pub struct StoreBlobs(pub Arc<dyn ContentStore>);

#[async_trait]
impl Blobs for StoreBlobs {
    async fn get(&self, cid: &str, limit: u64) -> Result<Bytes, NodeError> {
        let parsed = parse_cid(cid).map_err(|e| NodeError::Content(format!("{cid}: {e}")))?;
        self.0
            .get_bytes(&parsed, limit)
            .await
            .map_err(|e| NodeError::Content(format!("reading {cid}: {e}")))
    }

    async fn put(&self, data: Bytes) -> Result<String, NodeError> {
        self.0
            .put(data)
            .await
            .map(|c| c.to_string())
            .map_err(|e| NodeError::Content(format!("storing: {e}")))
    }
}

/// Through the API. The API verifies on read too, but a worker trusts no one: the bytes are
/// re-hashed here with the same importer Kubo uses and must give back the CID asked for.
pub struct ApiBlobs(pub Arc<ApiClient>);

#[async_trait]
impl Blobs for ApiBlobs {
    async fn get(&self, cid: &str, limit: u64) -> Result<Bytes, NodeError> {
        let expected = parse_cid(cid).map_err(|e| NodeError::Content(format!("{cid}: {e}")))?;
        let bytes = self.0.download(cid).await?;
        if bytes.len() as u64 > limit {
            return Err(NodeError::Content(format!(
                "{cid} is {} bytes, above the limit of {limit}",
                bytes.len()
            )));
        }
        let actual = unixfs::hash_reader(bytes.as_ref())
            .map_err(|e| NodeError::Content(format!("hashing {cid}: {e}")))?
            .root;
        if actual.hash() != expected.hash() {
            return Err(NodeError::Content(format!(
                "the bytes served for {cid} hash to {actual}: refused"
            )));
        }
        Ok(bytes)
    }

    async fn put(&self, data: Bytes) -> Result<String, NodeError> {
        Ok(self.0.upload(data).await?)
    }
}

/// Largest single file a node fetches (a base model's weights).
pub const MAX_FILE_BYTES: u64 = 8 << 30;
/// Largest bundle document.
const MAX_BUNDLE_BYTES: u64 = 1 << 20;

/// Writes every file of bundle `cid` into `dir`, opening each with `seal` where the bundle is
/// sealed. A bundle sealed when none was expected, or plain when one was, is refused: an adapter
/// is always sealed and a model never is.
pub async fn fetch_bundle(
    blobs: &dyn Blobs,
    cid: &str,
    dir: &Path,
    seal: Option<&BundleSeal>,
) -> Result<Bundle, NodeError> {
    fetch_bundle_files(blobs, cid, dir, seal, None).await
}

/// The PEFT files of adapter bundle `cid` ([`fetch_bundle`] of those two only): what a verdict or
/// a merge reads. A submission's proof of training, most of its bytes, is left for the replay.
pub async fn fetch_adapter(
    blobs: &dyn Blobs,
    cid: &str,
    dir: &Path,
    seal: &BundleSeal,
) -> Result<Bundle, NodeError> {
    const PEFT_FILES: &[&str] = &[PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE];
    fetch_bundle_files(blobs, cid, dir, Some(seal), Some(PEFT_FILES)).await
}

/// [`fetch_bundle`] of the files named in `only` (all without it); a named file the bundle
/// lacks is not an error here: loading what was written names it.
async fn fetch_bundle_files(
    blobs: &dyn Blobs,
    cid: &str,
    dir: &Path,
    seal: Option<&BundleSeal>,
    only: Option<&[&str]>,
) -> Result<Bundle, NodeError> {
    let doc = blobs.get(cid, MAX_BUNDLE_BYTES).await?;
    let bundle = Bundle::decode(&doc)
        .map_err(|e| NodeError::Content(format!("{cid} is not a bundle: {e}")))?;
    match (bundle.sealed, seal.is_some()) {
        (true, false) => {
            return Err(NodeError::Content(format!(
                "{cid} is sealed and no key to it was given"
            )));
        }
        (false, true) => {
            return Err(NodeError::Content(format!(
                "{cid} is not sealed; an adapter must be"
            )));
        }
        _ => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| NodeError::Io(format!("{}: {e}", dir.display())))?;
    // What one bundle may make this node write, all files together (decoding refused a bundle
    // naming one content under two names).
    let mut written: u64 = 0;
    for (name, file_cid) in &bundle.files {
        if only.is_some_and(|names| !names.contains(&name.as_str())) {
            continue;
        }
        let left = MAX_MODEL_BYTES.saturating_sub(written);
        let mut bytes = blobs
            .get(&file_cid.to_string(), MAX_FILE_BYTES.min(left))
            .await
            .map_err(|e| match e {
                NodeError::Content(m) if left < MAX_FILE_BYTES => NodeError::Content(format!(
                    "{cid}: its files are more than {MAX_MODEL_BYTES} bytes together ({name}: {m})"
                )),
                other => other,
            })?;
        written += bytes.len() as u64;
        if let Some(seal) = seal {
            bytes = Bytes::from(seal.open_file(name, &bytes).map_err(|_| {
                NodeError::Content(format!(
                    "{name} of {cid} does not open with the key given for it"
                ))
            })?);
        }
        let path = dir.join(name);
        std::fs::write(&path, &bytes)
            .map_err(|e| NodeError::Io(format!("{}: {e}", path.display())))?;
    }
    Ok(bundle)
}

/// Stores the files `names` of `dir` (each sealed with `seal`, if given) and a bundle naming
/// them; returns the bundle's CID.
pub async fn put_bundle(
    blobs: &dyn Blobs,
    kind: &str,
    dir: &Path,
    names: &[&str],
    seal: Option<&BundleSeal>,
) -> Result<String, NodeError> {
    let mut bundle = Bundle::new(kind);
    bundle.sealed = seal.is_some();
    for name in names {
        let path = dir.join(name);
        let mut bytes =
            std::fs::read(&path).map_err(|e| NodeError::Io(format!("{}: {e}", path.display())))?;
        if let Some(seal) = seal {
            bytes = seal.seal_file(name, &bytes);
        }
        let cid = blobs.put(Bytes::from(bytes)).await?;
        bundle.files.insert(
            (*name).to_owned(),
            cid.parse()
                .map_err(|e| NodeError::Content(format!("store answered a bad CID {cid}: {e}")))?,
        );
    }
    let doc = serde_json::to_vec_pretty(&bundle).map_err(|e| NodeError::Content(e.to_string()))?;
    blobs.put(Bytes::from(doc)).await
}

/// Writes every file of completed job `job_id`'s final adapter into `dir`, as the API opens them
/// for the job's requester; returns the API's result (adapter CID, files, last merge), the
/// adapter's CID and the files' names.
pub async fn fetch_result(
    api: &ApiClient,
    job_id: uuid::Uuid,
    dir: &Path,
) -> Result<(serde_json::Value, String, Vec<String>), NodeError> {
    let result = api.result(job_id).await?;
    let cid = result["adapter_cid"]
        .as_str()
        .ok_or_else(|| NodeError::Content(format!("the result of job {job_id} names no adapter")))?
        .to_owned();
    std::fs::create_dir_all(dir).map_err(|e| NodeError::Io(format!("{}: {e}", dir.display())))?;
    let mut names = Vec::new();
    for file in result["files"].as_array().into_iter().flatten() {
        let name = file["name"].as_str().unwrap_or_default();
        if !shardwork_core::protocol::bundle::is_plain_file_name(name) {
            return Err(NodeError::Content(format!(
                "the result of job {job_id} names a file {name:?}, not a plain file name"
            )));
        }
        let bytes = api.result_file(job_id, name).await?;
        let path = dir.join(name);
        std::fs::write(&path, &bytes)
            .map_err(|e| NodeError::Io(format!("{}: {e}", path.display())))?;
        names.push(name.to_owned());
    }
    Ok((result, cid, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwork_core::protocol::submission::TRACE_FILE;
    use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};
    use shardwork_core::store::keys::Sealed;
    use shardwork_core::store::seal::SealingKey;

    /// A verdict's fetch writes the adapter's two PEFT files and leaves the proof of training in
    /// the store; the replay's full fetch writes all three, each opened with the seal.
    #[tokio::test]
    async fn an_adapter_fetch_leaves_the_proof_of_training_behind() {
        let root = tempfile::tempdir().unwrap();
        let mut config = EmbeddedConfig::new(root.path().join("store"));
        config.sync_writes = false;
        let blobs = StoreBlobs(Arc::new(EmbeddedStore::open(config).await.unwrap()));
        let seal = Sealed::RoundResult { round: 1 }
            .seal_for(uuid::Uuid::from_u128(7), &SealingKey::from_bytes([3; 32]));
        let out = root.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let names = [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, TRACE_FILE];
        for name in names {
            std::fs::write(out.join(name), format!("bytes of {name}")).unwrap();
        }
        let cid = put_bundle(&blobs, "adapter", &out, &names, Some(&seal))
            .await
            .unwrap();

        let verdict = root.path().join("verdict");
        fetch_adapter(&blobs, &cid, &verdict, &seal).await.unwrap();
        let mut written: Vec<String> = std::fs::read_dir(&verdict)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        written.sort();
        assert_eq!(written, [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE]);
        assert_eq!(
            std::fs::read_to_string(verdict.join(PEFT_WEIGHTS_FILE)).unwrap(),
            format!("bytes of {PEFT_WEIGHTS_FILE}")
        );

        let replay = root.path().join("replay");
        fetch_bundle(&blobs, &cid, &replay, Some(&seal))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(replay.join(TRACE_FILE)).unwrap(),
            format!("bytes of {TRACE_FILE}")
        );
    }
}
