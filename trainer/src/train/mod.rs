//! Training loops.

pub mod classify;
pub mod dpo;
pub mod sft;
pub mod sft_data;
mod step_loop;
pub mod trace;

use serde::Serialize;

/// One heartbeat of a training run, emitted after every optimiser step.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Progress {
    /// Optimiser steps done (1-based).
    pub step: usize,
    /// Optimiser steps in the run.
    pub total_steps: usize,
    /// Mean loss of this step's micro-batches.
    pub loss: f32,
    /// Learning rate of this step.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Real (non-padding) tokens per second since the run started.
    pub tokens_per_sec: f64,
}
