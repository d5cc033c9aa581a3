//! Sequence-classification fine-tuning: cross-entropy on `{"text","label"}` records through a
//! [`BertClassifier`], LoRA factors and head trained by [`AdamW`].
//!
//! Deterministic given `seed`: the epoch orders, the LoRA/head initialisation (seeded in the
//! model) and every dropout mask come from seeded generators, and CPU kernels are
//! deterministic for a fixed thread count.

use candle_core::{D, Device, Tensor};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::Progress;
use super::step_loop::StepLoop;
use super::trace::{Span, TrainTrace};
use crate::bert::BertClassifier;
use crate::data::ClassificationSet;
use crate::error::{Error, Result};
use crate::eval::{self, ClassificationMetrics};
use crate::lora::Trainables;
use crate::optim::{AdamW, OptimConfig};
use crate::text::{Batch, TextTokenizer, pad};

/// Settings of a classification training run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassifyConfig {
    /// Examples per micro-batch.
    pub batch_size: usize,
    /// `optim.total_steps` optimiser steps of `optim.grad_accum` micro-batches each.
    pub optim: OptimConfig,
    /// Seeds the epoch order of the examples.
    pub seed: u64,
}

/// What a training run did and how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    /// Optimiser steps taken.
    pub steps: usize,
    /// Mean loss over the last 10% of steps.
    pub final_loss: f32,
    /// Real (non-padding) tokens trained on.
    pub tokens: usize,
    /// Wall-clock seconds of training.
    pub seconds: f64,
    /// Real tokens per second over the run.
    pub tokens_per_sec: f64,
}

/// Trains `trainables` (owned by `model`) on `data`, calling `progress` after every step.
pub fn train(
    model: &BertClassifier,
    trainables: &Trainables,
    tokenizer: &TextTokenizer,
    data: &ClassificationSet,
    cfg: &ClassifyConfig,
    device: &Device,
    progress: &mut dyn FnMut(&Progress),
) -> Result<TrainReport> {
    let span = Span::whole();
    train_span(
        model, trainables, tokenizer, data, cfg, device, span, progress,
    )
    .map(|(r, _)| r)
}

/// [`train`] over the steps `span` asks for (a whole run keeping its proof-of-training
/// checkpoints, or one stretch of it resumed from its checkpoint), returning the trace too.
#[allow(clippy::too_many_arguments)]
pub fn train_span(
    model: &BertClassifier,
    trainables: &Trainables,
    tokenizer: &TextTokenizer,
    data: &ClassificationSet,
    cfg: &ClassifyConfig,
    device: &Device,
    span: Span,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(TrainReport, TrainTrace)> {
    if cfg.batch_size == 0 {
        return Err(Error::Invalid(
            "batch_size: 0 is below the minimum 1".into(),
        ));
    }
    if data.is_empty() {
        return Err(Error::Invalid("training set is empty".into()));
    }
    if data.num_labels() != model.num_labels() {
        return Err(Error::Invalid(format!(
            "dataset has {} labels, model head has {}",
            data.num_labels(),
            model.num_labels()
        )));
    }
    // The frozen weights are packed for AMX once for the run, where the CPU has it.
    let _packs = crate::fused::packs::PackScope::enter();
    let encoded = tokenizer.encode_all(&data.texts)?;
    let opt = AdamW::new(trainables, cfg.optim.clone())?;
    let mut steps = StepLoop::new(opt, trainables, data.len(), cfg.batch_size, cfg.seed, span)?;
    for _ in 0..steps.micro_batches() {
        let batch_idx = steps.next_batch();
        let seqs: Vec<&[u32]> = batch_idx.iter().map(|&i| encoded[i].as_slice()).collect();
        let batch = pad(&seqs, tokenizer.pad_id(), device)?;
        let labels: Vec<u32> = batch_idx.iter().map(|&i| data.labels[i]).collect();
        let labels = Tensor::from_vec(labels, batch_idx.len(), device)?;
        let logits = model.forward(&batch.ids, &batch.mask, true)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &labels)?;
        steps.backward(&loss, batch.tokens, progress)?;
    }
    let (summary, trace) = steps.finish();
    let report = TrainReport {
        steps: summary.steps,
        final_loss: summary.final_loss,
        tokens: summary.tokens,
        seconds: summary.seconds,
        tokens_per_sec: summary.tokens as f64 / summary.seconds,
    };
    Ok((report, trace))
}

/// Predicted label ids for `texts`, in order. The model is scored folded, through the
/// inference kernels.
pub fn predict(
    model: &BertClassifier,
    tokenizer: &TextTokenizer,
    texts: &[String],
    batch_size: usize,
    device: &Device,
) -> Result<Vec<u32>> {
    let model = model.folded()?;
    predict_batches(tokenizer, texts, batch_size, device, &|batch| {
        model.infer(&batch.ids, &batch.mask)
    })
}

/// Predicted label ids for `texts`, in order, from `logits` of each padded batch. Batches
/// group texts of similar length so little time goes to padding. On the CPU the batches run
/// concurrently: each kernel is parallel already, but the single-threaded steps between them
/// left a core idle a sixth of the time. Each batch is computed alone and placed by index, so
/// the result does not depend on the schedule.
pub fn predict_batches(
    tokenizer: &TextTokenizer,
    texts: &[String],
    batch_size: usize,
    device: &Device,
    logits: &(dyn Fn(&Batch) -> Result<Tensor> + Sync),
) -> Result<Vec<u32>> {
    let encoded = tokenizer.encode_all(texts)?;
    let mut by_len: Vec<usize> = (0..texts.len()).collect();
    by_len.sort_by_key(|&i| encoded[i].len());
    let chunks: Vec<&[usize]> = by_len.chunks(batch_size.max(1)).collect();
    let predict_chunk = |chunk: &&[usize]| -> Result<Vec<u32>> {
        let seqs: Vec<&[u32]> = chunk.iter().map(|&i| encoded[i].as_slice()).collect();
        let batch = pad(&seqs, tokenizer.pad_id(), device)?;
        Ok(logits(&batch)?.argmax(D::Minus1)?.to_vec1()?)
    };
    let predictions: Vec<Vec<u32>> = if device.is_cpu() {
        chunks
            .par_iter()
            .map(predict_chunk)
            .collect::<Result<_>>()?
    } else {
        chunks.iter().map(predict_chunk).collect::<Result<_>>()?
    };
    let mut out = vec![0u32; texts.len()];
    for (chunk, pred) in chunks.iter().zip(predictions) {
        for (&i, p) in chunk.iter().zip(pred) {
            out[i] = p;
        }
    }
    Ok(out)
}

/// Accuracy and macro-F1 of `model` on `set`.
pub fn evaluate(
    model: &BertClassifier,
    tokenizer: &TextTokenizer,
    set: &ClassificationSet,
    batch_size: usize,
    device: &Device,
) -> Result<ClassificationMetrics> {
    let pred = predict(model, tokenizer, &set.texts, batch_size, device)?;
    eval::classification(&pred, &set.labels, set.num_labels())
}
