//! Trainer benchmarks: training throughput and model FLOPs utilisation (MFU) against a matmul
//! peak measured in the same process, and held-out accuracy against Naive Bayes.

use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::bert::BertWeights;
use crate::error::Result;
use crate::eval::ClassificationMetrics;
use crate::experiment::{self, ClassifyRun, FederatedReport};
use crate::train::Progress;

/// Best sustained f32 matmul rate (FLOP/s) on `device` for an `m × k · k × n` product, the
/// shape the model's largest layer runs at.
pub fn matmul_peak(device: &Device, m: usize, k: usize, n: usize) -> Result<f64> {
    let a = Tensor::randn(0f32, 1.0, (m, k), device)?;
    let b = Tensor::randn(0f32, 1.0, (k, n), device)?;
    // Warm-up (thread pool start, GPU kernels) is not counted.
    a.matmul(&b)?
        .sum_all()?
        .to_dtype(DType::F32)?
        .to_scalar::<f32>()?;
    let mut best = 0f64;
    for _ in 0..5 {
        let reps = 10;
        let start = Instant::now();
        let mut acc = Tensor::zeros((), DType::F32, device)?;
        for _ in 0..reps {
            acc = (acc + a.matmul(&b)?.sum_all()?)?;
        }
        acc.to_scalar::<f32>()?;
        let secs = start.elapsed().as_secs_f64();
        best = best.max(2.0 * (m * k * n * reps) as f64 / secs);
    }
    Ok(best)
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassifyBenchReport {
    pub device: String,
    pub run: ClassifyRun,
    pub train_examples: usize,
    pub held_out_examples: usize,
    pub steps: usize,
    pub train_seconds: f64,
    pub tokens_per_sec: f64,
    /// Training FLOP/s: 2× the forward FLOPs per token (forward plus activation gradients;
    /// frozen weights get no weight gradients), at the run's mean sequence length.
    pub train_flops_per_sec: f64,
    pub matmul_peak_flops_per_sec: f64,
    pub mfu: f64,
    pub lora: ClassificationMetrics,
    pub naive_bayes: ClassificationMetrics,
}

/// MiniLM + LoRA on the Rotten Tomatoes split with `run`; `held_out_limit` evaluates on a
/// fixed prefix of the held-out split (NB on the same texts).
pub fn classify(
    model_dir: &Path,
    rotten_tomatoes: &Path,
    run: &ClassifyRun,
    held_out_limit: Option<usize>,
    device: &Device,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ClassifyBenchReport> {
    let (train, held_out) = experiment::rotten_tomatoes_split(rotten_tomatoes)?;
    let held_out = match held_out_limit {
        Some(n) if n < held_out.len() => held_out.subset(&(0..n).collect::<Vec<_>>()),
        _ => held_out,
    };
    let naive_bayes = experiment::naive_bayes(&train, &held_out)?;
    let weights = BertWeights::load(model_dir, device)?;
    let tok = run.tokenizer(model_dir)?;
    let cfg = weights.config.clone();
    let peak = matmul_peak(
        device,
        run.train.batch_size * run.max_seq_len,
        cfg.hidden_size,
        cfg.intermediate_size,
    )?;
    let trained =
        experiment::train_and_evaluate(&weights, &tok, &train, &held_out, run, device, progress)?;
    let r = &trained.report;
    let micro_batches = (r.steps * run.train.optim.grad_accum).max(1);
    let mean_len = r.tokens as f64 / (micro_batches * run.train.batch_size) as f64;
    let flops_per_token = 2.0
        * trained
            .model
            .forward_flops_per_token(mean_len.round() as usize);
    let train_flops_per_sec = r.tokens_per_sec * flops_per_token;
    Ok(ClassifyBenchReport {
        device: format!("{device:?}"),
        run: run.clone(),
        train_examples: train.len(),
        held_out_examples: held_out.len(),
        steps: r.steps,
        train_seconds: r.seconds,
        tokens_per_sec: r.tokens_per_sec,
        train_flops_per_sec,
        matmul_peak_flops_per_sec: peak,
        mfu: train_flops_per_sec / peak,
        lora: trained.metrics,
        naive_bayes,
    })
}

/// The federated comparison on the Rotten Tomatoes split (see [`experiment::federated`]).
pub fn federated(
    model_dir: &Path,
    rotten_tomatoes: &Path,
    run: &ClassifyRun,
    shards: usize,
    held_out_limit: Option<usize>,
    device: &Device,
    progress: &mut dyn FnMut(&str, &Progress),
) -> Result<FederatedReport> {
    let (train, held_out) = experiment::rotten_tomatoes_split(rotten_tomatoes)?;
    let held_out = match held_out_limit {
        Some(n) if n < held_out.len() => held_out.subset(&(0..n).collect::<Vec<_>>()),
        _ => held_out,
    };
    let weights = BertWeights::load(model_dir, device)?;
    let tok = run.tokenizer(model_dir)?;
    experiment::federated(
        &weights, &tok, &train, &held_out, run, shards, device, progress,
    )
}
