//! Kernels for scoring only: fused, multi-threaded, and without gradients.
//!
//! * this module: layer norm, softmax and GELU for [`crate::bert::BertClassifier::infer`] on
//!   any device;
//! * [`amx`] / [`packed`]: linear layers on Intel AMX tiles at f32 accuracy, and the choice of
//!   kernel ([`ScoringKernel`]);
//! * [`attention`] / [`norm`]: a BERT layer's attention and residual layer norms fused, on
//!   the CPU.
//!
//! Held-out scoring is the validator's whole critical path between a round's last submission
//! and the next round (four forward passes over the held-out set per round: three adapters
//! and their merge). The composed, differentiable ops of [`crate::nn`] make each layer norm and
//! softmax five or six single-threaded passes over memory, and candle's `gelu_erf` calls libm's
//! `erff` per element on one thread (13% of scoring in a `perf` profile). These replacements
//! give the same values to within float rounding (the tests bound the difference) and must
//! never be used where a gradient is needed: they are registered without a backward pass.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::Result;

mod attention;
mod norm;
mod packed;

pub use attention::FusedAttention;
pub use norm::AddLayerNorm;
pub use packed::{PackedLinear, ScoringKernel};

/// Layer norm over the last dimension (candle-nn's fused, row-parallel kernel).
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(candle_nn::ops::layer_norm(
        &x.contiguous()?,
        weight,
        bias,
        eps as f32,
    )?)
}

/// Softmax over the last dimension (candle-nn's fused, row-parallel kernel).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::softmax_last_dim(&x.contiguous()?)?)
}

/// `x·Φ(x)` with the exact (erf) Gaussian CDF, as BERT's `"gelu"`.
pub fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 {
        Ok(x.contiguous()?.apply_op1_no_bwd(&GeluErf)?)
    } else {
        Ok(x.gelu_erf()?)
    }
}

/// The values a CPU kernel reads: `storage` as an f32 slice in `layout`'s contiguous range.
pub(crate) fn contiguous_f32<'a>(
    op: &str,
    storage: &'a CpuStorage,
    layout: &Layout,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(values) = storage else {
        candle_core::bail!("{op}: only f32 input is supported");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: input must be contiguous");
    };
    Ok(&values[start..end])
}

/// Elements per parallel chunk of an element-wise pass, here and in the fused training kernels:
/// large enough that scheduling costs nothing next to the work.
pub(crate) const CHUNK: usize = 1 << 14;

struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "gelu-erf-inference"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = contiguous_f32(self.name(), storage, layout)?;
        let mut dst = vec![0f32; src.len()];
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(out, inp)| {
                for (o, &v) in out.iter_mut().zip(inp) {
                    *o = gelu_erf_scalar(v);
                }
            });
        Ok((CpuStorage::F32(dst), layout.shape().clone()))
    }
}

/// `x·Φ(x)` of one value, through the rational [`erf`].
#[inline(always)]
pub(crate) fn gelu_erf_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Beyond this |x|, erf(x) is within one f32 ulp (6e-8) of ±1.
const ERF_SATURATES: f32 = 3.832_507;

/// `erf(x)` for f32 by a rational approximation (odd degree-13 numerator over an even degree-8
/// denominator), saturating to ±1 where erf is within one ulp of ±1. Absolute error at most 3.6e-7
/// against libm (about three ulp next to ±1; tested): the rational form alone drifts to 4.2e-7
/// just below |x| = 4, hence the saturation. Branch-free (a select), so the loop above
/// vectorises.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let clamped = x.clamp(-ERF_SATURATES, ERF_SATURATES);
    let x2 = clamped * clamped;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329e-3;
    q = q * x2 - 1.426_474e-2;
    let rational = clamped * p / q;
    if x.abs() >= ERF_SATURATES {
        1f32.copysign(x)
    } else {
        rational
    }
}

/// `Σ f(a_i, b_i)` in eight independent lanes: one running sum is a dependency chain the
/// compiler may not reorder, eight are not.
#[inline(always)]
pub(crate) fn lanes(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| f(x, y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += f(x[l], y[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn erf_matches_libm_everywhere() {
        let mut worst = 0f32;
        let mut x = -8.0f32;
        while x < 8.0 {
            worst = worst.max((erf(x) - libm_erf(x)).abs());
            x += 1e-3;
        }
        assert!(worst < 4e-7, "largest error {worst}");
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert!((erf(ERF_SATURATES) - libm_erf(ERF_SATURATES)).abs() <= f32::EPSILON / 2.0);
    }

    /// candle's own erf, which is libm's.
    fn libm_erf(x: f32) -> f32 {
        candle_core::cpu::erf::erf_f32(x)
    }

    #[test]
    fn kernels_match_the_differentiable_ops() {
        let dev = Device::Cpu;
        // More elements than one chunk, and a strided input, to cover the parallel split.
        let x = (Tensor::randn(0f32, 3.0, (3, 7, 1600), &dev).unwrap() - 0.5).unwrap();
        let xt = x.transpose(1, 2).unwrap();
        // GELU's error is |x|/2 times erf's, and erf saturates past |x| = 3.83·√2.
        assert!(max_diff(&gelu_erf(&xt).unwrap(), &xt.gelu_erf().unwrap()) < 2e-6);
        let w = Tensor::randn(1f32, 0.1, 1600, &dev).unwrap();
        let b = Tensor::randn(0f32, 0.1, 1600, &dev).unwrap();
        let fused = layer_norm(&x, &w, &b, 1e-12).unwrap();
        let composed = crate::nn::layer_norm(&x, &w, &b, 1e-12).unwrap();
        assert!(max_diff(&fused, &composed) < 1e-4);
        assert!(
            max_diff(
                &softmax_last(&xt).unwrap(),
                &crate::nn::softmax_last(&xt).unwrap()
            ) < 1e-6
        );
        assert_eq!(
            gelu_erf(&x.to_dtype(DType::F64).unwrap()).unwrap().dtype(),
            DType::F64
        );
    }

    /// The fused attention and residual norm give what candle's ops give, padding included
    /// (a padded key must get no weight; a fully padded row still normalises).
    #[test]
    fn fused_attention_and_norm_match_candle_ops() {
        let dev = Device::Cpu;
        let (b, t, heads, d) = (3, 7, 4, 8);
        let h = heads * d;
        let qkv = Tensor::randn(0f32, 1.0, (b, t, 3 * h), &dev).unwrap();
        let mask: Vec<f32> = [7, 3, 2]
            .iter()
            .flat_map(|&len| (0..t).map(move |i| if i < len { 1.0 } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (b, t), &dev).unwrap();
        let fused = qkv
            .apply_op2_no_bwd(&mask, &FusedAttention { heads })
            .unwrap();
        let part = |i: usize| {
            qkv.narrow(2, i * h, h)
                .unwrap()
                .reshape((b, t, heads, d))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let scores =
            (q.matmul(&k.t().unwrap().contiguous().unwrap()).unwrap() / (d as f64).sqrt()).unwrap();
        let padding = ((&mask - 1.0).unwrap() * 1e4)
            .unwrap()
            .reshape((b, 1, 1, t))
            .unwrap();
        let probs = crate::nn::softmax_last(&scores.broadcast_add(&padding).unwrap()).unwrap();
        let composed = probs
            .matmul(&v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((b, t, h))
            .unwrap();
        assert!(max_diff(&fused, &composed) < 1e-5);

        let x = Tensor::randn(0f32, 2.0, (b, t, h), &dev).unwrap();
        let residual = Tensor::randn(0.5f32, 1.0, (b, t, h), &dev).unwrap();
        let w = Tensor::randn(1f32, 0.1, h, &dev).unwrap();
        let bias = Tensor::randn(0f32, 0.1, h, &dev).unwrap();
        let op = AddLayerNorm {
            weight: w.to_vec1().unwrap(),
            bias: bias.to_vec1().unwrap(),
            eps: 1e-12,
        };
        let fused = x.apply_op2_no_bwd(&residual, &op).unwrap();
        let composed = crate::nn::layer_norm(&(&x + &residual).unwrap(), &w, &bias, 1e-12).unwrap();
        assert!(max_diff(&fused, &composed) < 1e-4);
    }
}
