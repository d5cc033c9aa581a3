//! Proof of training: a run keeps the optimiser's state where it crosses from one stretch of
//! its steps into the next ([`Checkpoint`]) and the loss of every step ([`TrainTrace`]); a
//! verifier trains any one stretch again from the state at its start ([`Span::Segment`]) and
//! compares where it ends ([`Divergence`]). Training is deterministic given its start, data
//! order and dropout positions, so an honest stretch replays to rounding, and a worker that
//! skipped a stretch's work cannot say where it would have ended.
//!
//! The file is safetensors: `trace.losses` (f32, one per step run), `trace.steps` (i64:
//! the run's first step and its total), and per checkpoint `j`: `checkpoint.j.step` (i64),
//! `checkpoint.j.dropout` (i64 stream positions), and `checkpoint.j.value.NAME`,
//! `checkpoint.j.m.NAME`, `checkpoint.j.v.NAME` for every trainable tensor.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};
use crate::optim::OptimState;

/// Where a run stood after `state.step` optimiser steps: enough to continue it exactly.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The optimiser's step count, the trainables' values and their moments.
    pub state: OptimState,
    /// Positions of the model's dropout streams ([`crate::lora::Trainables::dropout_streams`]).
    pub dropout: Vec<u64>,
}

/// Which steps of a run to train, and which states to keep.
#[derive(Debug, Clone)]
pub enum Span {
    /// The whole run, keeping the state at each boundary between `segments` equal stretches
    /// (not at the end: the end is the adapter).
    Whole {
        /// Stretches the run is cut into (1: keep nothing).
        segments: usize,
    },
    /// Stretch `index` of `segments` only, from `from` (its state at the stretch's first step;
    /// `None` for stretch 0, which starts where the run starts), keeping the state at its start
    /// and at its end.
    Segment {
        /// Which stretch, from 0.
        index: usize,
        /// Stretches the run is cut into.
        segments: usize,
        /// The state the stretch starts from (stretch 1 on).
        from: Option<Box<Checkpoint>>,
    },
}

impl Span {
    /// The whole run, keeping nothing.
    pub fn whole() -> Span {
        Span::Whole { segments: 1 }
    }
}

/// The steps at which a run of `total` steps cut into `segments` stretches crosses from one
/// into the next, with 0 first and `total` last: `min(segments, total)` stretches of `total /
/// segments` steps, give or take one.
pub fn boundaries(total: usize, segments: usize) -> Vec<usize> {
    let k = segments.clamp(1, total.max(1));
    (0..=k).map(|i| i * total / k).collect()
}

/// What a run (or one stretch of it) leaves as its proof.
#[derive(Debug, Clone, Default)]
pub struct TrainTrace {
    /// Steps the whole run takes.
    pub total_steps: usize,
    /// Steps taken before the first one traced here.
    pub first_step: usize,
    /// The loss of each step run, from step `first_step + 1` on.
    pub losses: Vec<f32>,
    /// The states kept, in step order.
    pub checkpoints: Vec<Checkpoint>,
}

/// Checkpoints a trace file may hold: far more than [`boundaries`] ever asks for, few enough
/// that a hostile file cannot make the reader allocate without bound.
const MAX_CHECKPOINTS: usize = 64;

fn bad(path: &Path, detail: impl Into<String>) -> Error {
    Error::Safetensors {
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

fn as_i64s(t: &Tensor) -> Result<Vec<i64>> {
    Ok(t.flatten_all()?.to_vec1::<i64>()?)
}

impl TrainTrace {
    /// The kept state at step `step`, if any.
    pub fn at(&self, step: usize) -> Option<&Checkpoint> {
        self.checkpoints.iter().find(|c| c.state.step == step)
    }

    /// The losses of steps `from + 1 ..= until`, when the trace holds them all.
    pub fn losses_of(&self, from: usize, until: usize) -> Option<&[f32]> {
        let start = from.checked_sub(self.first_step)?;
        let end = until.checked_sub(self.first_step)?;
        self.losses.get(start..end)
    }

    /// Writes the trace to `path` as safetensors (tensors moved to the CPU).
    pub fn save(&self, path: &Path) -> Result<()> {
        let cpu = Device::Cpu;
        let int = |v: Vec<i64>| Tensor::new(v, &cpu);
        let mut named: HashMap<String, Tensor> = HashMap::new();
        named.insert(
            "trace.losses".into(),
            Tensor::new(self.losses.as_slice(), &cpu)?,
        );
        named.insert(
            "trace.steps".into(),
            int(vec![self.first_step as i64, self.total_steps as i64])?,
        );
        for (j, c) in self.checkpoints.iter().enumerate() {
            named.insert(
                format!("checkpoint.{j}.step"),
                int(vec![c.state.step as i64])?,
            );
            named.insert(
                format!("checkpoint.{j}.dropout"),
                int(c.dropout.iter().map(|&p| p as i64).collect())?,
            );
            for (kind, map) in [
                ("value", &c.state.values),
                ("m", &c.state.first_moments),
                ("v", &c.state.second_moments),
            ] {
                for (name, t) in map {
                    named.insert(
                        format!("checkpoint.{j}.{kind}.{name}"),
                        t.to_device(&cpu)?.to_dtype(DType::F32)?,
                    );
                }
            }
        }
        candle_core::safetensors::save(&named, path).map_err(|e| bad(path, e.to_string()))
    }

    /// Reads a trace written by [`TrainTrace::save`], tensors on `device`. The file comes from
    /// a worker: anything out of shape is an error naming what, never a panic.
    pub fn load(path: &Path, device: &Device) -> Result<TrainTrace> {
        let mut raw = crate::safetensors_file::load(path, device)?;
        let mut take = |name: &str| {
            raw.remove(name)
                .ok_or_else(|| bad(path, format!("no tensor {name}")))
        };
        let losses = take("trace.losses")?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let steps = as_i64s(&take("trace.steps")?)?;
        let [first, total] = steps[..] else {
            return Err(bad(path, "trace.steps must hold [first step, total steps]"));
        };
        let (Ok(first_step), Ok(total_steps)) = (usize::try_from(first), usize::try_from(total))
        else {
            return Err(bad(path, "trace.steps holds a negative step"));
        };
        let mut checkpoints: BTreeMap<usize, Checkpoint> = BTreeMap::new();
        for (name, tensor) in raw {
            let rest = name
                .strip_prefix("checkpoint.")
                .ok_or_else(|| bad(path, format!("unexpected tensor {name}")))?;
            let (index, field) = rest
                .split_once('.')
                .ok_or_else(|| bad(path, format!("unexpected tensor {name}")))?;
            let index: usize = index
                .parse()
                .ok()
                .filter(|&i| i < MAX_CHECKPOINTS)
                .ok_or_else(|| bad(path, format!("{name}: bad checkpoint index")))?;
            let c = checkpoints.entry(index).or_insert_with(|| Checkpoint {
                state: OptimState {
                    step: usize::MAX,
                    ..OptimState::default()
                },
                dropout: Vec::new(),
            });
            match field {
                "step" => match as_i64s(&tensor)?[..] {
                    [s] if s >= 0 => c.state.step = s as usize,
                    _ => return Err(bad(path, format!("{name} must hold one step"))),
                },
                "dropout" => {
                    c.dropout = as_i64s(&tensor)?
                        .into_iter()
                        .map(|p| u64::try_from(p).map_err(|_| bad(path, format!("{name} < 0"))))
                        .collect::<Result<_>>()?
                }
                _ => {
                    let (kind, trainable) = field
                        .split_once('.')
                        .ok_or_else(|| bad(path, format!("unexpected tensor {name}")))?;
                    let map = match kind {
                        "value" => &mut c.state.values,
                        "m" => &mut c.state.first_moments,
                        "v" => &mut c.state.second_moments,
                        _ => return Err(bad(path, format!("unexpected tensor {name}"))),
                    };
                    map.insert(trainable.to_owned(), tensor.to_dtype(DType::F32)?);
                }
            }
        }
        let checkpoints: Vec<Checkpoint> = checkpoints.into_values().collect();
        if checkpoints.iter().any(|c| c.state.step == usize::MAX) {
            return Err(bad(path, "a checkpoint has no step"));
        }
        if checkpoints
            .windows(2)
            .any(|w| w[0].state.step >= w[1].state.step)
        {
            return Err(bad(path, "checkpoints are not in step order"));
        }
        Ok(TrainTrace {
            total_steps,
            first_step,
            losses,
            checkpoints,
        })
    }
}

/// How the end of a replayed stretch compares with the end the trace claims, both measured
/// from the stretch's start: the update `claimed − start` against `replayed − start` over
/// every trainable, flattened into one vector.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Divergence {
    /// `cos(claimed update, replayed update)`; NaN when either is zero.
    pub cosine: f64,
    /// `‖claimed update‖ / ‖replayed update‖`.
    pub norm_ratio: f64,
}

impl Divergence {
    /// Compares `claimed` and `replayed` (trainable values by name) as updates of `start`.
    /// The three must name the same tensors with the same shapes.
    pub fn measure(
        start: &BTreeMap<String, Tensor>,
        claimed: &BTreeMap<String, Tensor>,
        replayed: &BTreeMap<String, Tensor>,
    ) -> Result<Divergence> {
        let (mut dot, mut claimed_sq, mut replayed_sq) = (0f64, 0f64, 0f64);
        for (name, s) in start {
            fn get<'a>(
                map: &'a BTreeMap<String, Tensor>,
                whose: &str,
                name: &str,
                shape: &[usize],
            ) -> Result<&'a Tensor> {
                map.get(name).filter(|t| t.dims() == shape).ok_or_else(|| {
                    Error::Mismatch(format!("the {whose} state lacks {name} as {shape:?}"))
                })
            }
            let flat = |t: &Tensor| -> Result<Vec<f32>> {
                Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
            };
            let c = flat(get(claimed, "claimed", name, s.dims())?)?;
            let r = flat(get(replayed, "replayed", name, s.dims())?)?;
            let s = flat(s)?;
            for ((s, c), r) in s.iter().zip(&c).zip(&r) {
                let (dc, dr) = (f64::from(c - s), f64::from(r - s));
                dot += dc * dr;
                claimed_sq += dc * dc;
                replayed_sq += dr * dr;
            }
        }
        if claimed.len() != start.len() || replayed.len() != start.len() {
            return Err(Error::Mismatch(format!(
                "states of {} and {} tensors compared with a start of {}",
                claimed.len(),
                replayed.len(),
                start.len()
            )));
        }
        Ok(Divergence {
            cosine: dot / (claimed_sq.sqrt() * replayed_sq.sqrt()),
            norm_ratio: claimed_sq.sqrt() / replayed_sq.sqrt(),
        })
    }
}

/// The largest gap between two loss traces of the same steps, relative to the replayed loss
/// (infinite when their lengths differ or a loss is not finite).
pub fn loss_gap(claimed: &[f32], replayed: &[f32]) -> f64 {
    if claimed.len() != replayed.len() {
        return f64::INFINITY;
    }
    claimed
        .iter()
        .zip(replayed)
        .map(|(&c, &r)| {
            let gap = (f64::from(c) - f64::from(r)).abs() / f64::from(r).abs().max(1e-6);
            if gap.is_finite() { gap } else { f64::INFINITY }
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_cut_a_run_into_near_equal_stretches() {
        assert_eq!(boundaries(10, 4), vec![0, 2, 5, 7, 10]);
        assert_eq!(boundaries(8, 4), vec![0, 2, 4, 6, 8]);
        // Fewer steps than stretches: one stretch a step.
        assert_eq!(boundaries(3, 4), vec![0, 1, 2, 3]);
        assert_eq!(boundaries(5, 1), vec![0, 5]);
        assert_eq!(boundaries(0, 4), vec![0, 0]);
    }

    #[test]
    fn loss_gap_is_relative_and_refuses_other_lengths_and_nan() {
        assert!((loss_gap(&[1.01, 2.0], &[1.0, 2.0]) - 0.01).abs() < 1e-6);
        assert_eq!(loss_gap(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(loss_gap(&[f32::NAN], &[1.0]), f64::INFINITY);
    }

    #[test]
    fn a_trace_survives_its_file_and_a_bad_file_is_named() {
        let dev = Device::Cpu;
        let t = |v: &[f32]| Tensor::new(v, &dev).unwrap();
        let state = OptimState {
            step: 3,
            values: [("a".to_owned(), t(&[1.0, 2.0]))].into(),
            first_moments: [("a".to_owned(), t(&[0.1, 0.2]))].into(),
            second_moments: [("a".to_owned(), t(&[0.01, 0.02]))].into(),
        };
        let trace = TrainTrace {
            total_steps: 8,
            first_step: 0,
            losses: vec![3.0, 2.5, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5],
            checkpoints: vec![Checkpoint {
                state,
                dropout: vec![7, 1 << 40],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.safetensors");
        trace.save(&path).unwrap();
        let back = TrainTrace::load(&path, &dev).unwrap();
        assert_eq!((back.total_steps, back.first_step), (8, 0));
        assert_eq!(back.losses, trace.losses);
        assert_eq!(back.losses_of(2, 5).unwrap(), &[2.0, 1.9, 1.8]);
        assert!(back.losses_of(6, 9).is_none());
        let c = back.at(3).unwrap();
        assert_eq!(c.dropout, vec![7, 1 << 40]);
        assert_eq!(
            c.state.second_moments["a"].to_vec1::<f32>().unwrap(),
            vec![0.01, 0.02]
        );
        std::fs::write(&path, b"not a trace").unwrap();
        let err = TrainTrace::load(&path, &dev).unwrap_err().to_string();
        assert!(err.contains("trace.safetensors"), "{err}");
    }

    #[test]
    fn divergence_compares_updates_not_values() {
        let dev = Device::Cpu;
        let map = |v: &[f32]| -> BTreeMap<String, Tensor> {
            [("w".to_owned(), Tensor::new(v, &dev).unwrap())].into()
        };
        let start = map(&[1.0, 1.0]);
        let same = Divergence::measure(&start, &map(&[2.0, 1.0]), &map(&[2.0, 1.0])).unwrap();
        assert!((same.cosine - 1.0).abs() < 1e-12 && (same.norm_ratio - 1.0).abs() < 1e-12);
        let other = Divergence::measure(&start, &map(&[1.0, 3.0]), &map(&[2.0, 1.0])).unwrap();
        assert!(other.cosine.abs() < 1e-12);
        assert!((other.norm_ratio - 2.0).abs() < 1e-12);
        assert!(Divergence::measure(&start, &map(&[1.0]), &map(&[2.0, 1.0])).is_err());
    }
}
