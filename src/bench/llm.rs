//! LoRA SFT throughput on SmolLM2-135M-Instruct (GGUF, dequantized to f32): training tokens/s
//! and model-FLOPs utilisation against the f32 matmul peak measured on the same device in the
//! same run, so the figure says how much of the machine the trainer uses, not how fast the
//! machine is.
//!
//! Model FLOPs per token count the work LoRA training needs: the forward (2 FLOPs per weight
//! plus attention scores) and the backward to the activations (the same again). Frozen base
//! weights need no weight gradient, so the usual 6·N rule would overstate the work; LoRA
//! factors are under 0.5% of the weights and are left out.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use candle_core::{Device, Tensor};
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::llama::Config;
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::optim::OptimConfig;
use shardwork_trainer::train::sft::{self, SftConfig};
use shardwork_trainer::train::sft_data::SftExample;

/// The fixed configuration the figure is reported for.
#[derive(Debug, Clone)]
pub struct LlmBenchConfig {
    pub gguf: PathBuf,
    pub batch_size: usize,
    pub seq_len: usize,
    /// Measured optimiser steps, after `warmup_steps` unmeasured ones.
    pub steps: usize,
    pub warmup_steps: usize,
    pub lora_r: usize,
}

impl LlmBenchConfig {
    /// batch 8 × 128 tokens, LoRA r=8 on q_proj/v_proj, 1 warmup + 3 measured steps.
    pub fn new(gguf: &Path) -> Self {
        Self {
            gguf: gguf.to_owned(),
            batch_size: 8,
            seq_len: 128,
            steps: 3,
            warmup_steps: 1,
            lora_r: 8,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LlmBenchReport {
    pub device: String,
    pub batch_size: usize,
    pub seq_len: usize,
    pub steps: usize,
    pub seconds_per_step: f64,
    pub tokens_per_sec: f64,
    pub model_flops_per_token: f64,
    pub achieved_flops: f64,
    pub matmul_peak_flops: f64,
}

impl LlmBenchReport {
    pub fn mfu(&self) -> f64 {
        self.achieved_flops / self.matmul_peak_flops
    }
}

impl fmt::Display for LlmBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "SmolLM2-135M LoRA SFT on {} (batch {} x {} tokens, {} steps)",
            self.device, self.batch_size, self.seq_len, self.steps
        )?;
        writeln!(
            f,
            "  training:     {:>10.1} tokens/s ({:.2} s/step)",
            self.tokens_per_sec, self.seconds_per_step
        )?;
        writeln!(
            f,
            "  model FLOPs:  {:>10.2} GFLOP/s ({:.2} GFLOP/token)",
            self.achieved_flops / 1e9,
            self.model_flops_per_token / 1e9
        )?;
        writeln!(
            f,
            "  matmul peak:  {:>10.2} GFLOP/s (f32, same run)",
            self.matmul_peak_flops / 1e9
        )?;
        write!(f, "  MFU:          {:>10.1}%", self.mfu() * 100.0)
    }
}

/// Forward + activation-gradient FLOPs per trained token for a sequence of `seq_len` tokens.
pub fn training_flops_per_token(cfg: &Config, seq_len: usize) -> f64 {
    let d = cfg.hidden_size as f64;
    let attn_width = (cfg.num_attention_heads * cfg.head_dim()) as f64;
    let kv_width = (cfg.num_kv_heads() * cfg.head_dim()) as f64;
    let per_layer =
        d * attn_width * 2.0 + d * kv_width * 2.0 + 3.0 * d * cfg.intermediate_size as f64;
    let weights = per_layer * cfg.num_hidden_layers as f64 + d * cfg.vocab_size as f64;
    // QKᵀ and PV over the whole (masked) sequence, as the kernel computes them.
    let attention = 2.0 * 2.0 * seq_len as f64 * attn_width * cfg.num_hidden_layers as f64;
    2.0 * (2.0 * weights + attention)
}

/// Best f32 matmul throughput over square sizes that bracket the model's shapes.
pub fn matmul_peak_flops(device: &Device) -> anyhow::Result<f64> {
    let mut best = 0f64;
    for n in [512usize, 1024, 2048] {
        let a = Tensor::randn(0f32, 1.0, (n, n), device)?;
        let b = Tensor::randn(0f32, 1.0, (n, n), device)?;
        a.matmul(&b)?.sum_all()?.to_scalar::<f32>()?;
        let reps = (4096 / n).max(2);
        let start = Instant::now();
        for _ in 0..reps {
            // Reading a scalar back forces the work to finish, on GPUs too.
            a.matmul(&b)?.sum_all()?.to_scalar::<f32>()?;
        }
        let secs = start.elapsed().as_secs_f64();
        best = best.max(reps as f64 * 2.0 * (n as f64).powi(3) / secs);
    }
    Ok(best)
}

/// Runs the fixed configuration on `device` and measures it beside the matmul peak.
pub fn run_llm_bench(cfg: &LlmBenchConfig, device: &Device) -> anyhow::Result<LlmBenchReport> {
    anyhow::ensure!(
        cfg.steps > 0 && cfg.batch_size > 0 && cfg.seq_len > 1,
        "bench: empty configuration"
    );
    let file = GgufFile::open(&cfg.gguf)?;
    let mut model = file.load_model(device)?;
    let model_cfg = model.config().clone();
    // Fixed pseudo-random token sequences, every position learned: throughput does not depend
    // on content, and the run is the same every time.
    let mut state = 0x9e37_79b9u64;
    let examples: Vec<SftExample> = (0..cfg.batch_size)
        .map(|_| {
            let ids = (0..=cfg.seq_len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 33) % model_cfg.vocab_size as u64) as u32
                })
                .collect::<Vec<_>>();
            SftExample {
                learn: vec![true; ids.len()],
                ids,
            }
        })
        .collect();
    let run_cfg = |steps: usize| SftConfig {
        lora: LoraConfig::new(
            cfg.lora_r,
            2.0 * cfg.lora_r as f64,
            0.0,
            &["q_proj", "v_proj"],
            &[],
        )
        .expect("fixed LoRA settings are valid"),
        optim: OptimConfig {
            lr: 1e-4,
            total_steps: steps,
            ..OptimConfig::default()
        },
        batch_size: cfg.batch_size,
        max_seq_len: cfg.seq_len + 1,
        seed: 0,
    };
    let bench_cfg = run_cfg(cfg.steps);
    let trainables = sft::attach_lora(&mut model, &bench_cfg.lora, 0)?;
    if cfg.warmup_steps > 0 {
        sft::train(
            &model,
            &trainables,
            &examples,
            &run_cfg(cfg.warmup_steps),
            0,
            &mut |_| {},
        )
        .context("warmup steps")?;
    }
    let report = sft::train(&model, &trainables, &examples, &bench_cfg, 0, &mut |_| {})?;
    let tokens_per_sec = report.tokens as f64 / report.seconds;
    let model_flops_per_token = training_flops_per_token(&model_cfg, cfg.seq_len);
    let achieved_flops = tokens_per_sec * model_flops_per_token;
    let matmul_peak_flops = matmul_peak_flops(device)?;
    // Keep the device type visible in the figure; CUDA and CPU numbers are not comparable.
    let device_name = match device {
        Device::Cpu => format!("CPU ({} threads)", candle_core::utils::get_num_threads()),
        Device::Cuda(_) => "CUDA".to_owned(),
        Device::Metal(_) => "Metal".to_owned(),
    };
    Ok(LlmBenchReport {
        device: device_name,
        batch_size: cfg.batch_size,
        seq_len: cfg.seq_len,
        steps: report.steps,
        seconds_per_step: report.seconds / report.steps as f64,
        tokens_per_sec,
        model_flops_per_token,
        achieved_flops,
        matmul_peak_flops,
    })
}
