//! Workers and the validator: in-process for `shardwork up` and `demo`, or one per process for
//! `shardwork worker` / `shardwork validator` against a served API.
//!
//! Development accounts (public keys, `shardwork_contracts::dev_keys`) have fixed jobs on a
//! development chain: 0 deploys the escrow, 1 is the API's operator (validator role on chain),
//! 2 funds jobs in development mode, 3 is the demo's requester. The in-process validator and
//! workers never use them: their keys are generated into the data folder
//! (`crate::dev_secrets::node_keys`), since the API gives whoever signs in with the
//! validator's address every job's held-out set and its verdicts (issue 46, decision 0038).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use alloy::signers::local::PrivateKeySigner;
use shardwork_client::ApiClient;
use shardwork_core::protocol::EthAddress;
use shardwork_core::queue::TaskQueue;
use shardwork_core::store::ContentStore;
use shardwork_node::adversary::Behaviour;
use shardwork_node::content::{ApiBlobs, Blobs, StoreBlobs};
use shardwork_node::models::WorkDir;
use shardwork_node::validator::{Rules, ValidatorNode};
use shardwork_node::worker::{Honest, TrainingSlot, WorkerNode};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const REQUESTER_DEV_KEY: usize = 3;
/// The most in-process workers one machine runs (each gets a share of its memory).
pub const MAX_DEV_WORKERS: usize = 5;

pub fn dev_key(index: usize) -> PrivateKeySigner {
    shardwork_contracts::dev_keys::dev_signers()[index].clone()
}

pub fn address_of(key: &PrivateKeySigner) -> EthAddress {
    EthAddress(key.address().into_array())
}

use shardwork_node::service::{HEARTBEAT, VALIDATOR_POLL};
pub use shardwork_node::service::{shutdown_on_signal, stop_signal, training_device};

/// Running nodes; [`NodeSet::stop`] asks them to finish their current work and waits.
pub struct NodeSet {
    shutdown: watch::Sender<bool>,
    handles: Vec<JoinHandle<()>>,
}

impl NodeSet {
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for handle in self.handles {
            let _ = handle.await;
        }
    }

    /// Asks the nodes to stop and waits at most `grace`; a node still busy then (a worker deep
    /// in a long training run) is cut off, and its lease expires into a retry elsewhere.
    pub async fn stop_within(self, grace: std::time::Duration) {
        let _ = self.shutdown.send(true);
        let deadline = tokio::time::Instant::now() + grace;
        for mut handle in self.handles {
            if tokio::time::timeout_at(deadline, &mut handle)
                .await
                .is_err()
            {
                tracing::warn!("a node did not stop within {grace:?}; cutting it off");
                handle.abort();
            }
        }
    }
}

/// What an in-process deployment runs beside the API.
pub struct InProcess<'a> {
    pub api_url: String,
    pub store: Arc<dyn ContentStore>,
    pub queue: Arc<dyn TaskQueue>,
    pub work_dir: &'a Path,
    /// The validators' and the workers' keys (`crate::dev_secrets::node_keys`); as many
    /// validators and workers run as it holds keys for.
    pub keys: crate::dev_secrets::NodeKeys,
    /// Of the workers, how many are dishonest (demo, tests).
    pub adversaries: usize,
    /// What the dishonest ones do.
    pub adversary: Behaviour,
}

pub fn spawn_in_process(setup: InProcess<'_>) -> anyhow::Result<NodeSet> {
    let workers = setup.keys.workers.len();
    anyhow::ensure!(
        workers <= MAX_DEV_WORKERS,
        "at most {MAX_DEV_WORKERS} in-process workers, not {workers}"
    );
    let (shutdown, receiver) = watch::channel(false);
    let blobs: Arc<dyn Blobs> = Arc::new(StoreBlobs(setup.store.clone()));
    let device = training_device();
    let mut handles = Vec::new();
    for (i, key) in setup.keys.validators.iter().enumerate() {
        let validator = ValidatorNode {
            api: Arc::new(ApiClient::new(&setup.api_url, key.clone(), &["validator"])?),
            blobs: blobs.clone(),
            device: device.clone(),
            // The first keeps the folder a single validator always had (its model cache).
            work_dir: WorkDir::new(setup.work_dir.join(match i {
                0 => "validator".to_owned(),
                _ => format!("validator-{i}"),
            })),
            poll: VALIDATOR_POLL,
            rules: Rules::default(),
        };
        let rx = receiver.clone();
        handles.push(tokio::spawn(async move {
            if let Err(e) = validator.run(rx).await {
                tracing::error!(error = %e, "validator stopped");
            }
        }));
    }
    // In-process workers share this machine with each other and the validator: each registers
    // its share of the memory available now, not all of it (three workers that each claimed the
    // whole machine were leased three jobs' worth of training and ran it out of memory).
    let share_mb = match shardwork_node::capacity::host_memory_mb() {
        Ok(mb) => Some(mb / (workers as u64 + 1)),
        Err(e) => {
            tracing::warn!(error = %e, "host memory unknown: in-process workers register what they measure");
            None
        }
    };
    // They share the cores too: they train in turn (`TrainingSlot`), not all at once.
    let slot = TrainingSlot::new();
    for (i, key) in setup.keys.workers.iter().enumerate() {
        let behaviour = if i < setup.adversaries {
            setup.adversary
        } else if i == setup.adversaries && setup.adversary == Behaviour::Copycat {
            // A copycat copies what its accomplice trained: adapters are sealed, so it has no
            // other way to read one.
            Behaviour::Accomplice
        } else {
            Behaviour::Honest
        };
        let node = WorkerNode {
            api: Arc::new(ApiClient::new(&setup.api_url, key.clone(), &["worker"])?),
            blobs: blobs.clone(),
            queue: setup.queue.clone(),
            device: device.clone(),
            work_dir: WorkDir::new(setup.work_dir.join(format!("worker-{i}"))),
            heartbeat: HEARTBEAT,
            conduct: behaviour.conduct(),
            memory_limit_mb: share_mb,
            training_slot: slot.clone(),
        };
        let rx = receiver.clone();
        handles.push(tokio::spawn(async move {
            if let Err(e) = node.run(rx).await {
                tracing::error!(error = %e, "worker stopped");
            }
        }));
    }
    Ok(NodeSet { shutdown, handles })
}

/// Which API a node (or its operator) talks to, and the key it signs in with.
#[derive(Debug, clap::Args)]
pub struct ApiKeyArgs {
    /// The API's root URL.
    #[arg(
        long,
        env = "SHARDWORK_API_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub api: String,
    /// File holding the node's hex private key (default: SHARDWORK_NODE_KEY).
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

/// A node's signing key: `SHARDWORK_NODE_KEY` (hex), or the file given.
pub fn node_key(key_file: Option<&Path>) -> anyhow::Result<PrivateKeySigner> {
    signing_key(key_file, "SHARDWORK_NODE_KEY")
}

/// A hex secp256k1 private key from `key_file`, else from the environment variable `variable`.
pub fn signing_key(key_file: Option<&Path>, variable: &str) -> anyhow::Result<PrivateKeySigner> {
    Ok(shardwork_node::service::signing_key(key_file, variable)?)
}

/// Content access for a node in its own process: straight to Kubo when the deployment uses
/// Kubo, else through the API.
pub async fn remote_blobs(
    config: &crate::config::Config,
    api: Arc<ApiClient>,
) -> anyhow::Result<Arc<dyn Blobs>> {
    Ok(match config.store.kind {
        crate::config::StoreKind::Kubo => {
            Arc::new(StoreBlobs(crate::infra::open_store(config).await?))
        }
        crate::config::StoreKind::Embedded => Arc::new(ApiBlobs(api)),
    })
}

/// `shardwork worker`: one worker process.
pub async fn run_worker(
    config: crate::config::Config,
    api_url: String,
    key_file: Option<PathBuf>,
    work_dir: PathBuf,
    memory_limit_mb: Option<u64>,
) -> anyhow::Result<()> {
    let api = Arc::new(ApiClient::new(
        &api_url,
        node_key(key_file.as_deref())?,
        &["worker"],
    )?);
    let db = match config.queue.kind {
        crate::config::QueueKind::Embedded => {
            Some(crate::infra::connect_database(&config.effective_database_url()).await?)
        }
        crate::config::QueueKind::RabbitMq => None,
    };
    let queue = crate::infra::open_queue(&config, db.as_ref()).await?;
    queue
        .declare(
            shardwork_core::protocol::TASK_QUEUE,
            &crate::infra::queue_options(&config),
        )
        .await?;
    let node = WorkerNode {
        blobs: remote_blobs(&config, api.clone()).await?,
        api,
        queue,
        device: training_device(),
        work_dir: WorkDir::new(work_dir),
        heartbeat: HEARTBEAT,
        conduct: Arc::new(Honest),
        memory_limit_mb,
        training_slot: TrainingSlot::new(),
    };
    println!(
        "worker {} serving {api_url}",
        address_of(&node_key(key_file.as_deref())?)
    );
    node.run(shutdown_on_signal()).await?;
    Ok(())
}

/// `shardwork validator`: the validator service in its own process.
pub async fn run_validator(
    config: crate::config::Config,
    api_url: String,
    key_file: Option<PathBuf>,
    work_dir: PathBuf,
) -> anyhow::Result<()> {
    let api = Arc::new(ApiClient::new(
        &api_url,
        node_key(key_file.as_deref())?,
        &["validator"],
    )?);
    let node = ValidatorNode {
        blobs: remote_blobs(&config, api.clone()).await?,
        api,
        device: training_device(),
        work_dir: WorkDir::new(work_dir),
        poll: VALIDATOR_POLL,
        rules: Rules::default(),
    };
    println!(
        "validator {} serving {api_url}",
        address_of(&node_key(key_file.as_deref())?)
    );
    node.run(shutdown_on_signal()).await?;
    Ok(())
}
