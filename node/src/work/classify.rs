//! A job's sequence-classification work as the services do it: build the BERT-family model the
//! spec names (from a model folder), start from the round's adapter, train on a shard, and
//! score on a held-out file. The worker and the validator build the model the same way, so the
//! base model the validator compares against is exactly the one the worker started from.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use candle_core::{Device, Tensor};
use shardwork_core::protocol::job_spec::{LoraSpec, TrainingArgs};
use shardwork_core::protocol::{HeldOutMetric, JobSpec, TrainingTask};

use shardwork_trainer::bert::{BertClassifier, BertWeights, ClassifierSpec};
use shardwork_trainer::data::ClassificationSet;
use shardwork_trainer::eval::ClassificationMetrics;
use shardwork_trainer::lora::{LoraConfig, Trainables};
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::text::TextTokenizer;
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::classify::{self, ClassifyConfig, TrainReport};
use shardwork_trainer::train::trace::{Span, TrainTrace};
use shardwork_trainer::{Error, Result};

use super::{
    DefaultGain, ExampleScores, HeldOut, HeldOutSet, Metric, RoundOf, Share, Trained, Work,
};

/// Batch size of held-out scoring (no gradients, so larger than training's).
const EVAL_BATCH: usize = 64;

/// The model, tokenizer and label names of a classification job.
pub struct ClassifyJob {
    /// The spec's training arguments; its seed also fixes the fresh model's head.
    pub training: TrainingArgs,
    /// The job's rounds (1 for a run of its own): the span of a job-wide schedule.
    pub rounds: u32,
    /// The base model's weights, loaded once and shared by every model built from them.
    pub weights: BertWeights,
    /// The base model's tokenizer, truncating at the spec's `max_seq_len`.
    pub tokenizer: TextTokenizer,
    /// The classes, fixed by the spec (`0`…`n-1`) rather than read from the data, so every
    /// shard maps a label to the same class; a record with any other label is refused.
    pub label_names: Vec<String>,
    /// The adapters' LoRA settings; the classifier head is always among the saved modules.
    pub lora: LoraConfig,
    /// The base model's frozen weights by checkpoint path, built once for the norm rule.
    frozen: OnceLock<BTreeMap<String, Tensor>>,
}

impl ClassifyJob {
    /// Loads the base model from `model_dir` (config.json, model.safetensors, tokenizer.json).
    pub fn load(spec: JobSpec, model_dir: &Path, device: &Device) -> Result<ClassifyJob> {
        if spec.base_model.task != TrainingTask::SequenceClassification {
            return Err(Error::Invalid(format!(
                "a sequence-classification job was asked to run a {:?} spec",
                spec.base_model.task
            )));
        }
        let num_labels = spec.base_model.num_labels.unwrap_or(2) as usize;
        Ok(ClassifyJob {
            rounds: spec.rounds,
            ..Self::from_args(&spec.lora, spec.training, num_labels, model_dir, device)?
        })
    }

    /// The same from LoRA and training arguments alone (`shardwork train`, no job spec).
    pub fn from_args(
        lora: &LoraSpec,
        training: TrainingArgs,
        num_labels: usize,
        model_dir: &Path,
        device: &Device,
    ) -> Result<ClassifyJob> {
        let targets: Vec<&str> = lora.target_modules.iter().map(String::as_str).collect();
        let saved = lora.saved_modules(TrainingTask::SequenceClassification);
        let to_save: Vec<&str> = saved.iter().map(String::as_str).collect();
        let lora = LoraConfig::new(
            lora.r as usize,
            lora.alpha,
            lora.dropout as f32,
            &targets,
            &to_save,
        )?;
        let weights = BertWeights::load(model_dir, device)?;
        let tokenizer = TextTokenizer::from_file(
            &model_dir.join("tokenizer.json"),
            training.max_seq_len as usize,
        )?;
        Ok(ClassifyJob {
            label_names: (0..num_labels).map(|i| i.to_string()).collect(),
            training,
            rounds: 1,
            weights,
            tokenizer,
            lora,
            frozen: OnceLock::new(),
        })
    }

    /// A fresh model: LoRA B = 0 and the head initialised from the job's seed, so every node
    /// builds the same starting point.
    pub fn build(&self) -> Result<(BertClassifier, Trainables)> {
        BertClassifier::new(
            &self.weights,
            &ClassifierSpec {
                num_labels: self.label_names.len(),
                lora: self.lora.clone(),
                encoder_dropout: Some(0.0),
                seed: self.training.seed,
            },
        )
    }

    /// A model at `adapter` (the previous round's merge), or the fresh model without one.
    pub fn build_from(&self, adapter: Option<&Adapter>) -> Result<(BertClassifier, Trainables)> {
        let (model, trainables) = self.build()?;
        if let Some(adapter) = adapter {
            trainables.load(&adapter.tensors)?;
        }
        Ok((model, trainables))
    }

    /// Reads the JSONL file at `path`, its labels checked against this job's classes.
    pub fn dataset(&self, path: &Path) -> Result<ClassificationSet> {
        ClassificationSet::from_jsonl(path, Some(&self.label_names))
    }

    /// The PEFT configuration this job's adapters are saved with, naming the base model as
    /// its folder does ([`BertWeights::name`]).
    pub fn adapter_config(&self) -> AdapterConfig {
        AdapterConfig::from_lora(&self.lora, "SEQ_CLS", Some(self.weights.name()))
    }

    /// Optimiser steps for `records` training records under the spec's epochs and batch.
    pub fn total_steps(&self, records: usize) -> usize {
        let t = &self.training;
        let batch = t.batch_size.max(1) as usize;
        let accum = t.gradient_accumulation.max(1) as usize;
        let micro = records.div_ceil(batch);
        (micro * t.epochs.max(1) as usize).div_ceil(accum).max(1)
    }

    /// Trains from `start` on `data` at `round` of the job's schedule ([`RoundOf::ALONE`]: a
    /// schedule of its own); returns the new adapter and the run's report.
    pub fn train(
        &self,
        start: Option<&Adapter>,
        data: &ClassificationSet,
        device: &Device,
        round: RoundOf,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(Adapter, TrainReport, TrainTrace)> {
        let (model, trainables) = self.build_from(start)?;
        let t = &self.training;
        let total_steps = self.total_steps(data.len());
        let config = ClassifyConfig {
            batch_size: t.batch_size.max(1) as usize,
            optim: round.optim(t, total_steps),
            seed: t.seed,
        };
        let (report, trace) = classify::train_span(
            &model,
            &trainables,
            &self.tokenizer,
            data,
            &config,
            device,
            span,
            progress,
        )?;
        let adapter = Adapter::from_trainables(self.adapter_config(), &trainables)?;
        Ok((adapter, report, trace))
    }

    /// Held-out accuracy and macro-F1 of the model at `adapter` (the fresh model without one).
    pub fn evaluate(
        &self,
        adapter: Option<&Adapter>,
        held_out: &ClassificationSet,
        device: &Device,
    ) -> Result<ClassificationMetrics> {
        let (model, _) = self.build_from(adapter)?;
        classify::evaluate(&model, &self.tokenizer, held_out, EVAL_BATCH, device)
    }
}

impl HeldOutSet for ClassificationSet {
    fn len(&self) -> usize {
        ClassificationSet::len(self)
    }

    fn sample(&self, picks: &[usize]) -> HeldOut {
        HeldOut::new(ClassificationSet {
            texts: picks.iter().map(|&i| self.texts[i].clone()).collect(),
            labels: picks.iter().map(|&i| self.labels[i]).collect(),
            label_names: self.label_names.clone(),
        })
    }
}

/// Held-out accuracy: the share of the way from the base model's accuracy to 1.
const ACCURACY: Metric = Metric {
    kind: HeldOutMetric::Accuracy,
    best: 1.0,
    // A discrete, noisy metric: one honest shard's update from a merged start can score below
    // it (three examples of 180 below, in a 5-shard run of the sample model, while the merge
    // gained), and retraining it gives the same adapter, so a stricter bar fails honest jobs.
    // Sign flips and wrong labels fall tens of points; replays and copies are caught by what
    // their update added, and lazy work by spot checks.
    default_min_gain: DefaultGain::WithinNoise,
};

impl Work for ClassifyJob {
    fn metric(&self) -> Metric {
        ACCURACY
    }

    fn seed(&self) -> u64 {
        self.training.seed
    }

    fn adapter_config(&self) -> AdapterConfig {
        ClassifyJob::adapter_config(self)
    }

    fn train(
        &self,
        start: Option<&Adapter>,
        shard: &Path,
        device: &Device,
        round: u32,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Trained> {
        let data = self.dataset(shard)?;
        let round = RoundOf::under(self.training.schedule, round, self.rounds);
        let (adapter, report, trace) =
            ClassifyJob::train(self, start, &data, device, round, span, progress)?;
        Ok(Trained {
            adapter,
            records: data.len(),
            steps: report.steps,
            final_loss: report.final_loss,
            tokens_per_sec: report.tokens_per_sec,
            trace,
        })
    }

    fn total_steps(&self, shard: &Path) -> Result<usize> {
        Ok(ClassifyJob::total_steps(self, self.dataset(shard)?.len()))
    }

    fn held_out(&self, path: &Path) -> Result<HeldOut> {
        Ok(HeldOut::new(self.dataset(path)?))
    }

    fn score_examples(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        device: &Device,
    ) -> Result<ExampleScores> {
        let set: &ClassificationSet = held_out.get()?;
        let (model, _) = self.build_from(adapter)?;
        let predicted = classify::predict(&model, &self.tokenizer, &set.texts, EVAL_BATCH, device)?;
        Ok(ExampleScores {
            metric: predicted
                .iter()
                .zip(&set.labels)
                .map(|(p, label)| Share::one(if p == label { 1.0 } else { 0.0 }))
                .collect(),
            beside: Vec::new(),
        })
    }

    fn base_weight(&self, module: &str) -> Result<Option<Tensor>> {
        let frozen = match self.frozen.get() {
            Some(frozen) => frozen,
            None => {
                let (model, _) = self.build()?;
                let built = model.frozen_tensors().into_iter().collect();
                self.frozen.get_or_init(|| built)
            }
        };
        // PEFT names the classifier's encoder `bert.`; the checkpoint's paths do not.
        let key = format!("{}.weight", module.trim_start_matches("bert."));
        Ok(frozen.get(&key).cloned())
    }
}
