//! Federated SFT against one LoRA trained centrally, on the chat demo's task: SmolLM2-135M-Instruct
//! on chatterbot-corpus conversations, cut by the API's own dataset pipeline, trained by the
//! workers' own `CausalLmJob`, merged by the validator's merge with the validator's options.
//!
//! The question it answers (issue 14): does N shards × R rounds of federated training, merged
//! exactly, reach the held-out loss of one adapter trained on the union of the shards with the
//! same number of optimiser steps (goal: within 2%)? Naive factor averaging runs beside it on
//! the same shards, so the figure also says what the exact merge buys.
//!
//! Round 1 trains every shard from the fresh adapter in both federated variants, so its adapters
//! are trained once and merged both ways; the variants part at the first merge.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use candle_core::Device;
use serde::Serialize;
use shardwork_api::domain::pipeline;
use shardwork_core::protocol::{JobSpec, TrainingArgs};
use shardwork_node::validator::{Rules, merge_adapters};
use shardwork_node::work::causal_lm::CausalLmJob;
use shardwork_node::work::{RoundOf, Work};
use shardwork_trainer::merge::{MergeMode, combine};
use shardwork_trainer::peft::Adapter;
use shardwork_trainer::train::sft_data::SftExample;
use shardwork_trainer::train::trace::Span;

use crate::progress::ProgressLine;

/// The goal: federated held-out loss at most this much above central, in percent.
const GOAL_PERCENT: f64 = 2.0;

/// What to run.
#[derive(Debug, Clone)]
pub struct FederatedBenchConfig {
    pub gguf: PathBuf,
    /// The CID of `gguf` stored as a model bundle, as the demo's job names it.
    pub model_cid: String,
    /// chatterbot-corpus' `data` folder (its `english/` is read).
    pub corpus: PathBuf,
    pub shards: u32,
    pub rounds: u32,
    /// Conversations taken from the corpus, spread over it by stride as the demo does.
    pub conversations: usize,
    /// Passes each task makes over its shard (`training.epochs`).
    pub epochs: u32,
    /// `training.learning_rate`, when not the demo's.
    pub learning_rate: Option<f64>,
    /// `training.batch_size`, when not the demo's.
    pub batch_size: Option<u32>,
    /// Nesterov momentum of the exact variants' outer step over rounds (DiLoCo's outer
    /// optimiser; 0: none, the validator's merge).
    pub server_momentum: f64,
    /// Server learning rates the exact merge is run with, each a variant of its own (the
    /// first is the one the goal is judged on); naive averaging runs at 1.
    pub server_learning_rates: Vec<f64>,
    /// The job's spec asks for `training.schedule: job`: each round's tasks take their part
    /// of one schedule over the job's rounds, instead of a warmup and cosine of their own.
    pub job_schedule: bool,
    /// Learning rates central is trained at, each a run of its own; the gap is taken to the
    /// best of them, so the federated figure is judged against central at its best rate, not
    /// at the federated one (a job wants a higher rate than one run on the union). Empty:
    /// central at the federated rate alone.
    pub central_learning_rates: Vec<f64>,
}

/// One way of training, measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// Held-out loss per learned token of the final adapter.
    pub loss: f64,
    /// Optimiser steps over all its training runs.
    pub steps: usize,
    /// Seconds inside the training loops (round 1 counted in both federated variants).
    pub train_seconds: f64,
    /// Seconds merging (0 for central).
    pub merge_seconds: f64,
    /// Held-out loss of each round's merged adapter (empty for central).
    pub round_losses: Vec<f64>,
    /// Per round, the largest relative error of the merged update against the exact weighted
    /// sum of the round's updates (the rank-r truncation for exact, the cross terms for naive).
    pub merge_max_relative_error: Vec<f64>,
    /// The merge's server learning rate (1 for central, which has no merge).
    pub server_learning_rate: f64,
    /// `training.learning_rate` of its training runs.
    pub learning_rate: f64,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct FederatedReport {
    pub model: String,
    pub device: String,
    pub conversations: usize,
    pub held_out_examples: usize,
    /// Training examples of each shard (records with something to learn within max_seq_len).
    pub shard_examples: Vec<usize>,
    pub rounds: u32,
    /// Passes each task made over its shard (central made as many over the union per round).
    pub epochs: u32,
    /// `training.learning_rate` of the federated runs (central's are in its figures).
    pub learning_rate: f64,
    /// The exact variants' outer Nesterov momentum (0: none).
    pub server_momentum: f64,
    /// Whether the federated tasks each took their round's part of one schedule over the job
    /// (`--job-schedule`) instead of a warmup and cosine of their own.
    pub job_schedule: bool,
    pub base_loss: f64,
    /// Held-out loss of each round-1 adapter alone, before any merge: beside the round-1
    /// merge's, it says whether averaging loses what the shards learned or the shards' runs
    /// are short.
    pub round1_shard_losses: Vec<f64>,
    /// Central at its best learning rate of those run: the gaps are taken to it.
    pub central: RunFigures,
    /// Central at each learning rate run, in the order asked.
    pub central_runs: Vec<RunFigures>,
    /// The exact merge, at the first server learning rate asked for: the goal is judged on it.
    pub federated_exact: RunFigures,
    /// The exact merge at each further server learning rate asked for.
    pub federated_exact_other_rates: Vec<RunFigures>,
    pub federated_naive: RunFigures,
    pub goal_percent: f64,
}

impl FederatedReport {
    /// `federated / central − 1`, in percent.
    pub fn gap_percent(&self, federated: &RunFigures) -> f64 {
        (federated.loss / self.central.loss - 1.0) * 100.0
    }

    /// The share of central training's fall from the base loss that `run` achieved.
    pub fn share_of_central_gain(&self, run: &RunFigures) -> f64 {
        (self.base_loss - run.loss) / (self.base_loss - self.central.loss)
    }

    pub fn goal_met(&self) -> bool {
        self.gap_percent(&self.federated_exact) <= self.goal_percent
    }
}

/// The report with its derived figures, for `--json`.
#[derive(Serialize)]
pub struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a FederatedReport,
    federated_exact_gap_percent: f64,
    federated_naive_gap_percent: f64,
    goal_met: bool,
}

impl FederatedReport {
    pub fn to_json(&self) -> JsonReport<'_> {
        JsonReport {
            report: self,
            federated_exact_gap_percent: self.gap_percent(&self.federated_exact),
            federated_naive_gap_percent: self.gap_percent(&self.federated_naive),
            goal_met: self.goal_met(),
        }
    }
}

impl fmt::Display for FederatedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shards = self.shard_examples.len();
        writeln!(
            f,
            "Federated SFT, {shards} shards x {} rounds ({} epoch(s) a task, learning rate {}, {}), \
             against central on the union: {} on {}",
            self.rounds,
            self.epochs,
            self.learning_rate,
            if self.job_schedule {
                "one schedule over the job"
            } else {
                "a schedule per task"
            },
            self.model,
            self.device
        )?;
        writeln!(
            f,
            "  data: {} conversations; held out {}, shards {:?} examples",
            self.conversations, self.held_out_examples, self.shard_examples
        )?;
        writeln!(
            f,
            "  {:<24} {:>9} {:>11} {:>9} {:>6} {:>10} {:>9}",
            "run", "held-out", "vs central", "of gain", "steps", "train s", "merge s"
        )?;
        writeln!(f, "  {:<24} {:>9.4}", "base", self.base_loss)?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, run: &RunFigures, federated: bool| {
            let gap = if federated {
                format!("{:+.2}%", self.gap_percent(run))
            } else {
                "-".to_owned()
            };
            writeln!(
                f,
                "  {:<24} {:>9.4} {:>11} {:>8.1}% {:>6} {:>10.1} {:>9.1}",
                name,
                run.loss,
                gap,
                self.share_of_central_gain(run) * 100.0,
                run.steps,
                run.train_seconds,
                run.merge_seconds
            )
        };
        for run in &self.central_runs {
            let best = if run.learning_rate == self.central.learning_rate {
                " *"
            } else {
                ""
            };
            row(
                f,
                &format!("central, lr {}{best}", run.learning_rate),
                run,
                false,
            )?;
        }
        let momentum = if self.server_momentum > 0.0 {
            format!(", momentum {}", self.server_momentum)
        } else {
            String::new()
        };
        let exact =
            |run: &RunFigures| format!("exact, server {}{momentum}", run.server_learning_rate);
        let mut federated = vec![(exact(&self.federated_exact), &self.federated_exact)];
        for run in &self.federated_exact_other_rates {
            federated.push((exact(run), run));
        }
        federated.push(("naive".to_owned(), &self.federated_naive));
        for (name, run) in &federated {
            row(f, &format!("fed. {name}"), run, true)?;
        }
        let alone: Vec<String> = self
            .round1_shard_losses
            .iter()
            .map(|l| format!("{l:.4}"))
            .collect();
        writeln!(f, "  round 1 adapters alone: {}", alone.join(", "))?;
        for (name, run) in &federated {
            let rounds: Vec<String> = run
                .round_losses
                .iter()
                .zip(&run.merge_max_relative_error)
                .map(|(loss, err)| format!("{loss:.4} (merge error {:.1}%)", err * 100.0))
                .collect();
            writeln!(f, "  {name} by round: {}", rounds.join(", "))?;
        }
        let gap = self.gap_percent(&self.federated_exact);
        write!(
            f,
            "  goal (federated exact, server learning rate {}, within {}% of central at its best \
             rate of those run, {}): {} ({gap:+.2}%)",
            self.federated_exact.server_learning_rate,
            self.goal_percent,
            self.central.learning_rate,
            if self.goal_met() { "met" } else { "NOT met" },
        )
    }
}

/// Writes `bytes` to `dir/name` and reads it back as the workers do.
fn examples_of(
    job: &CausalLmJob,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<Vec<SftExample>> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(job.examples(&path)?)
}

/// Steps and seconds summed over the training runs of one way of training.
#[derive(Default)]
struct Tally {
    steps: usize,
    seconds: f64,
}

/// The job's training runs under one progress bar over every run of the bench.
struct Trainer {
    bar: ProgressLine,
    done: usize,
    all_steps: usize,
}

impl Trainer {
    fn train(
        &mut self,
        job: &CausalLmJob,
        start: Option<&Adapter>,
        examples: &[SftExample],
        round: RoundOf,
        label: &str,
        tally: &mut Tally,
    ) -> anyhow::Result<Adapter> {
        let (bar, done, all_steps) = (&mut self.bar, self.done, self.all_steps);
        let (adapter, report, _) =
            job.train_examples(start, examples, round, Span::whole(), &mut |p| {
                bar.draw(
                    (done + p.step) as u64,
                    all_steps as u64,
                    &format!("{label} loss {:.3}", p.loss),
                );
            })?;
        self.done += report.steps;
        tally.steps += report.steps;
        tally.seconds += report.seconds;
        Ok(adapter)
    }
}

/// One outer Nesterov step over the round's mean update `Δ = Σ w_k·x_k − start` (DiLoCo's
/// outer optimiser, in the adapters' product space): `m ← μ·m + Δ`, kept at rank (K+1)·r (a
/// round's update has at most that), and `start + η·(μ·m + Δ)` truncated to rank r. Returns
/// the merged adapter and the truncation's largest relative error. No norm clipping: it
/// measures the outer step alone.
fn outer_nesterov(
    start: Option<&Adapter>,
    adapters: &[Adapter],
    weights: &[f64],
    momentum: &mut Option<Adapter>,
    mu: f64,
    eta: f64,
) -> anyhow::Result<(Adapter, f64)> {
    let total: f64 = weights.iter().sum();
    let r = adapters[0].config.r;
    let mut delta: Vec<(&Adapter, f64)> = adapters
        .iter()
        .zip(weights)
        .map(|(a, w)| (a, w / total))
        .collect();
    if let Some(start) = start {
        delta.push((start, -1.0));
    }
    let mut with_momentum = delta.clone();
    if let Some(m) = momentum.as_ref() {
        with_momentum.push((m, mu));
    }
    let (m_new, _) = combine(&with_momentum, (adapters.len() + 1) * r)?;
    let mut step: Vec<(&Adapter, f64)> = delta.iter().map(|&(a, c)| (a, eta * c)).collect();
    if let Some(start) = start {
        step.push((start, 1.0));
    }
    step.push((&m_new, eta * mu));
    let (merged, error) = combine(&step, r)?;
    *momentum = Some(m_new);
    Ok((merged, error))
}

/// Runs base, federated (exact and naive merges) and central, in that order, on CPU.
pub fn run(cfg: &FederatedBenchConfig) -> anyhow::Result<FederatedReport> {
    anyhow::ensure!(
        cfg.shards >= 1 && cfg.rounds >= 1 && cfg.epochs >= 1,
        "bench: --shards, --rounds and --epochs must be at least 1"
    );
    anyhow::ensure!(
        !cfg.server_learning_rates.is_empty(),
        "bench: --server-learning-rates needs at least one rate"
    );
    anyhow::ensure!(
        (0.0..1.0).contains(&cfg.server_momentum),
        "bench: --server-momentum {} is outside [0, 1)",
        cfg.server_momentum
    );
    if let Some(bad) = cfg
        .central_learning_rates
        .iter()
        .find(|r| !(r.is_finite() && **r > 0.0))
    {
        anyhow::bail!("bench: --central-learning-rates: {bad} is not a positive rate");
    }
    let device = Device::Cpu;
    // The demo's own spec and records, so the bench cuts the split a posted demo job gets.
    let now = chrono::Utc::now();
    let mut spec = crate::demo::chat_spec(&cfg.model_cid, cfg.shards, cfg.rounds);
    spec["training"]["epochs"] = cfg.epochs.into();
    if let Some(rate) = cfg.learning_rate {
        spec["training"]["learning_rate"] = rate.into();
    }
    if let Some(batch) = cfg.batch_size {
        spec["training"]["batch_size"] = batch.into();
    }
    if cfg.job_schedule {
        spec["training"]["schedule"] = "job".into();
    }
    let spec = JobSpec::parse(spec.to_string().as_bytes(), now)
        .map_err(|e| anyhow::anyhow!("job spec: {e}"))?;
    let records = crate::demo::chat_records(&cfg.corpus, cfg.conversations, cfg.shards)?;
    let conversations = records.len();
    let jsonl: String = records.iter().map(|r| format!("{r}\n")).collect();
    // The API's own parse and cut, so held-out set and shards are the ones a posted job gets.
    let records = pipeline::parse_records(jsonl.as_bytes(), &spec, true).map_err(|errors| {
        let lines: Vec<String> = errors.into_iter().map(|e| e.message).collect();
        anyhow::anyhow!("dataset: {}", lines.join("; "))
    })?;
    let split = pipeline::split(&records, &spec)
        .map_err(|e| anyhow::anyhow!("dataset split: {}", e.message))?;

    let load_started = Instant::now();
    let job = CausalLmJob::from_args(&spec.lora, spec.training.clone(), &cfg.gguf, &device)?;
    eprintln!(
        "model loaded in {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir()?;
    let held_out = examples_of(&job, dir.path(), "held-out.jsonl", &split.held_out)?;
    let shards = split
        .shards
        .iter()
        .enumerate()
        .map(|(i, (bytes, _))| examples_of(&job, dir.path(), &format!("shard-{i}.jsonl"), bytes))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let weights: Vec<f64> = shards.iter().map(|s| s.len() as f64).collect();

    // Central trains as many optimiser steps as all federated tasks together. The job's
    // schedule is `epochs` passes over what it is given, so central is given the union
    // `rounds` times, topped up from the union until its step count reaches the federated one
    // (shards rounding their last batch up can add a step each).
    let round_steps: usize = shards.iter().map(|s| job.total_steps(s.len())).sum();
    let federated_steps = round_steps * cfg.rounds as usize;
    let union: Vec<SftExample> = shards.iter().flatten().cloned().collect();
    let mut central_pool: Vec<SftExample> = Vec::with_capacity(union.len() * cfg.rounds as usize);
    for _ in 0..cfg.rounds {
        central_pool.extend(union.iter().cloned());
    }
    let mut top_up = union.iter().cycle();
    while job.total_steps(central_pool.len()) < federated_steps {
        central_pool.extend(top_up.next().cloned());
    }
    anyhow::ensure!(
        job.total_steps(central_pool.len()) == federated_steps,
        "central cannot match the federated step count {federated_steps} with batches of {}",
        spec.training.batch_size
    );

    // Round 1 is shared, so the naive variant trains (rounds - 1) rounds of its own.
    let central_rates = if cfg.central_learning_rates.is_empty() {
        vec![spec.training.learning_rate]
    } else {
        cfg.central_learning_rates.clone()
    };
    let mut trainer = Trainer {
        bar: ProgressLine::new(),
        done: 0,
        all_steps: (federated_steps - round_steps) * (cfg.server_learning_rates.len() + 1)
            + round_steps
            + federated_steps * central_rates.len(),
    };

    let base_loss = job.evaluate(None, &held_out)?.loss;
    eprintln!("base held-out loss {base_loss:.4}");

    // Every variant: exact at each server learning rate asked for, then naive at 1.
    let mut variants: Vec<(MergeMode, f64)> = cfg
        .server_learning_rates
        .iter()
        .map(|&rate| (MergeMode::Exact, rate))
        .collect();
    variants.push((MergeMode::Naive, 1.0));
    let n = variants.len();
    let mut tallies: Vec<Tally> = (0..n).map(|_| Tally::default()).collect();
    let mut starts: Vec<Option<Adapter>> = vec![None; n];
    let mut round_losses = vec![Vec::new(); n];
    let mut merge_errors = vec![Vec::new(); n];
    let mut merge_seconds = vec![0.0; n];
    let mut momenta: Vec<Option<Adapter>> = vec![None; n];
    let mut shared_round: Option<(Vec<Adapter>, Tally)> = None;
    let mut round1_shard_losses = Vec::new();
    for round in 1..=cfg.rounds {
        for (v, &(mode, rate)) in variants.iter().enumerate() {
            let name = match mode {
                MergeMode::Exact => format!("exact x{rate}"),
                _ => "naive".to_owned(),
            };
            let adapters = if let Some((adapters, tally)) = &shared_round
                && round == 1
            {
                tallies[v].steps += tally.steps;
                tallies[v].seconds += tally.seconds;
                adapters.clone()
            } else {
                let mut tally = Tally::default();
                let adapters = shards
                    .iter()
                    .enumerate()
                    .map(|(k, shard)| {
                        let label = if round == 1 {
                            format!("round 1 shard {}", k + 1)
                        } else {
                            format!("{name} round {round} shard {}", k + 1)
                        };
                        let position = RoundOf::under(spec.training.schedule, round, cfg.rounds);
                        trainer.train(
                            &job,
                            starts[v].as_ref(),
                            shard,
                            position,
                            &label,
                            &mut tally,
                        )
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                tallies[v].steps += tally.steps;
                tallies[v].seconds += tally.seconds;
                if round == 1 {
                    for adapter in &adapters {
                        round1_shard_losses.push(job.evaluate(Some(adapter), &held_out)?.loss);
                    }
                    shared_round = Some((adapters.clone(), tally));
                }
                adapters
            };
            let merge_started = Instant::now();
            // As the validator merges (weights here are the shards' example counts; the
            // validator also multiplies by each adapter's quality, which moves them little on
            // equal-sized shards of one distribution).
            let (merged, error) = if mode == MergeMode::Exact && cfg.server_momentum > 0.0 {
                outer_nesterov(
                    starts[v].as_ref(),
                    &adapters,
                    &weights,
                    &mut momenta[v],
                    cfg.server_momentum,
                    rate,
                )?
            } else {
                let (merged, report) = merge_adapters(
                    starts[v].as_ref(),
                    &adapters,
                    &weights,
                    mode,
                    Rules::default().clip_factor,
                    rate,
                    job.seed(),
                )?;
                (merged, report.max_relative_error)
            };
            merge_seconds[v] += merge_started.elapsed().as_secs_f64();
            let loss = job.evaluate(Some(&merged), &held_out)?.loss;
            trainer.bar.println(&format!(
                "federated {name} round {round}: held-out loss {loss:.4}"
            ));
            round_losses[v].push(loss);
            merge_errors[v].push(error);
            starts[v] = Some(merged);
        }
    }

    let mut central_runs = Vec::with_capacity(central_rates.len());
    for &rate in &central_rates {
        // Another rate is another job's training arguments on the same model (loaded again:
        // a job holds one set of trainables).
        let other;
        let central_job = if rate == spec.training.learning_rate {
            &job
        } else {
            let training = TrainingArgs {
                learning_rate: rate,
                ..spec.training.clone()
            };
            other = CausalLmJob::from_args(&spec.lora, training, &cfg.gguf, &device)?;
            &other
        };
        let mut tally = Tally::default();
        let adapter = trainer.train(
            central_job,
            None,
            &central_pool,
            RoundOf::ALONE,
            &format!("central lr {rate}"),
            &mut tally,
        )?;
        let loss = central_job.evaluate(Some(&adapter), &held_out)?.loss;
        trainer
            .bar
            .println(&format!("central at lr {rate}: held-out loss {loss:.4}"));
        central_runs.push(RunFigures {
            loss,
            steps: tally.steps,
            train_seconds: tally.seconds,
            merge_seconds: 0.0,
            round_losses: Vec::new(),
            merge_max_relative_error: Vec::new(),
            server_learning_rate: 1.0,
            learning_rate: rate,
        });
    }
    trainer.bar.finish();
    let central = central_runs
        .iter()
        .min_by(|a, b| a.loss.total_cmp(&b.loss))
        .cloned()
        .expect("at least one central rate");

    let mut federated: Vec<RunFigures> = variants
        .iter()
        .enumerate()
        .map(|(v, &(_, rate))| RunFigures {
            loss: *round_losses[v].last().expect("at least one round"),
            steps: tallies[v].steps,
            train_seconds: tallies[v].seconds,
            merge_seconds: merge_seconds[v],
            round_losses: std::mem::take(&mut round_losses[v]),
            merge_max_relative_error: std::mem::take(&mut merge_errors[v]),
            server_learning_rate: rate,
            learning_rate: spec.training.learning_rate,
        })
        .collect();
    let federated_naive = federated.pop().expect("the naive variant");
    let mut exact = federated.into_iter();
    let federated_exact = exact.next().expect("at least one server learning rate");
    Ok(FederatedReport {
        model: cfg
            .gguf
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        device: format!("CPU ({} threads)", candle_core::utils::get_num_threads()),
        conversations,
        held_out_examples: held_out.len(),
        shard_examples: shards.iter().map(Vec::len).collect(),
        rounds: cfg.rounds,
        epochs: cfg.epochs,
        learning_rate: spec.training.learning_rate,
        job_schedule: cfg.job_schedule,
        server_momentum: cfg.server_momentum,
        base_loss,
        round1_shard_losses,
        central,
        central_runs,
        federated_exact,
        federated_exact_other_rates: exact.collect(),
        federated_naive,
        goal_percent: GOAL_PERCENT,
    })
}

#[cfg(test)]
mod tests {
    use candle_core::Tensor;

    use super::*;

    fn figures(loss: f64) -> RunFigures {
        RunFigures {
            loss,
            steps: 1,
            train_seconds: 1.0,
            merge_seconds: 0.0,
            round_losses: vec![loss],
            merge_max_relative_error: vec![0.0],
            server_learning_rate: 1.0,
            learning_rate: 2e-3,
        }
    }

    fn report(central: f64, exact: f64) -> FederatedReport {
        FederatedReport {
            model: "m".into(),
            device: "CPU".into(),
            conversations: 30,
            held_out_examples: 3,
            shard_examples: vec![9, 9, 9],
            rounds: 1,
            epochs: 1,
            learning_rate: 2e-3,
            job_schedule: false,
            server_momentum: 0.0,
            base_loss: 3.0,
            round1_shard_losses: vec![2.5, 2.5, 2.5],
            central: RunFigures {
                learning_rate: 1e-3,
                ..figures(central)
            },
            central_runs: vec![
                RunFigures {
                    learning_rate: 1e-3,
                    ..figures(central)
                },
                figures(central * 1.2),
            ],
            federated_exact: figures(exact),
            federated_exact_other_rates: vec![figures(exact * 0.9)],
            federated_naive: figures(exact * 1.1),
            goal_percent: GOAL_PERCENT,
        }
    }

    /// A rank-`r` adapter on two 12 x 10 modules whose values follow from `seed`.
    fn synthetic(seed: u64, r: usize) -> Adapter {
        use shardwork_trainer::lora::LoraConfig;
        use shardwork_trainer::peft::AdapterConfig;
        let cfg = LoraConfig::new(r, 16.0, 0.0, &["q", "v"], &[]).unwrap();
        let values = |n: usize, salt: u64| -> Vec<f32> {
            (0..n as u64)
                .map(|i| {
                    ((((i + 1) * 2654435761) ^ (seed * 7919 + salt)) % 1000) as f32 / 1000.0 - 0.5
                })
                .collect()
        };
        let mut tensors = std::collections::BTreeMap::new();
        for (j, m) in ["m.0.q", "m.0.v"].iter().enumerate() {
            let a = Tensor::from_vec(values(r * 10, 2 * j as u64), (r, 10), &Device::Cpu).unwrap();
            let b =
                Tensor::from_vec(values(12 * r, 2 * j as u64 + 1), (12, r), &Device::Cpu).unwrap();
            tensors.insert(format!("{m}.lora_A.weight"), a);
            tensors.insert(format!("{m}.lora_B.weight"), b);
        }
        Adapter {
            config: AdapterConfig::from_lora(&cfg, "CAUSAL_LM", None),
            tensors,
        }
    }

    fn product(a: &Adapter, module: &str) -> Tensor {
        let s = a.config.lora_alpha / a.config.r as f64;
        let pair = &a.lora_pairs().unwrap()[module];
        (pair.b.matmul(&pair.a).unwrap() * s).unwrap()
    }

    fn distance(x: &Tensor, y: &Tensor) -> f32 {
        (x - y)
            .unwrap()
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt()
    }

    #[test]
    fn the_outer_nesterov_step_without_momentum_is_the_exact_merge_and_keeps_the_update() {
        let start = synthetic(9, 2);
        let adapters: Vec<Adapter> = (1..=3).map(|k| synthetic(k, 2)).collect();
        let weights = [1.0, 2.0, 1.0];
        let mut momentum = None;
        let (stepped, _) =
            outer_nesterov(Some(&start), &adapters, &weights, &mut momentum, 0.0, 1.0).unwrap();
        let opts = shardwork_trainer::merge::MergeOptions::default();
        let (merged, _) =
            shardwork_trainer::merge::merge_from(Some(&start), &adapters, &weights, &opts).unwrap();
        let kept = momentum.expect("the step keeps its momentum");
        assert_eq!(
            kept.config.r, 8,
            "(K+1)·r: the mean update minus the start, untruncated"
        );
        for m in ["m.0.q", "m.0.v"] {
            assert!(
                distance(&product(&stepped, m), &product(&merged, m)) < 1e-4,
                "{m}"
            );
            // The momentum after one round is the round's update: mean − start.
            let mean = (((product(&adapters[0], m) + (product(&adapters[1], m) * 2.0).unwrap())
                .unwrap()
                + product(&adapters[2], m))
            .unwrap()
                / 4.0)
                .unwrap();
            let update = (mean - product(&start, m)).unwrap();
            assert!(distance(&product(&kept, m), &update) < 1e-4, "{m}");
        }
    }

    #[test]
    fn the_goal_is_federated_loss_at_most_two_percent_above_central() {
        assert!(report(2.0, 2.039).goal_met());
        assert!(report(2.0, 1.9).goal_met(), "beating central meets it too");
        assert!(!report(2.0, 2.041).goal_met());
        let r = report(2.0, 2.5);
        assert!((r.gap_percent(&r.federated_exact) - 25.0).abs() < 1e-9);
        assert!((r.share_of_central_gain(&r.federated_exact) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_json_report_carries_the_gaps_and_the_verdict() {
        let r = report(2.0, 2.5);
        let v = serde_json::to_value(r.to_json()).unwrap();
        assert_eq!(v["goal_met"], false);
        assert!((v["federated_exact_gap_percent"].as_f64().unwrap() - 25.0).abs() < 1e-9);
        assert_eq!(v["central"]["loss"], 2.0);
        assert_eq!(v["central_runs"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_report_names_central_at_each_rate_and_judges_against_the_best() {
        let text = report(2.0, 2.039).to_string();
        assert!(text.contains("central, lr 0.001 *"), "{text}");
        assert!(text.contains("central, lr 0.002 "), "{text}");
        assert!(
            text.contains("central at its best rate of those run, 0.001): met (+1.95%)"),
            "{text}"
        );
    }
}
