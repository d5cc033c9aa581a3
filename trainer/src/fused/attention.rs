//! Grouped-query self-attention for training, with its backward pass, as one candle op: causal
//! for the decoders, or over the unpadded keys of each batch row, with dropout on the
//! probabilities, for the encoders.
//!
//! It replaces the composite the forward passes used to build from tensor ops: repeat the
//! key/value heads (or transpose every head into place), `q·kᵀ`, scale, add a causal or padding
//! mask, softmax, dropout, `·v`. For the backward pass candle kept every intermediate of that
//! chain alive per layer: the scores, the mask-added scores, several softmax intermediates and
//! the dropout's output, each `b·hq·t²` floats, next to the repeated or transposed keys and
//! values, and each of those graph nodes cost the backward pass a zeroed gradient buffer and an
//! add. Most of the steps were also single-threaded passes over memory, and a small encoder's
//! attention (MiniLM: 12 heads of 32 over 32 tokens) was a string of tiny ops dominated by their
//! overhead. Here the graph keeps only `q`, `k` and `v`; the backward pass recomputes the
//! probabilities (and the dropout mask, a pure function of its stream position) per (batch,
//! head) from them, flash-attention style, and both passes run head-parallel with gemm products
//! over strided views, so no head is ever transposed or copied.
//!
//! Results are bit-for-bit reproducible whatever the thread scheduling: every output element is
//! written by exactly one task, which visits its contributions in a fixed order (the trainer
//! checks that a seed gives bit-identical adapters).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, D, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::dropout::DropoutDraw;
use super::exp::exp_nonpositive;
use super::matmul::{Mat, Shared, product, product_into};
use super::{f32s, split_gradients, with_f32s};

const NAME: &str = "fused-attention";
const BWD_NAME: &str = "fused-attention-backward";

/// Query rows per step. With a causal mask each step multiplies its rows by the keys up to its
/// last row only, so the fully masked part of the score matrix right of each block is never
/// computed (at t = 512, 56% of the full t × t products, against 50% for an exact triangle),
/// while blocks stay tall enough for gemm's kernels: 32 was 15% slower overall, 128 no faster.
const BLOCK: usize = 64;

/// q: (b, t, hq, d), k: (b, t, hkv, d), v: (b, t, hkv, d); hq a multiple of hkv; query head h reads kv head h / (hq / hkv).
/// Returns (b, t, hq, d): out[b,i,h,:] = Σ_{j≤i} softmax_j(scale · q[b,i,h]·k[b,j,g]) · v[b,j,g], g = h / (hq/hkv).
///
/// The `(b, t, heads, d)` layout is what a projection's output reshapes to without a copy, and
/// the result reshapes to `(b, t, hq·d)` the same way. On the CPU with f32 inputs this is one
/// fused op whose graph node keeps only `q`, `k` and `v`; elsewhere, or for other dtypes, it is
/// the composite of candle ops it replaces, with the same results up to float rounding.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> candle_core::Result<Tensor> {
    Dims::of(q.dims(), k.dims(), v.dims())?;
    if fused_here(q, k, v) {
        let spec = Spec {
            scale,
            keys: Keys::Causal,
            dropout: None,
        };
        return fused(q, k, v, spec);
    }
    causal_composite(q, k, v, scale)
}

/// [`causal_attention`] for queries that continue `past` positions whose keys and values come
/// first in `k` and `v`: q: (b, t, hq, d), k and v: (b, past + t, hkv, d); query `i` attends to
/// keys `j ≤ past + i`. For scoring and generation after a cache (a shared prompt computed
/// once, or the tokens decoded so far): forward only, the op has no backward pass.
pub fn causal_attention_after(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let dims = Dims::of_keys(q.dims(), k.dims(), v.dims())?;
    if fused_here(q, k, v) {
        let spec = Spec {
            scale,
            keys: Keys::Causal,
            dropout: None,
        };
        return q.contiguous()?.apply_op3_no_bwd(
            &k.contiguous()?,
            &v.contiguous()?,
            &FusedAttention { spec },
        );
    }
    let past = dims.tk - dims.t;
    let mask: Vec<f32> = (0..dims.t)
        .flat_map(|i| (0..dims.tk).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let mask = Tensor::from_vec(mask, (dims.t, dims.tk), q.device())?.to_dtype(q.dtype())?;
    composite_attention(q, k, v, scale, &mask, None)
}

/// [`causal_attention`] composed of candle ops, with a −∞ mask above the diagonal.
fn causal_composite(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let t = Dims::of(q.dims(), k.dims(), v.dims())?.t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let mask = Tensor::from_vec(mask, (t, t), q.device())?.to_dtype(q.dtype())?;
    composite_attention(q, k, v, scale, &mask, None)
}

/// Bidirectional attention over a padded batch, an encoder's: query `i` of batch row `b` attends
/// to every key `j` with `token_mask[b, j] = 1`, and the probabilities pass through `dropout`
/// (inverted, drawn over them in `(b, hq, t, t)` order) before they weigh the values. Shapes as
/// for [`causal_attention`]; `token_mask`: `(b, t)`, 1 for a token and 0 for padding.
///
/// The composite it replaces adds Hugging Face's extended mask, `(m − 1)·10⁴`, to the scores;
/// the kernel gives padded keys exactly zero weight, which is what that mask's `e^(−10⁴)` is in
/// f32. A batch row with no token at all attends to every key, as under that mask.
pub fn padded_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    token_mask: &Tensor,
    dropout: Option<DropoutDraw>,
) -> candle_core::Result<Tensor> {
    let dims = Dims::of(q.dims(), k.dims(), v.dims())?;
    if token_mask.dims() != [dims.b, dims.t] {
        candle_core::bail!(
            "{NAME}: the token mask {:?} is not (batch, tokens) = {:?}",
            token_mask.dims(),
            [dims.b, dims.t]
        );
    }
    if fused_here(q, k, v) {
        let flags = token_mask
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        if let Some(bad) = flags.iter().find(|&&m| m != 0.0 && m != 1.0) {
            candle_core::bail!("{NAME}: the token mask holds {bad}; it must be 0 or 1");
        }
        let mut live: Vec<bool> = flags.iter().map(|&m| m == 1.0).collect();
        for row in live.chunks_mut(dims.t.max(1)) {
            if !row.contains(&true) {
                row.fill(true);
            }
        }
        let spec = Spec {
            scale,
            keys: Keys::Unpadded(live.into()),
            dropout,
        };
        return fused(q, k, v, spec);
    }
    padded_composite(q, k, v, scale, token_mask, dropout)
}

/// [`padded_attention`] composed of candle ops, with Hugging Face's extended mask.
fn padded_composite(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    token_mask: &Tensor,
    dropout: Option<DropoutDraw>,
) -> candle_core::Result<Tensor> {
    let (b, t) = token_mask.dims2()?;
    let mask = ((token_mask.to_dtype(q.dtype())? - 1.0)? * 1e4)?.reshape((b, 1, 1, t))?;
    composite_attention(q, k, v, scale, &mask, dropout)
}

/// Whether the fused kernel serves these inputs: f32 on the CPU.
fn fused_here(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    [q, k, v]
        .iter()
        .all(|x| x.dtype() == DType::F32 && x.device().is_cpu())
}

fn fused(q: &Tensor, k: &Tensor, v: &Tensor, spec: Spec) -> candle_core::Result<Tensor> {
    q.contiguous()?
        .apply_op3(&k.contiguous()?, &v.contiguous()?, FusedAttention { spec })
}

/// The tensor-op composite the fused op replaces, in the same `(b, t, heads, d)` layout, with
/// an additive mask that broadcasts over `(b, hq, t, t)`: the fallback off the CPU and for other
/// dtypes, and the tests' reference.
fn composite_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: &Tensor,
    dropout: Option<DropoutDraw>,
) -> candle_core::Result<Tensor> {
    let dims = Dims::of_keys(q.dims(), k.dims(), v.dims())?;
    let Dims {
        b, tk, hq, hkv, d, ..
    } = dims;
    let heads_first = |x: &Tensor| x.transpose(1, 2)?.contiguous();
    let repeat_kv = |x: &Tensor| -> candle_core::Result<Tensor> {
        let x = heads_first(x)?;
        if hq == hkv {
            return Ok(x);
        }
        x.unsqueeze(2)?
            .broadcast_as((b, hkv, dims.group(), tk, d))?
            .reshape((b, hq, tk, d))
    };
    let (q, k, v) = (heads_first(q)?, repeat_kv(k)?, repeat_kv(v)?);
    let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(mask)?;
    let mut probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
    if let Some(draw) = dropout {
        probs = draw.apply(&probs)?;
    }
    probs.matmul(&v)?.transpose(1, 2)?.contiguous()
}

/// Which keys each query attends to.
#[derive(Clone, Debug)]
enum Keys {
    /// Query `i` attends to keys `j ≤ i` (a decoder).
    Causal,
    /// A query attends to every key that is a token in its batch row: `b·t` flags, `true` for a
    /// token (an encoder over a padded batch; rows with no token are all `true`).
    Unpadded(Arc<[bool]>),
}

/// One call's settings, shared by its forward and backward ops.
#[derive(Clone, Debug)]
struct Spec {
    scale: f64,
    keys: Keys,
    /// Dropout on the probabilities; the probability of query `i` and key `j` in head `h` of
    /// batch row `bi` is element `((bi·hq + h)·t + i)·t + j` of the draw, as in the composite.
    dropout: Option<DropoutDraw>,
}

impl Spec {
    /// The keys batch row `bi`'s queries see.
    fn visible(&self, bi: usize, dims: Dims) -> Visible<'_> {
        let t = dims.t;
        match &self.keys {
            Keys::Causal => Visible::Causal {
                past: dims.tk - dims.t,
            },
            Keys::Unpadded(live) => Visible::Tokens(&live[bi * t..(bi + 1) * t]),
        }
    }
}

/// [`Keys`] for one batch row.
#[derive(Clone, Copy)]
enum Visible<'a> {
    /// Query `i` sees keys `j ≤ past + i`: the `past` positions before the queries' own.
    Causal {
        past: usize,
    },
    Tokens(&'a [bool]),
}

impl Visible<'_> {
    /// How many keys (from the first) a block of query rows ending before row `i1` reads.
    fn keys(self, i1: usize, t: usize) -> usize {
        match self {
            Visible::Causal { past } => past + i1,
            Visible::Tokens(_) => t,
        }
    }

    /// The first of the `rows` query rows of a block starting at row `i0` that sees key `j`
    /// (`rows` when none does): those after it see it too.
    #[inline(always)]
    fn first_row(self, j: usize, i0: usize, rows: usize) -> usize {
        match self {
            Visible::Causal { past } => j.saturating_sub(past + i0).min(rows),
            Visible::Tokens(live) => {
                if live[j] {
                    0
                } else {
                    rows
                }
            }
        }
    }
}

/// The sizes of one call, checked once so that the kernels' index arithmetic can trust them.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    /// Queries per batch row.
    t: usize,
    /// Keys (and values) per batch row: `t`, or more when earlier positions come first.
    tk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
}

impl Dims {
    /// Sizes of a self-attention call: as many keys as queries.
    fn of(q: &[usize], k: &[usize], v: &[usize]) -> candle_core::Result<Self> {
        let dims = Self::of_keys(q, k, v)?;
        if dims.tk != dims.t {
            candle_core::bail!("{NAME}: k {k:?} does not match q {q:?} in tokens");
        }
        Ok(dims)
    }

    /// Sizes of a call whose keys may begin with earlier positions: at least as many as queries.
    fn of_keys(q: &[usize], k: &[usize], v: &[usize]) -> candle_core::Result<Self> {
        let &[b, t, hq, d] = q else {
            candle_core::bail!("{NAME}: q must be (batch, tokens, heads, head size), got {q:?}")
        };
        let &[kb, kt, hkv, kd] = k else {
            candle_core::bail!("{NAME}: k must be (batch, tokens, heads, head size), got {k:?}")
        };
        if v != k {
            candle_core::bail!("{NAME}: v {v:?} does not match k {k:?}");
        }
        if (kb, kd) != (b, d) || kt < t {
            candle_core::bail!(
                "{NAME}: k {k:?} does not match q {q:?} in batch, tokens or head size"
            );
        }
        if hkv == 0 || hq % hkv != 0 {
            candle_core::bail!(
                "{NAME}: {hq} query heads are not a multiple of {hkv} key/value heads"
            );
        }
        Ok(Self {
            b,
            t,
            tk: kt,
            hq,
            hkv,
            d,
        })
    }

    /// Query heads per key/value head.
    fn group(&self) -> usize {
        self.hq / self.hkv
    }

    fn q_len(&self) -> usize {
        self.b * self.t * self.hq * self.d
    }

    fn kv_len(&self) -> usize {
        self.b * self.tk * self.hkv * self.d
    }

    /// Query head `h` of batch row `bi` (or the same head of the output, `dO` or `dQ`), a
    /// `t × d` matrix whose rows are `hq` heads apart.
    fn q_head(&self, bi: usize, h: usize) -> Mat {
        let row = self.hq * self.d;
        Mat::rows(bi * self.t * row + h * self.d, self.t, self.d, row)
    }

    /// Where the probability of query row `i0`, key 0, in head `h` of batch row `bi` sits in a
    /// dropout draw over the `(b, hq, t, t)` probabilities, and the distance between rows.
    fn probability_at(&self, bi: usize, h: usize, i0: usize) -> (u64, usize) {
        let t = self.t;
        ((((bi * self.hq + h) * t + i0) * t) as u64, t)
    }

    /// Key/value head `g` of batch row `bi` (or of `dK`, `dV`).
    fn kv_head(&self, bi: usize, g: usize) -> Mat {
        let row = self.hkv * self.d;
        Mat::rows(bi * self.tk * row + g * self.d, self.tk, self.d, row)
    }
}

/// `dropout(softmax(scale·q·kᵀ + mask))·v`, keeping only its inputs for the backward pass.
struct FusedAttention {
    spec: Spec,
}

impl CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // The public entry points checked the key count against their kind (equal, or a past
        // before the queries' own); the backward pass is only reachable with equal counts.
        let dims = Dims::of_keys(ql.dims(), kl.dims(), vl.dims())?;
        let (q, k, v) = (
            f32s(NAME, "q", q, ql)?,
            f32s(NAME, "k", k, kl)?,
            f32s(NAME, "v", v, vl)?,
        );
        let out = forward(q, k, v, dims, &self.spec);
        Ok((CpuStorage::F32(out), ql.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        Dims::of(q.dims(), k.dims(), v.dims())?;
        let op = FusedAttentionBackward {
            spec: self.spec.clone(),
            dout: grad.contiguous()?,
        };
        // One op for all three gradients: each needs the recomputed probabilities, and
        // recomputing them once per gradient would triple the cost of the pass.
        let all = q.apply_op3_no_bwd(k, v, &op)?;
        let [dq, dk, dv] = split_gradients(&all, [q.shape(), k.shape(), v.shape()])?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// The gradients of [`FusedAttention`] for the output gradient `dout`, as one flat tensor
/// `[dq | dk | dv]` in the layouts of `q`, `k` and `v`.
///
/// `dout` rides in the op rather than as an input because a custom op takes at most three.
struct FusedAttentionBackward {
    spec: Spec,
    dout: Tensor,
}

impl CustomOp3 for FusedAttentionBackward {
    fn name(&self) -> &'static str {
        BWD_NAME
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = Dims::of(ql.dims(), kl.dims(), vl.dims())?;
        let (q, k, v) = (
            f32s(BWD_NAME, "q", q, ql)?,
            f32s(BWD_NAME, "k", k, kl)?,
            f32s(BWD_NAME, "v", v, vl)?,
        );
        if self.dout.dims() != ql.dims() {
            candle_core::bail!(
                "{BWD_NAME}: output gradient {:?} does not match q {:?}",
                self.dout.dims(),
                ql.dims()
            );
        }
        let grads = with_f32s(BWD_NAME, "the output gradient", &self.dout, |dout| {
            Ok(backward(q, k, v, dout, dims, &self.spec))
        })?;
        let len = grads.len();
        Ok((CpuStorage::F32(grads), Shape::from(len)))
    }
}

fn forward(q: &[f32], k: &[f32], v: &[f32], dims: Dims, spec: &Spec) -> Vec<f32> {
    let Dims { b, t, hq, .. } = dims;
    let scale = spec.scale as f32;
    let mut out = vec![0f32; dims.q_len()];
    if out.is_empty() {
        return out;
    }
    let shared = Shared::new(&mut out);
    (0..b * hq).into_par_iter().for_each(|task| {
        let (bi, h) = (task / hq, task % hq);
        let seen = spec.visible(bi, dims);
        let qh = dims.q_head(bi, h);
        let kvh = dims.kv_head(bi, h / dims.group());
        let mut p = vec![0f32; BLOCK.min(t) * dims.tk];
        let mut mask = vec![0f32; if spec.dropout.is_some() { p.len() } else { 0 }];
        for i0 in (0..t).step_by(BLOCK) {
            let i1 = (i0 + BLOCK).min(t);
            let keys = seen.keys(i1, dims.tk);
            let (qb, kvb) = (qh.row_range(i0, i1), kvh.row_range(0, keys));
            let pm = score_block(i1 - i0, keys);
            product_into(&mut p, pm, false, q, qb, k, kvb.t(), scale);
            if let Some(draw) = &spec.dropout {
                dropout_factors(&mut mask, pm, draw, dims.probability_at(bi, h, i0));
            }
            vectorized(
                #[inline(always)]
                || {
                    masked_softmax(&mut p, pm, i0, seen);
                    if spec.dropout.is_some() {
                        multiply(&mut p, &mask, pm);
                    }
                },
            );
            // SAFETY: `out` has the layout of `q`, so `qb` lies inside it (`product` checks), and
            // these rows of head `h` of batch row `bi` belong to this task alone: tasks are
            // distinct (batch row, head) pairs and each writes each of its row blocks once.
            unsafe { product(shared, qb, false, &p, pm, v, kvb, 1.0) };
        }
    });
    out
}

fn backward(q: &[f32], k: &[f32], v: &[f32], dout: &[f32], dims: Dims, spec: &Spec) -> Vec<f32> {
    let Dims { b, t, hkv, .. } = dims;
    let scale = spec.scale as f32;
    let (nq, nkv) = (dims.q_len(), dims.kv_len());
    // Zeroed: dK and dV accumulate over the group's query heads and the query blocks.
    let mut grads = vec![0f32; nq + 2 * nkv];
    if nq == 0 {
        return grads;
    }
    let shared = Shared::new(&mut grads);
    // One task per key/value head, so the gradients of a shared head are summed over its
    // group by a single task in a fixed order rather than by racing or reducing threads.
    (0..b * hkv).into_par_iter().for_each(|task| {
        let (bi, g) = (task / hkv, task % hkv);
        let seen = spec.visible(bi, dims);
        let kvh = dims.kv_head(bi, g);
        let (dkh, dvh) = (kvh.shifted(nq), kvh.shifted(nq + nkv));
        let mut p = vec![0f32; BLOCK.min(t) * dims.tk];
        let mut ds = vec![0f32; BLOCK.min(t) * dims.tk];
        let mut mask = vec![0f32; if spec.dropout.is_some() { p.len() } else { 0 }];
        for h in g * dims.group()..(g + 1) * dims.group() {
            let qh = dims.q_head(bi, h);
            for i0 in (0..t).step_by(BLOCK) {
                let i1 = (i0 + BLOCK).min(t);
                let keys = seen.keys(i1, dims.tk);
                let (qb, kvb) = (qh.row_range(i0, i1), kvh.row_range(0, keys));
                let (dkb, dvb) = (dkh.row_range(0, keys), dvh.row_range(0, keys));
                let pm = score_block(i1 - i0, keys);
                product_into(&mut p, pm, false, q, qb, k, kvb.t(), scale);
                // dP̃ = dO·Vᵀ is the gradient of the dropped probabilities P̃ = P ⊙ M, so
                // dP = dP̃ ⊙ M and dS = P ⊙ (dP − rowsum(dP ⊙ P)), in place over dP̃; then
                // dV += P̃ᵀ·dO, dK += scale·dSᵀ·Q and dQ = scale·dS·K.
                product_into(&mut ds, pm, false, dout, qb, v, kvb.t(), 1.0);
                if let Some(draw) = &spec.dropout {
                    dropout_factors(&mut mask, pm, draw, dims.probability_at(bi, h, i0));
                }
                vectorized(
                    #[inline(always)]
                    || {
                        masked_softmax(&mut p, pm, i0, seen);
                        if spec.dropout.is_some() {
                            multiply(&mut ds, &mask, pm);
                        }
                        softmax_backward(&p, &mut ds, pm, i0, seen);
                        if spec.dropout.is_some() {
                            multiply(&mut p, &mask, pm);
                        }
                    },
                );
                // SAFETY: `grads` is `[dq | dk | dv]` in the layouts of q, k and v, so these
                // views lie inside it (`product` checks). This task alone writes kv head `g` of
                // batch row `bi` in dK and dV, and the rows of its group's query heads in dQ
                // (each row block once): tasks are distinct (batch row, kv head) pairs.
                unsafe {
                    product(shared, dvb, true, &p, pm.t(), dout, qb, 1.0);
                    product(shared, dkb, true, &ds, pm.t(), q, qb, scale);
                    product(shared, qb, false, &ds, pm, k, kvb, scale);
                }
            }
        }
    });
    grads
}

/// Softmax of each query row of the score block `m` (see [`Mat::score_block`]; query rows
/// `i0..`) over the keys it sees. The masked entries become exact zeros, so they add nothing to
/// the products after. The block is stored key-major, so each pass runs along a key's scores
/// for all query rows at once: contiguous, and vectorised across the rows.
#[inline(always)]
fn masked_softmax(p: &mut [f32], m: Mat, i0: usize, seen: Visible) {
    let rows = m.rows;
    debug_assert!(m.rs == 1 && m.cs == rows && rows <= BLOCK);
    let (mut max, mut sum) = ([f32::NEG_INFINITY; BLOCK], [0f32; BLOCK]);
    let (max, sum) = (&mut max[..rows], &mut sum[..rows]);
    // Key j is masked for the query rows before `first_live(j)`.
    let first_live = || (0..m.cols).map(|j| seen.first_row(j, i0, rows));
    for (col, live) in p.chunks_exact_mut(rows).zip(first_live()) {
        for (mx, &x) in max[live..].iter_mut().zip(&col[live..]) {
            *mx = mx.max(x);
        }
    }
    for (col, live) in p.chunks_exact_mut(rows).zip(first_live()) {
        col[..live].fill(0.0);
        for ((x, &mx), sm) in col[live..]
            .iter_mut()
            .zip(&max[live..])
            .zip(&mut sum[live..])
        {
            *x = exp_nonpositive(*x - mx);
            *sm += *x;
        }
    }
    for s in sum.iter_mut() {
        *s = 1.0 / *s;
    }
    for col in p.chunks_exact_mut(rows).take(m.cols) {
        for (x, &inv) in col.iter_mut().zip(sum.iter()) {
            *x *= inv;
        }
    }
}

/// `dp ← p ⊙ (dp − rowsum(dp ⊙ p))` for each query row of a score block stored like
/// [`masked_softmax`]'s: the softmax's backward, with zeros where masked.
#[inline(always)]
fn softmax_backward(p: &[f32], dp: &mut [f32], m: Mat, i0: usize, seen: Visible) {
    let rows = m.rows;
    debug_assert!(m.rs == 1 && m.cs == rows && rows <= BLOCK);
    let mut dot = [0f32; BLOCK];
    let dot = &mut dot[..rows];
    let first_live = || (0..m.cols).map(|j| seen.first_row(j, i0, rows));
    for ((pc, dc), live) in p
        .chunks_exact(rows)
        .zip(dp.chunks_exact(rows))
        .zip(first_live())
    {
        for ((acc, &x), &y) in dot[live..].iter_mut().zip(&pc[live..]).zip(&dc[live..]) {
            *acc += x * y;
        }
    }
    for ((pc, dc), live) in p
        .chunks_exact(rows)
        .zip(dp.chunks_exact_mut(rows))
        .zip(first_live())
    {
        dc[..live].fill(0.0);
        for ((d, &x), &c) in dc[live..].iter_mut().zip(&pc[live..]).zip(&dot[live..]) {
            *d = x * (*d - c);
        }
    }
}

/// The dropout factors of a score block (stored like [`masked_softmax`]'s) whose query row 0,
/// key 0 is position `first` of the draw; query rows are `t` positions apart.
fn dropout_factors(mask: &mut [f32], m: Mat, draw: &DropoutDraw, (first, t): (u64, usize)) {
    for (j, col) in mask.chunks_exact_mut(m.rows).take(m.cols).enumerate() {
        for (r, f) in col.iter_mut().enumerate() {
            *f = draw.factor(first + (r * t + j) as u64);
        }
    }
}

/// `x ← x ⊙ f` over a score block.
#[inline(always)]
fn multiply(x: &mut [f32], f: &[f32], m: Mat) {
    let n = m.rows * m.cols;
    for (x, &f) in x[..n].iter_mut().zip(&f[..n]) {
        *x *= f;
    }
}

/// Runs `f` (which must be `#[inline(always)]`, as must everything it calls) compiled for the
/// widest vector instructions this CPU has. The crate is built for baseline x86-64, whose SSE2
/// does four lanes; the softmax passes are a fifth of the op's time there. The passes vectorise
/// across query rows only, never reordering a sum, so every path gives the same bits.
#[inline(always)]
fn vectorized(f: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { x86::avx512(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { x86::avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512(f: impl FnOnce()) {
        f()
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn avx2(f: impl FnOnce()) {
        f()
    }
}

/// A score block: the scores of `rows` query rows against `keys` keys in a task's scratch buffer, stored
/// key-major (column-major): gemm's kernels want the product's output columns contiguous,
/// and `q·kᵀ` written row-major ran at half the speed (75 against 135 GFLOP/s, one core,
/// 64 × 512 × 64). Every later product reads it through strides at no cost.
fn score_block(rows: usize, keys: usize) -> Mat {
    Mat {
        at: 0,
        rows,
        cols: keys,
        rs: 1,
        cs: rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    type Attention = fn(&Tensor, &Tensor, &Tensor, f64) -> candle_core::Result<Tensor>;

    /// `(b, t, hq, hkv, d)`.
    type Case = (usize, usize, usize, usize, usize);

    /// Random q, k, v (as variables, so gradients reach them) and a probe for the loss.
    fn inputs((b, t, hq, hkv, d): Case) -> (Var, Var, Var, Tensor) {
        let dev = Device::Cpu;
        let randn = |heads: usize| Tensor::randn(0f32, 1.0, (b, t, heads, d), &dev).unwrap();
        let var = |heads: usize| Var::from_tensor(&randn(heads)).unwrap();
        (var(hq), var(hkv), var(hkv), randn(hq))
    }

    /// The output and the gradients of q, k and v of `loss = Σ out ⊙ probe`.
    fn run(
        f: impl Fn(&Tensor, &Tensor, &Tensor, f64) -> candle_core::Result<Tensor>,
        q: &Var,
        k: &Var,
        v: &Var,
        probe: &Tensor,
        scale: f64,
    ) -> [Tensor; 4] {
        let out = f(q.as_tensor(), k.as_tensor(), v.as_tensor(), scale).unwrap();
        let grads = probe_backward(&out, probe);
        let grad = |x: &Var| grads.get(x.as_tensor()).unwrap().clone();
        [out, grad(q), grad(k), grad(v)]
    }

    use crate::fused::{assert_each_close, max_abs_diff as max_diff, probe_backward};

    fn assert_close(fused: &[Tensor; 4], reference: &[Tensor; 4], what: &str) {
        assert_each_close(&["out", "dq", "dk", "dv"], fused, reference, 1e-4, what);
    }

    fn check(case: Case) {
        let (q, k, v, probe) = inputs(case);
        let scale = 1.0 / (case.4 as f64).sqrt();
        let fused = run(causal_attention, &q, &k, &v, &probe, scale);
        let reference = run(causal_composite, &q, &k, &v, &probe, scale);
        assert_close(
            &fused,
            &reference,
            &format!("(b, t, hq, hkv, d) = {case:?}"),
        );
    }

    #[test]
    fn matches_the_composite_with_grouped_heads() {
        check((2, 7, 4, 2, 8));
    }

    #[test]
    fn matches_the_composite_for_a_single_token() {
        check((1, 1, 2, 2, 4));
    }

    #[test]
    fn matches_the_composite_across_query_blocks() {
        check((2, 33, 6, 3, 16));
        // Several blocks, the last one ragged, and all query heads on one kv head.
        check((1, 2 * BLOCK + 5, 4, 1, 8));
    }

    #[test]
    fn matches_the_composite_with_one_kv_head_per_query_head() {
        check((3, 12, 3, 3, 8));
    }

    #[test]
    fn accepts_non_contiguous_inputs() {
        let (b, t, hq, hkv, d) = (2, 9, 4, 2, 8);
        // Heads-first variables seen through a transpose: strided views, not contiguous.
        let dev = Device::Cpu;
        let var = |heads: usize| Var::randn(0f32, 1.0, (b, heads, t, d), &dev).unwrap();
        let (q, k, v) = (var(hq), var(hkv), var(hkv));
        let probe = Tensor::randn(0f32, 1.0, (b, t, hq, d), &dev).unwrap();
        let go = |f: Attention| {
            let tr = |x: &Var| x.as_tensor().transpose(1, 2).unwrap();
            let out = f(&tr(&q), &tr(&k), &tr(&v), 0.3).unwrap();
            assert!(!tr(&q).is_contiguous());
            let grads = probe_backward(&out, &probe);
            let grad = |x: &Var| grads.get(x.as_tensor()).unwrap().clone();
            [out, grad(&q), grad(&k), grad(&v)]
        };
        assert_close(
            &go(causal_attention),
            &go(causal_composite),
            "strided inputs",
        );
    }

    /// The output and gradients of `loss = Σ out ⊙ probe` for any attention closure.
    fn run_with(
        f: impl Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>,
        q: &Var,
        k: &Var,
        v: &Var,
        probe: &Tensor,
    ) -> [Tensor; 4] {
        run(|q, k, v, _| f(q, k, v), q, k, v, probe, 0.0)
    }

    /// A `(b, t)` token mask whose rows hold `lens[i]` tokens then padding.
    fn token_mask(lens: &[usize], t: usize) -> Tensor {
        let flags: Vec<f32> = lens
            .iter()
            .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
            .collect();
        Tensor::from_vec(flags, (lens.len(), t), &Device::Cpu).unwrap()
    }

    fn check_padded(case: Case, lens: &[usize], dropout: Option<DropoutDraw>) {
        let (q, k, v, probe) = inputs(case);
        let mask = token_mask(lens, case.1);
        let scale = 1.0 / (case.4 as f64).sqrt();
        let fused = run_with(
            |q, k, v| padded_attention(q, k, v, scale, &mask, dropout),
            &q,
            &k,
            &v,
            &probe,
        );
        let reference = run_with(
            |q, k, v| padded_composite(q, k, v, scale, &mask, dropout),
            &q,
            &k,
            &v,
            &probe,
        );
        let what = format!("(b, t, hq, hkv, d) = {case:?}, tokens {lens:?}, {dropout:?}");
        assert_close(&fused, &reference, &what);
    }

    #[test]
    fn padded_attention_matches_the_composite_over_padded_rows() {
        // Full rows, padded rows and a one-token row.
        check_padded((4, 9, 3, 3, 8), &[9, 5, 1, 2], None);
        // Several query blocks, grouped heads.
        check_padded((2, BLOCK + 7, 4, 2, 16), &[BLOCK + 7, 20], None);
    }

    #[test]
    fn padded_attention_drops_the_probabilities_the_composite_drops() {
        let draw = DropoutDraw::new(11, 1234, 0.3);
        check_padded((3, 12, 4, 4, 8), &[12, 7, 3], Some(draw));
        check_padded((2, BLOCK + 3, 2, 1, 8), &[BLOCK + 3, 9], Some(draw));
        // And the dropout does something: without it the output differs.
        let (q, k, v, _) = inputs((2, 12, 4, 4, 8));
        let mask = token_mask(&[12, 7], 12);
        let at = |d| padded_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), 0.3, &mask, d);
        assert!(max_diff(&at(Some(draw)).unwrap(), &at(None).unwrap()) > 1e-2);
    }

    #[test]
    fn a_row_with_no_token_attends_to_every_key() {
        // As under the composite's additive mask, which shifts every score alike; compared with
        // the unmasked composite, since scores shifted by −10⁴ keep only about 3 digits in f32.
        let case = (2, 9, 2, 2, 8);
        let (q, k, v, probe) = inputs(case);
        let fused = run_with(
            |q, k, v| padded_attention(q, k, v, 0.3, &token_mask(&[9, 0], 9), None),
            &q,
            &k,
            &v,
            &probe,
        );
        let everything = token_mask(&[9, 9], 9);
        let reference = run_with(
            |q, k, v| padded_composite(q, k, v, 0.3, &everything, None),
            &q,
            &k,
            &v,
            &probe,
        );
        assert_close(&fused, &reference, "a row with no token");
    }

    #[test]
    fn padded_keys_change_nothing() {
        // Whatever the padded keys and values hold, the tokens' outputs are the same.
        let (b, t, h, d) = (2, 10, 2, 8);
        let (q, k, v, _) = inputs((b, t, h, h, d));
        let mask = token_mask(&[6, 10], t);
        let noise = Tensor::randn(0f32, 5.0, (b, t, h, d), &Device::Cpu).unwrap();
        let pad = mask
            .affine(-1.0, 1.0)
            .unwrap()
            .reshape((b, t, 1, 1))
            .unwrap()
            .broadcast_as((b, t, h, d))
            .unwrap();
        let noisy = |x: &Var| (x.as_tensor() + (&noise * &pad).unwrap()).unwrap();
        let out = |k: &Tensor, v: &Tensor| {
            padded_attention(q.as_tensor(), k, v, 0.35, &mask, None)
                .unwrap()
                .narrow(0, 0, 1)
                .unwrap()
                .narrow(1, 0, 6)
                .unwrap()
        };
        let clean = out(k.as_tensor(), v.as_tensor());
        assert!(max_diff(&clean, &out(&noisy(&k), &noisy(&v))) < 1e-6);
    }

    #[test]
    fn a_bad_token_mask_is_an_error() {
        let (q, k, v, _) = inputs((2, 4, 2, 2, 8));
        let attend = |mask: &Tensor| {
            padded_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), 1.0, mask, None)
        };
        let half = Tensor::full(0.5f32, (2, 4), &Device::Cpu).unwrap();
        let err = attend(&half).unwrap_err().to_string();
        assert!(err.contains("0 or 1"), "{err}");
        let err = attend(&token_mask(&[4], 4)).unwrap_err().to_string();
        assert!(err.contains("token mask"), "{err}");
    }

    #[test]
    fn other_dtypes_fall_back_to_the_composite() {
        let (q, k, v, _) = inputs((1, 5, 2, 1, 4));
        let fused = causal_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), 0.5).unwrap();
        let f64 = |x: &Var| x.as_tensor().to_dtype(DType::F64).unwrap();
        let composite = causal_attention(&f64(&q), &f64(&k), &f64(&v), 0.5).unwrap();
        assert_eq!(composite.dtype(), DType::F64);
        assert!(max_diff(&fused, &composite.to_dtype(DType::F32).unwrap()) < 1e-5);
    }

    /// Queries after `past` earlier positions see what the same rows of the whole sequence see,
    /// on the fused kernel (past and own keys across query blocks) and on the composite.
    #[test]
    fn queries_after_a_past_match_the_whole_sequence() {
        for (b, past, t, hq, hkv, d) in [
            (2, 6, 5, 6, 2, 8),
            (1, 70, 80, 4, 4, 16),
            (3, 0, 7, 2, 1, 4),
        ] {
            let (q, k, v, _) = inputs((b, past + t, hq, hkv, d));
            let whole = causal_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), 0.3).unwrap();
            let own = q.as_tensor().narrow(1, past, t).unwrap();
            let after = causal_attention_after(&own, k.as_tensor(), v.as_tensor(), 0.3).unwrap();
            let expected = whole.narrow(1, past, t).unwrap();
            assert!(max_diff(&after, &expected) < 1e-5, "past {past}, t {t}");
            let f64 = |x: &Tensor| x.to_dtype(DType::F64).unwrap();
            let composite =
                causal_attention_after(&f64(&own), &f64(k.as_tensor()), &f64(v.as_tensor()), 0.3)
                    .unwrap();
            assert!(max_diff(&composite.to_dtype(DType::F32).unwrap(), &expected) < 1e-5);
        }
        // Fewer keys than queries is an error, not a read past the end.
        let z = |shape: &[usize]| Tensor::zeros(shape, DType::F32, &Device::Cpu).unwrap();
        let err =
            causal_attention_after(&z(&[1, 4, 2, 8]), &z(&[1, 3, 2, 8]), &z(&[1, 3, 2, 8]), 1.0)
                .unwrap_err();
        assert!(err.to_string().contains(NAME), "{err}");
    }

    #[test]
    fn two_runs_are_bit_identical() {
        let (q, k, v, probe) = inputs((3, 70, 8, 2, 16));
        let bits = |x: &Tensor| -> Vec<u32> {
            let x = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            x.into_iter().map(f32::to_bits).collect()
        };
        let first = run(causal_attention, &q, &k, &v, &probe, 0.25);
        for _ in 0..3 {
            let again = run(causal_attention, &q, &k, &v, &probe, 0.25);
            for (a, b) in first.iter().zip(&again) {
                assert_eq!(bits(a), bits(b));
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let z = |shape: &[usize]| Tensor::zeros(shape, DType::F32, &Device::Cpu).unwrap();
        let attend =
            |q: &[usize], k: &[usize], v: &[usize]| causal_attention(&z(q), &z(k), &z(v), 1.0);
        // 3 query heads over 2 kv heads.
        let err = attend(&[1, 4, 3, 8], &[1, 4, 2, 8], &[1, 4, 2, 8]).unwrap_err();
        assert!(err.to_string().contains(NAME), "{err}");
        // Mismatched token counts.
        let err = attend(&[1, 4, 2, 8], &[1, 5, 2, 8], &[1, 5, 2, 8]).unwrap_err();
        assert!(err.to_string().contains(NAME), "{err}");
        // Mismatched head size, k and v disagreeing, wrong rank, no kv heads.
        assert!(attend(&[1, 4, 2, 8], &[1, 4, 2, 4], &[1, 4, 2, 4]).is_err());
        assert!(attend(&[1, 4, 2, 8], &[1, 4, 2, 8], &[1, 4, 1, 8]).is_err());
        assert!(attend(&[4, 2, 8], &[4, 2, 8], &[4, 2, 8]).is_err());
        assert!(attend(&[1, 4, 2, 8], &[1, 4, 0, 8], &[1, 4, 0, 8]).is_err());
    }

    /// Fused forward + backward against the composite, best of 3 after a warm-up, in release:
    /// `cargo test --release -p shardwork-trainer --lib fused::attention -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn timing() {
        use std::time::Instant;
        for case in [(8, 128, 9, 3, 64), (4, 512, 32, 8, 64)] {
            let (q, k, v, probe) = inputs(case);
            let scale = 1.0 / (case.4 as f64).sqrt();
            let time = |f: Attention| {
                run(f, &q, &k, &v, &probe, scale);
                let mut best = f64::INFINITY;
                for _ in 0..3 {
                    let start = Instant::now();
                    run(f, &q, &k, &v, &probe, scale);
                    best = best.min(start.elapsed().as_secs_f64());
                }
                best * 1e3
            };
            let (fused, composite) = (time(causal_attention), time(causal_composite));
            println!(
                "(b, t, hq, hkv, d) = {case:?}: fused {fused:.1} ms, composite {composite:.1} ms \
                 ({:.1}x), {} threads",
                composite / fused,
                rayon::current_num_threads()
            );
        }
    }
}
