//! `shardwork job …`: the requester's side from a terminal: post a job (spec + dataset), fund
//! it in development mode, watch it train with a progress bar, fetch the final adapter, list and
//! cancel. Everything goes through the API as the portal does, signed in with the requester's key.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde_json::Value;
use shardwork_client::ApiClient;
use shardwork_core::protocol::{JobEvent, JobStatus};
use shardwork_node::content::fetch_result;
use uuid::Uuid;

use crate::progress::ProgressLine;

#[derive(Debug, Args)]
pub struct JobArgs {
    /// The API's root URL.
    #[arg(
        long,
        env = "SHARDWORK_API_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub api: String,
    /// File holding the requester's hex private key (default: SHARDWORK_REQUESTER_KEY).
    #[arg(long, global = true)]
    pub key_file: Option<PathBuf>,
    /// Sign in with the public development requester key (account 3 of the development
    /// mnemonic): only for a local marketplace on a development chain.
    #[arg(long, global = true)]
    pub dev_requester: bool,
    /// Machine-readable output on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Post a job: a spec (JSON) and a dataset (JSONL). Prints the job id.
    Post {
        #[arg(long)]
        spec: PathBuf,
        #[arg(long)]
        data: PathBuf,
        /// Development mode: have the server fund the escrow from its development account.
        #[arg(long)]
        dev_fund: bool,
        /// Then follow the job until it ends (as `job watch`).
        #[arg(long)]
        watch: bool,
    },
    /// Post a job that continues from a completed job's result: round 1 trains from its
    /// adapter on new data. The spec is the earlier job's (its deadline moved as far ahead of
    /// now as it was of that job's posting), or `--spec` with `base_model.adapter` set to the
    /// result. Prints the new job's id.
    Continue {
        /// The completed job whose adapter the new job starts from (one of yours).
        id: Uuid,
        #[arg(long)]
        data: PathBuf,
        /// A spec for the new job instead of the earlier job's (its `base_model.adapter` is
        /// set to the earlier result).
        #[arg(long)]
        spec: Option<PathBuf>,
        /// Development mode: have the server fund the escrow from its development account.
        #[arg(long)]
        dev_fund: bool,
        /// Then follow the job until it ends (as `job watch`).
        #[arg(long)]
        watch: bool,
    },
    /// Development mode: have the server fund a posted job's escrow.
    Fund { id: Uuid },
    /// Follow a job with a progress bar until it completes, is refunded or is cancelled; exits
    /// non-zero unless it completed.
    Watch {
        id: Uuid,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 24 * 3600)]
        timeout_secs: u64,
    },
    /// Show a job.
    Show { id: Uuid },
    /// List your jobs, newest first.
    List {
        #[arg(long)]
        status: Option<String>,
    },
    /// Cancel a job that has not started.
    Cancel { id: Uuid },
    /// Download the final adapter (adapter_config.json, adapter_model.safetensors, report).
    Result {
        id: Uuid,
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

pub async fn run(args: JobArgs) -> anyhow::Result<()> {
    let key = if args.dev_requester {
        crate::nodes::dev_key(crate::nodes::REQUESTER_DEV_KEY)
    } else {
        crate::nodes::signing_key(args.key_file.as_deref(), "SHARDWORK_REQUESTER_KEY")?
    };
    let api = Arc::new(ApiClient::new(&args.api, key, &[])?);
    match args.command {
        JobCommand::Post {
            spec,
            data,
            dev_fund,
            watch,
        } => {
            let id = post(&api, &spec, &data, args.json).await?;
            if dev_fund {
                fund(&api, id, args.json).await?;
            }
            if watch {
                follow(&api, id, Duration::from_secs(24 * 3600), args.json).await?;
            }
        }
        JobCommand::Continue {
            id,
            data,
            spec,
            dev_fund,
            watch,
        } => {
            let spec_value = continuing_spec(&api, id, spec.as_deref()).await?;
            let label = format!("a continuation of job {id}");
            let id = post_value(&api, &spec_value, &label, &data, args.json).await?;
            if dev_fund {
                fund(&api, id, args.json).await?;
            }
            if watch {
                follow(&api, id, Duration::from_secs(24 * 3600), args.json).await?;
            }
        }
        JobCommand::Fund { id } => fund(&api, id, args.json).await?,
        JobCommand::Watch { id, timeout_secs } => {
            follow(&api, id, Duration::from_secs(timeout_secs), args.json).await?
        }
        JobCommand::Show { id } => {
            let job = api.job(id).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&job)?);
            } else {
                print_job(&job);
            }
        }
        JobCommand::List { status } => {
            let jobs = api.my_jobs(status.as_deref()).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&jobs)?);
            } else if jobs.is_empty() {
                println!("no jobs");
            } else {
                for job in &jobs {
                    println!(
                        "{}  {:<16} round {}/{}  {}",
                        job["id"].as_str().unwrap_or("?"),
                        job["status"].as_str().unwrap_or("?"),
                        job["current_round"],
                        job["rounds"],
                        job["created_at"].as_str().unwrap_or("")
                    );
                }
            }
        }
        JobCommand::Cancel { id } => {
            let job = api.cancel_job(id).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&job)?);
            } else {
                let status = job["status"].as_str();
                println!(
                    "job {id} {}",
                    status.unwrap_or(JobStatus::Cancelled.as_str())
                );
            }
        }
        JobCommand::Result { id, out } => {
            let (result, cid, names) = fetch_result(&api, id, &out).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                println!("adapter {cid} written to {}:", out.display());
                for name in names {
                    println!("  {}", out.join(name).display());
                }
            }
        }
    }
    Ok(())
}

/// The JSON spec in the file at `spec`.
fn read_spec(spec: &Path) -> anyhow::Result<Value> {
    let spec_text =
        std::fs::read_to_string(spec).with_context(|| format!("reading {}", spec.display()))?;
    serde_json::from_str(&spec_text).with_context(|| {
        format!(
            "{} is not JSON (a job spec is a JSON object)",
            spec.display()
        )
    })
}

async fn post(api: &ApiClient, spec: &Path, data: &Path, json: bool) -> anyhow::Result<Uuid> {
    let spec_value = read_spec(spec)?;
    post_value(api, &spec_value, &spec.display().to_string(), data, json).await
}

/// The spec of a job continuing from completed job `id`'s result: `spec` (a file) or the
/// earlier job's own, its deadline as far ahead of now as it was ahead of that job's posting,
/// with `base_model.adapter` naming the result.
async fn continuing_spec(api: &ApiClient, id: Uuid, spec: Option<&Path>) -> anyhow::Result<Value> {
    let earlier = api.job(id).await?;
    let Some(adapter) = earlier["result_adapter_cid"].as_str() else {
        bail!(
            "job {id} is {} and has no result to continue from; a job continues from a \
             completed one",
            earlier["status"].as_str().unwrap_or("?")
        );
    };
    let mut value = match spec {
        Some(path) => read_spec(path)?,
        None => {
            let mut value = earlier["spec"].clone();
            let at = |key: &str| {
                earlier[key]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            };
            let span = match (at("deadline"), at("created_at")) {
                (Some(deadline), Some(created)) => deadline - created,
                _ => chrono::Duration::days(1),
            };
            value["deadline"] = Value::String((chrono::Utc::now() + span).to_rfc3339());
            value
        }
    };
    if !value["base_model"].is_object() {
        bail!("the spec has no base_model object");
    }
    value["base_model"]["adapter"] = Value::String(adapter.to_owned());
    Ok(value)
}

async fn post_value(
    api: &ApiClient,
    spec_value: &Value,
    label: &str,
    data: &Path,
    json: bool,
) -> anyhow::Result<Uuid> {
    let dataset = std::fs::read(data).with_context(|| format!("reading {}", data.display()))?;
    eprintln!(
        "posting {label} with {} ({:.1} MiB) to {}",
        data.display(),
        dataset.len() as f64 / (1 << 20) as f64,
        api.base()
    );
    let job = api.post_job(spec_value, Bytes::from(dataset)).await?;
    let id: Uuid = job["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .context("the API answered a job without an id")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        println!("{id}");
        eprintln!(
            "job {id} posted: {} shard(s) x {} round(s), stake {} wei, status {}",
            job["shards"],
            job["rounds"],
            job["stake_wei"].as_str().unwrap_or("?"),
            job["status"].as_str().unwrap_or("?")
        );
        if let Some(funding) = job.get("funding").filter(|f| !f.is_null()) {
            eprintln!("fund it on chain with: {funding}");
        }
    }
    Ok(id)
}

async fn fund(api: &ApiClient, id: Uuid, json: bool) -> anyhow::Result<()> {
    let funded = api.dev_fund(id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&funded)?);
    } else {
        eprintln!(
            "escrow funded by the development account (escrow job {}, tx {})",
            funded["escrow_job_id"].as_str().unwrap_or("?"),
            funded["tx_hash"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// Where a job stands, read off its events.
#[derive(Debug, Default)]
struct Standing {
    round: i64,
    rounds: i64,
    shards: i64,
    accepted_in_round: i64,
}

impl Standing {
    fn apply(&mut self, event: &JobEvent) {
        match event {
            JobEvent::RoundOpened(opened) => {
                self.round = i64::from(opened.round);
                self.accepted_in_round = 0;
            }
            JobEvent::Verdict(verdict)
                if verdict.accepted && i64::from(verdict.round) == self.round =>
            {
                self.accepted_in_round += 1;
            }
            _ => {}
        }
    }

    /// Progress over the whole job: accepted shards across rounds.
    fn done(&self) -> u64 {
        ((self.round - 1).max(0) * self.shards + self.accepted_in_round).max(0) as u64
    }
}

/// Follows a job until it ends; `Ok` only when it completed.
async fn follow(api: &ApiClient, id: Uuid, timeout: Duration, json: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let job = api.job(id).await?;
    let mut standing = Standing {
        rounds: job["rounds"].as_i64().unwrap_or(1),
        shards: job["shards"].as_i64().unwrap_or(1),
        ..Standing::default()
    };
    let mut bar = ProgressLine::new();
    // Both callbacks draw on the bar and read the standing.
    let shared = std::cell::RefCell::new((&mut bar, &mut standing));
    let outcome = crate::job_events::follow(
        api,
        id,
        timeout,
        Duration::from_millis(500),
        &mut |event| {
            let (bar, standing) = &mut *shared.borrow_mut();
            standing.apply(&event.event);
            if json {
                println!("{}", serde_json::to_string(event)?);
            } else {
                bar.println(&format!(
                    "{}  {}",
                    event
                        .created_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    crate::job_events::describe(&event.event)
                ));
            }
            Ok(())
        },
        &mut |status| {
            let (bar, standing) = &mut *shared.borrow_mut();
            bar.draw(
                standing.done(),
                (standing.rounds * standing.shards) as u64,
                &format!(
                    "shard-rounds accepted · round {}/{} · {status} · {:.0}s",
                    standing.round.max(1),
                    standing.rounds,
                    started.elapsed().as_secs_f64()
                ),
            );
        },
    )
    .await;
    bar.finish();
    let status = outcome?;
    if status != JobStatus::Completed {
        bail!("job {id} ended {status}");
    }
    let result = api.result(id).await?;
    if !json {
        eprintln!(
            "job {id} completed in {:.0} s; final adapter {} (fetch it with `shardwork job result {id}`)",
            started.elapsed().as_secs_f64(),
            result["adapter_cid"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

fn print_job(job: &Value) {
    let field = |name: &str| match &job[name] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    for name in [
        "id",
        "status",
        "kind",
        "requester",
        "shards",
        "rounds",
        "current_round",
        "stake_wei",
        "deadline",
        "escrow_address",
        "escrow_job_id",
        "manifest_cid",
        "result_adapter_cid",
    ] {
        println!("{name:<20} {}", field(name));
    }
}
