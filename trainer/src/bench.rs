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
use crate::inference::ScoringKernel;
use crate::train::Progress;

/// Best sustained f32 matmul rate (FLOP/s) on `device` for an `m × k · k × n` product, the
/// shape the model's largest layer runs at: of the kernel training multiplies frozen weights
/// with (AMX's split-bf16 product on a CPU that has it, the f32 panels where the plan uses them,
/// candle's matmul otherwise).
pub fn matmul_peak(device: &Device, m: usize, k: usize, n: usize) -> Result<f64> {
    if device.is_cpu() && crate::amx::available() {
        return Ok(amx_matmul_peak(m, k, n));
    }
    if device.is_cpu() && crate::panels::available() {
        return Ok(panels_matmul_peak(m, k, n));
    }
    let a = Tensor::randn(0f32, 1.0, (m, k), device)?;
    let b = Tensor::randn(0f32, 1.0, (k, n), device)?;
    // Warm-up (thread pool start, GPU kernels) is not counted.
    drop(a.matmul(&b)?);
    device.synchronize()?;
    let mut best = 0f64;
    for _ in 0..5 {
        let reps = 10;
        let start = Instant::now();
        // Products only: on a GPU they are queued, so the clock stops once the device is done.
        // (Summing each product to force that, as this once did, timed candle's reduction
        // kernel with the product.)
        for _ in 0..reps {
            drop(a.matmul(&b)?);
        }
        device.synchronize()?;
        let secs = start.elapsed().as_secs_f64();
        best = best.max(2.0 * (m * k * n * reps) as f64 / secs);
    }
    Ok(best)
}

/// [`matmul_peak`] of the AMX kernel, the weight packed once as training packs it.
fn amx_matmul_peak(m: usize, k: usize, n: usize) -> f64 {
    let w = probe_weight(n, k);
    let packed = crate::amx::PackedWeight::new(&w, None, n, k);
    packed_matmul_peak(m, k, n, |x, y| packed.matmul_t_into(x, m, y))
}

/// [`matmul_peak`] of the f32 panel kernel (AVX-512 or AVX2, without AMX), packed once as training
/// packs it.
fn panels_matmul_peak(m: usize, k: usize, n: usize) -> f64 {
    let packed = crate::panels::PanelWeight::new(&probe_weight(n, k), n, k);
    packed_matmul_peak(m, k, n, |x, y| packed.matmul_t_into(x, m, y))
}

/// A deterministic `n × k` weight for the probes.
fn probe_weight(n: usize, k: usize) -> Vec<f32> {
    (0..n * k).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect()
}

/// The best rate of `product(x, y)`, `x (m × k) · packed weight` into `y (m × n)`.
fn packed_matmul_peak(m: usize, k: usize, n: usize, product: impl Fn(&[f32], &mut [f32])) -> f64 {
    let x: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
    let mut y = vec![0f32; m * n];
    product(&x, &mut y);
    let mut best = 0f64;
    for _ in 0..5 {
        let reps = 10;
        let start = Instant::now();
        for _ in 0..reps {
            product(&x, &mut y);
        }
        let secs = start.elapsed().as_secs_f64();
        best = best.max(2.0 * (m * k * n * reps) as f64 / secs);
    }
    best
}

/// What [`classify`] measured: throughput, MFU and held-out accuracy of LoRA against Naive Bayes.
#[derive(Debug, Clone, Serialize)]
pub struct ClassifyBenchReport {
    /// The device the run used, as candle prints it.
    pub device: String,
    /// The classification run's settings.
    pub run: ClassifyRun,
    /// Training examples in the split.
    pub train_examples: usize,
    /// Held-out examples scored (after `held_out_limit`).
    pub held_out_examples: usize,
    /// Optimiser steps taken.
    pub steps: usize,
    /// Wall-clock seconds of training.
    pub train_seconds: f64,
    /// Real (non-padding) training tokens per second.
    pub tokens_per_sec: f64,
    /// Training FLOP/s: 2× the forward FLOPs per token (forward plus activation gradients;
    /// frozen weights get no weight gradients), at the run's mean sequence length.
    pub train_flops_per_sec: f64,
    /// Best f32 matmul FLOP/s measured on the device (see [`matmul_peak`]).
    pub matmul_peak_flops_per_sec: f64,
    /// Model FLOPs utilisation: `train_flops_per_sec / matmul_peak_flops_per_sec`.
    pub mfu: f64,
    /// Held-out metrics of the LoRA classifier.
    pub lora: ClassificationMetrics,
    /// Held-out metrics of the Naive Bayes baseline on the same texts.
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

/// What [`scoring`] measured: held-out scoring time of the baseline and inference paths.
#[derive(Debug, Clone, Serialize)]
pub struct ScoringBenchReport {
    /// The device the run used, as candle prints it.
    pub device: String,
    /// Held-out examples scored.
    pub held_out_examples: usize,
    /// Maximum tokens per text.
    pub max_seq_len: usize,
    /// Timed rounds; the reported seconds are medians over them.
    pub rounds: usize,
    /// The matrix kernel [`crate::train::classify::predict`] picked on this machine.
    pub kernel: String,
    /// Median seconds to score the held-out set through the differentiable forward pass with
    /// the LoRA branch live (how the validator scored before the inference path).
    pub baseline_seconds: f64,
    /// The inference path (folded weights, fused kernels) on candle's f32 matmul.
    pub portable_seconds: f64,
    /// The same through [`crate::train::classify::predict`], on `kernel`.
    pub inference_seconds: f64,
    /// `baseline_seconds / inference_seconds`.
    pub speedup: f64,
    /// `portable_seconds / inference_seconds`: what the kernel alone gains.
    pub kernel_speedup: f64,
    /// Predictions on which each inference path differs from the baseline (float rounding at a
    /// decision boundary).
    pub portable_disagreements: usize,
    /// Predictions on which the picked kernel's path differs from the baseline.
    pub disagreements: usize,
    /// Largest absolute logit difference between the portable and the picked kernel.
    pub max_logit_difference: f32,
    /// Tokens the batches carry, padding included.
    pub padded_tokens: usize,
    /// Model FLOP/s of the inference path, against the best f32 matmul rate at the model's
    /// feed-forward shape in the same process.
    pub inference_flops_per_sec: f64,
    /// Best f32 matmul FLOP/s measured on the device at the feed-forward shape.
    pub matmul_peak_flops_per_sec: f64,
}

/// Held-out scoring as the validator does it, against the pre-inference-path baseline and the
/// inference path on candle's f32 matmul, in the same process, alternating `rounds` times. The
/// adapter has random non-zero LoRA factors so the branch the baseline runs is real work.
pub fn scoring(
    model_dir: &Path,
    rotten_tomatoes: &Path,
    run: &ClassifyRun,
    held_out_limit: usize,
    rounds: usize,
    device: &Device,
) -> Result<ScoringBenchReport> {
    let (_, held_out) = experiment::rotten_tomatoes_split(rotten_tomatoes)?;
    let n = held_out_limit.min(held_out.len());
    let held_out = held_out.subset(&(0..n).collect::<Vec<_>>());
    let weights = BertWeights::load(model_dir, device)?;
    let tok = run.tokenizer(model_dir)?;
    let (model, trainables) = run.build(&weights, 2)?;
    for (name, var) in trainables.iter() {
        if name.contains("lora_B") {
            var.set(&Tensor::randn(0f32, 0.02, var.shape(), device)?)?;
        }
    }
    let kernel = ScoringKernel::detect(device, DType::F32);
    let batch = run.eval_batch;
    let texts = &held_out.texts;
    let time = |f: &mut dyn FnMut() -> Result<Vec<u32>>| -> Result<(f64, Vec<u32>)> {
        let start = Instant::now();
        let pred = f()?;
        Ok((start.elapsed().as_secs_f64(), pred))
    };
    let baseline = &mut || {
        crate::train::classify::predict_batches(&tok, texts, batch, device, &|b| {
            model.forward(&b.ids, &b.mask, false)
        })
    };
    // What `classify::predict` does, on one kernel, counting the padded tokens the batches
    // carry and keeping the logits to compare the kernels.
    let folded_path = |kernel: ScoringKernel,
                       tokens: &mut usize,
                       flops: &mut f64,
                       logits: &mut Vec<Tensor>|
     -> Result<Vec<u32>> {
        let folded = model.folded_with(kernel)?;
        let seen = std::sync::Mutex::new((0usize, 0f64, Vec::new()));
        let pred = crate::train::classify::predict_batches(&tok, texts, batch, device, &|b| {
            let (rows, t) = b.ids.dims2()?;
            let out = folded.infer(&b.ids, &b.mask)?;
            let mut seen = seen.lock().expect("a scoring batch panicked");
            seen.0 += rows * t;
            seen.1 += (rows * t) as f64 * model.forward_flops_per_token(t);
            // Keyed by the batch's first ids so the two kernels' logits pair up.
            seen.2
                .push((b.ids.flatten_all()?.to_vec1::<u32>()?, out.clone()));
            Ok(out)
        })?;
        let (t, f, mut batches) = seen.into_inner().expect("a scoring batch panicked");
        batches.sort_by(|a, b| a.0.cmp(&b.0));
        (*tokens, *flops) = (t, f);
        *logits = batches.into_iter().map(|(_, l)| l).collect();
        Ok(pred)
    };
    let (mut tokens, mut flops) = (0usize, 0f64);
    let (mut portable_logits, mut picked_logits) = (Vec::new(), Vec::new());
    let (mut unused_tokens, mut unused_flops) = (0usize, 0f64);
    let portable = &mut || {
        folded_path(
            ScoringKernel::Portable,
            &mut unused_tokens,
            &mut unused_flops,
            &mut portable_logits,
        )
    };
    let picked = &mut || folded_path(kernel, &mut tokens, &mut flops, &mut picked_logits);
    // Warm-up: thread pools, first-touch allocations.
    picked()?;
    let (mut base_times, mut portable_times, mut picked_times) = (vec![], vec![], vec![]);
    let (mut portable_disagreements, mut disagreements) = (0, 0);
    for _ in 0..rounds.max(1) {
        let (tb, pb) = time(baseline)?;
        let (tp, pp) = time(portable)?;
        let (ti, pi) = time(picked)?;
        base_times.push(tb);
        portable_times.push(tp);
        picked_times.push(ti);
        let differ = |a: &[u32], b: &[u32]| a.iter().zip(b).filter(|(x, y)| x != y).count();
        portable_disagreements = differ(&pb, &pp);
        disagreements = differ(&pb, &pi);
    }
    let mut max_logit_difference = 0f32;
    for (p, q) in portable_logits.iter().zip(&picked_logits) {
        let d: f32 = (p - q)?.abs()?.flatten_all()?.max(0)?.to_scalar()?;
        max_logit_difference = max_logit_difference.max(d);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let baseline_seconds = median(&mut base_times);
    let portable_seconds = median(&mut portable_times);
    let inference_seconds = median(&mut picked_times);
    let hidden = weights.config.hidden_size;
    let peak = matmul_peak(device, batch * run.max_seq_len / 2, hidden, hidden * 4)?;
    Ok(ScoringBenchReport {
        device: format!("{device:?}"),
        held_out_examples: n,
        max_seq_len: run.max_seq_len,
        rounds: rounds.max(1),
        kernel: format!("{kernel:?}"),
        baseline_seconds,
        portable_seconds,
        inference_seconds,
        speedup: baseline_seconds / inference_seconds,
        kernel_speedup: portable_seconds / inference_seconds,
        portable_disagreements,
        disagreements,
        max_logit_difference,
        padded_tokens: tokens,
        inference_flops_per_sec: flops / inference_seconds,
        matmul_peak_flops_per_sec: peak,
    })
}

/// SmolLM2-135M's frozen projections as (name, input features, output features): the
/// products a training pass of its LoRA SFT multiplies, forward and for the input gradient.
pub const SMOLLM2_PROJECTIONS: [(&str, usize, usize); 4] = [
    ("q_proj, o_proj", 576, 576),
    ("k_proj, v_proj", 576, 192),
    ("gate_proj, up_proj", 576, 1536),
    ("down_proj", 1536, 576),
];

/// One frozen product shape on gemm and on the panel kernel, best of the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct ProductFigures {
    /// The projections of this shape.
    pub name: String,
    /// Rows multiplied (the pass's tokens).
    pub rows: usize,
    /// The weight's input features (summed over forward).
    pub input: usize,
    /// The weight's output features.
    pub out: usize,
    /// `x·Wᵀ` on gemm (which packs `W` on every product), GFLOP/s.
    pub forward_gemm: f64,
    /// `x·Wᵀ` on the panels, `W` packed once beforehand as a training run packs it, GFLOP/s.
    pub forward_panels: f64,
    /// `g·W` on gemm, GFLOP/s.
    pub input_grad_gemm: f64,
    /// `g·W` on the panels, `W` read in place, GFLOP/s.
    pub input_grad_panels: f64,
    /// The largest difference between the two kernels' answers, relative to the largest answer.
    pub max_relative_difference: f64,
}

/// The frozen products of `shapes` at `rows` rows on gemm and on the panel kernel
/// ([`crate::panels`]), the kernels alternating within each of `rounds` rounds, best rate of
/// each kept. Errors where the CPU cannot run the panels.
pub fn products(
    shapes: &[(&str, usize, usize)],
    rows: usize,
    rounds: usize,
) -> Result<Vec<ProductFigures>> {
    if !crate::panels::supported() {
        return Err(crate::error::Error::Invalid(
            "this CPU has neither AVX-512F nor AVX2 with FMA: its frozen products run on gemm only"
                .to_owned(),
        ));
    }
    let mut figures = Vec::new();
    for &(name, input, out) in shapes {
        let w = probe_weight(out, input);
        let x: Vec<f32> = (0..rows * input)
            .map(|i| ((i % 13) as f32 - 6.0) * 0.1)
            .collect();
        let g: Vec<f32> = (0..rows * out)
            .map(|i| ((i % 11) as f32 - 5.0) * 0.1)
            .collect();
        let packed = crate::panels::PanelWeight::new(&w, out, input);
        let (mut y, mut y2) = (vec![0f32; rows * out], vec![0f32; rows * out]);
        let (mut dx, mut dx2) = (vec![0f32; rows * input], vec![0f32; rows * input]);
        let flops = 2.0 * (rows * input * out) as f64;
        let mut best = [0f64; 4];
        for _ in 0..rounds.max(1) {
            let rates = [
                rate(flops, || {
                    crate::fused::frozen_forward_on_gemm(&x, &w, out, input, &mut y)
                }),
                rate(flops, || packed.matmul_t_into(&x, rows, &mut y2)),
                rate(flops, || {
                    crate::fused::frozen_input_grad_on_gemm(&g, &w, out, input, &mut dx)
                }),
                rate(flops, || {
                    crate::panels::matmul_into(&g, rows, &w, out, input, &mut dx2)
                }),
            ];
            for (b, r) in best.iter_mut().zip(rates) {
                *b = b.max(r);
            }
        }
        let largest = |v: &[f32]| v.iter().fold(0f32, |m, &a| m.max(a.abs())) as f64;
        let differs = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .fold(0f32, |m, (&p, &q)| m.max((p - q).abs())) as f64
        };
        figures.push(ProductFigures {
            name: name.to_owned(),
            rows,
            input,
            out,
            forward_gemm: best[0] / 1e9,
            forward_panels: best[1] / 1e9,
            input_grad_gemm: best[2] / 1e9,
            input_grad_panels: best[3] / 1e9,
            max_relative_difference: (differs(&y, &y2) / largest(&y).max(f64::MIN_POSITIVE))
                .max(differs(&dx, &dx2) / largest(&dx).max(f64::MIN_POSITIVE)),
        });
    }
    Ok(figures)
}

/// The best FLOP/s of `product` (`flops` a call) over a few timed batches, after one untimed
/// call.
fn rate(flops: f64, mut product: impl FnMut()) -> f64 {
    product();
    let mut best = 0f64;
    for _ in 0..3 {
        let reps = 8;
        let start = Instant::now();
        for _ in 0..reps {
            product();
        }
        best = best.max(flops * reps as f64 / start.elapsed().as_secs_f64());
    }
    best
}
