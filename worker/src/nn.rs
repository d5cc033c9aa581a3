//! Differentiable building blocks.
//!
//! candle-nn's fused `ops::layer_norm`, `ops::rms_norm` and `ops::softmax_last_dim` (and
//! `LayerNorm::forward` on contiguous input, which calls the fused op) are registered with
//! `apply_op*_no_bwd`: gradients silently stop at them. A LoRA layer below a frozen norm would
//! then never learn. Training code must use these composed versions instead.

use candle_core::{D, Tensor};

use crate::error::Result;

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dimension.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(candle_nn::ops::layer_norm_slow(x, weight, bias, eps as f32)?)
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dimension.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(candle_nn::ops::rms_norm_slow(x, weight, eps as f32)?)
}

/// Softmax over the last dimension.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::softmax(x, D::Minus1)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

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
            let g = grads.get(x.as_tensor()).expect("gradient reaches the input");
            let n: f32 = g.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert!(n > 0.0);
        }
    }
}
