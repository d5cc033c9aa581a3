//! `shardwork train`, `shardwork eval`, `shardwork merge`: the trainer on its own, outside the
//! marketplace. Adapters go in and out in Hugging Face PEFT layout (adapter_config.json +
//! adapter_model.safetensors), so they load in PEFT unchanged.
//!
//! Two model kinds: a BERT-family folder (config.json, model.safetensors, tokenizer.json) trains
//! sequence classification on `{"text","label"}` lines; a Llama-family model (a GGUF file, or a
//! Hugging Face folder of Llama, Qwen2 or SmolLM) trains SFT on `{"text"}`,
//! `{"prompt","completion"}`, `{"instruction","input","output"}` or `{"messages":[…]}` lines.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::Device;
use clap::{Args, ValueEnum};
use serde::Serialize;
use shardwork_core::protocol::RecordsFor;
use shardwork_core::protocol::job_spec::{LoraSpec, LrSchedule, TrainingArgs};
use shardwork_core::protocol::model_files::{BERT_MODEL_TYPES, LLAMA_MODEL_TYPES};
use shardwork_node::work::RoundOf;
use shardwork_node::work::causal_lm::{CausalLmJob, held_out_eval};
use shardwork_node::work::classify::ClassifyJob;
use shardwork_trainer::causal_model::{BaseWeights, CausalModel, CausalModelFiles};
use shardwork_trainer::data::jsonl::read_records;
use shardwork_trainer::fused::packs::KeptPacks;
use shardwork_trainer::lora::{LoraConfig, Trainables};
use shardwork_trainer::merge::{MergeMode, MergeOptions, MergeReport};
use shardwork_trainer::optim::OptimConfig;
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::tokenizer_gguf::LmTokenizer;
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::dpo;
use shardwork_trainer::train::sft::{self, SftConfig};
use shardwork_trainer::train::sft_data::{SftExample, read_sft_jsonl};
use shardwork_trainer::train::trace::Span;

use crate::progress::ProgressLine;

/// Examples per batch when scoring (no gradients).
const EVAL_BATCH: usize = 16;

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// A BERT-family model folder (classification), or a Llama-family .gguf file or Hugging Face
    /// folder (SFT).
    #[arg(long)]
    pub model: PathBuf,
    /// Training data (JSONL).
    #[arg(long)]
    pub data: PathBuf,
    /// Folder to write the PEFT adapter to.
    #[arg(long)]
    pub out: PathBuf,
    /// Held-out JSONL scored before and after training.
    #[arg(long)]
    pub held_out: Option<PathBuf>,
    #[arg(long, default_value_t = 8)]
    pub r: u32,
    #[arg(long, default_value_t = 16.0)]
    pub alpha: f64,
    #[arg(long, default_value_t = 0.05)]
    pub dropout: f64,
    /// Modules to adapt, comma-separated (default: query,value for BERT; q_proj,v_proj for
    /// Llama).
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Classification: number of labels.
    #[arg(long, default_value_t = 2)]
    pub labels: usize,
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// SFT: optimiser steps (default: what the epochs give).
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    #[arg(long, default_value_t = 16)]
    pub batch_size: u32,
    #[arg(long, default_value_t = 1)]
    pub grad_accum: u32,
    #[arg(long, default_value_t = 0.06)]
    pub warmup_ratio: f64,
    #[arg(long, default_value_t = 128)]
    pub max_seq_len: u32,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// SFT on a GGUF model: keep the projections LoRA does not adapt in the file's block
    /// format (Q4_1, Q8_0, ...) and expand them a layer at a time. The same training, bit for
    /// bit, in less memory, somewhat slower.
    #[arg(long)]
    pub quantized_base: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A BERT-family model folder, or a Llama-family .gguf file or Hugging Face folder.
    #[arg(long)]
    pub model: PathBuf,
    /// Held-out JSONL.
    #[arg(long)]
    pub data: PathBuf,
    /// A PEFT adapter folder; without it the base model is scored.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    #[arg(long, default_value_t = 2)]
    pub labels: usize,
    #[arg(long, default_value_t = 128)]
    pub max_seq_len: u32,
    /// A causal LM on preference pairs: score them as a DPO job with this beta judges them
    /// (the loss, each pair's chosen and rejected rewards), against `--reference`.
    #[arg(long)]
    pub dpo_beta: Option<f64>,
    /// With `--dpo-beta`: the reference policy's adapter (the base model without one).
    #[arg(long, requires = "dpo_beta")]
    pub reference: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MergeModeArg {
    /// Weighted sum of ΔW = B·A per module, truncated SVD back to rank r.
    Exact,
    /// Weighted mean of the A's and of the B's (wrong in general; for comparison).
    Naive,
    /// Coordinate-wise median of ΔW (robust; weights ignored).
    Median,
    /// Coordinate-wise trimmed mean of ΔW (robust; weights ignored).
    Trimmed,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Adapter folders, each optionally `=WEIGHT` (default 1): `a/=3 b/=1`.
    #[arg(required = true, num_args = 1..)]
    pub adapters: Vec<String>,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = MergeModeArg::Exact)]
    pub mode: MergeModeArg,
    /// Trimmed mean: values dropped at each end.
    #[arg(long, default_value_t = 1)]
    pub trim: usize,
    /// Rank of the merged adapter (default: the inputs' r).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Scale down any adapter whose ‖ΔW‖_F exceeds this before merging.
    #[arg(long)]
    pub clip_norm: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The adapter every input was trained from (the round's start); with
    /// `--server-learning-rate` the merge steps from it. Default: a fresh adapter.
    #[arg(long)]
    pub start: Option<PathBuf>,
    /// Step `start + η·(merge − start)` instead of the merge itself (1 = the merge).
    #[arg(long, default_value_t = 1.0)]
    pub server_learning_rate: f64,
    #[arg(long)]
    pub json: bool,
}

/// What `model` points at.
enum ModelKind {
    /// A BERT-family folder: sequence classification.
    Bert(PathBuf),
    /// A Llama-family GGUF file or Hugging Face folder (Llama, Qwen2, SmolLM): SFT.
    Causal(PathBuf),
}

fn model_kind(path: &Path) -> anyhow::Result<ModelKind> {
    if path.is_file() {
        CausalModelFiles::locate(path)?;
        return Ok(ModelKind::Causal(path.to_owned()));
    }
    if !path.is_dir() {
        bail!(
            "{}: expected a model folder (config.json, model.safetensors, tokenizer.json) or a \
             .gguf file",
            path.display()
        );
    }
    let config_path = path.join("config.json");
    if !config_path.exists() {
        // A folder holding one .gguf file (a fetched model bundle).
        CausalModelFiles::locate(path)?;
        return Ok(ModelKind::Causal(path.to_owned()));
    }
    let text = std::fs::read_to_string(&config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not JSON", config_path.display()))?;
    match config["model_type"].as_str() {
        Some(t) if BERT_MODEL_TYPES.contains(&t) => Ok(ModelKind::Bert(path.to_owned())),
        Some(t) if LLAMA_MODEL_TYPES.contains(&t) => Ok(ModelKind::Causal(path.to_owned())),
        Some(other) => bail!(
            "{}: model_type {other:?} is not supported: `shardwork train` takes BERT-family \
             folders ({}) and Llama-family folders or GGUF files ({})",
            config_path.display(),
            BERT_MODEL_TYPES.join(", "),
            LLAMA_MODEL_TYPES.join(", ")
        ),
        None => bail!("{}: no model_type", config_path.display()),
    }
}

fn default_targets(given: &[String], kind: &ModelKind) -> Vec<String> {
    if !given.is_empty() {
        return given.to_vec();
    }
    match kind {
        ModelKind::Bert(_) => vec!["query".into(), "value".into()],
        ModelKind::Causal(_) => vec!["q_proj".into(), "v_proj".into()],
    }
}

/// Draws the progress bar for a training step.
fn on_progress(bar: &mut ProgressLine) -> impl FnMut(&Progress) + '_ {
    move |p: &Progress| {
        bar.draw(
            p.step as u64,
            p.total_steps as u64,
            &format!(
                "steps  loss {:.4}  lr {:.2e}  {:.0} tok/s",
                p.loss, p.lr, p.tokens_per_sec
            ),
        )
    }
}

#[derive(Debug, Serialize)]
struct TrainOutput {
    adapter_dir: PathBuf,
    task: &'static str,
    steps: usize,
    seconds: f64,
    tokens_per_sec: f64,
    final_loss: f32,
    /// Held-out scores before and after (accuracy/macro-F1, or loss/perplexity).
    held_out_before: Option<serde_json::Value>,
    held_out_after: Option<serde_json::Value>,
}

pub async fn train(args: TrainArgs) -> anyhow::Result<()> {
    let output = tokio::task::spawn_blocking(move || train_blocking(&args).map(|o| (o, args.json)))
        .await??;
    let (output, json) = output;
    if json {
        println!("{}", serde_json::to_string_pretty(&output)?);
    } else {
        println!(
            "{} adapter written to {}: {} steps in {:.1} s ({:.0} tok/s), final loss {:.4}",
            output.task,
            output.adapter_dir.display(),
            output.steps,
            output.seconds,
            output.tokens_per_sec,
            output.final_loss
        );
        if let (Some(before), Some(after)) = (&output.held_out_before, &output.held_out_after) {
            println!("held-out before {before}\nheld-out after  {after}");
        }
    }
    Ok(())
}

fn train_blocking(args: &TrainArgs) -> anyhow::Result<TrainOutput> {
    let kind = model_kind(&args.model)?;
    let targets = default_targets(&args.targets, &kind);
    let device = crate::nodes::training_device();
    let mut bar = ProgressLine::new();
    let output = match &kind {
        ModelKind::Bert(dir) => {
            anyhow::ensure!(
                !args.quantized_base,
                "--quantized-base: {} is a BERT folder; only a GGUF model's projections can be kept quantized",
                dir.display()
            );
            let job = ClassifyJob::from_args(
                &LoraSpec {
                    r: args.r,
                    alpha: args.alpha,
                    dropout: args.dropout,
                    target_modules: targets,
                    modules_to_save: vec!["classifier".into()],
                },
                TrainingArgs {
                    epochs: args.epochs,
                    learning_rate: args.lr,
                    batch_size: args.batch_size,
                    max_seq_len: args.max_seq_len,
                    seed: args.seed,
                    warmup_ratio: args.warmup_ratio,
                    gradient_accumulation: args.grad_accum,
                    schedule: LrSchedule::Task,
                    dpo: None,
                },
                args.labels,
                dir,
                &device,
            )?;
            let data = job.dataset(&args.data)?;
            let held_out = args
                .held_out
                .as_deref()
                .map(|p| job.dataset(p))
                .transpose()?;
            let before = held_out
                .as_ref()
                .map(|h| job.evaluate(None, h, &device))
                .transpose()?;
            let (adapter, report, _) = job.train(
                None,
                &data,
                &device,
                RoundOf::ALONE,
                Span::whole(),
                &mut on_progress(&mut bar),
            )?;
            bar.finish();
            adapter.save(&args.out)?;
            let after = held_out
                .as_ref()
                .map(|h| job.evaluate(Some(&adapter), h, &device))
                .transpose()?;
            TrainOutput {
                adapter_dir: args.out.clone(),
                task: "sequence classification",
                steps: report.steps,
                seconds: report.seconds,
                tokens_per_sec: report.tokens_per_sec,
                final_loss: report.final_loss,
                held_out_before: before.map(|m| serde_json::to_value(m).unwrap_or_default()),
                held_out_after: after.map(|m| serde_json::to_value(m).unwrap_or_default()),
            }
        }
        ModelKind::Causal(path) => {
            let base = if args.quantized_base {
                BaseWeights::Quantized
            } else {
                BaseWeights::F32
            };
            let CausalModel {
                mut model,
                tokenizer,
                files,
            } = CausalModel::load_with(path, &device, base)?;
            let train = encode_sft(&tokenizer, &args.data, args.max_seq_len)?;
            let held_out = args
                .held_out
                .as_deref()
                .map(|p| encode_sft(&tokenizer, p, args.max_seq_len))
                .transpose()?;
            let pad = tokenizer.eos_token_id;
            // Scored as a validator scores a verdict (before: the base model, no LoRA yet).
            let mut scoring_packs = KeptPacks::default();
            let before = held_out
                .as_ref()
                .map(|h| held_out_eval(&model, h, &mut scoring_packs))
                .transpose()?;
            let batch = args.batch_size.max(1) as usize;
            let accum = args.grad_accum.max(1) as usize;
            let steps = args.steps.unwrap_or_else(|| {
                (train.len().div_ceil(batch) * args.epochs.max(1) as usize)
                    .div_ceil(accum)
                    .max(1)
            });
            let cfg = SftConfig {
                lora: lora_config(args, &targets, &[])?,
                optim: OptimConfig {
                    lr: args.lr,
                    warmup_steps: ((steps as f64) * args.warmup_ratio).round() as usize,
                    total_steps: steps,
                    grad_accum: accum,
                    max_grad_norm: Some(1.0),
                    ..OptimConfig::default()
                },
                batch_size: batch,
                max_seq_len: args.max_seq_len as usize,
                seed: args.seed,
            };
            let trainables = sft::attach_lora(&mut model, &cfg.lora, cfg.seed)?;
            let report = sft::train(
                &model,
                &trainables,
                &train,
                &cfg,
                pad,
                &mut on_progress(&mut bar),
            )?;
            bar.finish();
            let adapter = Adapter::from_trainables(
                AdapterConfig::from_lora(&cfg.lora, "CAUSAL_LM", Some(&files.name())),
                &trainables,
            )?;
            adapter.save(&args.out)?;
            let after = held_out
                .as_ref()
                .map(|h| held_out_eval(&model, h, &mut scoring_packs))
                .transpose()?;
            TrainOutput {
                adapter_dir: args.out.clone(),
                task: "causal LM (SFT)",
                steps: report.steps,
                seconds: report.seconds,
                tokens_per_sec: report.tokens_per_sec,
                final_loss: report.final_loss,
                held_out_before: before.map(|m| serde_json::to_value(m).unwrap_or_default()),
                held_out_after: after.map(|m| serde_json::to_value(m).unwrap_or_default()),
            }
        }
    };
    Ok(output)
}

fn lora_config(args: &TrainArgs, targets: &[String], save: &[&str]) -> anyhow::Result<LoraConfig> {
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    Ok(LoraConfig::new(
        args.r as usize,
        args.alpha,
        args.dropout as f32,
        &targets,
        save,
    )?)
}

fn encode_sft(
    tokenizer: &LmTokenizer,
    path: &Path,
    max_seq_len: u32,
) -> anyhow::Result<Vec<SftExample>> {
    let records = read_sft_jsonl(path)?;
    let examples = sft::encode_dataset(tokenizer, &records, max_seq_len as usize)
        .with_context(|| format!("encoding {}", path.display()))?;
    if examples.is_empty() {
        bail!("{}: no example has tokens to learn", path.display());
    }
    Ok(examples)
}

pub async fn eval(args: EvalArgs) -> anyhow::Result<()> {
    let json = args.json;
    let scores = tokio::task::spawn_blocking(move || eval_blocking(&args)).await??;
    if json {
        println!("{}", serde_json::to_string_pretty(&scores)?);
    } else {
        println!("{scores}");
    }
    Ok(())
}

fn eval_blocking(args: &EvalArgs) -> anyhow::Result<serde_json::Value> {
    let device = crate::nodes::training_device();
    let adapter = args
        .adapter
        .as_deref()
        .map(|dir| Adapter::load(dir, &device))
        .transpose()?;
    Ok(match model_kind(&args.model)? {
        ModelKind::Bert(dir) => {
            // No adapter: a LoRA with B = 0 scores exactly as the base with a fresh head.
            let lora = scoring_lora(adapter.as_ref(), "query", &["classifier"]);
            let job = ClassifyJob::from_args(
                &lora,
                scoring_args(args.max_seq_len),
                args.labels,
                &dir,
                &device,
            )?;
            let data = job.dataset(&args.data)?;
            serde_json::to_value(job.evaluate(adapter.as_ref(), &data, &device)?)?
        }
        ModelKind::Causal(path) if args.dpo_beta.is_some() => {
            let reference = args
                .reference
                .as_deref()
                .map(|dir| Adapter::load(dir, &device))
                .transpose()?;
            serde_json::to_value(preference_scores(
                &path,
                adapter.as_ref(),
                reference.as_ref(),
                args,
                &device,
            )?)?
        }
        ModelKind::Causal(path) => {
            // Scored by the validator's own code (`CausalLmJob::evaluate`: its batches, and the
            // frozen weights' packs it keeps for scoring), so the loss printed is the one a
            // verdict on this adapter records, to the digit.
            let lora = scoring_lora(adapter.as_ref(), "q_proj", &[]);
            let job =
                CausalLmJob::from_args(&lora, scoring_args(args.max_seq_len), &path, &device)?;
            let data = job.examples(&args.data)?;
            serde_json::to_value(job.evaluate(adapter.as_ref(), &data)?)?
        }
    })
}

/// The LoRA layers `shardwork eval` attaches: `adapter`'s, or without one a rank-1 layer on
/// `target` (B = 0, so the base model scores) beside `to_save`.
fn scoring_lora(adapter: Option<&Adapter>, target: &str, to_save: &[&str]) -> LoraSpec {
    match adapter {
        Some(a) => LoraSpec {
            r: a.config.r as u32,
            alpha: a.config.lora_alpha,
            dropout: 0.0,
            target_modules: a.config.target_modules.clone(),
            modules_to_save: a.config.modules_to_save.clone().unwrap_or_default(),
        },
        None => LoraSpec {
            r: 1,
            alpha: 1.0,
            dropout: 0.0,
            target_modules: vec![target.to_owned()],
            modules_to_save: to_save.iter().map(|m| (*m).to_owned()).collect(),
        },
    }
}

/// The training arguments of a job that only scores: what matters is `max_seq_len` and the
/// scoring batch.
fn scoring_args(max_seq_len: u32) -> TrainingArgs {
    TrainingArgs {
        epochs: 1,
        learning_rate: 1e-3,
        batch_size: EVAL_BATCH as u32,
        max_seq_len,
        seed: 42,
        warmup_ratio: 0.0,
        gradient_accumulation: 1,
        schedule: LrSchedule::Task,
        dpo: None,
    }
}

/// `shardwork eval --dpo-beta`: what a DPO job's validator would report for `adapter` (the
/// base without one) on the pairs, and every pair's loss and rewards.
#[derive(Debug, Serialize)]
struct PreferenceScores {
    #[serde(flatten)]
    summary: dpo::DpoEval,
    scores: Vec<dpo::PairScore>,
}

fn preference_scores(
    model_path: &Path,
    adapter: Option<&Adapter>,
    reference: Option<&Adapter>,
    args: &EvalArgs,
    device: &Device,
) -> anyhow::Result<PreferenceScores> {
    let CausalModel {
        mut model,
        tokenizer,
        ..
    } = CausalModel::load(model_path, device)?;
    let records: Vec<_> = read_records(&args.data, RecordsFor::Preference)?
        .into_iter()
        .map(|(_, record)| record)
        .collect();
    let pairs = dpo::encode_pairs(&tokenizer, &records, args.max_seq_len as usize)?;
    if pairs.is_empty() {
        bail!(
            "{}: no pair has an answer token within max_seq_len",
            args.data.display()
        );
    }
    let pad = tokenizer.eos_token_id;
    // One set of LoRA layers holds the reference's values, then the policy's: the base model
    // is the fresh values (B = 0).
    let config = adapter
        .or(reference)
        .map(|a| a.config.lora_config())
        .transpose()?;
    let trainables = match &config {
        Some(config) => Some(sft::attach_lora(&mut model, config, 0)?),
        None => None,
    };
    let fresh = trainables.as_ref().map(Trainables::snapshot).transpose()?;
    let load = |values: Option<&Adapter>| -> anyhow::Result<()> {
        if let (Some(t), Some(fresh)) = (&trainables, &fresh) {
            t.load(values.map_or(fresh, |a| &a.tensors))?;
        }
        Ok(())
    };
    load(reference)?;
    let refs = dpo::reference_logps(&model, &pairs, EVAL_BATCH, pad)?;
    load(adapter)?;
    let objective = dpo::DpoObjective {
        beta: args.dpo_beta.unwrap_or(0.1),
        loss: shardwork_core::protocol::PreferenceLoss::Sigmoid,
    };
    let scores = dpo::pair_scores(&model, &pairs, &refs, objective, EVAL_BATCH, pad)?;
    Ok(PreferenceScores {
        summary: dpo::DpoEval::of(&scores),
        scores,
    })
}

pub async fn merge(args: MergeArgs) -> anyhow::Result<()> {
    let json = args.json;
    let started = Instant::now();
    let report = tokio::task::spawn_blocking(move || merge_blocking(&args)).await??;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "merged {} adapters ({:?}, rank {}, server learning rate {}) in {:.2} s; weights \
             {:?}; clip factors {:?}; max relative truncation error {:.4}",
            report.weights.len(),
            report.mode,
            report.rank,
            report.server_learning_rate,
            started.elapsed().as_secs_f64(),
            report
                .weights
                .iter()
                .map(|w| (w * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
            report.clip_factors,
            report.max_relative_error
        );
        for module in &report.modules {
            println!(
                "  {:<60} rank before {:>4}  relative error {:.4}",
                module.module, module.rank_before, module.relative_error
            );
        }
    }
    Ok(())
}

fn merge_blocking(args: &MergeArgs) -> anyhow::Result<MergeReport> {
    let mut adapters = Vec::new();
    let mut weights = Vec::new();
    for spec in &args.adapters {
        let (dir, weight) = match spec.rsplit_once('=') {
            Some((dir, w)) => (
                dir,
                w.parse::<f64>()
                    .with_context(|| format!("{spec}: the weight after `=` is not a number"))?,
            ),
            None => (spec.as_str(), 1.0),
        };
        adapters.push(Adapter::load(Path::new(dir), &Device::Cpu)?);
        weights.push(weight);
    }
    let mode = match args.mode {
        MergeModeArg::Exact => MergeMode::Exact,
        MergeModeArg::Naive => MergeMode::Naive,
        MergeModeArg::Median => MergeMode::Median,
        MergeModeArg::Trimmed => MergeMode::TrimmedMean { trim: args.trim },
    };
    let start = args
        .start
        .as_deref()
        .map(|dir| Adapter::load(dir, &Device::Cpu))
        .transpose()?;
    let (merged, report) = shardwork_trainer::merge::merge_from(
        start.as_ref(),
        &adapters,
        &weights,
        &MergeOptions {
            mode,
            rank: args.rank,
            clip_norm: args.clip_norm,
            seed: args.seed,
            server_learning_rate: args.server_learning_rate,
        },
    )?;
    merged.save(&args.out)?;
    Ok(report)
}
