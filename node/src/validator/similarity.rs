//! How alike two LoRA updates are, measured without forming `ΔW`: the validator's copy and
//! replay rules.
//!
//! A submission is compared by what it *added* in its round: `d = ΔW − ΔW_start` over all
//! modules (`ΔW_start` = 0 in round 1). A resubmitted starting adapter adds nothing (`‖d‖ = 0`);
//! a copied submission adds what the original added (`cos(d, d_orig) = 1`). Honest workers of one
//! round start from the same adapter and the same seeded initialisation and learn one task, so
//! their additions point roughly the same way, but never the same way: the threshold
//! [`COPY_COSINE`] sits above what honest pairs reach (measured figures in its doc).
//!
//! Inner products stay factored: `⟨s·B₁A₁, t·B₂A₂⟩_F = s·t·Σ (B₁ᵀB₂) ∘ (A₁A₂ᵀ)`, two r×r products
//! per module instead of two out×in matrices.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};
use shardwork_trainer::peft::Adapter;

use crate::NodeError;

/// Cosine between two submissions' additions at or above which the later one is a copy.
/// Honest submissions measured on the demo's jobs stay well below it (the highest cosine each had
/// with an earlier one of its round: chat SFT of SmolLM2 0.38-0.58, the sample classifier
/// 0.49-0.62; docs/decisions/0026), while a copy with 2% noise on every tensor scores 0.9996
/// (SmolLM2) and 0.9999 (sample classifier).
pub const COPY_COSINE: f64 = 0.95;

/// An addition smaller than this share of the round's starting update is no training at all
/// (a resubmitted start, give or take rounding or a whiff of noise).
pub const MIN_ADDITION_SHARE: f64 = 1e-3;

/// One adapter's update, per module, as the factors `(s·B, A)` of `ΔW = s·B·A`.
pub struct Update {
    modules: BTreeMap<String, (Tensor, Tensor)>,
}

fn trainer(e: candle_core::Error) -> NodeError {
    shardwork_trainer::Error::from(e).into()
}

impl Update {
    /// The update of `adapter` (its LoRA pairs scaled by `lora_alpha / r`), in f64: a resubmitted
    /// start is told from an honest addition by `‖x‖² − 2⟨x, s⟩ + ‖s‖²`, a difference of nearly
    /// equal sums that f32 would drown in rounding.
    pub fn of(adapter: &Adapter) -> Result<Update, NodeError> {
        let scale = adapter.config.lora_alpha / adapter.config.r.max(1) as f64;
        let mut modules = BTreeMap::new();
        for (name, pair) in adapter.lora_pairs()? {
            let b = pair
                .b
                .to_dtype(DType::F64)
                .and_then(|b| b.affine(scale, 0.0))
                .map_err(trainer)?;
            let a = pair.a.to_dtype(DType::F64).map_err(trainer)?;
            modules.insert(name, (b, a));
        }
        Ok(Update { modules })
    }

    /// `⟨ΔW_self, ΔW_other⟩_F` summed over the modules both adapt.
    pub fn inner(&self, other: &Update) -> Result<f64, NodeError> {
        let mut sum = 0.0;
        for (name, (b1, a1)) in &self.modules {
            let Some((b2, a2)) = other.modules.get(name) else {
                continue;
            };
            let bb = b1.t().and_then(|t| t.matmul(b2)).map_err(trainer)?;
            let aa = a1.matmul(&a2.t().map_err(trainer)?).map_err(trainer)?;
            let v: f64 = (bb * aa)
                .and_then(|p| p.sum_all())
                .and_then(|s| s.to_scalar())
                .map_err(trainer)?;
            sum += v;
        }
        Ok(sum)
    }
}

/// Gram products of the updates a verdict compares: the submission, the round's start and the
/// earlier submissions, each computed once.
pub struct Additions {
    /// `⟨start, start⟩` (0 in round 1).
    start_sq: f64,
    /// `⟨x, start⟩` for the submission and each earlier one.
    with_start: Vec<f64>,
    /// `⟨x, x⟩` likewise.
    self_sq: Vec<f64>,
    /// `⟨submission, earlier_k⟩`.
    with_submission: Vec<f64>,
}

/// What the submission added, against the start and against each earlier submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// `‖d‖_F`: the norm of what the submission added to the round's start.
    pub addition_norm: f64,
    /// `‖ΔW_start‖_F` (0 in round 1).
    pub start_norm: f64,
    /// Per earlier submission, `cos(d, d_k)` (NaN when either added nothing).
    pub cosines: Vec<f64>,
    /// Per earlier submission, `‖d‖ / ‖d_k‖`.
    pub norm_ratios: Vec<f64>,
}

impl Additions {
    /// The products for `submission` against `start` (none in round 1) and `earlier`.
    pub fn measure(
        submission: &Update,
        start: Option<&Update>,
        earlier: &[&Update],
    ) -> Result<Additions, NodeError> {
        let with = |x: &Update| -> Result<f64, NodeError> {
            match start {
                Some(s) => x.inner(s),
                None => Ok(0.0),
            }
        };
        let start_sq = match start {
            Some(s) => s.inner(s)?,
            None => 0.0,
        };
        let mut with_start = vec![with(submission)?];
        let mut self_sq = vec![submission.inner(submission)?];
        let mut with_submission = Vec::with_capacity(earlier.len());
        for e in earlier {
            with_start.push(with(e)?);
            self_sq.push(e.inner(e)?);
            with_submission.push(submission.inner(e)?);
        }
        Ok(Additions {
            start_sq,
            with_start,
            self_sq,
            with_submission,
        })
    }

    /// `‖x − start‖²` for update `i` (0: the submission; k + 1: earlier submission k).
    fn addition_sq(&self, i: usize) -> f64 {
        (self.self_sq[i] - 2.0 * self.with_start[i] + self.start_sq).max(0.0)
    }

    /// The norms and cosines of the additions.
    pub fn compare(&self) -> Comparison {
        let own = self.addition_sq(0);
        let mut cosines = Vec::with_capacity(self.with_submission.len());
        let mut norm_ratios = Vec::with_capacity(self.with_submission.len());
        for (k, cross) in self.with_submission.iter().enumerate() {
            let theirs = self.addition_sq(k + 1);
            // ⟨x − s, y − s⟩ = ⟨x, y⟩ − ⟨x, s⟩ − ⟨y, s⟩ + ⟨s, s⟩
            let dot = cross - self.with_start[0] - self.with_start[k + 1] + self.start_sq;
            let denominator = (own * theirs).sqrt();
            cosines.push(if denominator > 0.0 {
                (dot / denominator).clamp(-1.0, 1.0)
            } else {
                f64::NAN
            });
            norm_ratios.push(if theirs > 0.0 {
                (own / theirs).sqrt()
            } else {
                f64::INFINITY
            });
        }
        Comparison {
            addition_norm: own.sqrt(),
            start_norm: self.start_sq.sqrt(),
            cosines,
            norm_ratios,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use shardwork_trainer::peft::AdapterConfig;

    /// A `rows x cols` tensor of values in [-1, 1) drawn from `seed` (candle's CPU generator
    /// cannot be seeded).
    fn values(seed: &mut u64, rows: usize, cols: usize) -> Tensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    fn adapter(seed: u64, scale_b: f64) -> Adapter {
        let mut seed = seed;
        let mut tensors = BTreeMap::new();
        for (module, out, inp) in [("q", 6, 5), ("v", 4, 5)] {
            let a = values(&mut seed, 2, inp);
            let b = (values(&mut seed, out, 2) * scale_b).unwrap();
            tensors.insert(format!("m.{module}.lora_A.weight"), a);
            tensors.insert(format!("m.{module}.lora_B.weight"), b);
        }
        let config: AdapterConfig = serde_json::from_value(serde_json::json!({
            "peft_type": "LORA", "r": 2, "lora_alpha": 4.0, "target_modules": ["q", "v"]
        }))
        .unwrap();
        Adapter { config, tensors }
    }

    /// `ΔW` of every module, dense, flattened end to end.
    fn dense(a: &Adapter) -> Vec<f32> {
        let scale = (a.config.lora_alpha / a.config.r as f64) as f32;
        let mut out = Vec::new();
        for pair in a.lora_pairs().unwrap().values() {
            let d = pair.b.matmul(&pair.a).unwrap();
            out.extend(
                d.flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v * scale),
            );
        }
        out
    }

    fn dot(x: &[f32], y: &[f32]) -> f64 {
        x.iter().zip(y).map(|(a, b)| f64::from(a * b)).sum()
    }

    #[test]
    fn factored_products_equal_the_dense_ones() {
        let (x, y) = (adapter(1, 1.0), adapter(2, 0.5));
        let got = Update::of(&x)
            .unwrap()
            .inner(&Update::of(&y).unwrap())
            .unwrap();
        let want = dot(&dense(&x), &dense(&y));
        assert!(
            (got - want).abs() < 1e-4 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }

    #[test]
    fn additions_are_measured_from_the_round_start() {
        let (start, own, other) = (adapter(1, 1.0), adapter(2, 1.0), adapter(3, 1.0));
        let (s, x, y) = (
            Update::of(&start).unwrap(),
            Update::of(&own).unwrap(),
            Update::of(&other).unwrap(),
        );
        let c = Additions::measure(&x, Some(&s), &[&y, &x, &s])
            .unwrap()
            .compare();
        let (ds, dx, dy) = (dense(&start), dense(&own), dense(&other));
        let sub =
            |p: &[f32], q: &[f32]| -> Vec<f32> { p.iter().zip(q).map(|(a, b)| a - b).collect() };
        let (ax, ay) = (sub(&dx, &ds), sub(&dy, &ds));
        let want_cos = dot(&ax, &ay) / (dot(&ax, &ax) * dot(&ay, &ay)).sqrt();
        assert!(
            (c.addition_norm - dot(&ax, &ax).sqrt()).abs() < 1e-3,
            "{c:?}"
        );
        assert!((c.start_norm - dot(&ds, &ds).sqrt()).abs() < 1e-3, "{c:?}");
        assert!(
            (c.cosines[0] - want_cos).abs() < 1e-4,
            "{c:?} vs {want_cos}"
        );
        // A copy of itself: cosine 1, same norm. The start itself added nothing.
        assert!((c.cosines[1] - 1.0).abs() < 1e-6 && (c.norm_ratios[1] - 1.0).abs() < 1e-6);
        assert!(c.cosines[2].is_nan() && c.norm_ratios[2].is_infinite());
    }

    #[test]
    fn a_resubmitted_start_adds_nothing() {
        let start = Update::of(&adapter(1, 1.0)).unwrap();
        let again = Update::of(&adapter(1, 1.0)).unwrap();
        let c = Additions::measure(&again, Some(&start), &[])
            .unwrap()
            .compare();
        assert!(
            c.addition_norm <= MIN_ADDITION_SHARE * c.start_norm,
            "{c:?}"
        );
    }
}
