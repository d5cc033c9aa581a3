//! `shardwork bench validation`: what verifying a job costs beside training it, and how a
//! round's wait after its last submission grows with its shard count, with one validator and
//! with several (issue 47, decisions 0042 and 0043).
//!
//! Each configuration is a fresh in-process marketplace (embedded defaults, its own data
//! folder) running one sample job to payout, measured from the job's events as the demo
//! measures it: the validators' scoring, replays and merges against the seconds the machine had a
//! task in training (`crate::demo::ComputeReport`: every worker is on this machine too), and
//! per round the seconds from its last submission to the next round's first claim. Every run
//! shares the same machine, so the figures compare as ratios within one run of the bench.

use std::collections::BTreeMap;
use std::fmt;

use crate::config::Config;
use crate::demo::{DemoArgs, DemoReport};

/// What to run.
pub struct ValidationBenchConfig {
    /// Shard counts, each a job of its own.
    pub shards: Vec<u32>,
    /// Validator counts, each shard count run with each.
    pub validators: Vec<usize>,
    pub workers: usize,
    pub rounds: u32,
    /// Chat SFT of SmolLM2 instead of the generated sample model.
    pub chat: bool,
    /// Chat SFT: conversations per job.
    pub conversations: usize,
    /// The jobs' `validation.bond_multiple` (0: no bond, every proof checked).
    pub bond_multiple: u32,
    /// Also run each configuration with verdicts on the whole held-out set, the baseline of
    /// decisions/0052.
    pub whole_set_too: bool,
}

/// One configuration's figures.
#[derive(Debug, serde::Serialize)]
pub struct ValidationRun {
    pub shards: u32,
    pub validators: usize,
    /// Held-out examples each verdict scored, and in the whole set.
    pub verdict_examples: Option<u32>,
    pub held_out_examples: Option<u32>,
    pub status: String,
    pub wall_seconds: f64,
    pub training_critical_path_seconds: f64,
    pub platform_overhead: f64,
    /// Mean over the rounds before the last, from the round's last submission to the next
    /// round's first claim: what a round waits for its verdicts and merge.
    pub round_overhead_seconds: f64,
    pub validation_share: f64,
    /// The machine's seconds with a task in training.
    pub training_seconds: f64,
    /// The tasks' claim-to-submission seconds summed.
    pub task_seconds: f64,
    pub scoring_seconds: f64,
    pub replay_seconds: f64,
    pub merge_seconds: f64,
    /// Proof checks per validator address.
    pub proofs_by_validator: BTreeMap<String, u32>,
}

impl ValidationRun {
    fn of(shards: u32, validators: usize, r: &DemoReport) -> ValidationRun {
        let waits = &r.overhead.after_last_submission_seconds;
        let before_last = &waits[..waits.len().saturating_sub(1)];
        ValidationRun {
            shards,
            validators,
            verdict_examples: r.scoring.verdict_examples,
            held_out_examples: r.scoring.held_out_examples,
            status: r.status.clone(),
            wall_seconds: r.wall_seconds,
            training_critical_path_seconds: r.training_critical_path_seconds,
            platform_overhead: r.platform_overhead,
            round_overhead_seconds: if before_last.is_empty() {
                f64::NAN
            } else {
                before_last.iter().sum::<f64>() / before_last.len() as f64
            },
            validation_share: r.compute.validation_share,
            training_seconds: r.compute.training_seconds,
            task_seconds: r.compute.task_seconds,
            scoring_seconds: r.compute.scoring_seconds,
            replay_seconds: r.compute.replay_seconds,
            merge_seconds: r.compute.merge_seconds,
            proofs_by_validator: r.proofs.by_validator.clone(),
        }
    }
}

/// Every configuration's figures, and per validator count the round overhead at the most
/// shards over that at the fewest (goal with three validators: at most 2). With
/// `whole_set_too`, `runs` holds each configuration's sampled run and `whole_set` the same
/// configuration with verdicts on the whole held-out set, in the same order.
#[derive(Debug, serde::Serialize)]
pub struct ValidationReport {
    pub model: String,
    pub runs: Vec<ValidationRun>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub whole_set: Vec<ValidationRun>,
    pub overhead_growth: BTreeMap<usize, f64>,
}

pub async fn run(
    config: Config,
    bench: &ValidationBenchConfig,
) -> anyhow::Result<ValidationReport> {
    anyhow::ensure!(
        !bench.shards.is_empty() && !bench.validators.is_empty(),
        "--shards and --validators each need at least one value"
    );
    anyhow::ensure!(
        bench.rounds >= 2,
        "--rounds must be at least 2: a round's overhead is measured up to the next round"
    );
    let mut runs = Vec::new();
    let mut whole_set = Vec::new();
    let mut model = String::new();
    for &shards in &bench.shards {
        for &validators in &bench.validators {
            // The default sample first, then (asked for) every verdict on the whole set: a
            // sample of u32::MAX examples is the whole set (`ValidationSpec::verdict_examples`).
            let modes: &[Option<u32>] = if bench.whole_set_too {
                &[None, Some(u32::MAX)]
            } else {
                &[None]
            };
            for &verdict_examples in modes {
                let data = tempfile::tempdir()?;
                let mut config = config.clone();
                config.data_dir = data.path().to_owned();
                config.api.bind = "127.0.0.1:0".parse()?;
                let args = DemoArgs {
                    workers: bench.workers,
                    validators,
                    bond_multiple: bench.bond_multiple,
                    verdict_examples,
                    classification: !bench.chat,
                    sample_model: !bench.chat,
                    conversations: bench.conversations,
                    // 300 reviews per shard: more shards cut shards as large as the 3-shard
                    // job's, not thinner ones too small to beat their start.
                    sample_reviews: Some(300 * shards as usize),
                    ..DemoArgs::sample(shards, bench.rounds)
                };
                eprintln!(
                    "bench       {shards} shards, {validators} validator(s), verdicts on {}",
                    if verdict_examples.is_some() {
                        "the whole set"
                    } else {
                        "a sample"
                    }
                );
                let report = crate::demo::measure(config, &args).await?;
                model.clone_from(&report.model);
                let run = ValidationRun::of(shards, validators, &report);
                eprintln!("bench       {run}");
                if verdict_examples.is_some() {
                    whole_set.push(run);
                } else {
                    runs.push(run);
                }
            }
        }
    }
    let (fewest, most) = (
        *bench.shards.iter().min().unwrap_or(&0),
        *bench.shards.iter().max().unwrap_or(&0),
    );
    let overhead_growth = bench
        .validators
        .iter()
        .filter_map(|&v| {
            let at = |shards: u32| {
                runs.iter()
                    .find(|r| r.shards == shards && r.validators == v)
                    .map(|r| r.round_overhead_seconds)
            };
            Some((v, at(most)? / at(fewest)?))
        })
        .collect();
    Ok(ValidationReport {
        model,
        runs,
        whole_set,
        overhead_growth,
    })
}

impl fmt::Display for ValidationRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>6} {:>10} {:>9} {:>10} {:>8.1} {:>9.1} {:>8.1}% {:>10.1} {:>10.1}% {:>8.1} {:>8.1} {:>8.1}  {}",
            self.shards,
            self.validators,
            match (self.verdict_examples, self.held_out_examples) {
                (Some(each), Some(all)) => format!("{each}/{all}"),
                _ => "-".to_owned(),
            },
            self.status,
            self.wall_seconds,
            self.training_critical_path_seconds,
            100.0 * self.platform_overhead,
            self.round_overhead_seconds,
            100.0 * self.validation_share,
            self.scoring_seconds,
            self.replay_seconds,
            self.merge_seconds,
            self.proofs_by_validator
                .values()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("/"),
        )
    }
}

impl fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "validation cost and round overhead: {}", self.model)?;
        writeln!(
            f,
            "{:>6} {:>10} {:>9} {:>10} {:>8} {:>9} {:>9} {:>10} {:>11} {:>8} {:>8} {:>8}  proofs per validator",
            "shards",
            "validators",
            "verdicts",
            "status",
            "wall s",
            "train s",
            "overhead",
            "round wait",
            "validation",
            "score s",
            "replay s",
            "merge s"
        )?;
        for run in &self.runs {
            writeln!(f, "{run}")?;
        }
        if !self.whole_set.is_empty() {
            writeln!(
                f,
                "the same, every verdict on the whole held-out set (before decisions/0052):"
            )?;
            for run in &self.whole_set {
                writeln!(f, "{run}")?;
            }
            for (sampled, whole) in self.runs.iter().zip(&self.whole_set) {
                writeln!(
                    f,
                    "{} shards, {} validator(s): validation {:.1}% against {:.1}% ({:.2}x), scoring {:.1} s against {:.1} s ({:.2}x)",
                    sampled.shards,
                    sampled.validators,
                    100.0 * sampled.validation_share,
                    100.0 * whole.validation_share,
                    sampled.validation_share / whole.validation_share,
                    sampled.scoring_seconds,
                    whole.scoring_seconds,
                    sampled.scoring_seconds / whole.scoring_seconds,
                )?;
            }
        }
        for (v, growth) in &self.overhead_growth {
            writeln!(
                f,
                "{v} validator(s): round wait at the most shards is {growth:.2}x that at the fewest"
            )?;
        }
        Ok(())
    }
}
