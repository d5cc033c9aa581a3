//! `shardwork bench …`: benchmarks that print their figure beside a baseline measured in the same
//! run. They are not tests; `scripts/test` does not run them.

pub mod api;
pub mod catch_rate;
pub mod federated;
pub mod llm;
pub mod products;
pub mod queue;
pub mod store;
pub mod train;
pub mod validation;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use shardwork_core::queue::TaskQueue;
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::table::TableQueue;
use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};

use crate::infra;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Authenticated `GET /v1/jobs/{id}` on PostgreSQL beside the static `/healthz`, same
    /// server, same run: requests/s, p50/p99 and the ratio.
    Api {
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
        database_url: String,
        /// Concurrent keep-alive connections.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// Seconds per route per round.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Rounds; the routes alternate within each.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Jobs posted and read in turn, so reads are spread over distinct rows as when many
        /// requesters poll their own jobs.
        #[arg(long, default_value_t = 16)]
        jobs: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What verification costs: each shard count's sample job run to payout with each number
    /// of in-process validators; the validators' compute against the training's, and each
    /// round's wait from its last submission to the next round (issue 47).
    Validation {
        #[arg(long, value_delimiter = ',', default_value = "3,12,24")]
        shards: Vec<u32>,
        #[arg(long, value_delimiter = ',', default_value = "1,3")]
        validators: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        workers: usize,
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Chat SFT of SmolLM2-135M (the README's job) instead of the generated sample model.
        #[arg(long)]
        chat: bool,
        /// Chat SFT: conversations per job.
        #[arg(long, default_value_t = 240)]
        conversations: usize,
        /// The jobs' `validation.bond_multiple`: 4 samples a quarter of the proofs
        /// (decisions/0044); 0 checks every one.
        #[arg(long, default_value_t = 4)]
        bond_multiple: u32,
        /// Also run each configuration with every verdict scoring the whole held-out set (as
        /// before decisions/0052) and print the validation share against it.
        #[arg(long)]
        whole_set_too: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What cheating earns against sampled proofs: the sample job with one dishonest worker
    /// (each kind asked for) run `--jobs` times at `--bond-multiple`; jobs caught, submissions,
    /// the cheat's pay less its slashed bond against an honest worker's pay (decision 0044).
    CatchRate {
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "lazy,skip-last"
        )]
        adversaries: Vec<shardwork_node::adversary::Behaviour>,
        #[arg(long, default_value_t = 5)]
        jobs: usize,
        #[arg(long, default_value_t = 6)]
        shards: u32,
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        #[arg(long, default_value_t = 3)]
        workers: usize,
        #[arg(long, default_value_t = 4)]
        bond_multiple: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Federated LoRA SFT on the chat demo's task (SmolLM2-135M on chatterbot-corpus): N shards
    /// x R rounds merged exactly, and merged by naive factor averaging, beside one adapter
    /// trained centrally on the union with the same optimiser steps: held-out losses and the
    /// gap to central (goal: exact within 2%).
    FederatedSft {
        #[arg(long, default_value_t = 3)]
        shards: u32,
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Conversations taken from the corpus, spread over it as the demo does.
        #[arg(long, default_value_t = 480)]
        conversations: usize,
        /// Passes over its shard each task makes (the spec's `training.epochs`; the demo's is
        /// 1). Central makes as many over the union, so both still take the same steps.
        #[arg(long, default_value_t = 1)]
        epochs: u32,
        /// The spec's `training.learning_rate`, for federated and central alike (default: the
        /// demo's).
        #[arg(long)]
        learning_rate: Option<f64>,
        /// The spec's `training.batch_size`, for federated and central alike (default: the
        /// demo's). With `--shards 1` central at a batch of N times the demo's is the bound a
        /// federated job of N shards approaches as its rounds shorten to one step each.
        #[arg(long)]
        batch_size: Option<u32>,
        /// Server learning rates of the exact merge, each run as a variant of its own on the
        /// same round-1 adapters; the goal is judged on the first.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        server_learning_rates: Vec<f64>,
        /// Nesterov momentum of the exact variants' outer step over rounds (DiLoCo's outer
        /// optimiser: 0.9 with a server learning rate of 0.7 there); 0 is the validator's merge.
        #[arg(long, default_value_t = 0.0)]
        server_momentum: f64,
        /// Give each round's tasks their part of one learning-rate schedule over the job's
        /// rounds (warmup in round 1, one cosine to the last round's end) instead of a warmup
        /// and cosine each.
        #[arg(long)]
        job_schedule: bool,
        /// Learning rates to train central at, each a run of its own; the gap is taken to the
        /// best (default: central at the federated rate alone). A federated job wants a higher
        /// rate than one run on the union, so a fair verdict compares each at its best.
        #[arg(long, value_delimiter = ',')]
        central_learning_rates: Vec<f64>,
        /// Training seeds to train central with at each rate (LoRA initialisation, data order,
        /// dropout); the gap is taken to the mean at the best rate, and the spread shows how
        /// far one run can land from it (default: the job's seed alone).
        #[arg(long, value_delimiter = ',')]
        central_seeds: Vec<u64>,
        /// Conversations of the corpus outside the job's dataset, scored with its held-out set
        /// (the job holds out a tenth: 12 conversations of 120 cannot resolve 2%).
        #[arg(long, default_value_t = 0)]
        test_conversations: usize,
        /// GGUF file; by default SmolLM2-135M-Instruct from scripts/install/python-fixtures.
        #[arg(long)]
        gguf: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// LoRA SFT training tokens/s and MFU on SmolLM2-135M (GGUF from the PyPI fixture), beside
    /// the f32 matmul peak measured in the same run.
    Llm {
        /// GGUF file; by default SmolLM2-135M-Instruct from scripts/install/python-fixtures.
        #[arg(long)]
        gguf: Option<PathBuf>,
    },
    /// LoRA training tokens/s and peak memory of the trainer (candle) beside PyTorch + PEFT on
    /// the same configurations, alternating in one run, with the ratios (goal: candle at least
    /// as fast and no larger). The reference stack comes from scripts/reference-stack (several
    /// GB, installed once into .tools/torch).
    Train {
        /// Configurations to run (default: all three).
        #[arg(long, value_enum, value_delimiter = ',')]
        configs: Vec<train::TrainConfig>,
        /// Rounds; the stacks alternate within each.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Measured optimiser steps per run.
        #[arg(long, default_value_t = 3)]
        steps: usize,
        /// Unmeasured optimiser steps before them.
        #[arg(long, default_value_t = 1)]
        warmup: usize,
        /// Threads for each stack (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Where both stacks train: `cuda` needs a GPU and a binary built with --features cuda
        /// (scripts/cuda-build).
        #[arg(long, value_enum, default_value_t = train::BenchDevice::Cpu)]
        device: train::BenchDevice,
        /// GGUF file; by default SmolLM2-135M-Instruct from scripts/install/python-fixtures.
        #[arg(long)]
        gguf: Option<PathBuf>,
        /// all-MiniLM-L6-v2 folder; by default the one from scripts/install/python-fixtures.
        #[arg(long)]
        minilm: Option<PathBuf>,
        /// The reference stack's Python; by default the one scripts/reference-stack installs.
        #[arg(long)]
        python: Option<PathBuf>,
        /// Measure candle only (no PyTorch).
        #[arg(long)]
        candle_only: bool,
        /// On a CPU with AMX or AMD Zen 4 (or `SHARDWORK_PANELS=on`), also run candle with
        /// `SHARDWORK_AMX=off` and `SHARDWORK_PANELS=off` (every frozen product on gemm, as on
        /// an AVX2 CPU), in the same rounds.
        #[arg(long)]
        portable_too: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The frozen products of SmolLM2-135M's projections on gemm (which packs the weight on
    /// every product) and on the f32 panels (packed once, as a training run packs them), both
    /// orientations, the kernels alternating in each round: GFLOP/s and the ratios. Needs
    /// AVX-512F or AVX2 with FMA; the panels run here whether or not this CPU kind's plan
    /// uses them (decision 0050).
    Products {
        /// Rows of each product (a training pass multiplies 256).
        #[arg(long, default_value_t = 256)]
        rows: usize,
        /// Rounds; the best rate of each kernel is kept.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One candle measurement of `bench train`, run in a child process of it.
    #[command(hide = true)]
    TrainChild {
        /// (Not `--config`: that is the CLI's global settings file.)
        #[arg(long, value_enum)]
        workload: train::TrainConfig,
        #[arg(long)]
        gguf: Option<PathBuf>,
        #[arg(long)]
        minilm: Option<PathBuf>,
        #[arg(long)]
        batch_size: usize,
        #[arg(long)]
        seq_len: usize,
        #[arg(long)]
        steps: usize,
        #[arg(long)]
        warmup: usize,
        #[arg(long, value_enum)]
        device: train::BenchDevice,
        /// Set through RAYON_NUM_THREADS by the parent; accepted for symmetry with the script.
        #[arg(long)]
        threads: usize,
    },
    /// Content addressing (Kubo-compatible CIDs) in MB/s beside `sha256sum` on the same file.
    Store {
        /// File to hash; by default a generated file of --size-mib in the temp folder.
        #[arg(long)]
        file: Option<PathBuf>,
        #[arg(long, default_value_t = 256)]
        size_mib: u64,
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Task queue throughput (publish + consume + ack) of each adapter.
    Queue {
        #[arg(long, value_enum, default_value_t = QueueAdapter::All)]
        adapter: QueueAdapter,
        #[arg(long, default_value_t = 10_000)]
        messages: usize,
        #[arg(long, default_value_t = 4)]
        consumers: usize,
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
        postgres_url: String,
        #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
        amqp_url: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueAdapter {
    All,
    TableSqlite,
    TablePostgres,
    Rabbitmq,
}

pub async fn run(config: crate::config::Config, command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Api {
            database_url,
            connections,
            seconds,
            rounds,
            jobs,
            json,
        } => {
            let bench = api::ApiBenchConfig {
                database_url,
                connections,
                seconds,
                rounds,
                jobs,
            };
            let report = api::run(config, &bench).await?;
            print_report(&report, json)?;
        }
        BenchCommand::CatchRate {
            adversaries,
            jobs,
            shards,
            rounds,
            workers,
            bond_multiple,
            json,
        } => {
            let bench = catch_rate::CatchRateConfig {
                adversaries,
                jobs,
                shards,
                rounds,
                workers,
                bond_multiple,
            };
            let report = catch_rate::run(config, &bench).await?;
            print_report(&report, json)?;
        }
        BenchCommand::Validation {
            shards,
            validators,
            workers,
            rounds,
            chat,
            conversations,
            bond_multiple,
            whole_set_too,
            json,
        } => {
            let bench = validation::ValidationBenchConfig {
                shards,
                validators,
                workers,
                rounds,
                chat,
                conversations,
                bond_multiple,
                whole_set_too,
            };
            let report = validation::run(config, &bench).await?;
            print_report(&report, json)?;
        }
        BenchCommand::FederatedSft {
            shards,
            rounds,
            conversations,
            epochs,
            learning_rate,
            batch_size,
            server_learning_rates,
            server_momentum,
            job_schedule,
            central_learning_rates,
            central_seeds,
            test_conversations,
            gguf,
            json,
        } => {
            let gguf = gguf
                .or_else(shardwork_trainer::fixtures::smollm2_gguf)
                .context(
                    "SmolLM2 GGUF not found: run scripts/install/python-fixtures or pass --gguf",
                )?;
            let corpus = shardwork_trainer::fixtures::chatterbot_data()
                .context("chatterbot-corpus not found: run scripts/install/python-fixtures")?;
            // The spec names the model as the demo stores it: a bundle in a scratch store.
            let scratch = tempfile::tempdir()?;
            let store_config = EmbeddedConfig {
                sync_writes: false,
                ..EmbeddedConfig::new(scratch.path().join("blocks"))
            };
            let store = EmbeddedStore::open(store_config)
                .await
                .context("opening a scratch blockstore")?;
            let model_cid =
                crate::demo::put_gguf(&shardwork_node::content::StoreBlobs(Arc::new(store)), &gguf)
                    .await?;
            let bench = federated::FederatedBenchConfig {
                gguf,
                model_cid,
                corpus,
                shards,
                rounds,
                conversations,
                epochs,
                learning_rate,
                batch_size,
                server_learning_rates,
                server_momentum,
                job_schedule,
                central_learning_rates,
                central_seeds,
                test_conversations,
            };
            let report = tokio::task::spawn_blocking(move || federated::run(&bench)).await??;
            if json {
                println!("{}", serde_json::to_string_pretty(&report.to_json())?);
            } else {
                println!("{report}");
            }
        }
        BenchCommand::Products { rows, rounds, json } => {
            let report = tokio::task::spawn_blocking(move || {
                shardwork_trainer::bench::products(
                    &shardwork_trainer::bench::SMOLLM2_PROJECTIONS,
                    rows,
                    rounds,
                )
            })
            .await??;
            print_report(&products::ProductsReport::new(report), json)?;
        }
        BenchCommand::Llm { gguf } => {
            let gguf = gguf
                .or_else(shardwork_trainer::fixtures::smollm2_gguf)
                .context(
                    "SmolLM2 GGUF not found: run scripts/install/python-fixtures or pass --gguf",
                )?;
            let config = llm::LlmBenchConfig::new(&gguf);
            let device = candle_core::Device::Cpu;
            let report =
                tokio::task::spawn_blocking(move || llm::run_llm_bench(&config, &device)).await??;
            println!("{report}");
        }
        BenchCommand::Train {
            configs,
            rounds,
            steps,
            warmup,
            threads,
            device,
            gguf,
            minilm,
            python,
            candle_only,
            portable_too,
            json,
        } => {
            anyhow::ensure!(
                rounds >= 1 && steps >= 1,
                "bench train: --rounds and --steps must be at least 1"
            );
            let configs = if configs.is_empty() {
                train::TrainConfig::ALL.to_vec()
            } else {
                configs
            };
            // Each fixture is looked for only when a chosen configuration reads it, so the
            // random-weight 1B shape runs on a machine that has none (a GPU machine, say).
            let uses = |wanted: &[train::TrainConfig]| configs.iter().any(|c| wanted.contains(c));
            let gguf = match gguf.or_else(shardwork_trainer::fixtures::smollm2_gguf) {
                Some(path) => Some(path),
                None if uses(&[
                    train::TrainConfig::Smollm2,
                    train::TrainConfig::Smollm2Q4,
                    train::TrainConfig::Smollm2Score,
                ]) =>
                {
                    anyhow::bail!(
                        "SmolLM2 GGUF not found: run scripts/install/python-fixtures or pass --gguf"
                    )
                }
                None => None,
            };
            let minilm = match minilm.or_else(shardwork_trainer::fixtures::minilm_dir) {
                Some(path) => Some(path),
                None if uses(&[train::TrainConfig::Minilm]) => anyhow::bail!(
                    "all-MiniLM-L6-v2 not found: run scripts/install/python-fixtures or pass --minilm"
                ),
                None => None,
            };
            let python = match (candle_only, python) {
                (true, _) => None,
                (false, Some(python)) => Some(python),
                (false, None) => Some(reference_python()?),
            };
            let bench = train::TrainBenchConfig {
                configs,
                rounds,
                steps,
                warmup,
                device,
                threads: threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)),
                gguf,
                minilm,
                python,
                script: PathBuf::from("scripts/bench_train_reference.py"),
                portable_too: portable_too && shardwork_trainer::fused::packs::kernel_available(),
            };
            let report = tokio::task::spawn_blocking(move || train::run(&bench)).await??;
            print_report(&report, json)?;
        }
        BenchCommand::TrainChild {
            workload: config,
            gguf,
            minilm,
            batch_size,
            seq_len,
            steps,
            warmup,
            device,
            threads: _,
        } => {
            let args = train::ChildArgs {
                config,
                gguf,
                minilm,
                batch_size,
                seq_len,
                steps,
                warmup,
                device,
            };
            let figures = tokio::task::spawn_blocking(move || train::run_child(&args)).await??;
            println!("{}", serde_json::to_string(&figures)?);
        }
        BenchCommand::Store {
            file,
            size_mib,
            runs,
        } => {
            let report =
                store::bench_content_addressing(file.as_deref(), size_mib << 20, runs).await?;
            println!("{report}");
        }
        BenchCommand::Queue {
            adapter,
            messages,
            consumers,
            postgres_url,
            amqp_url,
        } => {
            let run_id = uuid::Uuid::new_v4().simple().to_string();
            let wanted = |a: QueueAdapter| adapter == QueueAdapter::All || adapter == a;
            let mut targets: Vec<(String, Arc<dyn TaskQueue>)> = Vec::new();
            let _sqlite_dir;
            if wanted(QueueAdapter::TableSqlite) {
                let dir = tempfile::tempdir()?;
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("bench.db").display()
                );
                // One connection: SQLite writers on several pooled connections stall each other
                // in its busy handler (about 35 tasks/s instead of about 300).
                let db = infra::connect_database_with(&url, Some(1)).await?;
                targets.push(("table (SQLite)".into(), Arc::new(TableQueue::new(db))));
                _sqlite_dir = dir;
            }
            if wanted(QueueAdapter::TablePostgres) {
                let db = infra::connect_database(&postgres_url).await?;
                targets.push(("table (PostgreSQL)".into(), Arc::new(TableQueue::new(db))));
            }
            if wanted(QueueAdapter::Rabbitmq) {
                let rabbit = RabbitQueue::connect(&amqp_url, RabbitSettings::default())
                    .await
                    .context("connecting to RabbitMQ")?;
                targets.push(("RabbitMQ".into(), Arc::new(rabbit)));
            }
            for (label, queue) in targets {
                let mut config = queue::QueueBenchConfig::new(&label, &format!("bench.{run_id}"));
                config.messages = messages;
                config.consumers = consumers;
                let report = queue::bench_queue(queue, &config).await?;
                println!("{report}");
            }
        }
    }
    Ok(())
}

/// The reference stack's interpreter from scripts/reference-stack (run from the repository
/// root; it installs the pinned stack into .tools/torch the first time).
fn reference_python() -> anyhow::Result<PathBuf> {
    let script = PathBuf::from("scripts/reference-stack");
    anyhow::ensure!(
        script.exists(),
        "bench train: run it from the repository root (scripts/reference-stack not found), pass --python, or --candle-only"
    );
    let output = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running scripts/reference-stack")?;
    anyhow::ensure!(
        output.status.success(),
        "scripts/reference-stack failed ({})",
        output.status
    );
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// A bench's report on stdout: as JSON with `--json`, else as its text.
fn print_report<R: serde::Serialize + std::fmt::Display>(
    report: &R,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}
