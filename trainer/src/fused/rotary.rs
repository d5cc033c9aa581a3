//! Rotary position embeddings in Hugging Face's `rotate_half` layout, on `(batch, seq, heads,
//! head_dim)` tensors: the layout a projection's output reshapes to without a copy.
//!
//! Composed (narrow, negate, concatenate, two products and a sum on `(batch, heads, seq, dim)`
//! after a transposing copy) it kept four tensors of the input's size alive per use for the
//! backward pass. A rotation's gradient is the inverse rotation, so the backward pass needs
//! nothing but the angles.

use candle_core::{CpuStorage, CustomOp1, D, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::inference::contiguous_f32;

/// Rotates `x (batch, seq, heads, dim)` at positions `0..seq` by the angles whose cosines and
/// sines are `cos`, `sin` `(seq, dim / 2)`: with `x = [x1 | x2]`, the result is
/// `[x1·cos − x2·sin | x2·cos + x1·sin]`.
pub fn rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (_, t, _, d) = x.dims4()?;
    if d % 2 != 0 || cos.dims() != [t, d / 2] || sin.dims() != [t, d / 2] {
        candle_core::bail!(
            "rotary: tables {:?} / {:?} do not fit (seq {t}, dim {d})",
            cos.dims(),
            sin.dims()
        );
    }
    if !(x.device().is_cpu() && x.dtype() == candle_core::DType::F32) {
        return composed(x, cos, sin);
    }
    x.contiguous()?.apply_op1(Rotary {
        cos: cos.flatten_all()?.to_vec1()?,
        sin: sin.flatten_all()?.to_vec1()?,
        inverse: false,
    })
}

/// The same rotation from differentiable candle ops: the fallback off the CPU and the tests'
/// reference.
pub fn composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    // (seq, dim) tables with each half repeated, broadcast over batch and heads.
    let cos = Tensor::cat(&[cos, cos], D::Minus1)?.unsqueeze(1)?;
    let sin = Tensor::cat(&[sin, sin], D::Minus1)?.unsqueeze(1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(&cos)? + rotated.broadcast_mul(&sin)?
}

struct Rotary {
    /// `(seq, dim / 2)`, row-major.
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Rotate by the negated angles: the backward pass of the forward rotation.
    inverse: bool,
}

impl CustomOp1 for Rotary {
    fn name(&self) -> &'static str {
        "rotary"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        let (_, t, heads, d) = layout.shape().dims4()?;
        let half = d / 2;
        let sign = if self.inverse { -1.0 } else { 1.0 };
        let mut out = vec![0f32; xs.len()];
        // One task per (batch, position): its heads share the position's angles.
        out.par_chunks_mut(heads * d)
            .zip(xs.par_chunks(heads * d))
            .enumerate()
            .for_each(|(row, (out, xs))| {
                let pos = row % t;
                let cos = &self.cos[pos * half..][..half];
                let sin = &self.sin[pos * half..][..half];
                for (y, x) in out.chunks_exact_mut(d).zip(xs.chunks_exact(d)) {
                    let (x1, x2) = x.split_at(half);
                    let (y1, y2) = y.split_at_mut(half);
                    for i in 0..half {
                        let s = sign * sin[i];
                        y1[i] = x1[i] * cos[i] - x2[i] * s;
                        y2[i] = x2[i] * cos[i] + x1[i] * s;
                    }
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let inverse = Rotary {
            cos: self.cos.clone(),
            sin: self.sin.clone(),
            inverse: !self.inverse,
        };
        Ok(Some(grad.contiguous()?.apply_op1(inverse)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use crate::fused::assert_matches_composed;

    #[test]
    fn matches_the_composed_rotation_and_its_gradient() {
        let dev = Device::Cpu;
        let (b, t, h, d) = (2usize, 5usize, 3usize, 8usize);
        let angles = Tensor::randn(0f32, 2.0, (t, d / 2), &dev).unwrap();
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        let x = Var::randn(0f32, 1.0, (b, t, h, d), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (b, t, h, d), &dev).unwrap();
        let fused = rotary(x.as_tensor(), &cos, &sin).unwrap();
        let reference = composed(x.as_tensor(), &cos, &sin).unwrap();
        assert_matches_composed(&fused, &reference, &probe, &[&x], (1e-5, 1e-5), "rotary");
    }

    #[test]
    fn tables_that_do_not_fit_are_an_error() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((1, 4, 2, 8), candle_core::DType::F32, &dev).unwrap();
        let table = Tensor::zeros((3, 4), candle_core::DType::F32, &dev).unwrap();
        assert!(
            rotary(&x, &table, &table)
                .unwrap_err()
                .to_string()
                .contains("rotary")
        );
    }
}
