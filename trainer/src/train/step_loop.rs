//! The bookkeeping every training loop shares, whatever the model: seeded epoch order, the
//! non-finite loss check, gradient accumulation, progress reports, the proof-of-training
//! checkpoints ([`super::trace`]) and the closing summary. The loops themselves only build
//! batches and compute losses.

use std::time::Instant;

use candle_core::Tensor;

use super::Progress;
use super::trace::{Checkpoint, Span, TrainTrace, boundaries};
use crate::data::split;
use crate::error::{Error, Result};
use crate::lora::{DropoutRng, Trainables};
use crate::optim::AdamW;

pub(crate) struct StepLoop {
    opt: AdamW,
    seed: u64,
    examples: usize,
    batch_size: usize,
    order: Vec<usize>,
    epoch: u64,
    start: Instant,
    tokens: usize,
    step_losses: Vec<f32>,
    /// Losses of the micro-batches accumulated into the step in progress.
    pending: Vec<f32>,
    /// Loss of the passes of the micro-batch in progress so far (see [`StepLoop::backward_part`]).
    partial: f32,
    /// The model's dropout generators, whose positions checkpoints keep.
    dropout: Vec<DropoutRng>,
    /// Steps taken before this loop's first (a resumed stretch starts later than 0).
    first_step: usize,
    /// The step after which this loop stops.
    until: usize,
    /// Steps after which the state is kept.
    keep: Vec<usize>,
    checkpoints: Vec<Checkpoint>,
}

/// What a finished loop measured.
pub(crate) struct LoopSummary {
    /// Optimiser steps taken.
    pub steps: usize,
    /// Mean loss over the last tenth of the steps (at least one).
    pub final_loss: f32,
    /// Real (non-padding) tokens trained on.
    pub tokens: usize,
    /// Wall-clock seconds since the loop started.
    pub seconds: f64,
}

impl StepLoop {
    /// A loop over `examples` examples in micro-batches of `batch_size`, epochs shuffled by
    /// `seed`, over the steps `span` asks for: a resumed stretch puts `trainables` (through the
    /// optimiser) and their dropout streams where its checkpoint says, and skips the data order
    /// up to its first step without computing anything.
    pub fn new(
        mut opt: AdamW,
        trainables: &Trainables,
        examples: usize,
        batch_size: usize,
        seed: u64,
        span: Span,
    ) -> Result<Self> {
        let total = opt.config().total_steps;
        let segment = matches!(span, Span::Segment { .. });
        let (first_step, until, keep, from) = match span {
            Span::Whole { segments } => {
                let b = boundaries(total, segments);
                let inner = b[1..b.len() - 1].to_vec();
                (0, total, inner, None)
            }
            Span::Segment {
                index,
                segments,
                from,
            } => {
                let b = boundaries(total, segments);
                if index + 1 >= b.len() {
                    return Err(Error::Invalid(format!(
                        "stretch {index} of a run of {total} steps cut into {} stretches",
                        b.len() - 1
                    )));
                }
                match (&from, index) {
                    (None, 0) => {}
                    (Some(c), _) if c.state.step == b[index] && index > 0 => {}
                    (Some(c), _) => {
                        return Err(Error::Mismatch(format!(
                            "stretch {index} starts at step {}, its checkpoint is at step {}",
                            b[index], c.state.step
                        )));
                    }
                    (None, _) => {
                        return Err(Error::Invalid(format!(
                            "stretch {index} needs the checkpoint it starts from"
                        )));
                    }
                }
                (b[index], b[index + 1], vec![b[index + 1]], from)
            }
        };
        let dropout = trainables.dropout_streams().to_vec();
        // A run draws its masks from the start of each stream, so a model kept between runs
        // (the validator's replays, the bench) draws what a freshly built one would.
        for stream in &dropout {
            stream.seek(0);
        }
        if let Some(c) = &from {
            if c.dropout.len() != dropout.len() {
                return Err(Error::Mismatch(format!(
                    "checkpoint keeps {} dropout positions, the model draws from {} streams",
                    c.dropout.len(),
                    dropout.len()
                )));
            }
            opt.resume(&c.state)?;
            for (stream, &position) in dropout.iter().zip(&c.dropout) {
                stream.seek(position);
            }
        }
        let mut this = StepLoop {
            opt,
            seed,
            examples,
            batch_size,
            order: Vec::new(),
            epoch: 0,
            start: Instant::now(),
            tokens: 0,
            step_losses: Vec::with_capacity(until - first_step),
            pending: Vec::new(),
            partial: 0.0,
            dropout,
            first_step,
            until,
            keep,
            checkpoints: Vec::new(),
        };
        if segment {
            // A stretch keeps where it started as well as where it ended, so a verifier has
            // both ends of the update it compares (stretch 0 starts from the run's start).
            let start = this.checkpoint()?;
            this.checkpoints.push(start);
        }
        // The data order is a function of the seed and how many micro-batches came before.
        for _ in 0..first_step * this.opt.config().grad_accum {
            this.next_batch();
        }
        Ok(this)
    }

    /// Micro-batches to run: optimiser steps times accumulation.
    pub fn micro_batches(&self) -> usize {
        (self.until - self.first_step) * self.opt.config().grad_accum
    }

    /// Example indices of the next micro-batch. A fresh seeded permutation per epoch; leftovers
    /// carry over so no example is skipped. A set smaller than one batch is one batch of all of
    /// it (it used to panic: a shard of 2 records with batch_size 8).
    pub fn next_batch(&mut self) -> Vec<usize> {
        let size = self.batch_size.min(self.examples);
        if self.order.len() < size {
            let permutation = split::permutation(self.examples, self.seed.wrapping_add(self.epoch));
            self.order.extend(permutation);
            self.epoch += 1;
        }
        self.order.drain(..size).collect()
    }

    /// Back-propagates one micro-batch's `loss`, stepping the optimiser once enough micro-batches
    /// are accumulated, and reports progress after each step. A NaN or infinite loss stops
    /// training with an error naming the step.
    pub fn backward(
        &mut self,
        loss: &Tensor,
        batch_tokens: usize,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<()> {
        self.backward_part(loss, batch_tokens, true, progress)
    }

    /// Back-propagates one pass of a micro-batch split to bound memory: `loss` is the pass's
    /// share of the micro-batch's loss (weighted by its share of the learned tokens), so the
    /// passes' gradients sum to the micro-batch's. The micro-batch ends with its `last` pass.
    pub fn backward_part(
        &mut self,
        loss: &Tensor,
        tokens: usize,
        last: bool,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<()> {
        let loss_value: f32 = loss.to_scalar()?;
        if !loss_value.is_finite() {
            return Err(Error::NonFiniteLoss {
                step: self.opt.steps_taken() + 1,
                loss: loss_value,
            });
        }
        self.tokens += tokens;
        let grads = loss.backward()?;
        if !last {
            self.partial += loss_value;
            return self.opt.add(&grads);
        }
        self.pending.push(self.partial + loss_value);
        self.partial = 0.0;
        if let Some(info) = self.opt.accumulate(&grads)? {
            let mean = self.pending.iter().sum::<f32>() / self.pending.len() as f32;
            self.pending.clear();
            self.step_losses.push(mean);
            if self.keep.contains(&(info.step + 1)) {
                let kept = self.checkpoint()?;
                self.checkpoints.push(kept);
            }
            progress(&Progress {
                step: info.step + 1,
                total_steps: self.opt.config().total_steps,
                loss: mean,
                lr: info.lr,
                grad_norm: info.grad_norm,
                tokens_per_sec: self.tokens as f64 / self.start.elapsed().as_secs_f64(),
            });
        }
        Ok(())
    }

    /// Where the run stands now, between two steps.
    fn checkpoint(&self) -> Result<Checkpoint> {
        Ok(Checkpoint {
            state: self.opt.state()?,
            dropout: self.dropout.iter().map(DropoutRng::position).collect(),
        })
    }

    /// Ends the loop and summarises it, with the proof of what it trained.
    pub fn finish(self) -> (LoopSummary, TrainTrace) {
        let steps = self.step_losses.len();
        let tail = (steps / 10).max(1).min(steps.max(1));
        let summary = LoopSummary {
            steps,
            final_loss: self.step_losses.iter().rev().take(tail).sum::<f32>() / tail as f32,
            tokens: self.tokens,
            seconds: self.start.elapsed().as_secs_f64(),
        };
        let trace = TrainTrace {
            total_steps: self.opt.config().total_steps,
            first_step: self.first_step,
            losses: self.step_losses,
            checkpoints: self.checkpoints,
        };
        (summary, trace)
    }
}
