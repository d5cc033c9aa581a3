//! Command-line surface: parsing and dispatch only; each subcommand's work lives in its module.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "shardwork",
    version,
    about = "An open marketplace for LoRA and federated fine-tuning"
)]
pub struct Cli {
    /// Configuration file (TOML). Without it, ./shardwork.toml is read when present.
    #[arg(long, global = true, env = "SHARDWORK_CONFIG")]
    pub config: Option<PathBuf>,

    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    pub json_logs: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the marketplace in one process on embedded defaults (no servers needed): the API,
    /// the validator and N workers.
    Up {
        /// In-process workers (0..=5; with 0, only workers started separately train).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// In-process validators (1..=4), sharing the scoring, proof replays and merges
        /// through leases; each signs in with its own generated key.
        #[arg(long, default_value_t = 1)]
        validators: usize,
    },
    /// Run the marketplace in one process and a sample federated job through it to payout.
    Demo(crate::demo::DemoArgs),
    /// Requester commands: post a job, fund it (development mode), watch it, fetch its adapter.
    Job(crate::job_cmd::JobArgs),
    /// Train a LoRA adapter (PEFT layout) on a BERT-family folder (classification) or a
    /// Llama-family GGUF (SFT), with a progress bar.
    Train(crate::train_cmd::TrainArgs),
    /// Score a model, with or without an adapter, on held-out JSONL.
    Eval(crate::train_cmd::EvalArgs),
    /// Merge PEFT adapters: exact (weighted ΔW, truncated SVD), naive, median or trimmed mean.
    Merge(crate::train_cmd::MergeArgs),
    /// Put a base model into the content store, or write the generated sample model.
    #[command(subcommand)]
    Model(crate::model_cmd::ModelCommand),
    /// Run one worker against a served API (its key in SHARDWORK_NODE_KEY or --key-file); or,
    /// with `earnings` / `withdraw`, see and withdraw what it earned.
    Worker(WorkerArgs),
    /// Run a validator against a served API (its key in SHARDWORK_NODE_KEY or --key-file).
    /// Run one per configured validator address: they share the work through leases.
    Validator(NodeArgs),
    /// Run the API server on the configured adapters (secrets must be configured).
    Serve,
    /// Exit 0 when the local API answers ready (GET /readyz on the configured bind address, or
    /// --url): the API image's health check.
    Health {
        /// The URL to ask instead.
        #[arg(long)]
        url: Option<String>,
    },
    /// Print the effective configuration (secrets redacted) and exit.
    Config,
    /// Print fresh random secrets for a deployment as `NAME=value` lines, the `.env` that
    /// `compose.yaml` refuses to start without: the API's JWT and sealing secrets, the
    /// validator's key and address, and two workers' keys (`shardwork secrets > .env`).
    Secrets,
    /// Deploy the escrow contract, or write its Etherscan verification input.
    #[command(subcommand)]
    Contracts(crate::contracts_cmd::ContractsCommand),
    /// Run a benchmark; each prints its baseline measured in the same run.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
}

impl Command {
    /// Log filter when `SHARDWORK_LOG` is unset: services log their requests and work at info;
    /// commands a person runs and reads (demo, job, train, …) print their own report and log
    /// only warnings, so that report is not buried under request logs.
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Up { .. }
            | Command::Serve
            | Command::Worker(WorkerArgs { action: None, .. })
            | Command::Validator(_) => "info,sqlx=warn,sea_orm_migration=warn",
            _ => "warn",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    #[command(flatten)]
    pub reach: crate::nodes::ApiKeyArgs,
    /// Where models are cached and tasks run.
    #[arg(long, default_value = ".shardwork/node")]
    pub work_dir: PathBuf,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkerArgs {
    /// Without a subcommand, run the worker.
    #[command(subcommand)]
    pub action: Option<crate::earnings_cmd::WorkerAction>,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Register at most this much training memory, MiB (default: all that is available at
    /// start, as measured): tasks of jobs that need more go to other workers.
    #[arg(long, env = "SHARDWORK_WORKER_MEMORY_MB")]
    pub memory_mb: Option<u64>,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Up {
            workers,
            validators,
        } => crate::up::run(config, validators, workers).await,
        Command::Demo(args) => crate::demo::run(config, args).await,
        Command::Job(args) => crate::job_cmd::run(args).await,
        Command::Train(args) => crate::train_cmd::train(args).await,
        Command::Eval(args) => crate::train_cmd::eval(args).await,
        Command::Merge(args) => crate::train_cmd::merge(args).await,
        Command::Model(command) => crate::model_cmd::run(config, command).await,
        Command::Worker(WorkerArgs {
            action: Some(action),
            ..
        }) => crate::earnings_cmd::run(config, action).await,
        Command::Worker(a) => {
            crate::nodes::run_worker(
                config,
                a.node.reach.api,
                a.node.reach.key_file,
                a.node.work_dir,
                a.memory_mb,
            )
            .await
        }
        Command::Validator(a) => {
            crate::nodes::run_validator(config, a.reach.api, a.reach.key_file, a.work_dir).await
        }
        Command::Serve => crate::serve::run(config).await,
        Command::Health { url } => crate::health::run(&config, url).await,
        Command::Bench(command) => crate::bench::run(config, command).await,
        Command::Contracts(command) => crate::contracts_cmd::run(command).await,
        Command::Config => {
            print!("{}", config.redacted_toml());
            Ok(())
        }
        Command::Secrets => {
            print!("{}", crate::dev_secrets::deployment_env());
            Ok(())
        }
    }
}
