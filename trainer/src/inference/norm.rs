//! Residual add and layer norm in one pass, for scoring.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};
use rayon::prelude::*;

use super::{contiguous_f32, lanes};

/// Layer norm of `x + residual` over the last dimension, one row per task slice.
pub struct AddLayerNorm {
    /// Layer norm scale (gamma), one per feature.
    pub weight: Vec<f32>,
    /// Layer norm shift (beta), one per feature.
    pub bias: Vec<f32>,
    /// Added to the variance before the square root.
    pub eps: f32,
}

impl CustomOp2 for AddLayerNorm {
    fn name(&self) -> &'static str {
        "add-layer-norm"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        residual: &CpuStorage,
        r_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(self.name(), x, x_layout)?;
        let r = contiguous_f32(self.name(), residual, r_layout)?;
        if x_layout.shape() != r_layout.shape() {
            candle_core::bail!(
                "add-layer-norm: {:?} and {:?} differ",
                x_layout.shape(),
                r_layout.shape()
            );
        }
        let n = self.weight.len();
        if x_layout.shape().dims().last() != Some(&n) {
            candle_core::bail!("add-layer-norm: rows are not {n} wide");
        }
        let mut out = vec![0f32; x.len()];
        const ROWS: usize = 16;
        out.par_chunks_mut(ROWS * n)
            .zip(x.par_chunks(ROWS * n))
            .zip(r.par_chunks(ROWS * n))
            .for_each(|((out, x), r)| {
                for ((o, x), r) in out.chunks_mut(n).zip(x.chunks(n)).zip(r.chunks(n)) {
                    for ((o, x), r) in o.iter_mut().zip(x).zip(r) {
                        *o = x + r;
                    }
                    let mean = lanes(o, o, |v, _| v) / n as f32;
                    let var = lanes(o, o, |v, _| (v - mean) * (v - mean)) / n as f32;
                    let inv = 1.0 / (var + self.eps).sqrt();
                    for ((o, w), b) in o.iter_mut().zip(&self.weight).zip(&self.bias) {
                        *o = (*o - mean) * inv * w + b;
                    }
                }
            });
        Ok((CpuStorage::F32(out), x_layout.shape().clone()))
    }
}
