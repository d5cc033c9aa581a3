//! BERT self-attention for scoring, fused: from the packed `[q | k | v]` projections straight to
//! the context in `(batch, token, hidden)` order.
//!
//! Through candle the same step is twelve tensor ops per layer: three head transposes and
//! copies, a key transpose, two batched matmuls of `batch × heads` tiny products (each a gemm
//! dispatch), a scale, a mask add, a softmax and a transpose back, every one a fresh allocation.
//! With sequences of at most a few hundred tokens and 32-wide heads there is little arithmetic
//! in it; what cost the time was the traffic. Here each batch row is one task that reads its
//! `q`, `k`, `v` in place and writes its context rows once.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};
use rayon::prelude::*;

use super::{contiguous_f32, lanes};

/// `softmax(q·kᵀ/√d + (mask − 1)·10⁴)·v` per head, as Hugging Face's BERT computes it.
pub struct FusedAttention {
    /// Number of attention heads the hidden width is split into.
    pub heads: usize,
}

impl CustomOp2 for FusedAttention {
    fn name(&self) -> &'static str {
        "fused-attention"
    }

    /// `qkv`: `(b, t, 3h)` f32, contiguous; `mask`: `(b, t)` f32, 1 for tokens, 0 for padding.
    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        qkv_layout: &Layout,
        mask: &CpuStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let qkv = contiguous_f32(self.name(), qkv, qkv_layout)?;
        let mask = contiguous_f32(self.name(), mask, mask_layout)?;
        let (b, t, three_h) = qkv_layout.shape().dims3()?;
        if three_h % 3 != 0 || (three_h / 3) % self.heads != 0 {
            candle_core::bail!(
                "fused-attention: {three_h} features are not q, k and v of {} heads",
                self.heads
            );
        }
        if mask_layout.shape().dims() != [b, t] {
            candle_core::bail!(
                "fused-attention: mask {:?} does not match ({b}, {t})",
                mask_layout.shape().dims()
            );
        }
        let h = three_h / 3;
        let out = attend(qkv, mask, b, t, h, self.heads);
        Ok((CpuStorage::F32(out), Shape::from((b, t, h))))
    }
}

fn attend(qkv: &[f32], mask: &[f32], b: usize, t: usize, h: usize, heads: usize) -> Vec<f32> {
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; b * t * h];
    out.par_chunks_mut(t * h)
        .zip(qkv.par_chunks(t * 3 * h))
        .zip(mask.par_chunks(t))
        .for_each(|((out, qkv), mask)| {
            let bias: Vec<f32> = mask.iter().map(|m| (m - 1.0) * 1e4).collect();
            let mut probs = vec![0f32; t];
            for head in 0..heads {
                let (q_at, k_at, v_at) = (head * d, h + head * d, 2 * h + head * d);
                for s in 0..t {
                    let q = &qkv[s * 3 * h + q_at..][..d];
                    let mut max = f32::NEG_INFINITY;
                    for (u, p) in probs.iter_mut().enumerate() {
                        let k = &qkv[u * 3 * h + k_at..][..d];
                        *p = dot(q, k) * scale + bias[u];
                        max = max.max(*p);
                    }
                    let mut sum = 0f32;
                    for p in probs.iter_mut() {
                        *p = (*p - max).exp();
                        sum += *p;
                    }
                    let context = &mut out[s * h + head * d..][..d];
                    for (u, p) in probs.iter().enumerate() {
                        let v = &qkv[u * 3 * h + v_at..][..d];
                        let w = p / sum;
                        for (c, &x) in context.iter_mut().zip(v) {
                            *c += w * x;
                        }
                    }
                }
            }
        });
    out
}

/// A dot product in eight independent lanes, so it vectorises.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| x * y)
}
