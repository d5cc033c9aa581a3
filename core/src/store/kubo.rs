//! The Kubo ContentStore: a Kubo (go-ipfs) node over its RPC API (`/api/v0`), through
//! `ipfs-api-backend-hyper`.
//!
//! We do not take the node's word for anything:
//!
//! * **put** streams the bytes to `add` with the settings our CIDs assume (CIDv1, raw leaves,
//!   `size-262144`, sha2-256, pin) and hashes the same bytes locally on the way. If the node
//!   answers with another CID (for example a node whose `Import.UnixFSFileMaxLinks` or profile
//!   differs from Kubo's defaults), the put fails and says so, rather than returning a CID the
//!   embedded store would not reproduce.
//! * **get** does not use `cat`: it walks the DAG with `block/get` and re-hashes every block
//!   against its CID before yielding a byte (see [`super::verify`]), so a faulty or malicious node
//!   cannot feed us wrong bytes under a right CID.
//!
//! Requests that may go to the network (`block/get`, `pin/add`) carry Kubo's `timeout` option, so
//! content nobody provides ends as [`StoreError::NotFound`] instead of hanging; `has` and the pin
//! check ask with `offline=true`, because they are questions about this node only.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use cid::Cid;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt, TryStreamExt, stream};
use ipfs_api_backend_hyper::{
    BackendWithGlobalOptions, Error as KuboError, GlobalOptions, IpfsApi, IpfsClient, TryFromUri,
    request::Add,
};

use super::unixfs::{CHUNK_SIZE, FileImporter};
use super::verify::{self, BlockSource};
use super::{ByteStream, ContentStat, ContentStore, StoreError};

/// Largest block we accept from a node. Kubo refuses to make or exchange blocks over 2 MiB
/// (its bitswap limit), so anything larger is not a block a well-behaved node would serve.
const MAX_BLOCK_SIZE: usize = 2 << 20;

/// Settings of a [`KuboStore`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KuboConfig {
    /// Base URL of the node's RPC API, e.g. `http://127.0.0.1:5001`.
    pub url: String,
    /// Largest content a single put accepts, in bytes.
    pub max_put_size: u64,
    /// How long a read may wait for blocks from the network before the content counts as
    /// not found.
    #[serde(with = "secs")]
    pub fetch_timeout: Duration,
}

impl KuboConfig {
    /// Settings for the node at `url`: puts of up to 16 GiB, reads that wait 60 s for the network.
    pub fn new(url: impl Into<String>) -> Self {
        KuboConfig {
            url: url.into(),
            max_put_size: 16 << 30,
            fetch_timeout: Duration::from_secs(60),
        }
    }
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.as_secs())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        <u64 as serde::Deserialize>::deserialize(d).map(Duration::from_secs)
    }
}

/// A ContentStore backed by a Kubo node; cheap to clone.
#[derive(Clone)]
pub struct KuboStore {
    inner: Arc<Clients>,
}

struct Clients {
    url: String,
    /// For `add`: no timeout, since a large upload may legitimately take long.
    plain: IpfsClient,
    /// For requests that may fetch from the network.
    fetch: BackendWithGlobalOptions<IpfsClient>,
    /// For questions about this node's own blocks and pins.
    local: BackendWithGlobalOptions<IpfsClient>,
    max_put_size: u64,
}

impl std::fmt::Debug for KuboStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KuboStore")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl KuboStore {
    /// A store talking to the node at `config.url`. Connects lazily; see [`KuboStore::check`].
    pub fn new(config: &KuboConfig) -> Result<Self, StoreError> {
        let client = || {
            IpfsClient::from_str(&config.url).map_err(|err| {
                StoreError::Backend(format!(
                    "Kubo URL {:?} is not a valid URI: {err}",
                    config.url
                ))
            })
        };
        let fetch = GlobalOptions {
            offline: None,
            timeout: Some(config.fetch_timeout),
        };
        let local = GlobalOptions {
            offline: Some(true),
            timeout: Some(config.fetch_timeout),
        };
        Ok(KuboStore {
            inner: Arc::new(Clients {
                url: config.url.clone(),
                plain: client()?,
                fetch: BackendWithGlobalOptions::new(client()?, fetch),
                local: BackendWithGlobalOptions::new(client()?, local),
                max_put_size: config.max_put_size,
            }),
        })
    }

    /// Asks the node for its version, to fail early (at start-up) when it is unreachable.
    pub async fn check(&self) -> Result<String, StoreError> {
        let version = self
            .inner
            .plain
            .version()
            .await
            .map_err(|err| self.backend("version", err))?;
        Ok(version.version)
    }

    fn backend(&self, call: &str, err: KuboError) -> StoreError {
        StoreError::Backend(format!("Kubo at {} failed {call}: {err}", self.inner.url))
    }

    /// Sends the stream to `add` while hashing it locally; returns the CID both agree on.
    async fn add(&self, mut input: ByteStream) -> Result<Cid, StoreError> {
        let limit = self.inner.max_put_size;
        // A small channel between our reader and the HTTP body gives back-pressure: at most a
        // few chunks are in memory whatever the size of the upload.
        let (mut body, reader) = mpsc::channel::<Result<Bytes, io::Error>>(4);
        let hash_locally = async move {
            let mut importer = FileImporter::hash_only();
            while let Some(chunk) = input.next().await {
                let failure = match chunk {
                    Ok(chunk) if importer.size() + chunk.len() as u64 > limit => {
                        StoreError::TooLarge {
                            size: importer.size() + chunk.len() as u64,
                            limit,
                        }
                    }
                    Ok(chunk) => {
                        importer.write(chunk.clone());
                        if body.send(Ok(chunk)).await.is_err() {
                            // The request ended early; its own error says why.
                            return Ok(None);
                        }
                        continue;
                    }
                    Err(err) => err,
                };
                // Fail the HTTP body rather than end it, so the node sees an aborted upload and
                // does not add (and pin) a truncated file.
                let _ = body.send(Err(io::Error::other(failure.to_string()))).await;
                return Err(failure);
            }
            drop(body);
            Ok(Some(importer.finish().0.root))
        };
        let options = Add {
            cid_version: Some(1),
            raw_leaves: Some(true),
            chunker: Some(CHUNKER),
            hash: Some("sha2-256"),
            pin: Some(true),
            trickle: Some(false),
            inline: Some(false),
            ..Add::default()
        };
        let upload = self
            .inner
            .plain
            .add_async_with_options(reader.into_async_read(), options);
        let (local, remote) = futures::join!(hash_locally, upload);
        let local = local?;
        let remote = remote.map_err(|err| self.backend("add", err))?;
        let local =
            local.ok_or_else(|| StoreError::Backend("Kubo stopped reading the upload".into()))?;
        let remote_cid = remote.hash.parse::<Cid>().map_err(|err| {
            StoreError::Backend(format!(
                "Kubo add returned {:?}, not a CID: {err}",
                remote.hash
            ))
        })?;
        if remote_cid != local {
            return Err(StoreError::Backend(format!(
                "Kubo at {} stored the content as {remote_cid}, but with CIDv1, raw leaves, 256 KiB \
                 chunks and 174 links per node it is {local}; check the node's Import settings",
                self.inner.url
            )));
        }
        Ok(local)
    }
}

/// Kubo's name for fixed 256 KiB chunks.
const CHUNKER: &str = "size-262144";
const _: () = assert!(CHUNK_SIZE == 262_144, "CHUNKER must name CHUNK_SIZE");

/// Kubo reports a block it cannot find (offline: "block was not found locally"; online: the
/// `timeout` option's "context deadline exceeded") only through its error message.
fn is_missing(err: &KuboError) -> bool {
    match err {
        KuboError::Api(api) => {
            let message = api.message.to_ascii_lowercase();
            ["not found", "could not find", "context deadline exceeded"]
                .iter()
                .any(|needle| message.contains(needle))
        }
        _ => false,
    }
}

#[async_trait]
impl BlockSource for KuboStore {
    async fn block(&self, cid: &Cid) -> Result<Option<Bytes>, StoreError> {
        let mut stream = self.inner.fetch.block_get(&cid.to_string());
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    if data.len() + chunk.len() > MAX_BLOCK_SIZE {
                        return Err(StoreError::Corrupt {
                            cid: *cid,
                            reason: format!(
                                "Kubo served more than {MAX_BLOCK_SIZE} bytes for one block"
                            ),
                        });
                    }
                    data.extend_from_slice(&chunk);
                }
                Err(err) if is_missing(&err) => return Ok(None),
                Err(err) => return Err(self.backend("block/get", err)),
            }
        }
        Ok(Some(Bytes::from(data)))
    }
}

#[async_trait]
impl ContentStore for KuboStore {
    async fn put(&self, data: Bytes) -> Result<Cid, StoreError> {
        let limit = self.inner.max_put_size;
        if data.len() as u64 > limit {
            return Err(StoreError::TooLarge {
                size: data.len() as u64,
                limit,
            });
        }
        // Hand the body over in chunk-sized pieces so the local hashing runs alongside the upload.
        let pieces: Vec<Result<Bytes, StoreError>> = (0..data.len())
            .step_by(CHUNK_SIZE)
            .map(|start| Ok(data.slice(start..(start + CHUNK_SIZE).min(data.len()))))
            .collect();
        self.add(Box::pin(stream::iter(pieces))).await
    }

    async fn put_stream(&self, stream: ByteStream) -> Result<Cid, StoreError> {
        self.add(stream).await
    }

    async fn get(&self, cid: &Cid) -> Result<ByteStream, StoreError> {
        verify::read_file(Arc::new(self.clone()), *cid).await
    }

    async fn pin(&self, cid: &Cid) -> Result<(), StoreError> {
        match self.inner.fetch.pin_add(&cid.to_string(), true).await {
            Ok(_) => Ok(()),
            Err(err) if is_missing(&err) => Err(StoreError::NotFound(*cid)),
            Err(err) => Err(self.backend("pin/add", err)),
        }
    }

    async fn unpin(&self, cid: &Cid) -> Result<(), StoreError> {
        match self.inner.fetch.pin_rm(&cid.to_string(), true).await {
            Ok(_) => Ok(()),
            // Kubo's own RPC client (client/rpc/pin.go) recognises this case by the same text.
            Err(KuboError::Api(api)) if api.message.contains("not pinned") => Ok(()),
            Err(err) => Err(self.backend("pin/rm", err)),
        }
    }

    async fn stat(&self, cid: &Cid) -> Result<ContentStat, StoreError> {
        let (size, blocks) = verify::stat_file(self, cid).await?;
        let pinned = match self
            .inner
            .local
            .pin_ls(Some(&cid.to_string()), Some("recursive"))
            .await
        {
            Ok(pins) => pins
                .keys
                .keys()
                .any(|key| key.parse::<Cid>().is_ok_and(|k| same_block(&k, cid))),
            // Kubo's own RPC client (client/rpc/pin.go) recognises this case by the same text.
            Err(KuboError::Api(api)) if api.message.contains("is not pinned") => false,
            Err(err) => return Err(self.backend("pin/ls", err)),
        };
        Ok(ContentStat {
            cid: *cid,
            size,
            blocks,
            pinned,
        })
    }

    async fn has(&self, cid: &Cid) -> Result<bool, StoreError> {
        match self.inner.local.block_stat(&cid.to_string()).await {
            Ok(_) => Ok(true),
            Err(err) if is_missing(&err) => Ok(false),
            Err(err) => Err(self.backend("block/stat", err)),
        }
    }
}

/// Kubo may list a pin under another CID version of the same block.
fn same_block(a: &Cid, b: &Cid) -> bool {
    a.codec() == b.codec() && a.hash() == b.hash()
}
