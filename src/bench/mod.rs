//! `shardwork bench …`: benchmarks that print their figure beside a baseline measured in the same
//! run. They are not tests; `scripts/test` does not run them.

pub mod api;
pub mod federated;
pub mod llm;
pub mod queue;
pub mod store;

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
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
        }
        BenchCommand::FederatedSft {
            shards,
            rounds,
            conversations,
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
            };
            let report = tokio::task::spawn_blocking(move || federated::run(&bench)).await??;
            if json {
                println!("{}", serde_json::to_string_pretty(&report.to_json())?);
            } else {
                println!("{report}");
            }
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
