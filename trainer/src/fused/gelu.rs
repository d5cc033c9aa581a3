//! GELU (erf form, BERT's `gelu`) with its backward pass.
//!
//! candle's `gelu_erf` calls libm's `erff` per element on one thread, forward and backward:
//! 16% of a MiniLM training step in a `perf` profile. This kernel uses the vectorisable erf of
//! the scoring path ([`crate::inference::erf`], within 3.6e-7 of libm) on every core.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp_nonpositive;
use crate::inference::{CHUNK, contiguous_f32, erf, gelu_erf_scalar};

/// `x · Φ(x)`, differentiable.
pub fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32) {
        return x.gelu_erf();
    }
    x.contiguous()?.apply_op1(Gelu)
}

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-erf"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(CHUNK)
            .zip(xs.par_chunks(CHUNK))
            .for_each(|(out, xs)| {
                for (y, &x) in out.iter_mut().zip(xs) {
                    *y = gelu_erf_scalar(x);
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&grad.contiguous()?, &GeluGrad)?))
    }
}

/// `dy · (Φ(x) + x · φ(x))`.
struct GeluGrad;

impl CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "gelu-erf-grad"
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
            candle_core::bail!("gelu-erf-grad: gradient and input sizes differ");
        }
        // 1 / sqrt(2π)
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(CHUNK)
            .zip(xs.par_chunks(CHUNK))
            .zip(dys.par_chunks(CHUNK))
            .for_each(|((out, xs), dys)| {
                for ((dx, &x), &dy) in out.iter_mut().zip(xs).zip(dys) {
                    let cdf = 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
                    let pdf = INV_SQRT_2PI * exp_nonpositive(-0.5 * x * x);
                    *dx = dy * (cdf + x * pdf);
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
    fn matches_candles_gelu_and_its_gradient() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 3.0, (7, 5001), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (7, 5001), &dev).unwrap();
        let fused = gelu_erf(x.as_tensor()).unwrap();
        let reference = x.as_tensor().gelu_erf().unwrap();
        assert_matches_composed(&fused, &reference, &probe, &[&x], (5e-6, 5e-6), "gelu");
    }
}
