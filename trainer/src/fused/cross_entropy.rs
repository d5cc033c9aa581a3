//! The language-model head and its cross-entropy as one op:
//! `mean(−log softmax(h·Wᵀ + b)[target])`.
//!
//! It replaces `candle_nn::loss::cross_entropy(&(hidden·Wᵀ), &targets)` in SFT's `batch_loss`
//! (the Liger-kernel idea). Composed, that materialises the whole `n × vocab` logits matrix —
//! 1024 × 49,152 floats = 200 MB for SmolLM2 at a batch of 8 × 128 learned tokens — and
//! `log_softmax` keeps three more of the same size alive for the backward pass (the shifted
//! logits, their exponentials and the log-probabilities): about 1 GB per micro-batch, before
//! the backward pass allocates its own `n × vocab` gradients (the process peaked 1.9 GB above
//! the fused op in the timing test). Each of those tensors is one more, mostly single-threaded,
//! pass over memory.
//!
//! Here the logits exist only one chunk of rows at a time (256 × vocab floats, 50 MB for
//! SmolLM2, plus 28 MB of per-block partial gradients), and because the head weight is frozen
//! the gradient with respect to the hidden states, `(softmax − onehot)·W / n`, is computed in
//! the same pass while the chunk's logits are still at hand. The op keeps that `n × d`
//! gradient (2.4 MB for SmolLM2), never the logits, and its backward pass only scales it by the
//! upstream gradient. Forward and backward for SmolLM2's head took 0.73–0.79 s against
//! 2.8–3.5 s composed (release build, 2 shared cores, the `timing_smollm2_head` test; under
//! heavier load 0.7–1.2 s against 3.5–5.9 s): both do the same two products, at about
//! 150 GFLOP/s here, so the difference is the passes over the logits.
//!
//! On other devices or dtypes it falls back to the composed ops
//! ([`linear_cross_entropy_composed`]), which the tests also use as the reference.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, DType, Device, Layout, Result, Shape, Storage, Tensor, bail,
};
use rayon::prelude::*;

use super::exp::exp_nonpositive;
use super::packs::{FrozenPacks, block_packs_for};

const OP: &str = "linear_cross_entropy";

/// Rows whose logits exist at once. Every vocabulary block re-reads its slice of `W` once per
/// chunk, so larger chunks cut that traffic (W is 113 MB for SmolLM2) at the price of a
/// larger scratch buffer (`ROW_CHUNK × vocab` floats). Fixed, never derived from the thread
/// count, so that results do not depend on the machine.
const ROW_CHUNK: usize = 256;

/// Vocabulary columns per task. The vocabulary, not the rows, is what is split across threads:
/// a chunk of rows then shares each slice of `W` between all its rows, and a batch of a few
/// rows (scoring) still uses every core. 1024 gives SmolLM2 48 tasks per pass, enough to keep
/// a many-core machine busy, each still a large product (256 × 1024 × 576); on 2 cores 512 to
/// 4096 measured the same. The price is one `ROW_CHUNK × d` partial gradient per block
/// (28 MB for SmolLM2).
const VOCAB_BLOCK: usize = 1024;

/// Packs the output projection `w` (`vocab × d`) for [`linear_cross_entropy`]'s training
/// products now, inside the run's [`super::packs::PackScope`], so that it is the first weight
/// the run keeps packs for. Where a model's packs do not all fit the budget, the head should
/// be the one kept: a weight past the budget is packed again for each product, and the head's
/// products are split into chunks of [`ROW_CHUNK`] rows, so packing it per product would cost
/// twice per pass what a projection of its size costs, at products too small to pay for it
/// (it then stays on gemm). On the 1B Llama shape (a 2.1 GB head pack, of its 10 GB) this
/// took the head's products off gemm. Outside a scope or without AMX it does nothing.
pub fn keep_head_packs_first(w: &Tensor) -> Result<()> {
    block_packs_for(OP, w, VOCAB_BLOCK)?;
    Ok(())
}

/// Mean over rows of −log softmax(hidden · wᵀ + bias)[row, target[row]].
///
/// `hidden`: `(n, d)` f32 (differentiable), `w`: `(vocab, d)` frozen (no gradient is computed
/// for it), `bias`: optional `(vocab)` frozen, `targets`: `(n)` u32 token ids. Returns a scalar
/// tensor (shape `()`).
///
/// With `with_grad` the gradient with respect to `hidden` is computed during the forward pass
/// (on the CPU) and the backward pass only scales it; without it (scoring) that work is
/// skipped, and calling `backward` through the result is an error on the CPU. On other
/// devices or dtypes this is [`linear_cross_entropy_composed`], with `hidden` detached when
/// `with_grad` is false so that no graph is kept.
pub fn linear_cross_entropy(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
    with_grad: bool,
) -> Result<Tensor> {
    fused(hidden, w, bias, targets, with_grad, Reduction::Mean)
}

/// Each row's −log softmax(hidden · wᵀ + bias)[row, target[row]], as an `(n)` tensor: what a
/// loss that weighs rows differently (a preference pair's log-probabilities, summed per
/// answer) is built from. Differentiable through `hidden` as [`linear_cross_entropy`] is, its
/// gradient made during the forward pass and scaled per row by the backward pass.
pub fn linear_cross_entropy_rows(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
    with_grad: bool,
) -> Result<Tensor> {
    fused(hidden, w, bias, targets, with_grad, Reduction::PerRow)
}

/// Whether the fused op returns the rows' mean or each row's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    Mean,
    PerRow,
}

fn fused(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
    with_grad: bool,
    reduction: Reduction,
) -> Result<Tensor> {
    let (_, _, vocab) = check_shapes(hidden, w, bias, targets)?;
    let targets_vec = target_ids(targets, vocab)?;
    let on_cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
    if !(on_cpu_f32(hidden) && on_cpu_f32(w) && bias.is_none_or(on_cpu_f32)) {
        let hidden = if with_grad {
            hidden.clone()
        } else {
            hidden.detach()
        };
        return match reduction {
            Reduction::Mean => linear_cross_entropy_composed(&hidden, w, bias, targets),
            Reduction::PerRow => linear_cross_entropy_rows_composed(&hidden, w, bias, targets),
        };
    }
    let bias = bias.map(|b| b.to_vec1::<f32>()).transpose()?;
    // Tracked even without `with_grad`, so that a backward pass through a scoring loss fails
    // loudly instead of silently leaving `hidden` without a gradient. Scoring multiplies by
    // the packed head too: in a scope that only scores (the validator's kept packs) the head
    // is a fifth of SmolLM2's products, and on gemm it took a quarter of the scoring time.
    hidden.apply_op1(LinearCrossEntropy {
        packs: block_packs_for(OP, w, VOCAB_BLOCK)?,
        w: w.clone(),
        bias,
        targets: targets_vec,
        with_grad,
        reduction,
        grad: Mutex::new(None),
    })
}

/// The composed ops [`linear_cross_entropy_rows`] replaces: each row's `−log_softmax` at its
/// target, through the full logits.
pub fn linear_cross_entropy_rows_composed(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
) -> Result<Tensor> {
    let logits = composed_logits(hidden, w, bias, targets)?;
    let log_probs = candle_nn::ops::log_softmax(&logits, 1)?;
    log_probs
        .gather(&targets.unsqueeze(1)?, 1)?
        .squeeze(1)?
        .neg()
}

/// The composed ops [`linear_cross_entropy`] replaces: `hidden·wᵀ (+ bias)` then
/// `candle_nn::loss::cross_entropy`. Differentiable through `hidden` (and through `w` and
/// `bias` if they are variables); keeps the full logits and their intermediates in the graph.
pub fn linear_cross_entropy_composed(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
) -> Result<Tensor> {
    let logits = composed_logits(hidden, w, bias, targets)?;
    candle_nn::loss::cross_entropy(&logits, targets)
}

/// `hidden·wᵀ (+ bias)`, the full logits the composed ops work on, after checking that the
/// operands fit together.
fn composed_logits(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
) -> Result<Tensor> {
    check_shapes(hidden, w, bias, targets)?;
    let logits = hidden.matmul(&w.t()?)?;
    match bias {
        Some(bias) => logits.broadcast_add(bias),
        None => Ok(logits),
    }
}

/// `(n, d, vocab)` after checking that the operands fit together.
fn check_shapes(
    hidden: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    targets: &Tensor,
) -> Result<(usize, usize, usize)> {
    let (n, d) = match hidden.dims() {
        &[n, d] => (n, d),
        dims => bail!("{OP}: hidden must be (n, d), got shape {dims:?}"),
    };
    let (vocab, wd) = match w.dims() {
        &[vocab, wd] => (vocab, wd),
        dims => bail!("{OP}: w must be (vocab, d), got shape {dims:?}"),
    };
    if n == 0 {
        bail!("{OP}: no rows (hidden is {n} × {d})");
    }
    if d == 0 {
        bail!("{OP}: hidden has width 0");
    }
    if wd != d {
        bail!("{OP}: hidden has width {d} but w is {vocab} × {wd}");
    }
    if vocab == 0 {
        bail!("{OP}: w has no rows (empty vocabulary)");
    }
    if targets.dims() != [n] {
        bail!(
            "{OP}: targets must be ({n}) to match hidden's rows, got shape {:?}",
            targets.dims()
        );
    }
    if let Some(bias) = bias
        && bias.dims() != [vocab]
    {
        bail!(
            "{OP}: bias must be ({vocab}) to match w's rows, got shape {:?}",
            bias.dims()
        );
    }
    Ok((n, d, vocab))
}

/// The targets as ids, each checked against the vocabulary: an out-of-range id would otherwise
/// index past a logits row (and candle's gather reports it without saying which row).
fn target_ids(targets: &Tensor, vocab: usize) -> Result<Vec<u32>> {
    if targets.dtype() != DType::U32 {
        bail!(
            "{OP}: targets must be u32 token ids, got {:?}",
            targets.dtype()
        );
    }
    let ids = targets.to_vec1::<u32>()?;
    if let Some((row, id)) = ids
        .iter()
        .enumerate()
        .find(|&(_, &id)| id as usize >= vocab)
    {
        bail!("{OP}: target id {id} at row {row} is not below the vocabulary size {vocab}");
    }
    Ok(ids)
}

/// The CPU op. It holds the frozen operands; the gradient made during the forward pass waits
/// in `grad` for the backward pass.
struct LinearCrossEntropy {
    /// `w` packed for AMX per vocabulary block, in a training run on a CPU that has it
    /// ([`super::packs`]); else its products go through gemm.
    packs: Option<Arc<[FrozenPacks]>>,
    w: Tensor,
    bias: Option<Vec<f32>>,
    targets: Vec<u32>,
    with_grad: bool,
    reduction: Reduction,
    grad: Mutex<Option<Tensor>>,
}

impl CustomOp1 for LinearCrossEntropy {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(hidden) = storage else {
            bail!("{OP}: hidden must be f32, got {:?}", storage.dtype());
        };
        let hidden = MatRef::from_layout(hidden, layout)?;
        let (w_storage, w_layout) = self.w.storage_and_layout();
        let Storage::Cpu(CpuStorage::F32(w)) = &*w_storage else {
            bail!("{OP}: w must be an f32 tensor on the CPU");
        };
        let w = MatRef::from_layout(w, w_layout)?;
        let (n, d) = (hidden.rows, hidden.cols);
        let bias_len = self.bias.as_ref().map_or(w.rows, Vec::len);
        if w.cols != d || self.targets.len() != n || bias_len != w.rows {
            bail!(
                "{OP}: hidden is {n} × {d}, w is {} × {}, {} targets, {bias_len} biases",
                w.rows,
                w.cols,
                self.targets.len()
            );
        }
        let out = forward(
            hidden,
            w,
            self.packs.as_deref(),
            self.bias.as_deref(),
            &self.targets,
            self.with_grad.then_some(match self.reduction {
                Reduction::Mean => 1.0 / n as f32,
                Reduction::PerRow => 1.0,
            }),
        )?;
        if self.with_grad {
            let grad = Tensor::from_vec(out.grad, (n, d), &Device::Cpu)?;
            *self.grad.lock().unwrap_or_else(PoisonError::into_inner) = Some(grad);
        }
        match self.reduction {
            Reduction::Mean => {
                // f64 and a fixed order: the mean is the same whatever thread made each term.
                let loss = out.losses.iter().sum::<f64>() / n as f64;
                Ok((CpuStorage::F32(vec![loss as f32]), Shape::from(())))
            }
            Reduction::PerRow => Ok((
                CpuStorage::F32(out.losses.iter().map(|&l| l as f32).collect()),
                Shape::from(n),
            )),
        }
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        if !self.with_grad {
            bail!("{OP} was built with_grad = false");
        }
        // Cloned, not taken, so that a second backward pass over the same loss still works;
        // it is n × d floats and goes away with the graph.
        let grad = self
            .grad
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match (grad, self.reduction) {
            (Some(grad), Reduction::Mean) => Ok(Some(grad.broadcast_mul(grad_res)?)),
            (Some(grad), Reduction::PerRow) => {
                Ok(Some(grad.broadcast_mul(&grad_res.unsqueeze(1)?)?))
            }
            (None, _) => bail!("{OP}: no gradient was computed (the forward pass did not run)"),
        }
    }
}

/// A strided view of an f32 matrix inside a buffer.
#[derive(Clone, Copy)]
struct MatRef<'a> {
    data: &'a [f32],
    offset: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    fn from_layout(data: &'a [f32], layout: &Layout) -> Result<Self> {
        let (&[rows, cols], &[row_stride, col_stride]) = (layout.dims(), layout.stride()) else {
            bail!("{OP}: expected a matrix, got shape {:?}", layout.dims());
        };
        Self {
            data,
            offset: layout.start_offset(),
            rows,
            cols,
            row_stride,
            col_stride,
        }
        .checked()
    }

    fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Result<Self> {
        Self {
            data,
            offset: 0,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
        .checked()
    }

    /// The view's elements as one slice, row after row, where they lie so in `data`.
    fn as_row_major(self) -> Option<&'a [f32]> {
        let view = self.checked().ok()?;
        (view.col_stride == 1 && view.row_stride == view.cols)
            .then(|| &view.data[view.offset..view.offset + view.rows * view.cols])
    }

    /// Every element the view names lies inside `data`: what makes handing it to gemm sound.
    fn checked(self) -> Result<Self> {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1)
                .checked_mul(self.row_stride)
                .zip((self.cols - 1).checked_mul(self.col_stride))
                .and_then(|(a, b)| a.checked_add(b)?.checked_add(self.offset));
            if last.is_none_or(|last| last >= self.data.len()) {
                bail!(
                    "{OP}: a {} × {} view with strides ({}, {}) at offset {} overruns {} floats",
                    self.rows,
                    self.cols,
                    self.row_stride,
                    self.col_stride,
                    self.offset,
                    self.data.len()
                );
            }
        }
        Ok(self)
    }

    /// Rows `start..start + count`. Unchecked here (saturating, not wrapping); `matmul`
    /// checks the views it is given.
    fn rows(self, start: usize, count: usize) -> Self {
        Self {
            offset: self
                .offset
                .saturating_add(start.saturating_mul(self.row_stride)),
            rows: count,
            ..self
        }
    }

    /// The view's elements as a row-major block, borrowed where they already are one.
    fn row_major_copy(self) -> Result<Cow<'a, [f32]>> {
        let view = self.checked()?;
        let len = view.rows * view.cols;
        if view.col_stride == 1 && (view.row_stride == view.cols || view.rows <= 1) {
            return Ok(Cow::Borrowed(&view.data[view.offset..view.offset + len]));
        }
        let mut out = Vec::with_capacity(len);
        for r in 0..view.rows {
            let row = view.offset + r * view.row_stride;
            out.extend((0..view.cols).map(|c| view.data[row + c * view.col_stride]));
        }
        Ok(Cow::Owned(out))
    }

    fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }
}

/// `dst = lhs · rhs`, `dst` row-major, on the calling thread (the callers are already one task
/// among many on the rayon pool).
fn matmul(dst: &mut [f32], lhs: MatRef, rhs: MatRef) -> Result<()> {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    if rhs.rows != k || dst.len() != m * n {
        bail!(
            "{OP}: internal error: {m} × {k} times {} × {n} into {} floats",
            rhs.rows,
            dst.len()
        );
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        dst.fill(0.0);
        return Ok(());
    }
    // Re-checked here rather than trusted from the caller: `rows()` can move a view.
    let (lhs, rhs) = (lhs.checked()?, rhs.checked()?);
    let stride = |s: usize| isize::try_from(s).map_err(candle_core::Error::wrap);
    // SAFETY: `dst` is an exclusive slice of exactly m·n floats written with strides (1, n);
    // m, n, k ≥ 1 and `checked()` proved every element of `lhs` (m × k) and `rhs` (k × n) at
    // its strides, the first included, lies inside its slice, so the offsets stay in bounds;
    // the shared inputs cannot alias the exclusive `dst`. With
    // `read_dst = false` gemm writes `dst = beta·lhs·rhs` without reading it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            stride(n)?,
            false,
            lhs.data.as_ptr().add(lhs.offset),
            stride(lhs.col_stride)?,
            stride(lhs.row_stride)?,
            rhs.data.as_ptr().add(rhs.offset),
            stride(rhs.col_stride)?,
            stride(rhs.row_stride)?,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}

struct Forward {
    /// `lse − logit[target]` per row.
    losses: Vec<f64>,
    /// `grad_scale` × d(Σ row losses)/d(hidden), `n × d` row-major; empty without a scale.
    grad: Vec<f32>,
}

fn forward(
    hidden: MatRef,
    w: MatRef,
    packs: Option<&[FrozenPacks]>,
    bias: Option<&[f32]>,
    targets: &[u32],
    grad_scale: Option<f32>,
) -> Result<Forward> {
    let with_grad = grad_scale.is_some();
    let (n, d, vocab) = (hidden.rows, hidden.cols, w.rows);
    let blocks = vocab.div_ceil(VOCAB_BLOCK);
    let chunk = n.min(ROW_CHUNK);
    // The logits of one chunk of rows, stored block by block (each block `rows × width`,
    // row-major) so that each task owns one contiguous slice.
    let mut logits = vec![0f32; chunk * vocab];
    // Each block's share of the chunk's gradient, summed in block order afterwards: splitting
    // the `vocab`-long reduction of (softmax − onehot)·W this way keeps it deterministic.
    let mut partials = vec![0f32; if with_grad { blocks * chunk * d } else { 0 }];
    let mut losses = vec![0f64; n];
    let mut grad = vec![0f32; if with_grad { n * d } else { 0 }];
    let scale = grad_scale.unwrap_or(0.0);

    for row0 in (0..n).step_by(ROW_CHUNK) {
        let rows = ROW_CHUNK.min(n - row0);
        let h = hidden.rows(row0, rows);
        // The packed products read the chunk's rows as one row-major block.
        let h_rows = packs.map(|_| h.row_major_copy()).transpose()?;
        let targets = &targets[row0..row0 + rows];
        let logits = &mut logits[..rows * vocab];
        let block_len = rows * VOCAB_BLOCK;

        // Logits block by block, with each row's (max, Σ exp(x − max)) over the block.
        let stats = logits
            .par_chunks_mut(block_len)
            .enumerate()
            .map(|(b, block)| {
                let start = b * VOCAB_BLOCK;
                let width = block.len() / rows;
                match (packs, &h_rows) {
                    (Some(packs), Some(h_rows)) => {
                        packs[b].forward.matmul_t_into(h_rows, rows, block);
                    }
                    _ => matmul(block, h, w.rows(start, width).t())?,
                }
                Ok(block
                    .chunks_exact_mut(width)
                    .map(|row| {
                        if let Some(bias) = bias {
                            add_assign(row, &bias[start..start + width]);
                        }
                        max_and_sum_exp(row)
                    })
                    .collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>>>()?;

        // Per row: log-sum-exp over the blocks, in block order, and the loss.
        let mut lse = vec![0f32; rows];
        for (i, &target) in targets.iter().enumerate() {
            let max = stats
                .iter()
                .map(|s| s[i].0)
                .fold(f32::NEG_INFINITY, nan_max);
            // A block whose logits are all −∞ adds nothing (and would add NaN as written).
            let sum: f64 = stats
                .iter()
                .map(|s| s[i])
                .filter(|&(m, _)| m != f32::NEG_INFINITY)
                .map(|(m, sum)| f64::from(sum) * f64::from(m - max).exp())
                .sum();
            let row_lse = f64::from(max) + sum.ln();
            let t = target as usize;
            let (b, col) = (t / VOCAB_BLOCK, t % VOCAB_BLOCK);
            let width = VOCAB_BLOCK.min(vocab - b * VOCAB_BLOCK);
            let picked = logits[b * block_len + i * width + col];
            losses[row0 + i] = row_lse - f64::from(picked);
            lse[i] = row_lse as f32;
        }

        if !with_grad {
            continue;
        }
        // dL/dlogits = (softmax − onehot) · scale, in place, then that block's share of dL/dh.
        let partials = &mut partials[..blocks * rows * d];
        logits
            .par_chunks_mut(block_len)
            .zip(partials.par_chunks_mut(rows * d))
            .enumerate()
            .try_for_each(|(b, (block, partial))| {
                let start = b * VOCAB_BLOCK;
                let width = block.len() / rows;
                for ((row, &lse), &target) in block.chunks_exact_mut(width).zip(&lse).zip(targets) {
                    softmax_scaled(row, lse, scale);
                    if let Some(col) = (target as usize).checked_sub(start)
                        && col < width
                    {
                        row[col] -= scale;
                    }
                }
                // A scope that only scores keeps no backward packs; a gradient taken there
                // goes through gemm. Panels keep none either: they read the head in place
                // where they take `g·W` at all.
                let in_place = packs
                    .filter(|_| !crate::amx::available() && crate::panels::input_grad_in_place())
                    .and_then(|_| w.rows(start, width).as_row_major());
                match (packs.and_then(|packs| packs[b].backward.as_ref()), in_place) {
                    (Some(backward), _) => {
                        backward.matmul_t_into(block, rows, partial);
                        Ok(())
                    }
                    (None, Some(head)) => {
                        crate::panels::matmul_into(block, rows, head, width, d, partial);
                        Ok(())
                    }
                    (None, None) => matmul(
                        partial,
                        MatRef::row_major(block, rows, width)?,
                        w.rows(start, width),
                    ),
                }
            })?;
        let partials = &*partials;
        grad[row0 * d..(row0 + rows) * d]
            .par_chunks_mut(d)
            .enumerate()
            .for_each(|(i, out)| {
                for b in 0..blocks {
                    add_assign(out, &partials[(b * rows + i) * d..][..d]);
                }
            });
    }
    Ok(Forward { losses, grad })
}

fn add_assign(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// Not `f32::max`: a NaN logit must reach the loss, not be skipped.
#[inline(always)]
fn nan_max(m: f32, x: f32) -> f32 {
    if x > m || x.is_nan() { x } else { m }
}

/// Lanes of the running max and sum: fixed-size arrays are what the compiler turns into SIMD
/// registers, and a fixed lane count keeps the order of the additions, hence the bits, the
/// same on every run and every instruction set.
const LANES: usize = 16;

/// `(max, Σ exp(x − max))` of a row.
fn max_and_sum_exp(row: &[f32]) -> (f32, f32) {
    let (chunks, tail) = row.as_chunks::<LANES>();
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for chunk in chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            *m = nan_max(*m, x);
        }
    }
    let max = tail
        .iter()
        .chain(&lanes)
        .copied()
        .fold(f32::NEG_INFINITY, nan_max);
    if max == f32::NEG_INFINITY {
        return (max, 0.0);
    }
    let mut lanes = [0f32; LANES];
    for chunk in chunks {
        for (sum, &x) in lanes.iter_mut().zip(chunk) {
            *sum += exp_nonpositive(x - max);
        }
    }
    let tail: f32 = tail.iter().map(|&x| exp_nonpositive(x - max)).sum();
    (max, lanes.iter().sum::<f32>() + tail)
}

/// `row ← exp(row − lse) · scale`.
fn softmax_scaled(row: &mut [f32], lse: f32, scale: f32) {
    for x in row {
        *x = exp_nonpositive(*x - lse) * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(rng: &mut StdRng, shape: (usize, usize), scale: f32) -> Tensor {
        let data: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| rng.random_range(-scale..scale))
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    fn random_targets(rng: &mut StdRng, n: usize, vocab: usize) -> Tensor {
        let ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..vocab as u32)).collect();
        Tensor::from_vec(ids, n, &Device::Cpu).unwrap()
    }

    struct Case {
        hidden: Var,
        w: Tensor,
        bias: Option<Tensor>,
        targets: Tensor,
    }

    fn case(seed: u64, n: usize, d: usize, vocab: usize, with_bias: bool) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        let hidden = Var::from_tensor(&random(&mut rng, (n, d), 1.0)).unwrap();
        let w = random(&mut rng, (vocab, d), 0.5);
        let bias = with_bias.then(|| random(&mut rng, (1, vocab), 1.0).flatten_all().unwrap());
        let targets = random_targets(&mut rng, n, vocab);
        Case {
            hidden,
            w,
            bias,
            targets,
        }
    }

    /// Loss and d(loss·factor)/d(hidden).
    fn loss_and_grad(case: &Case, fused: bool, factor: f64) -> (f32, Vec<f32>) {
        let hidden = case.hidden.as_tensor();
        let bias = case.bias.as_ref();
        let loss = if fused {
            linear_cross_entropy(hidden, &case.w, bias, &case.targets, true).unwrap()
        } else {
            linear_cross_entropy_composed(hidden, &case.w, bias, &case.targets).unwrap()
        };
        assert_eq!(loss.dims(), &[] as &[usize]);
        let grads = loss.affine(factor, 0.0).unwrap().backward().unwrap();
        let grad = grads.get(hidden).unwrap();
        (
            loss.to_scalar().unwrap(),
            grad.flatten_all().unwrap().to_vec1().unwrap(),
        )
    }

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    fn assert_matches_composed(case: &Case) {
        let (loss, grad) = loss_and_grad(case, true, 1.0);
        let (ref_loss, ref_grad) = loss_and_grad(case, false, 1.0);
        let rel = (loss - ref_loss).abs() / ref_loss.abs();
        assert!(rel < 1e-5, "loss {loss} vs composed {ref_loss} (rel {rel})");
        let diff = max_abs_diff(&grad, &ref_grad);
        assert!(diff < 1e-5, "gradient differs by up to {diff}");
    }

    /// Each row's loss, and the gradient of a sum of rows weighted unevenly (as a preference
    /// loss weighs its answers' tokens), fused against composed.
    #[test]
    fn per_row_losses_and_their_weighted_gradient_match_composed() {
        for (seed, n, vocab) in [(11, 9, 37), (12, ROW_CHUNK + 5, 3000)] {
            let c = case(seed, n, 16, vocab, seed % 2 == 0);
            let weights: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
            let weights = Tensor::from_vec(weights, n, &Device::Cpu).unwrap();
            let run = |fused: bool| {
                let hidden = c.hidden.as_tensor();
                let rows = if fused {
                    linear_cross_entropy_rows(hidden, &c.w, c.bias.as_ref(), &c.targets, true)
                } else {
                    linear_cross_entropy_rows_composed(hidden, &c.w, c.bias.as_ref(), &c.targets)
                }
                .unwrap();
                assert_eq!(rows.dims(), &[n]);
                let grads = (&rows * &weights)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                let grad = grads.get(hidden).unwrap();
                (
                    rows.to_vec1::<f32>().unwrap(),
                    grad.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                )
            };
            let (rows, grad) = run(true);
            let (ref_rows, ref_grad) = run(false);
            assert!(
                max_abs_diff(&rows, &ref_rows) < 1e-4,
                "{rows:?} vs {ref_rows:?}"
            );
            let diff = max_abs_diff(&grad, &ref_grad);
            assert!(diff < 1e-5, "gradient differs by up to {diff}");
            // The rows' mean is the mean loss.
            let mean = linear_cross_entropy(
                c.hidden.as_tensor(),
                &c.w,
                c.bias.as_ref(),
                &c.targets,
                false,
            )
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
            let of_rows = rows.iter().map(|&r| f64::from(r)).sum::<f64>() / n as f64;
            assert!((f64::from(mean) - of_rows).abs() < 1e-5);
        }
    }

    #[test]
    fn matches_composed_small_vocab() {
        assert_matches_composed(&case(1, 40, 16, 37, false));
    }

    #[test]
    fn matches_composed_several_vocab_blocks() {
        // 5000 is several full vocabulary blocks and a partial one; 1000 is less than one.
        assert_matches_composed(&case(2, 24, 16, 5000, false));
        assert_matches_composed(&case(3, 33, 16, 1000, false));
    }

    #[test]
    fn matches_composed_over_several_row_chunks() {
        // Two full chunks and a partial one, and a single chunk smaller than ROW_CHUNK.
        assert_matches_composed(&case(4, 2 * ROW_CHUNK + 17, 16, 1000, false));
        assert_matches_composed(&case(5, 7, 16, 1000, false));
        assert_matches_composed(&case(6, 1, 16, 37, false));
    }

    #[test]
    fn matches_composed_with_bias() {
        assert_matches_composed(&case(7, 50, 16, 37, true));
        assert_matches_composed(&case(8, 50, 16, 3000, true));
    }

    /// Inside a training run on an AMX CPU the head multiplies by its packed vocabulary blocks,
    /// forward and for the hidden states' gradient; the answers stay the composed ones.
    #[test]
    fn inside_a_training_run_the_packed_head_matches_composed() {
        let _run = super::super::packs::PackScope::enter();
        assert_matches_composed(&case(9, ROW_CHUNK + 40, 48, 2500, true));
        // A hidden taken as a column slice: the packed product reads a row-major copy.
        let c = case(10, 30, 16, 1500, false);
        let wide = Tensor::cat(&[c.hidden.as_tensor(), c.hidden.as_tensor()], 1).unwrap();
        let hidden = wide.narrow(1, 16, 16).unwrap();
        let fused = linear_cross_entropy(&hidden, &c.w, None, &c.targets, true)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let (reference, _) = loss_and_grad(&c, false, 1.0);
        assert!((fused - reference).abs() / reference < 1e-5);
        assert_eq!(
            super::super::packs::PackScope::packed_bytes() > 0,
            crate::fused::packs::kernel_available()
        );
    }

    /// The validator's scoring (no gradient, in a scope that keeps forward packs between
    /// verdicts) multiplies by the packed head too, and each row's loss stays the composed one.
    #[test]
    fn scoring_in_a_keeping_scope_multiplies_by_the_packed_head() {
        use super::super::packs::{KeptPacks, PackScope};
        let c = case(11, ROW_CHUNK + 20, 32, 2100, false);
        let composed =
            linear_cross_entropy_rows_composed(c.hidden.as_tensor(), &c.w, None, &c.targets)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
        let mut kept = KeptPacks::default();
        let scored = {
            let _scope = PackScope::enter_keeping(&mut kept);
            linear_cross_entropy_rows(c.hidden.as_tensor(), &c.w, None, &c.targets, false)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        for (row, (s, r)) in scored.iter().zip(&composed).enumerate() {
            assert!(
                (s - r).abs() <= 1e-5 * r.abs().max(1.0),
                "row {row}: {s} vs {r}"
            );
        }
        assert_eq!(
            kept.bytes() > 0,
            crate::fused::packs::kernel_available(),
            "head not packed"
        );
    }

    #[test]
    fn strided_operands() {
        // A transposed (column-major) w and a hidden taken as a column slice.
        let c = case(9, 30, 16, 1000, true);
        let w_t = c.w.t().unwrap().contiguous().unwrap().t().unwrap();
        assert!(!w_t.is_contiguous());
        let wide = Tensor::cat(&[c.hidden.as_tensor(), c.hidden.as_tensor()], 1).unwrap();
        let hidden = wide.narrow(1, 16, 16).unwrap();
        assert!(!hidden.is_contiguous());
        let fused = linear_cross_entropy(&hidden, &w_t, c.bias.as_ref(), &c.targets, false)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let (reference, _) = loss_and_grad(&c, false, 1.0);
        assert!((fused - reference).abs() / reference < 1e-5);
    }

    #[test]
    fn without_grad_gives_the_same_loss() {
        let c = case(10, 70, 16, 1000, true);
        let (with, _) = loss_and_grad(&c, true, 1.0);
        let loss = linear_cross_entropy(
            c.hidden.as_tensor(),
            &c.w,
            c.bias.as_ref(),
            &c.targets,
            false,
        )
        .unwrap();
        assert_eq!(loss.to_scalar::<f32>().unwrap().to_bits(), with.to_bits());
        let err = loss.backward().unwrap_err().to_string();
        assert!(err.contains("with_grad = false"), "{err}");
    }

    #[test]
    fn gradient_scales_with_the_upstream_gradient() {
        let c = case(11, 20, 16, 1000, false);
        let (_, once) = loss_and_grad(&c, true, 1.0);
        let (_, thrice) = loss_and_grad(&c, true, 3.0);
        let tripled: Vec<f32> = once.iter().map(|g| g * 3.0).collect();
        assert!(max_abs_diff(&thrice, &tripled) < 1e-7);
    }

    #[test]
    fn repeated_runs_are_bit_identical() {
        let c = case(12, ROW_CHUNK + 9, 16, 5000, true);
        let (loss, grad) = loss_and_grad(&c, true, 1.0);
        for _ in 0..3 {
            let (again, grad_again) = loss_and_grad(&c, true, 1.0);
            assert_eq!(again.to_bits(), loss.to_bits());
            assert!(
                grad.iter()
                    .zip(&grad_again)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let c = case(13, 5, 16, 37, false);
        let h = c.hidden.as_tensor();
        let bad_targets = Tensor::new(&[1u32, 2, 37, 3, 4], &Device::Cpu).unwrap();
        let err = linear_cross_entropy(h, &c.w, None, &bad_targets, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("37") && err.contains("row 2"), "{err}");

        let errors = [
            linear_cross_entropy(&h.flatten_all().unwrap(), &c.w, None, &c.targets, true),
            linear_cross_entropy(h, &c.w.narrow(1, 0, 8).unwrap(), None, &c.targets, true),
            linear_cross_entropy(h, &c.w, None, &c.targets.narrow(0, 0, 4).unwrap(), true),
            linear_cross_entropy(h, &c.w, Some(&c.targets), &c.targets, true),
            linear_cross_entropy(
                h,
                &c.w,
                None,
                &c.targets.to_dtype(DType::I64).unwrap(),
                true,
            ),
            linear_cross_entropy(&h.narrow(0, 0, 0).unwrap(), &c.w, None, &c.targets, true),
        ];
        for err in errors {
            let err = err.unwrap_err().to_string();
            assert!(err.contains(OP), "{err}");
        }
    }

    fn peak_rss_mb() -> f64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    /// SmolLM2's head at a batch of 8 × 128 learned tokens. Run with
    /// `cargo test --release -p shardwork-trainer --lib fused::cross_entropy -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn timing_smollm2_head() {
        use std::time::Instant;
        let (n, d, vocab) = (1024, 576, 49_152);
        let c = case(14, n, d, vocab, false);
        let h = c.hidden.as_tensor();
        let time = |label: &str, f: &dyn Fn() -> f32| {
            f();
            let mut times = Vec::new();
            let mut loss = 0.0;
            for _ in 0..5 {
                let start = Instant::now();
                loss = f();
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            println!(
                "{label}: median {:.1} ms (min {:.1}), loss {loss}, peak RSS so far {:.0} MB",
                times[2],
                times[0],
                peak_rss_mb()
            );
        };
        println!(
            "threads: {}, peak RSS before: {:.0} MB",
            rayon::current_num_threads(),
            peak_rss_mb()
        );
        time("fused forward (with_grad = false)", &|| {
            linear_cross_entropy(h, &c.w, None, &c.targets, false)
                .unwrap()
                .to_scalar()
                .unwrap()
        });
        time("fused forward + backward", &|| {
            let loss = linear_cross_entropy(h, &c.w, None, &c.targets, true).unwrap();
            let grads = loss.backward().unwrap();
            assert!(grads.get(h).is_some());
            loss.to_scalar().unwrap()
        });
        time("composed forward + backward", &|| {
            let loss = linear_cross_entropy_composed(h, &c.w, None, &c.targets).unwrap();
            let grads = loss.backward().unwrap();
            assert!(grads.get(h).is_some());
            loss.to_scalar().unwrap()
        });
    }
}
