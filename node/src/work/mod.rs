//! The seam between the nodes' loops and the trainer: what a job asks of a node, whatever the
//! model family.
//!
//! The worker and the validator hold a job's work as an `Arc<dyn Work>` built by [`load`] from
//! the job's spec and its verified model folder. The worker calls [`Work::train`]; the validator
//! calls [`Work::held_out`] once per job, then [`Work::score_examples`] for the base model,
//! every merge (the whole set) and every submission (the round's sample of it,
//! [`HeldOut::sample`]), and [`Work::base_weight`] for the norm rule. A new kind of job is
//! a new implementation of [`Work`] and one arm of [`load`]; the loops do not change.
//!
//! Implementations: [`classify`] (BERT-family sequence classification, judged by held-out
//! accuracy), [`causal_lm`] (Llama-family supervised fine-tuning, judged by held-out loss
//! per learned token) and [`preference`] (Llama-family DPO on preference pairs, judged by the
//! held-out DPO loss).

pub mod causal_lm;
pub mod classify;
pub mod preference;

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use candle_core::{Device, Tensor};
use shardwork_core::protocol::{
    BesideMetrics, HeldOutMetric, JobSpec, LrSchedule, TrainingArgs, TrainingTask,
};
use shardwork_trainer::optim::{OptimConfig, ScheduleWindow};
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::trace::{Span, TrainTrace};
use shardwork_trainer::{Error, Result};

/// The held-out metric a kind of work is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// The metric, by the name reports and verdicts use, and which way it is better.
    pub kind: HeldOutMetric,
    /// The best value the metric can take (1 for accuracy, 0 for a loss): the quality of an
    /// adapter is the share of the way from the base model's score to it.
    pub best: f64,
    /// The gain over the round's start an adapter must show when the job does not set
    /// `validation.min_gain`.
    pub default_min_gain: DefaultGain,
}

/// The gain over the round's start a metric asks for by default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DefaultGain {
    /// This much, in the metric's units.
    Fixed(f64),
    /// From a merged start (round 2 on): not worse than it by more than the held-out set's
    /// noise, one standard error of the start's score as a proportion plus one example (a
    /// negative gain). From the base model (round 1): better by at least one example, since an
    /// adapter that changes nothing scores exactly the base.
    WithinNoise,
}

impl Metric {
    /// The name reports and verdicts use (`accuracy`).
    pub const fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The gain an adapter must show over a start scoring `start` on `held_out` examples, when
    /// the job sets none; `from_base`: the start is the base model (round 1).
    pub fn default_min_gain_for(&self, start: f64, held_out: usize, from_base: bool) -> f64 {
        match self.default_min_gain {
            DefaultGain::Fixed(gain) => gain,
            DefaultGain::WithinNoise => {
                let n = held_out.max(1) as f64;
                if from_base {
                    return 1.0 / n;
                }
                let p = start.clamp(0.0, 1.0);
                -((p * (1.0 - p) / n).sqrt() + 1.0 / n)
            }
        }
    }

    /// How much better `value` is than `reference`, in the metric's units (negative: worse).
    pub fn gain(&self, value: f64, reference: f64) -> f64 {
        if self.kind.lower_is_better() {
            reference - value
        } else {
            value - reference
        }
    }

    /// The share of the possible improvement over `reference` that `value` achieved, in [0, 1].
    pub fn quality(&self, value: f64, reference: f64) -> f64 {
        let headroom = self.gain(self.best, reference).max(1e-9);
        (self.gain(value, reference) / headroom).clamp(0.0, 1.0)
    }
}

/// What training one shard produced.
pub struct Trained {
    /// The adapter as training left it.
    pub adapter: Adapter,
    /// Records of the shard trained on.
    pub records: usize,
    /// Optimiser steps taken.
    pub steps: usize,
    /// Mean training loss over the last steps.
    pub final_loss: f32,
    /// Training throughput, reported with the submission.
    pub tokens_per_sec: f64,
    /// The proof of what was trained: every step's loss and the states `span` asked to keep.
    pub trace: TrainTrace,
}

/// A task's round in its job: where its run sits in the job's learning-rate schedule. Under
/// `training.schedule: job` that schedule spans every round (warmup in round 1, the cosine
/// reaching its floor at the last round's end), so that round `r` continues the decay where
/// round `r − 1` left it instead of starting it anew; under `task` (the default) every task is
/// [`RoundOf::ALONE`], a schedule of its own (measured and why: DESIGN step 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundOf {
    /// 1-based, as the protocol counts rounds.
    pub round: u32,
    /// The job's `rounds`.
    pub rounds: u32,
}

impl RoundOf {
    /// A run with a schedule of its own: the one round of a one-round job.
    pub const ALONE: RoundOf = RoundOf {
        round: 1,
        rounds: 1,
    };

    /// Where round `round` of a `rounds`-round job trains under `schedule`. The round comes
    /// from the task as the API leased it (the validator's replay uses the submission's), never
    /// from a worker's word.
    pub fn under(schedule: LrSchedule, round: u32, rounds: u32) -> RoundOf {
        match schedule {
            LrSchedule::Task => RoundOf::ALONE,
            LrSchedule::Job => RoundOf { round, rounds },
        }
    }

    /// The optimiser of a task of `total_steps` steps at this round, whatever the kind of
    /// work: the spec's rate, warmup and accumulation, this round's stretch of the schedule,
    /// AdamW's default decay and the global gradient norm clipped at 1.
    pub fn optim(self, training: &TrainingArgs, total_steps: usize) -> OptimConfig {
        let (window, warmup_steps) = self.window(total_steps, training.warmup_ratio);
        OptimConfig {
            lr: training.learning_rate,
            warmup_steps,
            total_steps,
            window: Some(window),
            grad_accum: training.gradient_accumulation.max(1) as usize,
            max_grad_norm: Some(1.0),
            ..OptimConfig::default()
        }
    }

    /// The schedule of a job whose every round runs `steps` optimiser steps, this round's part
    /// of it, and its warmup at `warmup_ratio` of the whole.
    pub fn window(self, steps: usize, warmup_ratio: f64) -> (ScheduleWindow, usize) {
        let length = steps * self.rounds.max(1) as usize;
        let window = ScheduleWindow {
            offset: steps * (self.round.clamp(1, self.rounds.max(1)) - 1) as usize,
            length,
        };
        (window, (length as f64 * warmup_ratio).round() as usize)
    }
}

/// A held-out scoring: the judged metric and the measures reported beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldOutScore {
    /// The metric the work is judged by ([`Work::metric`]).
    pub metric: f64,
    /// Other measures of the same pass, by name (`reward_accuracy`), reported, never judged.
    pub beside: Vec<(&'static str, f64)>,
}

impl HeldOutScore {
    /// The measures beside the metric, as reports carry them (`None` for a non-finite one).
    pub fn beside(&self) -> BesideMetrics {
        self.beside
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.is_finite().then_some(*value)))
            .collect()
    }
}

/// One example's share of a held-out measure that is a ratio of sums: a loss per learned token
/// (the example's summed token losses over its learned tokens), an accuracy (1 or 0 over 1), a
/// mean over pairs (the pair's value over 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// What the example adds to the numerator.
    pub sum: f64,
    /// What it adds to the denominator.
    pub weight: f64,
}

impl Share {
    /// An example counted once with `value`.
    pub fn one(value: f64) -> Share {
        Share {
            sum: value,
            weight: 1.0,
        }
    }
}

/// A held-out pass example by example: each example's [`Share`] of the metric and of every
/// measure beside it, in the order of the set scored. The score of any subset of the examples
/// is read off it without scoring again: what lets a verdict compare a submission scored on a
/// sample with the round's start and the base model, each scored once on the whole set.
#[derive(Debug, Clone, PartialEq)]
pub struct ExampleScores {
    /// The judged metric's shares.
    pub metric: Vec<Share>,
    /// The shares of each measure beside it, by name; as long as `metric`.
    pub beside: Vec<(&'static str, Vec<Share>)>,
}

impl ExampleScores {
    /// Examples scored.
    pub fn len(&self) -> usize {
        self.metric.len()
    }

    /// Whether no example was scored.
    pub fn is_empty(&self) -> bool {
        self.metric.is_empty()
    }

    /// The metric and the measures beside it over every example.
    pub fn total(&self) -> HeldOutScore {
        HeldOutScore {
            metric: ratio(self.metric.iter()),
            beside: self
                .beside
                .iter()
                .map(|(name, shares)| (*name, ratio(shares.iter())))
                .collect(),
        }
    }

    /// The same over the examples at `picks` (indices into the set this pass scored; one out
    /// of range is an error).
    pub fn over(&self, picks: &[usize]) -> Result<HeldOutScore> {
        if let Some(&bad) = picks.iter().find(|&&i| i >= self.len()) {
            return Err(Error::Invalid(format!(
                "held-out example {bad} is not among the {} scored",
                self.len()
            )));
        }
        let pick = |shares: &[Share]| ratio(picks.iter().map(|&i| &shares[i]));
        Ok(HeldOutScore {
            metric: pick(&self.metric),
            beside: self
                .beside
                .iter()
                .map(|(name, shares)| (*name, pick(shares)))
                .collect(),
        })
    }
}

/// `Σ sum / Σ weight` (NaN when the weights sum to 0).
fn ratio<'a>(shares: impl Iterator<Item = &'a Share>) -> f64 {
    let (sum, weight) = shares.fold((0.0, 0.0), |(s, w), x| (s + x.sum, w + x.weight));
    if weight > 0.0 { sum / weight } else { f64::NAN }
}

/// A parsed held-out set that can give up a sample of its examples.
pub trait HeldOutSet: Any + Send + Sync {
    /// Examples in the set.
    fn len(&self) -> usize;

    /// Whether the set has no examples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The examples at `picks` (in range, ascending), in that order, as a set of their own.
    fn sample(&self, picks: &[usize]) -> HeldOut;
}

impl<T: Clone + Send + Sync + 'static> HeldOutSet for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn sample(&self, picks: &[usize]) -> HeldOut {
        HeldOut::new(picks.iter().map(|&i| self[i].clone()).collect::<Vec<T>>())
    }
}

/// A job's held-out set, parsed once by the [`Work`] that scores it. Opaque to the nodes: only
/// the implementation that made it reads it.
pub struct HeldOut(Box<dyn HeldOutSet>);

impl HeldOut {
    /// Wraps an implementation's parsed set; only the same type reads it back ([`HeldOut::get`]).
    pub fn new<T: HeldOutSet>(set: T) -> HeldOut {
        HeldOut(Box::new(set))
    }

    /// The set as the implementation that made it stored it.
    pub fn get<T: Any>(&self) -> Result<&T> {
        let any: &dyn Any = self.0.as_ref();
        any.downcast_ref().ok_or_else(|| {
            Error::Invalid("a held-out set was scored by another kind of work".into())
        })
    }

    /// Examples in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set has no examples.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The examples at `picks` (ascending, each below [`HeldOut::len`]) as a set of their own.
    pub fn sample(&self, picks: &[usize]) -> Result<HeldOut> {
        if !picks.windows(2).all(|w| w[0] < w[1]) || picks.last().is_some_and(|&i| i >= self.len())
        {
            return Err(Error::Invalid(format!(
                "a held-out sample must pick ascending examples below {}",
                self.len()
            )));
        }
        Ok(self.0.sample(picks))
    }
}

/// One job's work, as the nodes need it.
pub trait Work: Send + Sync {
    /// The held-out metric this work is judged by.
    fn metric(&self) -> Metric;

    /// The job's seed (merges that draw random numbers use it, so every validator agrees).
    fn seed(&self) -> u64;

    /// The PEFT configuration every adapter of this job must carry.
    fn adapter_config(&self) -> AdapterConfig;

    /// Trains on the JSONL shard at `shard` as round `round` (1-based) of the job, starting from
    /// `start` (the round's adapter; the fresh model in round 1), over the steps `span` asks for
    /// (a worker's whole run keeping its proof-of-training checkpoints; a validator's replay of
    /// one stretch of it), reporting each step to `progress`. A stretch resumed from a checkpoint
    /// starts from the checkpoint's values, not from `start`. The round places the run in the
    /// job's learning-rate schedule when the spec asks for one over the job.
    fn train(
        &self,
        start: Option<&Adapter>,
        shard: &Path,
        device: &Device,
        round: u32,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Trained>;

    /// Optimiser steps a whole run on the JSONL shard at `shard` takes.
    fn total_steps(&self, shard: &Path) -> Result<usize>;

    /// Parses the held-out JSONL at `path` into what [`Work::score`] reads.
    fn held_out(&self, path: &Path) -> Result<HeldOut>;

    /// The held-out scores of the model at `adapter` (the base model without one), example by
    /// example in the order of `held_out`, with what else the work measures on the same pass
    /// (a preference job's reward accuracy and margin).
    fn score_examples(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        device: &Device,
    ) -> Result<ExampleScores>;

    /// [`Work::score_examples`] over the whole set: the metric and the measures beside it.
    fn score_report(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        device: &Device,
    ) -> Result<HeldOutScore> {
        Ok(self.score_examples(adapter, held_out, device)?.total())
    }

    /// The held-out metric of the model at `adapter` over the whole set.
    fn score(&self, adapter: Option<&Adapter>, held_out: &HeldOut, device: &Device) -> Result<f64> {
        Ok(self.score_report(adapter, held_out, device)?.metric)
    }

    /// The frozen base weight the adapter's module `module` (its PEFT name) adapts, or `None`
    /// when the model has no such module.
    fn base_weight(&self, module: &str) -> Result<Option<Tensor>>;
}

/// The work a job's spec asks for, on the base model in `model_dir` (already verified by CID).
/// `reference`: a preference job's reference policy when it is an adapter (the one the job
/// continues from; the base model without one); other kinds have none. A kind the nodes cannot
/// run is an [`Error::Invalid`] naming it.
pub fn load(
    spec: JobSpec,
    model_dir: &Path,
    reference: Option<Adapter>,
    device: &Device,
) -> Result<Arc<dyn Work>> {
    if reference.is_some() && spec.training.dpo.is_none() {
        return Err(Error::Invalid(
            "a reference adapter was given for a job that is not preference training".into(),
        ));
    }
    match spec.base_model.task {
        TrainingTask::SequenceClassification => Ok(Arc::new(classify::ClassifyJob::load(
            spec, model_dir, device,
        )?)),
        TrainingTask::CausalLm if spec.training.dpo.is_some() => Ok(Arc::new(
            preference::PreferenceJob::load(spec, model_dir, reference, device)?,
        )),
        TrainingTask::CausalLm => Ok(Arc::new(causal_lm::CausalLmJob::load(
            spec, model_dir, device,
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quality_is_the_share_of_the_way_to_the_best_value_in_either_direction() {
        let accuracy = Metric {
            kind: HeldOutMetric::Accuracy,
            best: 1.0,
            default_min_gain: DefaultGain::WithinNoise,
        };
        assert!((accuracy.quality(0.75, 0.5) - 0.5).abs() < 1e-12);
        // 0.85 on 180 examples: one standard error (0.0266) and one example (0.0056) below.
        assert!((accuracy.default_min_gain_for(0.85, 180, false) + 0.0322).abs() < 1e-4);
        // A perfect start allows one example less; the base model must be beaten by one.
        assert!((accuracy.default_min_gain_for(1.0, 100, false) + 0.01).abs() < 1e-12);
        assert!((accuracy.default_min_gain_for(0.5, 100, true) - 0.01).abs() < 1e-12);
        assert_eq!(accuracy.quality(0.4, 0.5), 0.0);
        let loss = Metric {
            kind: HeldOutMetric::Loss,
            best: 0.0,
            default_min_gain: DefaultGain::Fixed(0.01),
        };
        assert_eq!(loss.default_min_gain_for(2.0, 100, true), 0.01);
        assert!((loss.gain(1.5, 2.0) - 0.5).abs() < 1e-12);
        assert!((loss.quality(1.5, 2.0) - 0.25).abs() < 1e-12);
        assert_eq!(loss.quality(2.5, 2.0), 0.0);
    }

    #[test]
    fn a_subset_of_a_pass_is_the_ratio_of_its_examples_sums() {
        // A loss per learned token: examples of 2, 3 and 5 tokens.
        let scores = ExampleScores {
            metric: vec![
                Share {
                    sum: 2.0,
                    weight: 2.0,
                },
                Share {
                    sum: 9.0,
                    weight: 3.0,
                },
                Share {
                    sum: 5.0,
                    weight: 5.0,
                },
            ],
            beside: vec![(
                "right",
                vec![Share::one(1.0), Share::one(0.0), Share::one(1.0)],
            )],
        };
        let total = scores.total();
        assert!((total.metric - 16.0 / 10.0).abs() < 1e-12);
        assert_eq!(total.beside, vec![("right", 2.0 / 3.0)]);
        let over = scores.over(&[0, 2]).unwrap();
        assert!((over.metric - 7.0 / 7.0).abs() < 1e-12);
        assert_eq!(over.beside, vec![("right", 1.0)]);
        assert!(scores.over(&[]).unwrap().metric.is_nan());
        let err = scores.over(&[3]).unwrap_err().to_string();
        assert!(err.contains("example 3 is not among the 3"), "{err}");
    }

    #[test]
    fn a_held_out_set_gives_up_the_examples_asked_for_in_order() {
        let set = HeldOut::new(vec!["a", "b", "c", "d"]);
        assert_eq!(set.len(), 4);
        let sample = set.sample(&[1, 3]).unwrap();
        assert_eq!(sample.get::<Vec<&str>>().unwrap(), &vec!["b", "d"]);
        assert!(set.sample(&[3, 1]).is_err());
        assert!(set.sample(&[1, 1]).is_err());
        assert!(set.sample(&[4]).is_err());
        assert!(sample.get::<Vec<String>>().is_err(), "another kind's set");
    }

    #[test]
    fn a_round_takes_its_stretch_of_the_job_schedule() {
        // Round 2 of 3 at 5 steps a round: steps 5..10 of 15, warming up over 6% of all 15.
        let (window, warmup) = RoundOf {
            round: 2,
            rounds: 3,
        }
        .window(5, 0.06);
        assert_eq!((window.offset, window.length, warmup), (5, 15, 1));
        // A one-round job's schedule is its task's own.
        let (window, warmup) = RoundOf::ALONE.window(40, 0.06);
        assert_eq!((window.offset, window.length), (0, 40));
        assert_eq!(warmup, (40.0f64 * 0.06).round() as usize);
    }

    #[test]
    fn only_a_job_wide_schedule_places_a_task_by_its_round() {
        assert_eq!(RoundOf::under(LrSchedule::Task, 3, 4), RoundOf::ALONE);
        assert_eq!(
            RoundOf::under(LrSchedule::Job, 3, 4),
            RoundOf {
                round: 3,
                rounds: 4
            }
        );
    }
}
