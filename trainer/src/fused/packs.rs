//! Frozen weights packed once per training run for this CPU's kernel: AMX tiles
//! ([`crate::amx`]) where the CPU has AMX, else f32 panels ([`crate::panels`]) where its plan
//! uses them (AVX-512 kinds; AVX2 when asked). Everything below says "AMX"; the panels take the same road under the same budget
//! and rules, with one difference: they pack only the forward orientation, since their input
//! gradient reads the weight in place (decision 0050).
//!
//! A training step multiplies by every frozen weight twice: `x·Wᵀ` in the forward pass and
//! `g·W` for the input gradient in the backward pass. On a CPU with AMX both go through the
//! split-bf16 kernel (f32 accuracy, about 1e-5 relative per product), whose operand must first
//! be packed into tiles: here once per run instead of on every product, which is what gemm does
//! (its packing was 11.6% of a SmolLM2 step on a Xeon). Each frozen weight gets two packs, one
//! per orientation, together the size of the f32 weight twice over.
//!
//! A run opens a [`PackScope`] on its thread; while one is open, [`packs_for`] returns each
//! frozen weight's packs, made on first use and kept until the thread's outermost scope closes,
//! so nothing outlives the run. Outside a scope (scoring, which packs its own weights; callers
//! that never train) and where neither kernel runs (AVX2 CPUs by default), the products stay on
//! gemm.
//!
//! Packs are kept up to [`KEPT_BYTES`] a thread ([`PANELS_KEPT_BYTES`] in panels), so a large
//! model's peak memory stays near its f32 weights' instead of three times them. A weight past the
//! budget is packed for each product of at least [`MIN_ROWS_PER_PACK`] rows, in the one orientation
//! that product needs, and freed after it (smaller products stay on gemm): the same tiles as a kept
//! pack, so the budget changes the speed, never a result. That pays since the packing pass is
//! vectorised ([`crate::amx`]); scalar, it did not (the 1B Llama shape trained at 26.4 tokens/s
//! packing per product against gemm's 40.5, 2-core Xeon). A weight kept quantized
//! ([`crate::quantized`]) is packed per product, never kept, but it is counted against the budget
//! as if it were ([`quantized_uses_packs`]), so that it takes AMX exactly where its f32 expansion
//! would and the two still train bit for bit alike.
//!
//! Held-out scoring runs the same frozen weights through many forward passes, one per verdict,
//! on whichever thread the validator's blocking pool hands it. A [`KeptPacks`] holds a job's
//! packs between those passes ([`PackScope::enter_keeping`]): forward packs only, since
//! scoring takes no gradient, so they take the size of the f32 weights once, not twice.
//!
//! Packs are keyed by candle's tensor id. A tensor's values never change unless it is a `Var`,
//! and a `Var` is never packed, so a pack cannot go stale within its scope.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;

use candle_core::{DType, Tensor, TensorId};
use shardwork_core::protocol::job_spec::TRAINING_PACKS_MAX_BYTES;

use super::with_f32s;
use crate::amx;
use crate::panels::{self, PanelWeight};

/// Bytes of AMX packs a thread keeps for one run ([`TRAINING_PACKS_MAX_BYTES`], which the API's
/// memory estimate counts). SmolLM2-135M's (every projection and the head) take 1.1 GB; a 1B
/// model's would take 10 GB, two and a half times its f32 weights.
pub const KEPT_BYTES: usize = TRAINING_PACKS_MAX_BYTES as usize;

/// Bytes of panels a thread keeps for one run: all of SmolLM2-135M's (513 MiB), and of the 1B
/// Llama shape a few layers, not its 1 GB head. At [`KEPT_BYTES`] the 1B shape's head and
/// layers filled 2 GiB and its peak rose from gemm's 0.44× PyTorch's to 0.57×, for 3% more speed
/// (2-core Zen 4): past issue 49's 0.5×. At this size its peak measured 0.48× (decision 0050).
pub const PANELS_KEPT_BYTES: usize = 640 << 20;

/// Bytes of packs a thread keeps for one run on this CPU's kernel.
fn kept_bytes() -> usize {
    if amx::available() {
        KEPT_BYTES
    } else {
        PANELS_KEPT_BYTES
    }
}

/// Bytes the packs of an `out × in` weight take in a training run, about: two bf16 halves per
/// value each way on AMX; one f32 per value forward alone in panels, whose input gradient reads
/// the weight in place ([`panels::matmul_into`]).
fn packed_size(out: usize, input: usize) -> usize {
    let ways = if amx::available() { 2 } else { 1 };
    ways * 2 * std::mem::size_of::<u16>() * out * input
}

/// Whether this CPU has a kernel that multiplies packed frozen weights: AMX first, else the
/// panels where this CPU's plan uses them. A process never changes its answer.
pub fn kernel_available() -> bool {
    amx::available() || panels::available()
}

/// One frozen weight packed one way for this CPU's kernel.
pub(crate) enum PackedWeight {
    /// AMX tiles, split bf16 at f32 accuracy.
    Amx(amx::PackedWeight),
    /// f32 panels for the AVX-512 or AVX2 kernel.
    Panels(PanelWeight),
}

impl PackedWeight {
    /// `w (out × in)` packed for `x·Wᵀ`.
    fn new(w: &[f32], out: usize, input: usize) -> PackedWeight {
        Self::new_in(Vec::new(), w, out, input)
    }

    /// [`PackedWeight::new`], on AMX into the memory of an earlier pack.
    fn new_in(tiles: Vec<u16>, w: &[f32], out: usize, input: usize) -> PackedWeight {
        if amx::available() {
            PackedWeight::Amx(amx::PackedWeight::new_in(tiles, w, None, out, input))
        } else {
            PackedWeight::Panels(PanelWeight::new(w, out, input))
        }
    }

    /// `x (rows × in) · packedᵀ` into `y (rows × out)`, overwriting it.
    pub(crate) fn matmul_t_into(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        match self {
            PackedWeight::Amx(p) => p.matmul_t_into(x, rows, y),
            PackedWeight::Panels(p) => p.matmul_t_into(x, rows, y),
        }
    }

    /// The memory of an AMX pack, for the next one packed for one product (none for panels).
    fn into_tiles(self) -> Vec<u16> {
        match self {
            PackedWeight::Amx(p) => p.into_tiles(),
            PackedWeight::Panels(_) => Vec::new(),
        }
    }

    fn size_in_bytes(&self) -> usize {
        match self {
            PackedWeight::Amx(p) => p.size_in_bytes(),
            PackedWeight::Panels(p) => p.size_in_bytes(),
        }
    }

    fn out_features(&self) -> usize {
        match self {
            PackedWeight::Amx(p) => p.out_features(),
            PackedWeight::Panels(p) => p.out_features(),
        }
    }

    fn in_features(&self) -> usize {
        match self {
            PackedWeight::Amx(p) => p.in_features(),
            PackedWeight::Panels(p) => p.in_features(),
        }
    }
}

/// The packs of one frozen weight `W (out, in)`: both ways in a training run, the forward one
/// alone in a scope that only scores.
pub(super) struct FrozenPacks {
    /// For `x·Wᵀ`.
    pub(super) forward: PackedWeight,
    /// For `g·W`; `None` where the scope takes no gradient ([`PackScope::enter_keeping`]) and
    /// for panels, which read the weight in place.
    pub(super) backward: Option<PackedWeight>,
}

impl FrozenPacks {
    /// Packs `w` (`out × in`, row-major) forward, and on AMX backward too when `gradients`
    /// (the panels' input gradient reads `w` in place).
    fn new(w: &[f32], out: usize, input: usize, gradients: bool) -> FrozenPacks {
        FrozenPacks {
            forward: PackedWeight::new(w, out, input),
            backward: (gradients && amx::available())
                .then(|| PackedWeight::Amx(amx::PackedWeight::transposed(w, out, input))),
        }
    }

    fn size_in_bytes(&self) -> usize {
        self.forward.size_in_bytes()
            + self
                .backward
                .as_ref()
                .map_or(0, PackedWeight::size_in_bytes)
    }
}

impl std::fmt::Debug for FrozenPacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrozenPacks")
            .field("out", &self.forward.out_features())
            .field("in", &self.forward.in_features())
            .finish()
    }
}

#[derive(Default)]
struct Scope {
    depth: usize,
    /// Packs only the forward orientation: a scope that scores and never takes a gradient.
    forward_only: bool,
    by_weight: HashMap<TensorId, Arc<FrozenPacks>>,
    /// A weight packed in blocks of rows (the language-model head's vocabulary blocks), by
    /// weight and rows per block.
    by_blocks: HashMap<(TensorId, usize), Arc<[FrozenPacks]>>,
    /// Quantized weights given AMX, by identity.
    quantized: HashSet<usize>,
    /// Bytes of everything above (a quantized weight counted as its packs would take), kept as
    /// entries are added: asked on every product, so never summed anew.
    bytes: usize,
    /// The memory of the last pack made for one product, reused by the next
    /// ([`PackedWeight::new_in`]); not counted in `bytes` (at most one weight's worth, one way).
    spare: Vec<u16>,
}

impl Scope {
    fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes the packs of an `out × in` weight take in this scope.
    fn packed_size(&self, out: usize, input: usize) -> usize {
        let packs = packed_size(out, input);
        if self.forward_only && amx::available() {
            packs / 2
        } else {
            packs
        }
    }
}

thread_local! {
    static SCOPE: RefCell<Scope> = RefCell::default();
}

/// While alive, frozen weights multiplied on this thread are packed once and reused. Scopes
/// nest; the outermost one frees the packs when it ends.
#[must_use = "the packs live only as long as the scope"]
pub struct PackScope {
    /// Bound to the thread whose packs it keeps.
    _thread: PhantomData<*const ()>,
}

impl PackScope {
    /// Opens a scope on this thread.
    pub fn enter() -> PackScope {
        SCOPE.with_borrow_mut(|s| s.depth += 1);
        PackScope {
            _thread: PhantomData,
        }
    }

    /// Opens a scope that scores with `kept`'s packs and leaves the packs it makes in `kept`
    /// when it ends, for the next scope opened with it, on this thread or another. It packs the
    /// forward orientation only: a gradient taken inside it is computed without packs. Inside
    /// an open scope it is a nested [`PackScope::enter`], and `kept` is left untouched.
    pub fn enter_keeping(kept: &mut KeptPacks) -> KeepingScope<'_> {
        if SCOPE.with_borrow(|s| s.depth > 0) {
            return KeepingScope {
                kept: None,
                _nested: Some(PackScope::enter()),
            };
        }
        SCOPE.with_borrow_mut(|s| {
            *s = std::mem::take(&mut kept.scope);
            s.depth = 1;
            s.forward_only = true;
        });
        KeepingScope {
            kept: Some(kept),
            _nested: None,
        }
    }

    /// Bytes of packs this thread keeps now.
    pub fn packed_bytes() -> usize {
        SCOPE.with_borrow(Scope::bytes)
    }
}

impl Drop for PackScope {
    fn drop(&mut self) {
        SCOPE.with_borrow_mut(|s| {
            s.depth -= 1;
            if s.depth == 0 {
                *s = Scope::default();
            }
        });
    }
}

/// A job's frozen-weight packs kept between the scopes that score with it
/// ([`PackScope::enter_keeping`]); empty on CPUs without AMX. Dropping it frees them.
#[derive(Default)]
pub struct KeptPacks {
    scope: Scope,
}

impl KeptPacks {
    /// Bytes of packs kept.
    pub fn bytes(&self) -> usize {
        self.scope.bytes
    }
}

impl std::fmt::Debug for KeptPacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptPacks")
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// The scope [`PackScope::enter_keeping`] opens: when it ends, the packs go back to the
/// [`KeptPacks`] it adopted.
#[must_use = "the packs are used only while the scope lives"]
pub struct KeepingScope<'a> {
    /// Where the packs go back to; `None` when the scope was nested in another.
    kept: Option<&'a mut KeptPacks>,
    /// The plain nested scope opened instead, inside another.
    _nested: Option<PackScope>,
}

impl Drop for KeepingScope<'_> {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            // The thread's scope goes back to the closed default; the packs to `kept`.
            let mut packs = SCOPE.with_borrow_mut(std::mem::take);
            packs.depth = 0;
            packs.spare = Vec::new();
            kept.scope = packs;
        }
    }
}

/// Whether frozen products on this thread may go through packs now: a scope is open and the
/// CPU has a kernel for them.
fn active() -> bool {
    kernel_available() && SCOPE.with_borrow(|s| s.depth > 0)
}

/// Whether `weight` may be packed now: a frozen f32 CPU tensor, AMX, an open scope.
fn packable(weight: &Tensor) -> bool {
    !weight.is_variable() && weight.dtype() == DType::F32 && weight.device().is_cpu() && active()
}

/// How a frozen weight multiplies inside a training run on AMX.
#[derive(Debug, Clone)]
pub(super) enum Frozen {
    /// Packed on first use, both ways, and kept for the run.
    Kept(Arc<FrozenPacks>),
    /// Past the kept bytes ([`KEPT_BYTES`], [`PANELS_KEPT_BYTES`]): packed for each product,
    /// in the orientation it needs, then freed.
    PerProduct,
}

impl Frozen {
    /// `x·Wᵀ` into `y` for the frozen `w` (`out × in`, row-major) and `x` (`rows × in`).
    pub(super) fn forward_into(
        &self,
        w: &[f32],
        out: usize,
        input: usize,
        x: &[f32],
        y: &mut [f32],
    ) {
        let rows = x.len() / input.max(1);
        match self {
            Frozen::Kept(packs) => packs.forward.matmul_t_into(x, rows, y),
            Frozen::PerProduct => once_forward_into(w, out, input, x, y),
        }
    }

    /// `g·W` into `dx` for the frozen `w` (`out × in`, row-major) and `g` (`rows × out`).
    pub(super) fn input_grad_into(
        &self,
        w: &[f32],
        out: usize,
        input: usize,
        g: &[f32],
        dx: &mut [f32],
    ) {
        let rows = g.len() / out.max(1);
        match self {
            Frozen::Kept(packs) => match &packs.backward {
                Some(backward) => backward.matmul_t_into(g, rows, dx),
                None => once_input_grad_into(w, out, input, g, dx),
            },
            Frozen::PerProduct => once_input_grad_into(w, out, input, g, dx),
        }
    }
}

/// `x·Wᵀ` into `y` on AMX, `w` (`out × in`) packed for this product alone in the scope's
/// reused memory (a fresh buffer where no scope is open).
pub(crate) fn once_forward_into(w: &[f32], out: usize, input: usize, x: &[f32], y: &mut [f32]) {
    let packed = PackedWeight::new_in(take_spare(), w, out, input);
    packed.matmul_t_into(x, x.len() / input.max(1), y);
    give_back_spare(packed.into_tiles());
}

/// `g·W` into `dx` on AMX, `w` (`out × in`) packed for this product alone, as
/// [`once_forward_into`]; in panels, `w` read in place.
pub(crate) fn once_input_grad_into(w: &[f32], out: usize, input: usize, g: &[f32], dx: &mut [f32]) {
    let rows = g.len() / out.max(1);
    if !kernel_takes_input_grad() {
        // Intel's panels leave `g·W` to gemm: the one place that decides, for kept, per-product
        // and quantized weights alike, so a quantized weight trains bit for bit as its expansion.
        super::matmul::frozen_input_grad_on_gemm(g, w, out, input, dx);
        return;
    }
    if !amx::available() {
        panels::matmul_into(g, rows, w, out, input, dx);
        return;
    }
    let packed = amx::PackedWeight::transposed_in(take_spare(), w, out, input);
    packed.matmul_t_into(g, rows, dx);
    give_back_spare(packed.into_tiles());
}

fn take_spare() -> Vec<u16> {
    SCOPE.with_borrow_mut(|s| std::mem::take(&mut s.spare))
}

/// Keeps `tiles` for the next pack made for one product, while a scope is open.
fn give_back_spare(tiles: Vec<u16>) {
    SCOPE.with_borrow_mut(|s| {
        if s.depth > 0 {
            s.spare = tiles;
        }
    });
}

/// Rows a product needs before a weight that is not kept is packed for it: packing costs about
/// what `rows` rows of the product save over gemm, so below this gemm is faster. The rule
/// depends only on the product's shape, so every worker with AMX takes the same path.
pub(super) const MIN_ROWS_PER_PACK: usize = 256;

/// Whether a product of `rows` rows by a weight past the budget goes to AMX, packed for it:
/// the one rule [`packs_for`] and [`quantized_uses_packs`] share, so that a quantized weight
/// takes AMX exactly where its f32 expansion would. Panels pack per product only where they
/// take `g·W` too (Zen 4): on Intel, packing a panel for one product lost to gemm (the 1B
/// shape 0.91x, decision 0050).
fn packed_per_product(rows: usize) -> bool {
    rows >= MIN_ROWS_PER_PACK && kernel_takes_input_grad()
}

/// Whether this CPU's kernel multiplies `g·W` too (AMX; panels on Zen 4), rather than leaving
/// it to gemm ([`once_input_grad_into`]).
fn kernel_takes_input_grad() -> bool {
    amx::available() || panels::input_grad_in_place()
}

/// How the frozen f32 CPU weight `weight (out, in)` multiplies `rows` rows inside a run: kept packs
/// while they fit in the kept bytes ([`kept_bytes`]), then packed per product for products of at
/// least [`MIN_ROWS_PER_PACK`] rows. `None` (gemm) outside a scope, on CPUs without AMX, and for
/// smaller products of weights past the budget.
pub(super) fn packs_for(
    op: &str,
    weight: &Tensor,
    rows: usize,
) -> candle_core::Result<Option<Frozen>> {
    if !packable(weight) {
        return Ok(None);
    }
    let (out, input) = weight.dims2()?;
    let (found, room, gradients) = SCOPE.with_borrow(|s| {
        let found = s.by_weight.get(&weight.id()).cloned();
        let room = s.bytes() + s.packed_size(out, input) <= kept_bytes();
        (found, room, !s.forward_only)
    });
    if let Some(found) = found {
        return Ok(Some(Frozen::Kept(found)));
    }
    if !room {
        return Ok(packed_per_product(rows).then_some(Frozen::PerProduct));
    }
    // Packed outside the borrow: packing runs on rayon, whose tasks may multiply too.
    let packs = with_f32s(op, "the weight", &weight.contiguous()?, |w| {
        Ok(Arc::new(FrozenPacks::new(w, out, input, gradients)))
    })?;
    SCOPE.with_borrow_mut(|s| {
        if s.by_weight.insert(weight.id(), packs.clone()).is_none() {
            s.bytes += packs.size_in_bytes();
        }
    });
    Ok(Some(Frozen::Kept(packs)))
}

/// Whether the quantized weight `identity` (`out × in`) multiplies `rows` rows on AMX, packed
/// for the product: wherever its f32 expansion would be multiplied on AMX by [`packs_for`],
/// kept or not, the budget counted the same way.
pub(crate) fn quantized_uses_packs(identity: usize, out: usize, input: usize, rows: usize) -> bool {
    if !active() {
        return false;
    }
    SCOPE.with_borrow_mut(|s| {
        if s.quantized.contains(&identity) {
            return true;
        }
        let size = packed_size(out, input);
        let room = s.bytes + size <= kept_bytes();
        if room {
            s.quantized.insert(identity);
            s.bytes += size;
        }
        room || packed_per_product(rows)
    })
}

/// [`packs_for`] for `weight (rows, in)` cut into blocks of `block_rows` rows (the last one
/// shorter), each packed on its own: block `b` holds rows `b·block_rows..`.
pub(super) fn block_packs_for(
    op: &str,
    weight: &Tensor,
    block_rows: usize,
) -> candle_core::Result<Option<Arc<[FrozenPacks]>>> {
    if !packable(weight) || block_rows == 0 {
        return Ok(None);
    }
    let key = (weight.id(), block_rows);
    let (rows, input) = weight.dims2()?;
    let (found, room, gradients) = SCOPE.with_borrow(|s| {
        let found = s.by_blocks.get(&key).cloned();
        let room = s.bytes() + s.packed_size(rows, input) <= kept_bytes();
        (found, room, !s.forward_only)
    });
    if found.is_some() || !room {
        return Ok(found);
    }
    let packs: Arc<[FrozenPacks]> = with_f32s(op, "the weight", &weight.contiguous()?, |w| {
        Ok(w.chunks(block_rows * input)
            .map(|block| FrozenPacks::new(block, block.len() / input, input, gradients))
            .collect())
    })?;
    SCOPE.with_borrow_mut(|s| {
        if s.by_blocks.insert(key, packs.clone()).is_none() {
            s.bytes += packs.iter().map(FrozenPacks::size_in_bytes).sum::<usize>();
        }
    });
    Ok(Some(packs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn weight() -> Tensor {
        Tensor::randn(0f32, 1.0, (40, 24), &Device::Cpu).unwrap()
    }

    #[test]
    fn nothing_is_packed_outside_a_scope() {
        assert!(packs_for("test", &weight(), 1024).unwrap().is_none());
    }

    #[test]
    fn a_scope_packs_each_weight_once_and_frees_them_when_it_ends() {
        if !kernel_available() {
            return;
        }
        let w = weight();
        {
            let _outer = PackScope::enter();
            let kept = |w: &Tensor| match packs_for("test", w, 1).unwrap() {
                Some(Frozen::Kept(packs)) => packs,
                other => panic!("not kept inside a scope: {other:?}"),
            };
            let first = kept(&w);
            {
                let _inner = PackScope::enter();
                assert!(Arc::ptr_eq(&first, &kept(&w)), "packed twice");
            }
            assert!(
                PackScope::packed_bytes() > 0,
                "the inner scope freed the outer's packs"
            );
        }
        assert_eq!(PackScope::packed_bytes(), 0);
        assert!(packs_for("test", &w, 1024).unwrap().is_none());
    }

    #[test]
    fn a_weight_in_blocks_packs_each_block_with_its_own_rows() {
        if !kernel_available() {
            return;
        }
        let _scope = PackScope::enter();
        let w = weight();
        let blocks = block_packs_for("test", &w, 16).unwrap().unwrap();
        let rows: Vec<usize> = blocks.iter().map(|b| b.forward.out_features()).collect();
        assert_eq!(rows, [16, 16, 8]);
        // Panels read the weight in place for the input gradient; AMX packs it.
        assert!(blocks.iter().all(|b| match &b.backward {
            Some(backward) => backward.out_features() == 24,
            None => !amx::available(),
        }));
    }

    /// Past the budget a weight, or a quantized one, is packed per product for large products
    /// (on AMX, and in panels where they take `g·W` too; on gemm otherwise) and stays on gemm
    /// for small ones; a weight in blocks stays on gemm.
    #[test]
    fn weights_past_the_budget_are_packed_per_product_or_stay_on_gemm() {
        if !kernel_available() {
            return;
        }
        let _scope = PackScope::enter();
        // 2^29 values: 2 GiB of panels (4 of AMX tiles), past the whole budget, with a small
        // weight kept before it.
        let small = weight();
        assert!(matches!(
            packs_for("test", &small, 1).unwrap(),
            Some(Frozen::Kept(_))
        ));
        assert!(quantized_uses_packs(1, 40, 24, 1));
        let (out, input) = (1 << 15, 1 << 14);
        assert!(packed_size(out, input) >= kept_bytes());
        // A broadcast view: the size of such a weight without its memory (it is never read).
        let large = Tensor::zeros(1, DType::F32, &Device::Cpu)
            .unwrap()
            .broadcast_as((out, input))
            .unwrap();
        let (few, many) = (MIN_ROWS_PER_PACK - 1, MIN_ROWS_PER_PACK);
        let per_product = kernel_takes_input_grad();
        assert!(packs_for("test", &large, few).unwrap().is_none());
        assert_eq!(
            matches!(
                packs_for("test", &large, many).unwrap(),
                Some(Frozen::PerProduct)
            ),
            per_product
        );
        assert!(block_packs_for("test", &large, 1024).unwrap().is_none());
        assert!(!quantized_uses_packs(2, out, input, few));
        assert_eq!(quantized_uses_packs(2, out, input, many), per_product);
        assert!(
            quantized_uses_packs(1, 40, 24, 1),
            "a quantized weight given AMX keeps it"
        );
        assert!(
            PackScope::packed_bytes() < 1 << 20,
            "the large weight was kept"
        );
    }

    /// A product with a weight packed for it gives exactly what the kept packs give, both ways:
    /// whether a weight fits the budget changes the speed, never a result.
    #[test]
    fn a_product_packed_for_itself_equals_one_with_kept_packs() {
        if !kernel_available() {
            return;
        }
        let _scope = PackScope::enter();
        let (out, input, rows) = (40, 24, 33);
        let w = weight();
        let Some(kept) = packs_for("test", &w, rows).unwrap() else {
            panic!("not packed inside a scope");
        };
        let ws = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let x = Tensor::randn(0f32, 1.0, rows * input, &Device::Cpu).unwrap();
        let x = x.to_vec1::<f32>().unwrap();
        let g = Tensor::randn(0f32, 1.0, rows * out, &Device::Cpu).unwrap();
        let g = g.to_vec1::<f32>().unwrap();
        let run = |frozen: &Frozen| {
            let mut y = vec![0f32; rows * out];
            frozen.forward_into(&ws, out, input, &x, &mut y);
            let mut dx = vec![0f32; rows * input];
            frozen.input_grad_into(&ws, out, input, &g, &mut dx);
            (y, dx)
        };
        let once = run(&Frozen::PerProduct);
        assert!(once == run(&kept), "packed for the product ≠ kept");
        // Again, into the memory the first products left behind.
        assert!(
            once == run(&Frozen::PerProduct),
            "a reused pack ≠ a fresh one"
        );
    }

    /// A keeping scope leaves its forward packs in the `KeptPacks` for the next one, on any
    /// thread, and the thread's own scope empty; nested in an open scope it keeps nothing.
    #[test]
    fn a_keeping_scope_hands_its_forward_packs_to_the_next() {
        if !kernel_available() {
            return;
        }
        let w = weight();
        let mut kept = KeptPacks::default();
        let first = {
            let _scope = PackScope::enter_keeping(&mut kept);
            match packs_for("test", &w, 1).unwrap() {
                Some(Frozen::Kept(packs)) => packs,
                other => panic!("not kept inside a keeping scope: {other:?}"),
            }
        };
        assert!(first.backward.is_none(), "a scoring scope packed backward");
        assert_eq!(PackScope::packed_bytes(), 0, "the thread kept the packs");
        assert_eq!(kept.bytes(), first.size_in_bytes());
        let again = std::thread::scope(|threads| {
            threads
                .spawn(|| {
                    let _scope = PackScope::enter_keeping(&mut kept);
                    match packs_for("test", &w, 1).unwrap() {
                        Some(Frozen::Kept(packs)) => packs,
                        other => panic!("not kept on another thread: {other:?}"),
                    }
                })
                .join()
                .unwrap()
        });
        assert!(Arc::ptr_eq(&first, &again), "packed again");
        {
            let _outer = PackScope::enter();
            let _nested = PackScope::enter_keeping(&mut kept);
            let Some(Frozen::Kept(packs)) = packs_for("test", &w, 1).unwrap() else {
                panic!("not packed in the outer scope");
            };
            assert!(
                !Arc::ptr_eq(&first, &packs),
                "the nested scope used the kept packs"
            );
            assert!(
                !SCOPE.with_borrow(|s| s.forward_only),
                "the nested scope is a scoring scope"
            );
            // Panels read the weight in place for the input gradient: they pack it on AMX only.
            assert_eq!(
                packs.backward.is_some(),
                amx::available(),
                "the training scope lost its backward pack"
            );
        }
        assert_eq!(PackScope::packed_bytes(), 0);
        assert_eq!(
            kept.bytes(),
            first.size_in_bytes(),
            "the nested scope touched them"
        );
    }

    #[test]
    fn variables_are_never_packed() {
        let _scope = PackScope::enter();
        let v = Var::from_tensor(&weight()).unwrap();
        assert!(packs_for("test", v.as_tensor(), 1024).unwrap().is_none());
    }
}
