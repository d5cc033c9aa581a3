//! RMSNorm (Llama family) and layer norm (BERT family) with frozen weights, over the last
//! dimension.
//!
//! Composed from candle ops each was six or more passes (square, mean, add, sqrt, divide,
//! scale, ...), most of them keeping a tensor of the input's size alive for the backward pass;
//! here the forward keeps only `x` and the backward recomputes each row's statistics. LoRA never
//! trains a norm's weight, so no gradient is computed for it; a weight that is a variable (a
//! norm someone chose to train) takes the composed path, which gives it one.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, D, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::inference::contiguous_f32;

/// Rows handed to one rayon task: enough work per task to amortise the scheduling.
const ROWS_PER_TASK: usize = 16;

/// `x / sqrt(mean(x²) + eps) · weight` over the last dimension of `x`; differentiable in `x`
/// only (`weight` is treated as frozen).
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    if weight.dims() != [d] {
        candle_core::bail!(
            "rms-norm: weight {:?} does not match the last dimension {d}",
            weight.dims()
        );
    }
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32) || weight.is_variable() {
        return composed(x, weight, eps);
    }
    let weight: Vec<f32> = weight.to_dtype(candle_core::DType::F32)?.to_vec1()?;
    x.contiguous()?.apply_op1(RmsNorm {
        weight,
        eps: eps as f32,
    })
}

/// The same function from differentiable candle ops: the fallback off the CPU and the tests'
/// reference.
pub fn composed(x: &Tensor, weight: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(mean_sq + eps)?.sqrt()?)?
        .broadcast_mul(weight)
}

struct RmsNorm {
    weight: Vec<f32>,
    eps: f32,
}

/// `1 / sqrt(mean(row²) + eps)`, accumulated in f64 so long rows lose nothing to rounding.
fn inverse_rms(row: &[f32], eps: f32) -> f32 {
    let sum: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    (1.0 / (sum / row.len() as f64 + f64::from(eps)).sqrt()) as f32
}

impl CustomOp1 for RmsNorm {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        let d = self.weight.len();
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(xs.par_chunks(d * ROWS_PER_TASK))
            .for_each(|(out, xs)| {
                for (y, x) in out.chunks_exact_mut(d).zip(xs.chunks_exact(d)) {
                    let r = inverse_rms(x, self.eps);
                    for ((y, &x), &w) in y.iter_mut().zip(x).zip(&self.weight) {
                        *y = x * r * w;
                    }
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let grad = grad.contiguous()?;
        let dx = x.apply_op2_no_bwd(
            &grad,
            &RmsNormGrad {
                weight: self.weight.clone(),
                eps: self.eps,
            },
        )?;
        Ok(Some(dx))
    }
}

/// `dx = r · (g − x · r² · mean(g ⊙ x))` with `g = dy ⊙ w` and `r` the row's inverse RMS.
struct RmsNormGrad {
    weight: Vec<f32>,
    eps: f32,
}

impl CustomOp2 for RmsNormGrad {
    fn name(&self) -> &'static str {
        "rms-norm-grad"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        dy: &CpuStorage,
        dy_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, x_layout)?;
        let dys = contiguous_f32(self.name(), dy, dy_layout)?;
        if xs.len() != dys.len() {
            candle_core::bail!("rms-norm-grad: gradient and input sizes differ");
        }
        let d = self.weight.len();
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(xs.par_chunks(d * ROWS_PER_TASK))
            .zip(dys.par_chunks(d * ROWS_PER_TASK))
            .for_each(|((out, xs), dys)| {
                for ((dx, x), dy) in out
                    .chunks_exact_mut(d)
                    .zip(xs.chunks_exact(d))
                    .zip(dys.chunks_exact(d))
                {
                    let r = inverse_rms(x, self.eps);
                    let dot: f64 = x
                        .iter()
                        .zip(dy)
                        .zip(&self.weight)
                        .map(|((&x, &dy), &w)| f64::from(dy * w) * f64::from(x))
                        .sum();
                    let correction = (dot / d as f64) as f32 * r * r;
                    for (((dx, &x), &dy), &w) in dx.iter_mut().zip(x).zip(dy).zip(&self.weight) {
                        *dx = r * (dy * w - x * correction);
                    }
                }
            });
        Ok((CpuStorage::F32(out), x_layout.shape().clone()))
    }
}

/// `(x − mean) / sqrt(var + eps) · weight + bias` over the last dimension of `x` (biased
/// variance, as BERT's LayerNorm); differentiable in `x` only unless a weight is a variable.
pub fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    if weight.dims() != [d] || bias.dims() != [d] {
        candle_core::bail!(
            "layer-norm: weight {:?} / bias {:?} do not match the last dimension {d}",
            weight.dims(),
            bias.dims()
        );
    }
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32)
        || weight.is_variable()
        || bias.is_variable()
    {
        return candle_nn::ops::layer_norm_slow(x, weight, bias, eps as f32);
    }
    x.contiguous()?.apply_op1(LayerNorm {
        weight: weight.to_dtype(candle_core::DType::F32)?.to_vec1()?,
        bias: bias.to_dtype(candle_core::DType::F32)?.to_vec1()?,
        eps: eps as f32,
    })
}

/// A row's mean and `1 / sqrt(var + eps)`, accumulated in f64.
fn mean_inverse_std(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean as f32, (1.0 / (var + f64::from(eps)).sqrt()) as f32)
}

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl CustomOp1 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        let d = self.weight.len();
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(xs.par_chunks(d * ROWS_PER_TASK))
            .for_each(|(out, xs)| {
                for (y, x) in out.chunks_exact_mut(d).zip(xs.chunks_exact(d)) {
                    let (mean, r) = mean_inverse_std(x, self.eps);
                    for (((y, &x), &w), &b) in y.iter_mut().zip(x).zip(&self.weight).zip(&self.bias)
                    {
                        *y = (x - mean) * r * w + b;
                    }
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dx = x.apply_op2_no_bwd(
            &grad.contiguous()?,
            &LayerNormGrad {
                weight: self.weight.clone(),
                eps: self.eps,
            },
        )?;
        Ok(Some(dx))
    }
}

/// `dx = r · (g − mean(g) − x̂ · mean(g ⊙ x̂))` with `g = dy ⊙ w`, `x̂` the normalised row and
/// `r` its inverse standard deviation.
struct LayerNormGrad {
    weight: Vec<f32>,
    eps: f32,
}

impl CustomOp2 for LayerNormGrad {
    fn name(&self) -> &'static str {
        "layer-norm-grad"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        dy: &CpuStorage,
        dy_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, x_layout)?;
        let dys = contiguous_f32(self.name(), dy, dy_layout)?;
        if xs.len() != dys.len() {
            candle_core::bail!("layer-norm-grad: gradient and input sizes differ");
        }
        let d = self.weight.len();
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(xs.par_chunks(d * ROWS_PER_TASK))
            .zip(dys.par_chunks(d * ROWS_PER_TASK))
            .for_each(|((out, xs), dys)| {
                for ((dx, x), dy) in out
                    .chunks_exact_mut(d)
                    .zip(xs.chunks_exact(d))
                    .zip(dys.chunks_exact(d))
                {
                    let (mean, r) = mean_inverse_std(x, self.eps);
                    let (mut sum_g, mut sum_gx) = (0f64, 0f64);
                    for ((&x, &dy), &w) in x.iter().zip(dy).zip(&self.weight) {
                        let g = f64::from(dy * w);
                        sum_g += g;
                        sum_gx += g * f64::from((x - mean) * r);
                    }
                    let (mean_g, mean_gx) = ((sum_g / d as f64) as f32, (sum_gx / d as f64) as f32);
                    for (((dx, &x), &dy), &w) in dx.iter_mut().zip(x).zip(dy).zip(&self.weight) {
                        *dx = r * (dy * w - mean_g - (x - mean) * r * mean_gx);
                    }
                }
            });
        Ok((CpuStorage::F32(out), x_layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use crate::fused::assert_matches_composed;

    #[test]
    fn matches_the_composed_norm_and_its_input_gradient() {
        let dev = Device::Cpu;
        for shape in [(3usize, 5usize, 8usize), (2, 1, 576), (1, 33, 7)] {
            let x = Var::randn(0f32, 1.5, shape, &dev).unwrap();
            let w = Tensor::randn(1f32, 0.2, shape.2, &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
            let fused = rms_norm(x.as_tensor(), &w, 1e-5).unwrap();
            let reference = composed(x.as_tensor(), &w, 1e-5).unwrap();
            let what = format!("{shape:?}");
            assert_matches_composed(&fused, &reference, &probe, &[&x], (1e-5, 1e-4), &what);
        }
    }

    #[test]
    fn layer_norm_matches_the_composed_norm_and_its_input_gradient() {
        let dev = Device::Cpu;
        for shape in [(3usize, 5usize, 8usize), (2, 1, 384)] {
            let x = Var::randn(0.5f32, 1.5, shape, &dev).unwrap();
            let w = Tensor::randn(1f32, 0.2, shape.2, &dev).unwrap();
            let b = Tensor::randn(0f32, 0.2, shape.2, &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
            let fused = layer_norm(x.as_tensor(), &w, &b, 1e-12).unwrap();
            let reference = candle_nn::ops::layer_norm_slow(x.as_tensor(), &w, &b, 1e-12).unwrap();
            let what = format!("{shape:?}");
            assert_matches_composed(&fused, &reference, &probe, &[&x], (1e-5, 1e-4), &what);
        }
    }

    #[test]
    fn a_trained_norm_weight_still_gets_its_gradient() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (2, 4), &dev).unwrap();
        let w = Var::ones(4, candle_core::DType::F32, &dev).unwrap();
        let grads = rms_norm(&x, w.as_tensor(), 1e-5)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(grads.get(w.as_tensor()).is_some());
    }

    #[test]
    fn a_weight_of_the_wrong_width_is_an_error() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 4), candle_core::DType::F32, &dev).unwrap();
        let w = Tensor::ones(5, candle_core::DType::F32, &dev).unwrap();
        let err = rms_norm(&x, &w, 1e-5).unwrap_err().to_string();
        assert!(err.contains("rms-norm"), "{err}");
    }
}
