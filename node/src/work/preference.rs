//! A job's preference fine-tuning (DPO, or IPO) of a Llama-family model: the causal-LM job's
//! model, tokenizer and LoRA, trained on `{"prompt","chosen","rejected"}` pairs
//! ([`shardwork_trainer::train::dpo`]) and judged by the held-out DPO loss (lower is better),
//! with the reward accuracy and mean margin reported beside it.
//!
//! The reference policy is the job's starting point: the model with the adapter the job
//! continues from, or with the fresh LoRA values (`B = 0`, so the base model), loaded into the
//! same layers, never a second copy of the model.
//! Its log-probabilities of a set's answers are computed once per set: by a worker before it
//! trains a shard (about a third of one epoch's compute: a forward pass over both answers), by
//! the validator once per job for the held-out set.

use std::path::Path;

use candle_core::{Device, Tensor};
use shardwork_core::protocol::{HeldOutMetric, JobSpec, RecordsFor};
use shardwork_trainer::data::jsonl::read_records;
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::dpo::{
    self, DpoEval, DpoObjective, PairScore, PreferencePair, ReferenceLogps, encode_pairs,
};
use shardwork_trainer::train::trace::Span;
use shardwork_trainer::{Error, Result};

use super::causal_lm::CausalLmJob;
use super::{
    DefaultGain, ExampleScores, HeldOut, HeldOutSet, Metric, RoundOf, Share, Trained, Work,
};

/// Pairs per held-out scoring batch (no gradients).
const EVAL_BATCH: usize = 8;

/// Held-out DPO loss per pair: ln 2 where the policy is the reference, 0 at best. An honest
/// round moves it by tenths (training pairs it learns to rank); a copy of the start does not
/// move it at all, so the causal LM's fixed bar serves.
pub const DPO_LOSS: Metric = Metric {
    kind: HeldOutMetric::DpoLoss,
    best: 0.0,
    default_min_gain: DefaultGain::Fixed(0.01),
};

/// A held-out set of pairs with the reference's log-probabilities of their answers.
struct ScoredPairs {
    pairs: Vec<PreferencePair>,
    reference: Vec<ReferenceLogps>,
}

impl HeldOutSet for ScoredPairs {
    fn len(&self) -> usize {
        self.pairs.len()
    }

    fn sample(&self, picks: &[usize]) -> HeldOut {
        HeldOut::new(ScoredPairs {
            pairs: picks.iter().map(|&i| self.pairs[i].clone()).collect(),
            reference: picks.iter().map(|&i| self.reference[i]).collect(),
        })
    }
}

/// The model, tokenizer, settings and objective of a preference job.
pub struct PreferenceJob {
    lm: CausalLmJob,
    objective: DpoObjective,
    /// The reference policy's LoRA values: the adapter the job continues from, or the fresh
    /// ones (the base model) without one.
    reference: Option<Adapter>,
}

impl PreferenceJob {
    /// Loads the base model in `model_dir` for the preference job `spec` (one whose
    /// `training.dpo` is set), judged against `reference` (the base model without one).
    pub fn load(
        spec: JobSpec,
        model_dir: &Path,
        reference: Option<Adapter>,
        device: &Device,
    ) -> Result<PreferenceJob> {
        let Some(dpo) = spec.training.dpo else {
            return Err(Error::Invalid(
                "a preference job was asked to run a spec without training.dpo".into(),
            ));
        };
        Ok(PreferenceJob {
            objective: DpoObjective {
                beta: dpo.beta,
                loss: dpo.loss,
            },
            lm: CausalLmJob::load(spec, model_dir, device)?,
            reference,
        })
    }

    /// Reads and encodes the JSONL pairs at `path`, each answer cut at the spec's
    /// `max_seq_len`, pairs with an answer left empty dropped.
    pub fn pairs(&self, path: &Path) -> Result<Vec<PreferencePair>> {
        let records: Vec<_> = read_records(path, RecordsFor::Preference)?
            .into_iter()
            .map(|(_, record)| record)
            .collect();
        let max_len = self.lm.training().max_seq_len as usize;
        let pairs = encode_pairs(self.lm.tokenizer(), &records, max_len)?;
        if pairs.is_empty() {
            return Err(Error::Invalid(format!(
                "{}: no pair has an answer token within max_seq_len {max_len}",
                path.display()
            )));
        }
        Ok(pairs)
    }

    /// The reference policy's log-probabilities of `pairs`' answers.
    fn reference(&self, pairs: &[PreferencePair]) -> Result<Vec<ReferenceLogps>> {
        let pad = self.lm.tokenizer().eos_token_id;
        self.lm.with_adapter(self.reference.as_ref(), |model, _| {
            dpo::reference_logps(model, pairs, EVAL_BATCH, pad)
        })
    }

    /// Held-out DPO loss, reward accuracy and margin of the model at `adapter` (the reference
    /// without one).
    pub fn evaluate(
        &self,
        adapter: Option<&Adapter>,
        pairs: &[PreferencePair],
        reference: &[ReferenceLogps],
    ) -> Result<DpoEval> {
        let pad = self.lm.tokenizer().eos_token_id;
        self.lm.scoring_with_adapter(adapter, |model| {
            dpo::evaluate(model, pairs, reference, self.objective, EVAL_BATCH, pad)
        })
    }
}

impl Work for PreferenceJob {
    fn metric(&self) -> Metric {
        DPO_LOSS
    }

    fn seed(&self) -> u64 {
        self.lm.training().seed
    }

    fn adapter_config(&self) -> AdapterConfig {
        self.lm.adapter_config()
    }

    fn train(
        &self,
        start: Option<&Adapter>,
        shard: &Path,
        _device: &Device,
        round: u32,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Trained> {
        let pairs = self.pairs(shard)?;
        let reference = self.reference(&pairs)?;
        let round = RoundOf::under(self.lm.training().schedule, round, self.lm.rounds());
        let cfg = self.lm.run_config(round, self.lm.total_steps(pairs.len()));
        let pad = self.lm.tokenizer().eos_token_id;
        let config = self.adapter_config();
        let (adapter, report, trace) = self.lm.with_adapter(start, |model, trainables| {
            let (report, trace) = dpo::train_span(
                model,
                trainables,
                &pairs,
                &reference,
                self.objective,
                &cfg,
                pad,
                span,
                progress,
            )?;
            // Read out under the same hold of the model: another scoring would load its own.
            let adapter = Adapter::from_trainables(config, trainables)?;
            Ok((adapter, report, trace))
        })?;
        Ok(Trained {
            adapter,
            records: pairs.len(),
            steps: report.steps,
            final_loss: report.final_loss,
            tokens_per_sec: report.tokens_per_sec,
            trace,
        })
    }

    fn total_steps(&self, shard: &Path) -> Result<usize> {
        Ok(self.lm.total_steps(self.pairs(shard)?.len()))
    }

    fn held_out(&self, path: &Path) -> Result<HeldOut> {
        let pairs = self.pairs(path)?;
        let reference = self.reference(&pairs)?;
        Ok(HeldOut::new(ScoredPairs { pairs, reference }))
    }

    fn score_examples(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        _device: &Device,
    ) -> Result<ExampleScores> {
        let set: &ScoredPairs = held_out.get()?;
        let pad = self.lm.tokenizer().eos_token_id;
        let scores = self.lm.scoring_with_adapter(adapter, |model| {
            dpo::pair_scores(
                model,
                &set.pairs,
                &set.reference,
                self.objective,
                EVAL_BATCH,
                pad,
            )
        })?;
        let shares =
            |value: fn(&PairScore) -> f64| scores.iter().map(|s| Share::one(value(s))).collect();
        // `DpoEval::of`'s measures, pair by pair.
        Ok(ExampleScores {
            metric: shares(|s| s.loss),
            beside: vec![
                (
                    "reward_accuracy",
                    shares(|s| f64::from(u8::from(s.ranked_right()))),
                ),
                ("reward_margin", shares(PairScore::margin)),
            ],
        })
    }

    fn base_weight(&self, module: &str) -> Result<Option<Tensor>> {
        Work::base_weight(&self.lm, module)
    }
}
