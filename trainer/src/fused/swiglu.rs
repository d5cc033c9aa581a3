//! SwiGLU's gating, `silu(gate) · up`, element-wise, as one op.
//!
//! Composed it kept `silu(gate)` for the backward pass beside `gate` and `up` (a tensor of the
//! MLP's width, 1,536 floats per token per layer in SmolLM2) and ran as two single-threaded
//! passes; here it keeps only its inputs and recomputes the sigmoid in the backward pass.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp_nonpositive;
use crate::inference::{CHUNK, contiguous_f32};

/// `silu(gate) · up`, differentiable in both.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    if gate.dims() != up.dims() {
        candle_core::bail!(
            "swiglu: gate {:?} and up {:?} differ in shape",
            gate.dims(),
            up.dims()
        );
    }
    if !(gate.device().is_cpu()
        && gate.dtype() == candle_core::DType::F32
        && up.dtype() == candle_core::DType::F32)
    {
        return composed(gate, up);
    }
    gate.contiguous()?.apply_op2(&up.contiguous()?, SwiGlu)
}

/// The same function from differentiable candle ops: the fallback off the CPU and the tests'
/// reference.
pub fn composed(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    candle_nn::ops::silu(gate)? * up
}

/// The logistic function from one [`exp_nonpositive`] of `−|x|`: `1 / (1 + e)` for `x ≥ 0` and
/// `e / (1 + e)` below, so neither side overflows and the loops vectorise (libm's `expf`, one
/// call per element, was 2.3% of a SmolLM2 training step on an AVX-512 Xeon).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 { r } else { e * r }
}

struct SwiGlu;

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "swiglu"
    }

    fn cpu_fwd(
        &self,
        gate: &CpuStorage,
        gate_layout: &Layout,
        up: &CpuStorage,
        up_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let gs = contiguous_f32(self.name(), gate, gate_layout)?;
        let us = contiguous_f32(self.name(), up, up_layout)?;
        let mut out = vec![0f32; gs.len()];
        out.par_chunks_mut(CHUNK)
            .zip(gs.par_chunks(CHUNK))
            .zip(us.par_chunks(CHUNK))
            .for_each(|((out, gs), us)| {
                for ((y, &g), &u) in out.iter_mut().zip(gs).zip(us) {
                    *y = g * sigmoid(g) * u;
                }
            });
        Ok((CpuStorage::F32(out), gate_layout.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        // One pass writes both gradients, stacked: (2, ...) then split by views.
        let both = gate.apply_op3_no_bwd(up, &grad.contiguous()?, &SwiGluGrad)?;
        Ok((Some(both.get(0)?), Some(both.get(1)?)))
    }
}

/// `[dy · up · silu'(gate), dy · silu(gate)]`, stacked on a new leading dimension.
struct SwiGluGrad;

impl CustomOp3 for SwiGluGrad {
    fn name(&self) -> &'static str {
        "swiglu-grad"
    }

    fn cpu_fwd(
        &self,
        gate: &CpuStorage,
        gate_layout: &Layout,
        up: &CpuStorage,
        up_layout: &Layout,
        dy: &CpuStorage,
        dy_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let gs = contiguous_f32(self.name(), gate, gate_layout)?;
        let us = contiguous_f32(self.name(), up, up_layout)?;
        let dys = contiguous_f32(self.name(), dy, dy_layout)?;
        if us.len() != gs.len() || dys.len() != gs.len() {
            candle_core::bail!("swiglu-grad: gate, up and gradient sizes differ");
        }
        let n = gs.len();
        let mut out = vec![0f32; 2 * n];
        let (dgate, dup) = out.split_at_mut(n);
        dgate
            .par_chunks_mut(CHUNK)
            .zip(dup.par_chunks_mut(CHUNK))
            .zip(gs.par_chunks(CHUNK))
            .zip(us.par_chunks(CHUNK))
            .zip(dys.par_chunks(CHUNK))
            .for_each(|((((dgate, dup), gs), us), dys)| {
                for ((((dg, du), &g), &u), &dy) in dgate
                    .iter_mut()
                    .zip(dup.iter_mut())
                    .zip(gs)
                    .zip(us)
                    .zip(dys)
                {
                    let s = sigmoid(g);
                    *du = dy * g * s;
                    *dg = dy * u * s * (1.0 + g * (1.0 - s));
                }
            });
        let mut dims = vec![2];
        dims.extend_from_slice(gate_layout.shape().dims());
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use crate::fused::assert_matches_composed;

    #[test]
    fn matches_the_composed_gate_and_both_gradients() {
        let dev = Device::Cpu;
        for shape in [(3usize, 7usize), (40_000, 1)] {
            let g = Var::randn(0f32, 3.0, shape, &dev).unwrap();
            let u = Var::randn(0f32, 1.0, shape, &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
            let fused = swiglu(g.as_tensor(), u.as_tensor()).unwrap();
            let reference = composed(g.as_tensor(), u.as_tensor()).unwrap();
            let what = format!("{shape:?}");
            assert_matches_composed(&fused, &reference, &probe, &[&g, &u], (1e-5, 1e-4), &what);
        }
    }

    #[test]
    fn sigmoid_matches_libm_and_saturates_without_overflow() {
        let reference = |x: f32| 1.0 / (1.0 + f64::from(-x).exp());
        // Down to −80, where e⁻⁸⁰ is still a normal f32 (below −87.3 it flushes to 0).
        let mut x = -80.0f32;
        while x <= 80.0 {
            let (got, want) = (f64::from(sigmoid(x)), reference(x));
            assert!(
                (got - want).abs() <= 4.0 * f64::from(f32::EPSILON) * want,
                "sigmoid({x}) = {got}, want {want}"
            );
            x += 0.37;
        }
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert!(sigmoid(f32::NAN).is_nan());
    }

    #[test]
    fn inputs_of_different_shapes_are_an_error() {
        let dev = Device::Cpu;
        let g = Tensor::zeros((2, 4), candle_core::DType::F32, &dev).unwrap();
        let u = Tensor::zeros((2, 5), candle_core::DType::F32, &dev).unwrap();
        assert!(swiglu(&g, &u).unwrap_err().to_string().contains("swiglu"));
    }
}
