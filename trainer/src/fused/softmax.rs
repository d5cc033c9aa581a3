//! Softmax over the last dimension with its backward pass.
//!
//! Composed (max, subtract, exp, sum, divide) it was five single-threaded passes over the
//! attention scores, four of them kept for the backward pass; here one row-parallel pass, and
//! the backward needs only the output: `dx = y ⊙ (dy − Σ dy ⊙ y)`.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, D, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp_nonpositive;
use crate::inference::contiguous_f32;

/// Rows handed to one rayon task.
const ROWS_PER_TASK: usize = 32;

/// Softmax over the last dimension of `x`, differentiable.
pub fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32) {
        return candle_nn::ops::softmax(x, D::Minus1);
    }
    x.contiguous()?.apply_op1(Softmax)
}

struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        let d = layout.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(xs.par_chunks(d * ROWS_PER_TASK))
            .for_each(|(out, xs)| {
                for (y, x) in out.chunks_exact_mut(d).zip(xs.chunks_exact(d)) {
                    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0f32;
                    for (y, &x) in y.iter_mut().zip(x) {
                        *y = exp_nonpositive(x - max);
                        sum += *y;
                    }
                    let inv = 1.0 / sum;
                    y.iter_mut().for_each(|y| *y *= inv);
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(
            res.contiguous()?
                .apply_op2_no_bwd(&grad.contiguous()?, &SoftmaxGrad)?,
        ))
    }
}

struct SoftmaxGrad;

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "softmax-grad"
    }

    fn cpu_fwd(
        &self,
        y: &CpuStorage,
        y_layout: &Layout,
        dy: &CpuStorage,
        dy_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let ys = contiguous_f32(self.name(), y, y_layout)?;
        let dys = contiguous_f32(self.name(), dy, dy_layout)?;
        if ys.len() != dys.len() {
            candle_core::bail!("softmax-grad: gradient and output sizes differ");
        }
        let d = y_layout.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut out = vec![0f32; ys.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(ys.par_chunks(d * ROWS_PER_TASK))
            .zip(dys.par_chunks(d * ROWS_PER_TASK))
            .for_each(|((out, ys), dys)| {
                for ((dx, y), dy) in out
                    .chunks_exact_mut(d)
                    .zip(ys.chunks_exact(d))
                    .zip(dys.chunks_exact(d))
                {
                    let dot: f32 = y.iter().zip(dy).map(|(&y, &g)| y * g).sum();
                    for ((dx, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
                        *dx = y * (g - dot);
                    }
                }
            });
        Ok((CpuStorage::F32(out), y_layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use crate::fused::assert_matches_composed;

    #[test]
    fn matches_candles_softmax_and_its_gradient() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 3.0, (2, 3, 5, 17), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (2, 3, 5, 17), &dev).unwrap();
        let fused = softmax_last(x.as_tensor()).unwrap();
        let reference = candle_nn::ops::softmax(x.as_tensor(), D::Minus1).unwrap();
        assert_matches_composed(&fused, &reference, &probe, &[&x], (1e-6, 1e-5), "softmax");
    }
}
