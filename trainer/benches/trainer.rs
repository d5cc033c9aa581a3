//! Trainer benchmarks on the real fixtures (run scripts/install/python-fixtures first).
//!
//!   cargo bench -p shardwork-trainer --bench trainer -- classify [STEPS] [HELD_OUT_LIMIT] [LR]
//!   cargo bench -p shardwork-trainer --bench trainer -- federated [STEPS] [HELD_OUT_LIMIT] [LR]
//!   cargo bench -p shardwork-trainer --bench trainer -- scoring [ROUNDS] [HELD_OUT_LIMIT] [MAX_SEQ_LEN]
//!
//! Prints progress on stderr and one JSON report on stdout. Built with `--features cuda` it
//! runs on the first GPU.

use std::process::ExitCode;

use shardwork_trainer::bench;
use shardwork_trainer::experiment::ClassifyRun;
use shardwork_trainer::fixtures;

fn device() -> candle_core::Device {
    #[cfg(feature = "cuda")]
    {
        match candle_core::Device::new_cuda(0) {
            Ok(d) => return d,
            Err(e) => eprintln!("no CUDA device ({e}); running on CPU"),
        }
    }
    candle_core::Device::Cpu
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; the first other argument picks the benchmark.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let which = args.first().map(String::as_str).unwrap_or("classify");
    let steps: Option<usize> = args.get(1).and_then(|s| s.parse().ok());
    let limit: Option<usize> = args.get(2).and_then(|s| s.parse().ok());
    let lr: Option<f64> = args.get(3).and_then(|s| s.parse().ok());
    let (Some(model), Some(rt)) = (fixtures::minilm_dir(), fixtures::rotten_tomatoes()) else {
        eprintln!("fixtures missing: run scripts/install/python-fixtures");
        return ExitCode::FAILURE;
    };
    let dev = device();
    let mut run = ClassifyRun::ci();
    if let Some(s) = steps {
        run = run.with_steps(s);
    }
    if let Some(lr) = lr {
        run.train.optim.lr = lr;
    }
    let report = match which {
        "classify" => bench::classify(&model, &rt, &run, limit, &dev, &mut |p| {
            if p.step % 50 == 0 || p.step == p.total_steps {
                eprintln!(
                    "step {}/{} loss {:.4} {:.0} tok/s",
                    p.step, p.total_steps, p.loss, p.tokens_per_sec
                );
            }
        })
        .map(|r| {
            eprintln!(
                "classify: {:.0} tok/s, {:.2} GFLOP/s of {:.2} GFLOP/s matmul peak (MFU {:.1}%); \
                 held-out acc {:.4} (macro-F1 {:.4}) vs Naive Bayes {:.4}",
                r.tokens_per_sec,
                r.train_flops_per_sec / 1e9,
                r.matmul_peak_flops_per_sec / 1e9,
                100.0 * r.mfu,
                r.lora.accuracy,
                r.lora.macro_f1,
                r.naive_bayes.accuracy
            );
            serde_json::to_string_pretty(&r).unwrap_or_default()
        }),
        "federated" => bench::federated(&model, &rt, &run, 4, limit, &dev, &mut |who, p| {
            if p.step % 50 == 0 || p.step == p.total_steps {
                eprintln!(
                    "{who}: step {}/{} loss {:.4}",
                    p.step, p.total_steps, p.loss
                );
            }
        })
        .map(|r| {
            eprintln!(
                "federated ({} shards, {} steps each): union {:.4}, exact merge {:.4} \
                 (max truncation error {:.3}), naive A/B average {:.4}",
                r.shards,
                r.steps_per_run,
                r.union.accuracy,
                r.exact.accuracy,
                r.exact_merge.max_relative_error,
                r.naive.accuracy
            );
            serde_json::to_string_pretty(&r).unwrap_or_default()
        }),
        "scoring" => {
            // The demo's shape: 240 held-out reviews at max_seq_len 48.
            run.max_seq_len = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(48);
            let rounds = steps.unwrap_or(5);
            bench::scoring(&model, &rt, &run, limit.unwrap_or(240), rounds, &dev).map(|r| {
                eprintln!(
                    "scoring {} held-out reviews: differentiable forward {:.3} s, inference path \
                     on f32 matmul {:.3} s, on the {} kernel {:.3} s: {:.2}x the baseline, \
                     {:.2}x the f32 inference path ({} and {} of {} predictions differ from the \
                     baseline; logits within {:.2e})",
                    r.held_out_examples,
                    r.baseline_seconds,
                    r.portable_seconds,
                    r.kernel,
                    r.inference_seconds,
                    r.speedup,
                    r.kernel_speedup,
                    r.portable_disagreements,
                    r.disagreements,
                    r.held_out_examples,
                    r.max_logit_difference
                );
                eprintln!(
                    "inference path: {} padded tokens, {:.1} GFLOP/s against a {:.1} GFLOP/s \
                     matmul peak",
                    r.padded_tokens,
                    r.inference_flops_per_sec / 1e9,
                    r.matmul_peak_flops_per_sec / 1e9
                );
                serde_json::to_string_pretty(&r).unwrap_or_default()
            })
        }
        other => {
            eprintln!("unknown benchmark {other:?}: classify, federated or scoring");
            return ExitCode::FAILURE;
        }
    };
    match report {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
