//! Differentiable building blocks.
//!
//! candle-nn's fused `ops::layer_norm`, `ops::rms_norm` and `ops::softmax_last_dim` (and
//! `LayerNorm::forward` on contiguous input, which calls the fused op) are registered with
//! `apply_op*_no_bwd`: gradients silently stop at them. A LoRA layer below a frozen norm would
//! then never learn. Training code must use these versions instead: [`crate::fused`]'s kernels,
//! which have backward passes, or candle's composed ops where those do not apply.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use crate::error::Result;

/// `x (m, k) · wᵀ` for a frozen `w (n, k)`, whose backward computes only the input gradient.
///
/// candle's `matmul` backward always computes both operands' gradients, so a frozen base
/// weight would cost a full weight-gradient matmul per layer per step (a third of training
/// compute) for a gradient nobody reads. On devices other than the CPU this falls back to the
/// plain matmul.
pub fn frozen_matmul_t(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == w.dtype() {
        Ok(x.apply_op2(w, FrozenMatmulT)?)
    } else {
        Ok(x.matmul(&w.t()?)?)
    }
}

struct FrozenMatmulT;

impl CustomOp2 for FrozenMatmulT {
    fn name(&self) -> &'static str {
        "frozen-matmul-t"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("frozen-matmul-t: x has {k} columns, w has {k2}");
        }
        let out = x.matmul(w, (1, m, n, k), xl, &wl.transpose(0, 1)?)?;
        Ok((out, Shape::from((m, n))))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.matmul(w)?), None))
    }
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dimension (fused on the CPU:
/// [`crate::fused::norm`]).
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(crate::fused::norm::layer_norm(x, weight, bias, eps)?)
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dimension (fused on the CPU).
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(crate::fused::norm::rms_norm(x, weight, eps)?)
}

/// Softmax over the last dimension (fused on the CPU: [`crate::fused::softmax`]).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    Ok(crate::fused::softmax::softmax_last(x)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn frozen_matmul_matches_matmul_and_passes_only_the_input_gradient() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (5, 3), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (4, 3), &dev).unwrap();
        let y = frozen_matmul_t(x.as_tensor(), &w).unwrap();
        let want = x.as_tensor().matmul(&w.t().unwrap()).unwrap();
        let d: f32 = (&y - &want)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(d < 1e-6);
        let g = y.sum_all().unwrap().backward().unwrap();
        let g2 = want.sum_all().unwrap().backward().unwrap();
        let (gx, gx2) = (
            g.get(x.as_tensor()).unwrap(),
            g2.get(x.as_tensor()).unwrap(),
        );
        let d: f32 = (gx - gx2)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(d < 1e-6);
        assert!(g.get(&w).is_none());
    }

    #[test]
    fn gradients_flow_through_norms_and_softmax() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (2, 4), &dev).unwrap();
        let w = Tensor::ones(4, candle_core::DType::F32, &dev).unwrap();
        let b = Tensor::zeros(4, candle_core::DType::F32, &dev).unwrap();
        let probe = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &dev).unwrap();
        for y in [
            layer_norm(x.as_tensor(), &w, &b, 1e-5).unwrap(),
            rms_norm(x.as_tensor(), &w, 1e-5).unwrap(),
            softmax_last(x.as_tensor()).unwrap(),
        ] {
            let loss = y.broadcast_mul(&probe).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            let g = grads
                .get(x.as_tensor())
                .expect("gradient reaches the input");
            let n: f32 = g.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert!(n > 0.0);
        }
    }
}
