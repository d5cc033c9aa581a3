//! `shardwork bench train`: LoRA training speed and peak memory of Shardwork's trainer (candle)
//! beside PyTorch + PEFT on the same configurations, same machine, same run (issue 17).
//!
//! Each measurement is a child process that loads one configuration, trains `warmup` unmeasured
//! and `steps` measured optimiser steps and prints one JSON line ([`StackFigures`]); the parent
//! alternates the two stacks, candle first in odd rounds and PyTorch first in even ones, so drift
//! in the machine's speed falls on both. Peak memory is each child's own peak resident set
//! (`VmHWM`), read the same way on both sides. Both sides train f32 weights with AdamW (lr 1e-4,
//! weight decay 0.01, gradient clipping at 1.0) and LoRA r = 8, alpha = 16, no LoRA dropout.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Tensor};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use shardwork_trainer::bert::{BertClassifier, BertWeights, ClassifierSpec};
use shardwork_trainer::fused::packs::{KeptPacks, PackScope};
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::llama::{Config, Llama, QuantizedWeights};
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::optim::{AdamW, OptimConfig};
use shardwork_trainer::quantized::QuantizedWeight;
use shardwork_trainer::train::sft::{self, SftConfig};
use shardwork_trainer::train::sft_data::SftExample;

/// Where both stacks train: the CPU (the comparison) or the first CUDA GPU (candle built
/// with `--features cuda`, scripts/cuda-build; PyTorch on the same GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchDevice {
    Cpu,
    Cuda,
}

impl BenchDevice {
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
        }
    }

    fn open(self) -> anyhow::Result<Device> {
        Ok(match self {
            Self::Cpu => Device::Cpu,
            Self::Cuda => {
                let device = Device::new_cuda(0).context(
                    "bench train --device cuda: no CUDA GPU, or this binary was built without \
                     --features cuda (scripts/cuda-build)",
                )?;
                shardwork_trainer::gpu::keep_freed_memory(&device)?;
                device
            }
        })
    }
}

/// The configurations of issue 17.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainConfig {
    /// SmolLM2-135M-Instruct (the GGUF fixture, dequantized to f32): causal-LM SFT, LoRA on
    /// q_proj and v_proj, batch 8 × 128 tokens, every position learned.
    Smollm2,
    /// all-MiniLM-L6-v2: sequence classification, LoRA on query and value plus the trained
    /// head, batch 16 × 32 tokens.
    Minilm,
    /// A 1B-class Llama shape with random weights (Llama 3.2 1B: hidden 2048, 16 layers, 32
    /// heads / 8 KV heads, MLP 8192, vocab 128,256, tied head): SFT, LoRA on q_proj and v_proj,
    /// batch 4 × 512 tokens.
    Llama1b,
    /// `smollm2` with the GGUF's Q4_1 projections kept quantized, expanded a layer at a time
    /// (the same training bit for bit; the reference stack runs `smollm2`).
    #[value(name = "smollm2-q4")]
    #[serde(rename = "smollm2-q4")]
    Smollm2Q4,
    /// `llama1b` with every projection quantized to Q4_0 and kept so (the reference stack runs
    /// `llama1b` in f32).
    #[value(name = "llama1b-q4")]
    #[serde(rename = "llama1b-q4")]
    Llama1bQ4,
    /// The validator's held-out scoring of `smollm2` (issue 49 item 2): forward passes without
    /// gradients through `sft::evaluate`, LoRA attached, batch 16 x 96 tokens (the validator's
    /// scoring batch at the demo's sequence length), every position scored. A "step" is one
    /// scored batch; the reference stack runs the same batch through transformers + PEFT in
    /// `torch.inference_mode`.
    #[value(name = "smollm2-score")]
    #[serde(rename = "smollm2-score")]
    Smollm2Score,
}

impl TrainConfig {
    pub const ALL: [TrainConfig; 3] = [Self::Smollm2, Self::Minilm, Self::Llama1b];

    /// (batch size, tokens per sequence).
    pub fn shape(self) -> (usize, usize) {
        match self {
            Self::Smollm2 | Self::Smollm2Q4 => (8, 128),
            Self::Minilm => (16, 32),
            Self::Llama1b | Self::Llama1bQ4 => (4, 512),
            Self::Smollm2Score => (16, 96),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Smollm2 => "smollm2",
            Self::Minilm => "minilm",
            Self::Llama1b => "llama1b",
            Self::Smollm2Q4 => "smollm2-q4",
            Self::Llama1bQ4 => "llama1b-q4",
            Self::Smollm2Score => "smollm2-score",
        }
    }

    /// The configuration the reference stack runs for this one (it has no CPU path that trains
    /// on 4-bit weights, so a quantized base is measured against its f32 one).
    pub fn reference(self) -> TrainConfig {
        match self {
            Self::Smollm2Q4 => Self::Smollm2,
            Self::Llama1bQ4 => Self::Llama1b,
            other => other,
        }
    }

    pub fn describe(self) -> String {
        let (b, t) = self.shape();
        match self {
            Self::Smollm2 => format!("SmolLM2-135M SFT, q_proj+v_proj, batch {b} x {t}"),
            Self::Minilm => {
                format!("all-MiniLM-L6-v2 classification, query+value+head, batch {b} x {t}")
            }
            Self::Llama1b => {
                format!("1B Llama shape (random weights) SFT, q_proj+v_proj, batch {b} x {t}")
            }
            Self::Smollm2Q4 => format!(
                "SmolLM2-135M SFT on its Q4_1 projections kept quantized, q_proj+v_proj, batch {b} x {t}"
            ),
            Self::Llama1bQ4 => format!(
                "1B Llama shape SFT on Q4_0 projections kept quantized, q_proj+v_proj, batch {b} x {t}"
            ),
            Self::Smollm2Score => format!(
                "SmolLM2-135M held-out scoring (no gradients), LoRA q_proj+v_proj attached, batch {b} x {t}"
            ),
        }
    }
}

/// What one child process measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StackFigures {
    /// The stack and its versions, as the child names itself.
    pub stack: String,
    pub config: TrainConfig,
    pub steps: usize,
    pub seconds_per_step: f64,
    /// Trained tokens (batch × sequence) per second over the measured steps.
    pub tokens_per_sec: f64,
    /// Loss of the first (warm-up) step and of the last measured step: both stacks start from
    /// the same kind of model and data, so these should be of the same size.
    pub first_loss: f64,
    pub last_loss: f64,
    /// The child's peak resident memory, MiB (VmHWM).
    pub peak_rss_mb: f64,
    /// On a GPU, the peak of device memory the child's allocations held, MiB: the high-water
    /// mark of CUDA's memory pool for candle, `torch.cuda.max_memory_allocated` for PyTorch.
    #[serde(default)]
    pub peak_gpu_mb: Option<f64>,
    /// The feed-forward product of the trained model, (tokens per step, hidden,
    /// intermediate), as the child read it from the model's configuration.
    pub matmul_shape: [usize; 3],
    /// The stack's f32 matrix-product rate at `matmul_shape`, GFLOP/s, measured after
    /// training: how much of the speed ratio is the machine's matmul rather than the rest of
    /// the step.
    pub matmul_gflops: f64,
}

/// Where the inputs are and what to run.
#[derive(Debug, Clone)]
pub struct TrainBenchConfig {
    pub configs: Vec<TrainConfig>,
    pub rounds: usize,
    pub steps: usize,
    pub warmup: usize,
    pub device: BenchDevice,
    /// Threads each stack may use (candle's rayon pool, `torch.set_num_threads`).
    pub threads: usize,
    /// The SmolLM2 GGUF (read by the `smollm2` configurations only).
    pub gguf: Option<PathBuf>,
    /// The all-MiniLM-L6-v2 folder (read by `minilm` only).
    pub minilm: Option<PathBuf>,
    /// The reference stack's interpreter; `None` measures candle alone.
    pub python: Option<PathBuf>,
    /// The reference script (scripts/bench_train_reference.py).
    pub script: PathBuf,
    /// Also run candle with its packed kernels switched off ([`shardwork_trainer::amx::SWITCH`],
    /// [`shardwork_trainer::panels::SWITCH`]): every frozen product on gemm.
    pub portable_too: bool,
}

/// One configuration's measurements over every round.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    pub config: TrainConfig,
    pub candle: Vec<StackFigures>,
    /// candle with AMX switched off, where asked for on a CPU that has it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candle_portable: Vec<StackFigures>,
    pub pytorch: Vec<StackFigures>,
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

impl ConfigReport {
    /// candle tokens/s over PyTorch's, means over the rounds (> 1: candle is faster).
    pub fn speed_ratio(&self) -> Option<f64> {
        Self::speed_of(&self.candle, &self.pytorch)
    }

    /// `runs`' mean tokens/s over `reference`'s.
    fn speed_of(runs: &[StackFigures], reference: &[StackFigures]) -> Option<f64> {
        (!runs.is_empty() && !reference.is_empty()).then(|| {
            mean(runs.iter().map(|f| f.tokens_per_sec))
                / mean(reference.iter().map(|f| f.tokens_per_sec))
        })
    }

    /// candle peak memory over PyTorch's, worst rounds (< 1: candle is leaner): GPU memory
    /// where both trained on a GPU, resident memory otherwise.
    pub fn memory_ratio(&self) -> Option<f64> {
        let on_gpu = self
            .candle
            .iter()
            .chain(&self.pytorch)
            .all(|f| f.peak_gpu_mb.is_some());
        let peak = |f: &StackFigures| match f.peak_gpu_mb {
            Some(gpu) if on_gpu => gpu,
            _ => f.peak_rss_mb,
        };
        let worst = |v: &[StackFigures]| v.iter().map(peak).fold(0.0, f64::max);
        (!self.pytorch.is_empty()).then(|| worst(&self.candle) / worst(&self.pytorch))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainBenchReport {
    pub device: BenchDevice,
    pub threads: usize,
    pub steps: usize,
    pub warmup: usize,
    pub configs: Vec<ConfigReport>,
}

impl fmt::Display for TrainBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "LoRA training on {}, f32, AdamW, r=8 alpha=16, {} threads each, {} measured steps after {} warm-up, every round shown",
            self.device.name(),
            self.threads,
            self.steps,
            self.warmup
        )?;
        for c in &self.configs {
            writeln!(f, "{}", c.config.describe())?;
            for (label, runs) in [
                ("candle", &c.candle),
                ("portable", &c.candle_portable),
                ("pytorch", &c.pytorch),
            ] {
                if let Some(first) = runs.first() {
                    let speeds: Vec<String> = runs
                        .iter()
                        .map(|r| format!("{:.1}", r.tokens_per_sec))
                        .collect();
                    let memory: Vec<String> = runs
                        .iter()
                        .map(|r| match r.peak_gpu_mb {
                            Some(gpu) => format!("{gpu:.0} (GPU; host {:.0})", r.peak_rss_mb),
                            None => format!("{:.0}", r.peak_rss_mb),
                        })
                        .collect();
                    writeln!(
                        f,
                        "  {label:<8} {} tokens/s, peak {} MiB, loss {:.3} -> {:.3}  [{}]",
                        speeds.join(" / "),
                        memory.join(" / "),
                        first.first_loss,
                        runs.last().map_or(first.last_loss, |r| r.last_loss),
                        first.stack
                    )?;
                }
            }
            let rate = |runs: &[StackFigures]| {
                runs.iter()
                    .map(|r| format!("{:.0}", r.matmul_gflops))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let Some([m, k, n]) = c
                .candle
                .iter()
                .chain(&c.pytorch)
                .map(|r| r.matmul_shape)
                .next()
            else {
                continue;
            };
            if c.pytorch.is_empty() {
                writeln!(
                    f,
                    "  matmul {m}x{k}x{n}: candle {} GFLOP/s",
                    rate(&c.candle)
                )?;
            } else {
                writeln!(
                    f,
                    "  matmul {m}x{k}x{n}: candle {} GFLOP/s, pytorch {} GFLOP/s",
                    rate(&c.candle),
                    rate(&c.pytorch)
                )?;
            }
            if let (Some(speed), Some(memory)) = (c.speed_ratio(), c.memory_ratio()) {
                writeln!(
                    f,
                    "  candle / pytorch: speed {speed:.2}x, peak memory {memory:.2}x (goal: speed >= 1.2x, memory <= 0.5x)"
                )?;
            }
            if let Some(portable) = ConfigReport::speed_of(&c.candle_portable, &c.pytorch) {
                writeln!(f, "  candle on gemm only / pytorch: speed {portable:.2}x")?;
            }
            if let Some(amx) = ConfigReport::speed_of(&c.candle, &c.candle_portable) {
                writeln!(
                    f,
                    "  candle with packed kernels / gemm only: speed {amx:.2}x"
                )?;
            }
        }
        Ok(())
    }
}

/// Runs every configuration in child processes, alternating stacks, and gathers the figures.
pub fn run(cfg: &TrainBenchConfig) -> anyhow::Result<TrainBenchReport> {
    let exe = std::env::current_exe().context("locating the shardwork binary")?;
    let mut reports: Vec<ConfigReport> = cfg
        .configs
        .iter()
        .map(|&config| ConfigReport {
            config,
            candle: Vec::new(),
            candle_portable: Vec::new(),
            pytorch: Vec::new(),
        })
        .collect();
    for round in 0..cfg.rounds {
        for report in &mut reports {
            // Each round starts with a different stack, so no stack always runs first.
            let mut stacks = vec![Stack::Candle];
            if cfg.portable_too {
                stacks.push(Stack::Portable);
            }
            if cfg.python.is_some() {
                stacks.push(Stack::Pytorch);
            }
            let turn = round % stacks.len();
            stacks.rotate_left(turn);
            for stack in stacks {
                let started = Instant::now();
                let figures = child(cfg, report.config, &exe, stack)?;
                eprintln!(
                    "round {} {} {}: {:.1} tokens/s, peak {:.0} MiB ({:.0} s with loading)",
                    round + 1,
                    report.config.name(),
                    stack.name(),
                    figures.tokens_per_sec,
                    figures.peak_rss_mb,
                    started.elapsed().as_secs_f64()
                );
                match stack {
                    Stack::Candle => report.candle.push(figures),
                    Stack::Portable => report.candle_portable.push(figures),
                    Stack::Pytorch => report.pytorch.push(figures),
                }
            }
        }
    }
    Ok(TrainBenchReport {
        device: cfg.device,
        threads: cfg.threads,
        steps: cfg.steps,
        warmup: cfg.warmup,
        configs: reports,
    })
}

/// Which stack a child process measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    /// This binary, with every kernel the CPU allows.
    Candle,
    /// This binary with AMX switched off.
    Portable,
    /// The reference script on PyTorch + PEFT.
    Pytorch,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Candle => "candle",
            Stack::Portable => "candle (gemm only)",
            Stack::Pytorch => "pytorch",
        }
    }
}

/// Runs one measurement in a child process and reads its JSON line.
fn child(
    cfg: &TrainBenchConfig,
    config: TrainConfig,
    exe: &Path,
    stack: Stack,
) -> anyhow::Result<StackFigures> {
    let (batch, seq) = config.shape();
    let candle = stack != Stack::Pytorch;
    let program = match stack {
        Stack::Candle | Stack::Portable => exe,
        Stack::Pytorch => cfg.python.as_deref().context("no reference stack to run")?,
    };
    let mut command = Command::new(program);
    if candle {
        command.args(["bench", "train-child", "--workload", config.name()]);
    } else {
        command
            .arg(&cfg.script)
            .args(["--workload", config.reference().name()]);
    }
    if stack == Stack::Portable {
        for (variable, off) in [
            shardwork_trainer::amx::SWITCH,
            shardwork_trainer::panels::SWITCH,
        ] {
            command.env(variable, off);
        }
    }
    if let Some(gguf) = &cfg.gguf {
        command.arg("--gguf").arg(gguf);
    }
    if let Some(minilm) = &cfg.minilm {
        command.arg("--minilm").arg(minilm);
    }
    command
        .args(["--batch-size", &batch.to_string()])
        .args(["--seq-len", &seq.to_string()])
        .args(["--steps", &cfg.steps.to_string()])
        .args(["--warmup", &cfg.warmup.to_string()])
        .args(["--device", cfg.device.name()])
        .args(["--threads", &cfg.threads.to_string()])
        // candle's pool size; PyTorch's intra-op threads are set by the script.
        .env("RAYON_NUM_THREADS", cfg.threads.to_string())
        .env("OMP_NUM_THREADS", cfg.threads.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let output = command
        .output()
        .with_context(|| format!("starting {}", program.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        anyhow::bail!(
            "{} on {} failed ({}):\n{}",
            stack.name(),
            config.name(),
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the child printed no JSON line")?;
    serde_json::from_str(line).with_context(|| format!("reading the child's figures: {line}"))
}

/// The child side for candle: trains one configuration in this process.
pub struct ChildArgs {
    pub config: TrainConfig,
    pub gguf: Option<PathBuf>,
    pub minilm: Option<PathBuf>,
    pub batch_size: usize,
    pub seq_len: usize,
    pub steps: usize,
    pub warmup: usize,
    pub device: BenchDevice,
}

/// The frozen products' kernel when it is the f32 panels: on which vector unit, and `rest`.
fn panels_label(rest: &str) -> String {
    let isa = shardwork_trainer::panels::isa().map_or("?", |isa| isa.name());
    format!("f32 panels ({isa}){rest}")
}

/// The process's peak resident set in MiB (`VmHWM`; Linux).
pub fn peak_rss_mb() -> anyhow::Result<f64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM in /proc/self/status")?;
    let kib: f64 = line
        .split_whitespace()
        .nth(1)
        .context("VmHWM has no value")?
        .parse()
        .context("VmHWM is not a number")?;
    Ok(kib / 1024.0)
}

/// Fixed pseudo-random token ids below `vocab`: throughput does not depend on content.
fn token_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as u32
        })
        .collect()
}

fn optim(steps: usize) -> OptimConfig {
    OptimConfig {
        lr: 1e-4,
        weight_decay: 0.01,
        total_steps: steps,
        max_grad_norm: Some(1.0),
        ..OptimConfig::default()
    }
}

pub fn run_child(args: &ChildArgs) -> anyhow::Result<StackFigures> {
    let device = args.device.open()?;
    let gguf = || {
        args.gguf
            .as_deref()
            .context("this configuration reads the SmolLM2 GGUF: pass --gguf")
    };
    let (losses, seconds, (hidden, intermediate)) = match args.config {
        TrainConfig::Smollm2 => train_llm(GgufFile::open(gguf()?)?.load_model(&device)?, args)?,
        TrainConfig::Smollm2Q4 => train_llm(
            GgufFile::open(gguf()?)?.load_model_with(&device, true)?,
            args,
        )?,
        TrainConfig::Llama1b => train_llm(random_llama_1b(&device, None)?, args)?,
        TrainConfig::Llama1bQ4 => {
            train_llm(random_llama_1b(&device, Some(GgmlDType::Q4_0))?, args)?
        }
        TrainConfig::Minilm => train_minilm(args, &device)?,
        TrainConfig::Smollm2Score => {
            score_llm(GgufFile::open(gguf()?)?.load_model(&device)?, args)?
        }
    };
    let tokens = args.batch_size * args.seq_len * args.steps;
    let matmul_shape = [args.batch_size * args.seq_len, hidden, intermediate];
    let [m, k, n] = matmul_shape;
    let matmul_gflops = shardwork_trainer::bench::matmul_peak(&device, m, k, n)? / 1e9;
    Ok(StackFigures {
        stack: format!(
            "Shardwork candle 0.11, {} threads, frozen products on {}",
            candle_core::utils::get_num_threads(),
            if !device.is_cpu() {
                "gemm".to_owned()
            } else if shardwork_trainer::amx::available() {
                "AMX (split bf16)".to_owned()
            } else if shardwork_trainer::panels::input_grad_in_place() {
                panels_label("")
            } else if shardwork_trainer::panels::available() {
                panels_label(", input gradients on gemm")
            } else {
                "gemm".to_owned()
            }
        ),
        config: args.config,
        steps: args.steps,
        seconds_per_step: seconds / args.steps as f64,
        tokens_per_sec: tokens as f64 / seconds,
        first_loss: losses.first().copied().unwrap_or(f64::NAN),
        last_loss: losses.last().copied().unwrap_or(f64::NAN),
        peak_rss_mb: peak_rss_mb()?,
        peak_gpu_mb: shardwork_trainer::gpu::peak_memory_mb(&device)?,
        matmul_shape,
        matmul_gflops,
    })
}

/// Llama 3.2 1B's shape with N(0, 0.02) weights and unit norms; the projections quantized to
/// `quantized` (each as it is drawn, so no f32 copy of them all ever exists) when given.
fn random_llama_1b(device: &Device, quantized: Option<GgmlDType>) -> anyhow::Result<Llama> {
    let cfg = Config {
        model_type: Some("llama".into()),
        vocab_size: 128_256,
        hidden_size: 2048,
        intermediate_size: 8192,
        num_hidden_layers: 16,
        num_attention_heads: 32,
        num_key_value_heads: Some(8),
        head_dim: None,
        rope_theta: 500_000.0,
        rms_norm_eps: 1e-5,
        max_position_embeddings: 2048,
        tie_word_embeddings: true,
        attention_bias: false,
        hidden_act: "silu".into(),
        rope_scaling: None,
    };
    let (h, i, kv) = (cfg.hidden_size, cfg.intermediate_size, 8 * cfg.head_dim());
    let mut tensors = std::collections::HashMap::new();
    let mut q_weights = QuantizedWeights::new();
    let randn = |shape: (usize, usize)| Tensor::randn(0f32, 0.02, shape, device);
    tensors.insert(
        "model.embed_tokens.weight".to_owned(),
        randn((cfg.vocab_size, h))?,
    );
    tensors.insert(
        "model.norm.weight".to_owned(),
        Tensor::ones(h, DType::F32, device)?,
    );
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj", (h, h)),
            ("self_attn.k_proj", (kv, h)),
            ("self_attn.v_proj", (kv, h)),
            ("self_attn.o_proj", (h, h)),
            ("mlp.gate_proj", (i, h)),
            ("mlp.up_proj", (i, h)),
            ("mlp.down_proj", (h, i)),
        ] {
            let key = format!("{p}.{name}.weight");
            match quantized {
                Some(dtype) => {
                    q_weights.insert(key, QuantizedWeight::quantize(&randn(shape)?, dtype)?);
                }
                None => {
                    tensors.insert(key, randn(shape)?);
                }
            }
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            tensors.insert(
                format!("{p}.{norm}.weight"),
                Tensor::ones(h, DType::F32, device)?,
            );
        }
    }
    let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, device);
    Ok(Llama::load_quantized(vb, &cfg, q_weights)?)
}

/// SFT steps on fixed random sequences, every position learned; (losses, measured seconds).
/// Per-step losses, seconds over the measured steps, and the model's (hidden, intermediate)
/// widths.
type Trained = (Vec<f64>, f64, (usize, usize));

/// The child's fixed batch: `batch_size` random sequences of `seq_len` inputs, every next token
/// learned (or scored).
fn random_batch(model: &Llama, args: &ChildArgs) -> Vec<SftExample> {
    let vocab = model.config().vocab_size;
    (0..args.batch_size)
        .map(|i| {
            let ids = token_ids(args.seq_len + 1, vocab, 0x9e37_79b9 + i as u64);
            SftExample {
                learn: vec![true; ids.len()],
                ids,
            }
        })
        .collect()
}

fn train_llm(mut model: Llama, args: &ChildArgs) -> anyhow::Result<Trained> {
    let widths = (model.config().hidden_size, model.config().intermediate_size);
    let examples = random_batch(&model, args);
    let sft_cfg = |steps: usize| -> anyhow::Result<SftConfig> {
        Ok(SftConfig {
            lora: LoraConfig::new(8, 16.0, 0.0, &["q_proj", "v_proj"], &[])?,
            optim: optim(steps),
            batch_size: args.batch_size,
            max_seq_len: args.seq_len + 1,
            seed: 0,
        })
    };
    let cfg = sft_cfg(args.steps)?;
    let trainables = sft::attach_lora(&mut model, &cfg.lora, 0)?;
    // One scope over the warm-up and the measured run: the frozen weights are packed for AMX
    // once, in the warm-up, as a task packs them once in its first step and not in the steady
    // state the bench measures (the packing's one-time cost is in docs/performance.md).
    let _packs = PackScope::enter();
    let mut losses = Vec::new();
    let mut record = |p: &shardwork_trainer::train::Progress| losses.push(f64::from(p.loss));
    if args.warmup > 0 {
        sft::train(
            &model,
            &trainables,
            &examples,
            &sft_cfg(args.warmup)?,
            0,
            &mut record,
        )?;
    }
    let report = sft::train(&model, &trainables, &examples, &cfg, 0, &mut record)?;
    Ok((losses, report.seconds, widths))
}

/// Held-out scoring as the validator does it (`sft::evaluate`: no gradients, the LoRA layers
/// attached and their B at zero as a fresh adapter's), one fixed random batch a step, every
/// position scored; (losses, measured seconds).
fn score_llm(mut model: Llama, args: &ChildArgs) -> anyhow::Result<Trained> {
    let widths = (model.config().hidden_size, model.config().intermediate_size);
    let examples = random_batch(&model, args);
    let lora = LoraConfig::new(8, 16.0, 0.0, &["q_proj", "v_proj"], &[])?;
    let _trainables = sft::attach_lora(&mut model, &lora, 0)?;
    // Each pass in a scope of its own that keeps the packs for the next, as the validator's
    // job does (`KeptPacks`): on a CPU with AMX the warm-up packs the weights, the measured
    // passes reuse them.
    let mut kept = KeptPacks::default();
    let pass = |kept: &mut KeptPacks| -> anyhow::Result<f64> {
        let _packs = PackScope::enter_keeping(kept);
        Ok(sft::evaluate(&model, &examples, args.batch_size)?.loss)
    };
    let mut losses = Vec::new();
    for _ in 0..args.warmup {
        losses.push(pass(&mut kept)?);
    }
    let started = Instant::now();
    for _ in 0..args.steps {
        losses.push(pass(&mut kept)?);
    }
    Ok((losses, started.elapsed().as_secs_f64(), widths))
}

/// Classification steps on a fixed random batch; (losses, measured seconds).
fn train_minilm(args: &ChildArgs, device: &Device) -> anyhow::Result<Trained> {
    let minilm = args
        .minilm
        .as_deref()
        .context("this configuration reads all-MiniLM-L6-v2: pass --minilm")?;
    let weights = BertWeights::load(minilm, device)?;
    let spec = ClassifierSpec {
        num_labels: 2,
        lora: LoraConfig::new(8, 16.0, 0.0, &["query", "value"], &["classifier"])?,
        encoder_dropout: None,
        seed: 0,
    };
    let (model, trainables) = BertClassifier::new(&weights, &spec)?;
    let vocab = model.config().vocab_size;
    let widths = (model.config().hidden_size, model.config().intermediate_size);
    let (b, t) = (args.batch_size, args.seq_len);
    let ids = Tensor::from_vec(token_ids(b * t, vocab, 7), (b, t), device)?;
    let mask = Tensor::ones((b, t), DType::F32, device)?;
    let labels = Tensor::from_vec(token_ids(b, 2, 11), b, device)?;
    let mut opt = AdamW::new(&trainables, optim(args.warmup + args.steps))?;
    // The training loop's scope (`classify::train_span` opens one): without it every frozen
    // product went to gemm, and the bench measured a path no classification task takes.
    let _packs = PackScope::enter();
    let mut losses = Vec::new();
    let mut step = || -> anyhow::Result<f64> {
        let logits = model.forward(&ids, &mask, true)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &labels)?;
        let value = f64::from(loss.to_scalar::<f32>()?);
        opt.accumulate(&loss.backward()?)?;
        Ok(value)
    };
    for _ in 0..args.warmup {
        losses.push(step()?);
    }
    let started = Instant::now();
    for _ in 0..args.steps {
        losses.push(step()?);
    }
    Ok((losses, started.elapsed().as_secs_f64(), widths))
}
