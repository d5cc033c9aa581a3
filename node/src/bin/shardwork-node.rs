//! `shardwork-node`: the worker or the validator on its own, for operators who run nodes
//! against a served marketplace (the `docker/node.Dockerfile` image; `worker-cuda` on a GPU).
//! It links the trainer, the API client, RabbitMQ and Kubo, and no database driver or API
//! server: an untrusted worker never holds database credentials, and its binary carries none of
//! that code.
//!
//! `shardwork worker` / `shardwork validator` in the full CLI do the same; this binary reads the
//! same environment variables, so a deployment can switch between them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use shardwork_client::ApiClient;
use shardwork_core::protocol::TASK_QUEUE;
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::{QueueOptions, TaskQueue};
use shardwork_core::store::kubo::{KuboConfig, KuboStore};
use shardwork_node::NodeError;
use shardwork_node::content::{ApiBlobs, Blobs, StoreBlobs};
use shardwork_node::health;
use shardwork_node::models::WorkDir;
use shardwork_node::service::{
    HEARTBEAT, VALIDATOR_POLL, shutdown_on_signal, signing_key, training_device,
};
use shardwork_node::validator::{Rules, ValidatorNode};
use shardwork_node::worker::{Honest, TrainingSlot, WorkerNode};

/// Shardwork's worker and validator services, against a served API.
#[derive(Debug, Parser)]
#[command(name = "shardwork-node", version)]
struct Cli {
    #[command(subcommand)]
    role: Role,
    #[command(flatten)]
    node: NodeArgs,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Take tasks from the queue, train them, submit the adapters (key: SHARDWORK_NODE_KEY).
    Worker(QueueArgs),
    /// Score submissions on the held-out sets and merge rounds (key: SHARDWORK_NODE_KEY).
    Validator,
    /// Exit 0 while a node runs in --work-dir (its heartbeat is fresh): the image's health
    /// check.
    Health,
}

#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// The API's root URL.
    #[arg(
        long,
        global = true,
        env = "SHARDWORK_API_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    api: String,
    /// File holding the node's hex private key (default: SHARDWORK_NODE_KEY).
    #[arg(long, global = true)]
    key_file: Option<PathBuf>,
    /// Where models are cached and tasks are worked on.
    #[arg(long, global = true, default_value = "node")]
    work_dir: PathBuf,
    /// Where content is read and written: `kubo` (straight to the Kubo node) or `embedded`
    /// (through the API, for marketplaces on the embedded store).
    #[arg(
        long,
        global = true,
        env = "SHARDWORK_STORE__KIND",
        default_value = "embedded"
    )]
    store: StoreKind,
    /// The Kubo RPC URL, with `--store kubo`.
    #[arg(
        long,
        global = true,
        env = "SHARDWORK_STORE__KUBO_URL",
        default_value = "http://127.0.0.1:5001"
    )]
    kubo_url: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StoreKind {
    Embedded,
    Kubo,
}

#[derive(Debug, clap::Args)]
struct QueueArgs {
    /// The RabbitMQ URL (a remote worker can only use RabbitMQ: the embedded queue lives in the
    /// API's database).
    #[arg(
        long,
        env = "SHARDWORK_QUEUE__AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    /// Deliveries of one task message before it is dead-lettered.
    #[arg(long, env = "SHARDWORK_QUEUE__MAX_DELIVERIES", default_value_t = 5)]
    max_deliveries: u32,
    /// How long a delivery may stay unacknowledged before the queue offers it again.
    #[arg(
        long,
        env = "SHARDWORK_QUEUE__VISIBILITY_TIMEOUT_SECS",
        default_value_t = 300
    )]
    visibility_timeout_secs: u64,
    /// Messages taken from the queue ahead of the one being worked on.
    #[arg(long, env = "SHARDWORK_QUEUE__PREFETCH", default_value_t = 1)]
    prefetch: u16,
    /// Register at most this much training memory, MiB (default: all that is available at
    /// start, as measured): tasks of jobs that need more go to other workers.
    #[arg(long, env = "SHARDWORK_WORKER_MEMORY_MB")]
    memory_mb: Option<u64>,
}

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in main, before any thread starts (tracing's and the runtime's
    // included).
    unsafe { shardwork_trainer::process::prepare_for_tensor_work() };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHARDWORK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(Cli::parse())) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    };
    // A stopped worker leaves its training thread behind (the task was given back): do not
    // wait for it, as dropping the runtime would.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

async fn run(cli: Cli) -> Result<(), NodeError> {
    let node = cli.node;
    // The worker's queue settings; None for the validator.
    let (role, worker_queue) = match cli.role {
        Role::Worker(queue_args) => ("worker", Some(queue_args)),
        Role::Validator => ("validator", None),
        Role::Health => {
            let age = health::check(&node.work_dir)?;
            println!("healthy: last heartbeat {} s ago", age.as_secs());
            return Ok(());
        }
    };
    let key = signing_key(node.key_file.as_deref(), "SHARDWORK_NODE_KEY")?;
    let address = key.address();
    let api = Arc::new(ApiClient::new(&node.api, key, &[role])?);
    let blobs: Arc<dyn Blobs> = match node.store {
        StoreKind::Kubo => {
            let store = KuboStore::new(&KuboConfig::new(node.kubo_url.clone()))
                .map_err(|e| NodeError::Content(format!("Kubo at {}: {e}", node.kubo_url)))?;
            Arc::new(StoreBlobs(Arc::new(store)))
        }
        StoreKind::Embedded => Arc::new(ApiBlobs(api.clone())),
    };
    let _heartbeat = health::beat(node.work_dir.clone());
    let work_dir = WorkDir::new(node.work_dir);
    match worker_queue {
        Some(queue_args) => {
            let queue: Arc<dyn TaskQueue> = Arc::new(
                RabbitQueue::connect(&queue_args.amqp_url, RabbitSettings::default()).await?,
            );
            queue
                .declare(
                    TASK_QUEUE,
                    &QueueOptions {
                        max_deliveries: queue_args.max_deliveries,
                        visibility_timeout: Duration::from_secs(queue_args.visibility_timeout_secs),
                        prefetch: queue_args.prefetch,
                    },
                )
                .await?;
            println!("worker {address:#x} serving {}", node.api);
            WorkerNode {
                api,
                blobs,
                queue,
                device: training_device(),
                work_dir,
                heartbeat: HEARTBEAT,
                conduct: Arc::new(Honest),
                memory_limit_mb: queue_args.memory_mb,
                training_slot: TrainingSlot::new(),
            }
            .run(shutdown_on_signal())
            .await
        }
        None => {
            println!("validator {address:#x} serving {}", node.api);
            ValidatorNode {
                api,
                blobs,
                device: training_device(),
                work_dir,
                poll: VALIDATOR_POLL,
                rules: Rules::default(),
            }
            .run(shutdown_on_signal())
            .await
        }
    }
}
