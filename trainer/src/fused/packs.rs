//! Frozen weights packed once per training run for the AMX kernel ([`crate::amx`]).
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
//! that never train) and on CPUs without AMX, the products stay on gemm.
//!
//! Packs are kept up to [`KEPT_BYTES`] a thread; a weight that would go past it stays on gemm,
//! so a large model's peak memory stays near its f32 weights' instead of three times them.
//! Packing each such weight for every product instead was measured and left out: on the 1B
//! Llama shape it trained at 26.4 tokens/s against gemm's 40.5 (same run, 2-core Xeon).
//! A weight kept quantized ([`crate::quantized`]) is packed per product, never kept, but it is
//! counted against the budget as if it were ([`quantized_uses_amx`]), so that it takes AMX
//! exactly where its f32 expansion would and the two still train bit for bit alike.
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
use crate::amx::{self, PackedWeight};

/// Bytes of packs a thread keeps for one run ([`TRAINING_PACKS_MAX_BYTES`], which the API's
/// memory estimate counts). SmolLM2-135M's (every projection and the head) take 1.1 GB; a 1B
/// model's would take 10 GB, two and a half times its f32 weights.
pub const KEPT_BYTES: usize = TRAINING_PACKS_MAX_BYTES as usize;

/// Bytes both packs of an `out × in` weight take, about: two bf16 halves per value, each way.
fn packed_size(out: usize, input: usize) -> usize {
    2 * 2 * std::mem::size_of::<u16>() * out * input
}

/// Both packs of one frozen weight `W (out, in)`.
pub(super) struct FrozenPacks {
    /// For `x·Wᵀ`.
    pub(super) forward: PackedWeight,
    /// For `g·W`.
    pub(super) backward: PackedWeight,
}

impl FrozenPacks {
    /// Packs `w` (`out × in`, row-major) both ways.
    fn new(w: &[f32], out: usize, input: usize) -> FrozenPacks {
        FrozenPacks {
            forward: PackedWeight::new(w, None, out, input),
            backward: PackedWeight::transposed(w, out, input),
        }
    }

    fn size_in_bytes(&self) -> usize {
        self.forward.size_in_bytes() + self.backward.size_in_bytes()
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
    by_weight: HashMap<TensorId, Arc<FrozenPacks>>,
    /// A weight packed in blocks of rows (the language-model head's vocabulary blocks), by
    /// weight and rows per block.
    by_blocks: HashMap<(TensorId, usize), Arc<[FrozenPacks]>>,
    /// Quantized weights given AMX, by identity.
    quantized: HashSet<usize>,
    /// Bytes of everything above (a quantized weight counted as its packs would take), kept as
    /// entries are added: asked on every product, so never summed anew.
    bytes: usize,
}

impl Scope {
    fn bytes(&self) -> usize {
        self.bytes
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
                s.by_weight.clear();
                s.by_blocks.clear();
                s.quantized.clear();
                s.bytes = 0;
            }
        });
    }
}

/// Whether frozen products on this thread may go through AMX now: a scope is open and the CPU
/// has it.
fn active() -> bool {
    amx::available() && SCOPE.with_borrow(|s| s.depth > 0)
}

/// Whether `weight` may be packed now: a frozen f32 CPU tensor, AMX, an open scope.
fn packable(weight: &Tensor) -> bool {
    !weight.is_variable() && weight.dtype() == DType::F32 && weight.device().is_cpu() && active()
}

/// The packs of the frozen f32 CPU weight `weight (out, in)`, when a scope is open on this
/// thread, the CPU has AMX and they fit in [`KEPT_BYTES`]; `None` otherwise (the caller then
/// multiplies with gemm).
pub(super) fn packs_for(
    op: &str,
    weight: &Tensor,
) -> candle_core::Result<Option<Arc<FrozenPacks>>> {
    if !packable(weight) {
        return Ok(None);
    }
    let (out, input) = weight.dims2()?;
    let (found, room) = SCOPE.with_borrow(|s| {
        let found = s.by_weight.get(&weight.id()).cloned();
        (found, s.bytes() + packed_size(out, input) <= KEPT_BYTES)
    });
    if found.is_some() || !room {
        return Ok(found);
    }
    // Packed outside the borrow: packing runs on rayon, whose tasks may multiply too.
    let packs = with_f32s(op, "the weight", &weight.contiguous()?, |w| {
        Ok(Arc::new(FrozenPacks::new(w, out, input)))
    })?;
    SCOPE.with_borrow_mut(|s| {
        if s.by_weight.insert(weight.id(), packs.clone()).is_none() {
            s.bytes += packs.size_in_bytes();
        }
    });
    Ok(Some(packs))
}

/// Whether the quantized weight `identity` (`out × in`) multiplies on AMX: where its f32
/// expansion would have its packs kept by [`packs_for`], the budget counted the same way.
pub(crate) fn quantized_uses_amx(identity: usize, out: usize, input: usize) -> bool {
    if !active() {
        return false;
    }
    SCOPE.with_borrow_mut(|s| {
        if s.quantized.contains(&identity) {
            return true;
        }
        let size = packed_size(out, input);
        let room = s.bytes + size <= KEPT_BYTES;
        if room {
            s.quantized.insert(identity);
            s.bytes += size;
        }
        room
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
    let (found, room) = SCOPE.with_borrow(|s| {
        let found = s.by_blocks.get(&key).cloned();
        (found, s.bytes() + packed_size(rows, input) <= KEPT_BYTES)
    });
    if found.is_some() || !room {
        return Ok(found);
    }
    let packs: Arc<[FrozenPacks]> = with_f32s(op, "the weight", &weight.contiguous()?, |w| {
        Ok(w.chunks(block_rows * input)
            .map(|block| FrozenPacks::new(block, block.len() / input, input))
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
        assert!(packs_for("test", &weight()).unwrap().is_none());
    }

    #[test]
    fn a_scope_packs_each_weight_once_and_frees_them_when_it_ends() {
        if !amx::available() {
            return;
        }
        let w = weight();
        {
            let _outer = PackScope::enter();
            let kept = |w: &Tensor| {
                packs_for("test", w)
                    .unwrap()
                    .expect("packed inside a scope")
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
        assert!(packs_for("test", &w).unwrap().is_none());
    }

    #[test]
    fn a_weight_in_blocks_packs_each_block_with_its_own_rows() {
        if !amx::available() {
            return;
        }
        let _scope = PackScope::enter();
        let w = weight();
        let blocks = block_packs_for("test", &w, 16).unwrap().unwrap();
        let rows: Vec<usize> = blocks.iter().map(|b| b.forward.out_features()).collect();
        assert_eq!(rows, [16, 16, 8]);
        assert!(blocks.iter().all(|b| b.backward.out_features() == 24));
    }

    /// Past the budget a weight, whole or in blocks, or quantized, stays on gemm.
    #[test]
    fn weights_past_the_budget_stay_on_gemm() {
        if !amx::available() {
            return;
        }
        let _scope = PackScope::enter();
        // 2^28 values: 2 GiB of packs, the whole budget, with a small weight kept before it.
        let small = weight();
        assert!(packs_for("test", &small).unwrap().is_some());
        assert!(quantized_uses_amx(1, 40, 24));
        let (out, input) = (1 << 14, 1 << 14);
        assert!(packed_size(out, input) >= KEPT_BYTES);
        // A broadcast view: the size of such a weight without its memory (it is never read).
        let large = Tensor::zeros(1, DType::F32, &Device::Cpu)
            .unwrap()
            .broadcast_as((out, input))
            .unwrap();
        assert!(packs_for("test", &large).unwrap().is_none());
        assert!(block_packs_for("test", &large, 1024).unwrap().is_none());
        assert!(!quantized_uses_amx(2, out, input));
        assert!(
            quantized_uses_amx(1, 40, 24),
            "a quantized weight given AMX keeps it"
        );
        assert!(
            PackScope::packed_bytes() < 1 << 20,
            "the large weight was kept"
        );
    }

    #[test]
    fn variables_are_never_packed() {
        let _scope = PackScope::enter();
        let v = Var::from_tensor(&weight()).unwrap();
        assert!(packs_for("test", v.as_tensor()).unwrap().is_none());
    }
}
