//! AdamW (Loshchilov & Hutter) with PyTorch's update rule, a linear-warmup + cosine learning-rate
//! schedule, clipping by global gradient norm and gradient accumulation — the combination the
//! Hugging Face Trainer uses for LoRA, so hyper-parameters carry over.
//!
//! candle's own `AdamW` has no schedule, clipping or accumulation, so the step is written here
//! over the [`GradStore`] that `Tensor::backward` returns.

use std::collections::BTreeMap;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lora::Trainables;

/// AdamW, schedule, clipping and accumulation settings; defaults follow the HF Trainer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    /// Peak learning rate, reached at the end of warmup.
    pub lr: f64,
    /// Decoupled weight decay, applied to every tensor except biases.
    pub weight_decay: f64,
    /// Decay rate of the first-moment (mean) estimate.
    pub beta1: f64,
    /// Decay rate of the second-moment (uncentred variance) estimate.
    pub beta2: f64,
    /// Added to the square root of the second moment to avoid division by zero.
    pub eps: f64,
    /// Optimiser steps of linear warmup from 0 to `lr` (steps of the whole schedule when the
    /// run has a [`window`](Self::window)).
    pub warmup_steps: usize,
    /// Optimiser steps in the run; without a window the cosine reaches `min_lr_ratio · lr` here.
    pub total_steps: usize,
    /// Floor of the cosine schedule as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// Clip the global gradient norm to this value; `None` disables clipping.
    pub max_grad_norm: Option<f64>,
    /// Micro-batches whose gradients are averaged into one optimiser step.
    pub grad_accum: usize,
    /// Where this run sits in a longer schedule (one round of a federated job); `None` when
    /// the run is the whole schedule.
    #[serde(default)]
    pub window: Option<ScheduleWindow>,
}

/// A run's place in a schedule longer than itself: its step `s` takes the rate of schedule step
/// `offset + s`, and the cosine ends at schedule step `length` (`warmup_steps` counts schedule
/// steps too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleWindow {
    /// Schedule steps before the run's first.
    pub offset: usize,
    /// Steps in the whole schedule.
    pub length: usize,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-4,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            warmup_steps: 0,
            total_steps: 1,
            min_lr_ratio: 0.0,
            max_grad_norm: Some(1.0),
            grad_accum: 1,
            window: None,
        }
    }
}

impl OptimConfig {
    /// Rejects a non-positive lr, betas outside `[0, 1)`, negative weight decay, zero steps or
    /// accumulation, and a non-positive clipping norm.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Invalid(what));
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("lr: {} must be a positive number", self.lr));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return bad(format!(
                "betas: ({}, {}) must lie in [0, 1)",
                self.beta1, self.beta2
            ));
        }
        if self.weight_decay < 0.0 || !self.weight_decay.is_finite() {
            return bad(format!("weight_decay: {} is negative", self.weight_decay));
        }
        if self.total_steps == 0 {
            return bad("total_steps: 0 is below the minimum 1".into());
        }
        if self.grad_accum == 0 {
            return bad("grad_accum: 0 is below the minimum 1".into());
        }
        if let Some(w) = self.window
            && w.offset + self.total_steps > w.length
        {
            return bad(format!(
                "window: steps {}..{} lie past the schedule's {}",
                w.offset,
                w.offset + self.total_steps,
                w.length
            ));
        }
        if let Some(c) = self.max_grad_norm
            && !(c.is_finite() && c > 0.0)
        {
            return bad(format!("max_grad_norm: {c} must be a positive number"));
        }
        Ok(())
    }

    /// Learning rate for optimiser step `step` (0-based) of this run: linear warmup, then cosine
    /// decay, over the run or over the schedule its [`ScheduleWindow`] places it in.
    pub fn lr_at(&self, step: usize) -> f64 {
        let (step, length) = match self.window {
            Some(w) => (w.offset + step, w.length),
            None => (step, self.total_steps),
        };
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = length.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine)
    }
}

/// What one optimiser step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepInfo {
    /// 0-based index of the step just taken.
    pub step: usize,
    /// Learning rate the step used.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
    acc: Option<Tensor>,
    decay: bool,
}

/// Where an [`AdamW`] run stands between two steps: enough to continue it exactly.
#[derive(Debug, Clone, Default)]
pub struct OptimState {
    /// Optimiser steps taken.
    pub step: usize,
    /// Every trainable's value, by PEFT name.
    pub values: BTreeMap<String, Tensor>,
    /// AdamW's first moment of each, by the same names.
    pub first_moments: BTreeMap<String, Tensor>,
    /// AdamW's second moment of each.
    pub second_moments: BTreeMap<String, Tensor>,
}

/// AdamW over a model's [`Trainables`], with gradient accumulation and global-norm clipping.
pub struct AdamW {
    cfg: OptimConfig,
    slots: Vec<Slot>,
    step: usize,
    micro: usize,
}

impl AdamW {
    /// Zeroed moments for every trainable tensor; fails when `cfg` does not validate.
    pub fn new(trainables: &Trainables, cfg: OptimConfig) -> Result<Self> {
        cfg.validate()?;
        let slots = trainables
            .iter()
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    m: var.zeros_like()?,
                    v: var.zeros_like()?,
                    acc: None,
                    // Like the HF Trainer: no weight decay on biases.
                    decay: !name.ends_with(".bias"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg,
            slots,
            step: 0,
            micro: 0,
        })
    }

    /// The settings the optimiser runs with.
    pub fn config(&self) -> &OptimConfig {
        &self.cfg
    }

    /// Optimiser steps taken so far.
    pub fn steps_taken(&self) -> usize {
        self.step
    }

    /// A copy of the state a run resumes from after `steps_taken` steps: every trainable's
    /// value and its first and second moments, by name. Only between steps (no micro-batch
    /// accumulated).
    pub fn state(&self) -> Result<OptimState> {
        if self.micro != 0 || self.slots.iter().any(|s| s.acc.is_some()) {
            return Err(Error::Invalid(
                "optimiser state asked for in the middle of a step".into(),
            ));
        }
        let mut state = OptimState {
            step: self.step,
            ..OptimState::default()
        };
        for slot in &self.slots {
            state
                .values
                .insert(slot.name.clone(), slot.var.as_detached_tensor().copy()?);
            state
                .first_moments
                .insert(slot.name.clone(), slot.m.copy()?);
            state
                .second_moments
                .insert(slot.name.clone(), slot.v.copy()?);
        }
        Ok(state)
    }

    /// Puts the optimiser and its trainables where `state` says a run was after
    /// `state.step` steps. Every trainable must be there, with its shape, and nothing else.
    pub fn resume(&mut self, state: &OptimState) -> Result<()> {
        if state.step > self.cfg.total_steps {
            return Err(Error::Mismatch(format!(
                "checkpoint at step {} of a run of {} steps",
                state.step, self.cfg.total_steps
            )));
        }
        for (what, map) in [
            ("value", &state.values),
            ("first moment", &state.first_moments),
            ("second moment", &state.second_moments),
        ] {
            if map.len() != self.slots.len() {
                return Err(Error::Mismatch(format!(
                    "checkpoint holds {} {what}s, the model trains {} tensors",
                    map.len(),
                    self.slots.len()
                )));
            }
            for slot in &self.slots {
                let t = map.get(&slot.name).ok_or_else(|| {
                    Error::Mismatch(format!("checkpoint lacks the {what} of {}", slot.name))
                })?;
                if t.dims() != slot.var.dims() {
                    return Err(Error::Mismatch(format!(
                        "checkpoint's {what} of {} is {:?}, the model's is {:?}",
                        slot.name,
                        t.dims(),
                        slot.var.dims()
                    )));
                }
            }
        }
        for slot in &mut self.slots {
            let on = |t: &Tensor| -> Result<Tensor> {
                Ok(t.to_dtype(slot.var.dtype())?.to_device(slot.var.device())?)
            };
            slot.var.set(&on(&state.values[&slot.name])?)?;
            slot.m = on(&state.first_moments[&slot.name])?;
            slot.v = on(&state.second_moments[&slot.name])?;
            slot.acc = None;
        }
        self.step = state.step;
        self.micro = 0;
        Ok(())
    }

    /// Adds one micro-batch's gradients. Every `grad_accum`-th call averages what was
    /// accumulated and takes an optimiser step, returning what it did.
    pub fn accumulate(&mut self, grads: &GradStore) -> Result<Option<StepInfo>> {
        self.add(grads)?;
        self.micro += 1;
        if self.micro < self.cfg.grad_accum {
            return Ok(None);
        }
        self.micro = 0;
        self.apply().map(Some)
    }

    /// Adds `grads` to the micro-batch in progress without ending it: the gradients of the
    /// passes one micro-batch is split into, each of whose losses is already weighted by its
    /// share of the micro-batch's tokens.
    pub fn add(&mut self, grads: &GradStore) -> Result<()> {
        for slot in &mut self.slots {
            // A trainable the loss does not reach (e.g. a frozen branch) gets a zero gradient.
            let Some(g) = grads.get(slot.var.as_tensor()) else {
                continue;
            };
            slot.acc = Some(match slot.acc.take() {
                Some(acc) => (acc + g)?,
                None => g.copy()?,
            });
        }
        Ok(())
    }

    fn apply(&mut self) -> Result<StepInfo> {
        let inv_accum = 1.0 / self.cfg.grad_accum as f64;
        let mut grads = Vec::with_capacity(self.slots.len());
        let mut sq_sum = 0f64;
        for slot in &mut self.slots {
            let g = match slot.acc.take() {
                Some(g) => g.affine(inv_accum, 0.0)?,
                None => slot.var.zeros_like()?,
            };
            let sq: f32 = g
                .to_dtype(candle_core::DType::F32)?
                .sqr()?
                .sum_all()?
                .to_scalar()?;
            sq_sum += sq as f64;
            grads.push(g);
        }
        let grad_norm = sq_sum.sqrt();
        if !grad_norm.is_finite() {
            let culprit = self
                .slots
                .iter()
                .zip(&grads)
                .find(|(_, g)| {
                    g.sqr()
                        .and_then(|s| s.sum_all())
                        .and_then(|s| s.to_dtype(candle_core::DType::F32))
                        .and_then(|s| s.to_scalar::<f32>())
                        .map(|v| !v.is_finite())
                        .unwrap_or(true)
                })
                .map(|(s, _)| s.name.clone())
                .unwrap_or_default();
            return Err(Error::Invalid(format!(
                "gradient of {culprit} is not finite at step {}",
                self.step
            )));
        }
        let clip = match self.cfg.max_grad_norm {
            // Same epsilon as torch.nn.utils.clip_grad_norm_.
            Some(max) if grad_norm > max => max / (grad_norm + 1e-6),
            _ => 1.0,
        };
        let lr = self.cfg.lr_at(self.step);
        let t = (self.step + 1) as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (slot, g) in self.slots.iter_mut().zip(grads) {
            let g = if clip < 1.0 { g.affine(clip, 0.0)? } else { g };
            slot.m = ((&slot.m * b1)? + (&g * (1.0 - b1))?)?;
            slot.v = ((&slot.v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let m_hat = (&slot.m / bc1)?;
            let v_hat = (&slot.v / bc2)?;
            let update = (m_hat / (v_hat.sqrt()? + self.cfg.eps)?)?;
            let mut p = slot.var.as_tensor().detach();
            if slot.decay && self.cfg.weight_decay > 0.0 {
                p = (&p * (1.0 - lr * self.cfg.weight_decay))?;
            }
            let p = (p - (update * lr)?)?;
            slot.var.set(&p)?;
        }
        let info = StepInfo {
            step: self.step,
            lr,
            grad_norm,
        };
        self.step += 1;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// Peak 1, four steps of warmup, a cosine to 0.1 at step 14.
    fn warmup_then_cosine() -> OptimConfig {
        OptimConfig {
            lr: 1.0,
            warmup_steps: 4,
            total_steps: 14,
            min_lr_ratio: 0.1,
            ..Default::default()
        }
    }

    #[test]
    fn schedule_warms_up_linearly_then_decays_by_cosine_to_the_floor() {
        let cfg = warmup_then_cosine();
        assert!((cfg.lr_at(0) - 0.25).abs() < 1e-12);
        assert!((cfg.lr_at(3) - 1.0).abs() < 1e-12);
        assert!((cfg.lr_at(4) - 1.0).abs() < 1e-12);
        // Halfway through the decay the cosine is at its midpoint.
        assert!((cfg.lr_at(9) - 0.55).abs() < 1e-12);
        assert!((cfg.lr_at(14) - 0.1).abs() < 1e-12);
        assert!((cfg.lr_at(100) - 0.1).abs() < 1e-12);
    }

    /// A run placed in a longer schedule takes that schedule's rates for its steps: the two
    /// halves of a 14-step schedule, run as two windows of 7, give the whole run's rates.
    #[test]
    fn a_window_takes_its_part_of_the_longer_schedule() {
        let whole = warmup_then_cosine();
        let half = |offset| OptimConfig {
            total_steps: 7,
            window: Some(ScheduleWindow { offset, length: 14 }),
            ..whole.clone()
        };
        let (first, second) = (half(0), half(7));
        first.validate().unwrap();
        second.validate().unwrap();
        for step in 0..7 {
            assert_eq!(first.lr_at(step), whole.lr_at(step));
            assert_eq!(second.lr_at(step), whole.lr_at(7 + step));
        }
        // A window reaching past its schedule is refused, naming the field.
        let past = half(8).validate().unwrap_err().to_string();
        assert!(past.contains("window"), "{past}");
    }

    /// One step on f(x) = sum(x²)/2 with known gradient x, against the AdamW formula by hand.
    #[test]
    fn first_step_matches_pytorch_adamw_by_hand() {
        let dev = Device::Cpu;
        let x = Var::from_vec(vec![1.0f32, -2.0, 3.0], 3, &dev).unwrap();
        let mut t = Trainables::new();
        t.insert("w", x.clone()).unwrap();
        let cfg = OptimConfig {
            lr: 0.1,
            weight_decay: 0.5,
            max_grad_norm: None,
            total_steps: 10,
            ..Default::default()
        };
        let mut opt = AdamW::new(&t, cfg).unwrap();
        let loss = (x.as_tensor().sqr().unwrap().sum_all().unwrap() * 0.5).unwrap();
        let info = opt.accumulate(&loss.backward().unwrap()).unwrap().unwrap();
        assert!((info.grad_norm - 14f64.sqrt()).abs() < 1e-5);
        let got = x.as_tensor().to_vec1::<f32>().unwrap();
        // Step 1: m̂ = g, v̂ = g², update = g/(|g|+eps) = sign(g); p ← p(1 - lr·wd) - lr·sign(g).
        for (p0, p1) in [1.0f32, -2.0, 3.0].iter().zip(got) {
            let want = p0 * (1.0 - 0.1 * 0.5) - 0.1 * p0.signum();
            assert!((p1 - want).abs() < 1e-6, "{p1} vs {want}");
        }
    }

    fn run_linear(cfg: OptimConfig, targets: &[[f32; 2]]) -> (Vec<Option<StepInfo>>, Vec<f32>) {
        let dev = Device::Cpu;
        let x = Var::zeros(2, DType::F32, &dev).unwrap();
        let mut t = Trainables::new();
        t.insert("w", x.clone()).unwrap();
        let mut opt = AdamW::new(&t, cfg).unwrap();
        let mut infos = vec![];
        for target in targets {
            let target = Tensor::new(target, &dev).unwrap();
            // The gradient of -x·target is -target.
            let loss = (x.as_tensor() * &target)
                .unwrap()
                .sum_all()
                .unwrap()
                .neg()
                .unwrap();
            infos.push(opt.accumulate(&loss.backward().unwrap()).unwrap());
        }
        (infos, x.as_tensor().to_vec1::<f32>().unwrap())
    }

    fn plain(lr: f64) -> OptimConfig {
        OptimConfig {
            lr,
            weight_decay: 0.0,
            max_grad_norm: None,
            total_steps: 10,
            beta1: 0.0,
            beta2: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn accumulation_averages_micro_batches_into_one_step() {
        let cfg = OptimConfig {
            grad_accum: 2,
            ..plain(0.1)
        };
        let (infos, _) = run_linear(cfg, &[[1.0, 2.0], [3.0, 6.0]]);
        assert!(infos[0].is_none());
        let info = infos[1].unwrap();
        // Mean gradient is -(2, 4): norm √20.
        assert!((info.grad_norm - 20f64.sqrt()).abs() < 1e-5);
        assert_eq!(info.step, 0);
    }

    #[test]
    fn clipping_scales_the_gradient_to_the_max_global_norm() {
        // A huge eps makes Adam's update proportional to the (clipped) gradient: g / eps.
        let cfg = OptimConfig {
            eps: 1e3,
            max_grad_norm: Some(0.5),
            ..plain(1.0)
        };
        let (infos, p) = run_linear(cfg, &[[3.0, 4.0]]);
        assert!((infos[0].unwrap().grad_norm - 5.0).abs() < 1e-5);
        let step_norm = ((p[0] as f64).powi(2) + (p[1] as f64).powi(2)).sqrt();
        // |clipped g| = 0.5, update = g / (|g| + eps) per coordinate.
        let want = 0.5 / (1e3 + 0.3);
        assert!(
            (step_norm - want).abs() / want < 1e-3,
            "{step_norm} vs {want}"
        );
        assert!((p[1] / p[0] - 4.0 / 3.0).abs() < 1e-3);
    }

    #[test]
    fn non_finite_gradient_is_reported_with_the_tensor_name() {
        let dev = Device::Cpu;
        let x = Var::from_vec(vec![0.0f32], 1, &dev).unwrap();
        let mut t = Trainables::new();
        t.insert("head.weight", x.clone()).unwrap();
        let mut opt = AdamW::new(&t, OptimConfig::default()).unwrap();
        let loss = x.as_tensor().sqrt().unwrap().sum_all().unwrap();
        let err = opt.accumulate(&loss.backward().unwrap()).unwrap_err();
        assert!(err.to_string().contains("head.weight"), "{err}");
    }
}
