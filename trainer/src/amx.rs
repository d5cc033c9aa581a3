//! `y = x·Wᵀ + b` on Intel AMX tiles, at f32 accuracy through a three-term bf16 split: scoring's
//! linear layers ([`crate::inference`]) and training's frozen products, forward and input
//! gradient ([`crate::fused::packs`]).
//!
//! AMX multiplies bf16 tiles into f32 accumulators at about 1 TFLOP/s a core (this machine's
//! Xeon: 1.75 TFLOP/s measured on one core), against about 75 GFLOP/s for candle's f32 gemm.
//! bf16 alone keeps 8 bits of mantissa, which would let a validator's verdicts depend on
//! whether its CPU has AMX. So every operand is split into `hi = bf16(v)` and
//! `lo = bf16(v − hi)` and the product taken as `hi·hi + hi·lo + lo·hi`: 16 bits of each
//! operand, every partial product exact in f32, f32 accumulation. The error is ~1e-5 relative
//! per product (tested against f64), three AMX passes still beat f32 gemm several times over,
//! and scoring gives the same logits, to ~1e-5, with or without AMX.
//!
//! Layouts, chosen so the inner loop needs nothing but constant displacements:
//! * `W` is packed once per model into 16×16 tiles of bf16 pairs (the `B` operand of
//!   `tdpbf16ps`), `hi` and `lo` tiles interleaved, all `k` tiles of a 16-column block in a row.
//! * Each 16-row block of `x` is converted per call into rows of `[hi 32][lo 32]` groups.
//! * Two 16×16 f32 accumulators (32 output columns) start from the bias, loaded with stride 0.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use rayon::prelude::*;

/// Rows and columns of every tile (`tdpbf16ps` multiplies 16×32 bf16 by 32×16 bf16).
const TILE: usize = 16;
/// bf16 values along `k` in one tile.
const TILE_K: usize = 32;
/// `u16`s in one packed weight tile (1 KiB).
const TILE_U16: usize = TILE * TILE_K;
/// Rows and columns of output one kernel call makes (2 × 2 tiles).
const BLOCK: usize = 2 * TILE;
/// Rows of `x` one parallel task converts and multiplies. Small tasks keep the converted rows
/// in L1/L2 while the weights stream past: measured on MiniLM scoring, 32/64/128/256 rows took
/// 0.68/0.66/0.69/0.78 s (larger tasks also balance worse over two cores); in SmolLM2 training
/// (1024-row products) 64/128/256/512 gave 223/220/187/187 tokens/s.
const ROWS_PER_TASK: usize = 2 * BLOCK;

/// Whether this CPU and kernel run AMX bf16 (checked once: CPUID, then the Linux permission
/// request every process must make before touching tile data).
///
/// `SHARDWORK_AMX=off` in the environment turns it off for the process: every product then
/// takes the portable path (gemm), as on a CPU without AMX, so the two can be compared on one
/// machine (`shardwork bench train` runs candle both ways).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| !switched_off() && detect())
}

/// The environment variable that turns AMX off, and the value that does it.
pub const SWITCH: (&str, &str) = ("SHARDWORK_AMX", "off");

fn switched_off() -> bool {
    std::env::var(SWITCH.0).is_ok_and(|v| v == SWITCH.1)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    if __cpuid(0).eax < 7 {
        return false;
    }
    let leaf7 = __cpuid_count(7, 0);
    let amx_bf16 = (leaf7.edx >> 22) & 1 == 1;
    let amx_tile = (leaf7.edx >> 24) & 1 == 1;
    if !(amx_bf16 && amx_tile) {
        return false;
    }
    // Linux hands out the 8 KiB tile state only on request (arch_prctl(ARCH_REQ_XCOMP_PERM,
    // XFEATURE_XTILEDATA)); it fails where the kernel or hypervisor does not support it.
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it changes only this process's
    // permission to use AMX state.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// bf16 bits of `v`, rounded to nearest even (the operands here are finite).
#[inline(always)]
fn bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let rounding = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(rounding) >> 16) as u16
}

#[inline(always)]
fn bf16_value(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `(hi, lo)` with `hi + lo` equal to `v` to 16 significant bits.
#[inline(always)]
fn split(v: f32) -> (u16, u16) {
    let hi = bf16_bits(v);
    (hi, bf16_bits(v - bf16_value(hi)))
}

/// Applied to each output row's block of columns while it is still in L1 (an activation, say;
/// scoring's GELU), or nothing.
pub trait Epilogue: Fn(&mut [f32]) + Sync {}

impl<F: Fn(&mut [f32]) + Sync> Epilogue for F {}

/// The epilogue that leaves the product as it is.
pub fn no_epilogue(_: &mut [f32]) {}

/// A weight `(n, k)` and bias `(n)`, packed for [`PackedWeight::matmul_t`].
pub struct PackedWeight {
    n: usize,
    k: usize,
    k_blocks: usize,
    /// Column blocks of 16, rounded up to an even count (the kernel makes 32 columns at once).
    n_blocks: usize,
    /// Tiles in `[column block][k block][hi | lo]` order.
    tiles: Vec<u16>,
    /// `n_blocks × 16`, zero past `n`.
    bias: Vec<f32>,
}

impl PackedWeight {
    /// Packs `weight` (row-major `n × k`, as a linear layer stores it) and `bias` (`n`), for
    /// `x·Wᵀ + b`.
    pub fn new(weight: &[f32], bias: Option<&[f32]>, n: usize, k: usize) -> PackedWeight {
        Self::new_in(Vec::new(), weight, bias, n, k)
    }

    /// [`PackedWeight::new`] into `tiles`, the memory of an earlier pack
    /// ([`PackedWeight::into_tiles`]): a weight packed for one product at a time reuses one
    /// buffer instead of paying the page faults and page zeroing of a fresh allocation (for
    /// the 1B Llama shape's 64 MiB packs, more than half of what the packing itself cost).
    pub fn new_in(
        tiles: Vec<u16>,
        weight: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        k: usize,
    ) -> PackedWeight {
        assert_eq!(weight.len(), n * k, "weight is not n × k");
        Self::pack(tiles, n, k, bias, Source::Rows(weight))
    }

    /// Packs the transpose of `weight` (row-major `k × n`), for `x·W` without a bias: a frozen
    /// layer's input gradient `g·W`, packed from the layer's own weight without a transposed
    /// copy.
    pub fn transposed(weight: &[f32], k: usize, n: usize) -> PackedWeight {
        Self::transposed_in(Vec::new(), weight, k, n)
    }

    /// [`PackedWeight::transposed`] into the memory of an earlier pack, as
    /// [`PackedWeight::new_in`].
    pub fn transposed_in(tiles: Vec<u16>, weight: &[f32], k: usize, n: usize) -> PackedWeight {
        assert_eq!(weight.len(), k * n, "weight is not k × n");
        Self::pack(tiles, n, k, None, Source::Columns(weight))
    }

    /// The tiles' memory, for the next [`PackedWeight::new_in`] or
    /// [`PackedWeight::transposed_in`].
    pub fn into_tiles(self) -> Vec<u16> {
        self.tiles
    }

    /// Bytes the packed tiles and bias take.
    pub fn size_in_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<u16>() + self.bias.len() * std::mem::size_of::<f32>()
    }

    /// Packs `n` columns of `k` values from `source` into `tiles`, whatever they held.
    fn pack(
        mut tiles: Vec<u16>,
        n: usize,
        k: usize,
        bias: Option<&[f32]>,
        source: Source<'_>,
    ) -> PackedWeight {
        let k_blocks = k.div_ceil(TILE_K);
        let n_blocks = n.div_ceil(2 * TILE) * 2;
        let block_len = k_blocks * 2 * TILE_U16;
        // Stale values are left where the memory is reused: every block is written whole.
        tiles.truncate(n_blocks * block_len);
        tiles.resize(n_blocks * block_len, 0);
        // Several column blocks per task, so that a task reads a transposed source in runs of
        // at least 256 bytes a row rather than one block's 64, and rayon's hand-off is
        // amortised over at least ~64k values (chosen, not tuned: the pass runs near the
        // memory's rate, docs/performance.md).
        let per_task = (65_536 / (TILE * k.max(1))).clamp(4, 64);
        let vector = vector::available();
        tiles
            .par_chunks_mut(per_task * block_len)
            .enumerate()
            .for_each(|(task, blocks)| {
                for (i, block) in blocks.chunks_exact_mut(block_len).enumerate() {
                    let nb = task * per_task + i;
                    if vector {
                        // SAFETY: `vector::available()` checked AVX-512F/BW; `block` is column
                        // block `nb`'s `k_blocks` tile pairs.
                        unsafe { vector::pack_block(source, n, k, nb, block) }
                    } else {
                        pack_block(source, n, k, nb, block);
                    }
                }
            });
        let mut padded_bias = vec![0f32; n_blocks * TILE];
        if let Some(b) = bias {
            assert_eq!(b.len(), n, "bias is not n long");
            padded_bias[..n].copy_from_slice(b);
        }
        PackedWeight {
            n,
            k,
            k_blocks,
            n_blocks,
            tiles,
            bias: padded_bias,
        }
    }

    /// Output features `n` (rows of `W`).
    pub fn out_features(&self) -> usize {
        self.n
    }

    /// Input features `k` (columns of `W`).
    pub fn in_features(&self) -> usize {
        self.k
    }

    /// `epilogue(x·Wᵀ + b)` for row-major `x` (`m × k`), on the rayon pool, the epilogue
    /// (an activation) applied to each output block as it is made. Call only when
    /// [`available`] is true.
    pub fn matmul_t(&self, x: &[f32], m: usize, epilogue: impl Epilogue) -> Vec<f32> {
        // Every element is written by a kernel call or a scratch copy, so the output is not
        // zero-filled first (that was 7% of scoring).
        let mut out = Vec::<f32>::with_capacity(m * self.n);
        self.matmul_t_uninit(x, m, &mut out.spare_capacity_mut()[..m * self.n], &epilogue);
        // SAFETY: `matmul_t_uninit` wrote all `m × n` elements.
        unsafe { out.set_len(m * self.n) };
        out
    }

    /// [`PackedWeight::matmul_t`] into `out` (`m × n`), overwriting it.
    pub fn matmul_t_into(&self, x: &[f32], m: usize, out: &mut [f32]) {
        assert_eq!(out.len(), m * self.n, "out is not m × n");
        // SAFETY: `MaybeUninit<f32>` has `f32`'s layout, and everything written through the
        // view is an initialised f32, so `out` holds valid floats afterwards.
        let out = unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) };
        self.matmul_t_uninit(x, m, out, &no_epilogue);
    }

    /// Writes every element of `out` (`m × n`).
    fn matmul_t_uninit(
        &self,
        x: &[f32],
        m: usize,
        out: &mut [MaybeUninit<f32>],
        epilogue: &dyn Epilogue,
    ) {
        assert!(available(), "AMX kernel called on a CPU without AMX");
        assert_eq!(x.len(), m * self.k, "x is not m × k");
        assert_eq!(out.len(), m * self.n, "out is not m × n");
        if out.is_empty() {
            return;
        }
        out.par_chunks_mut(ROWS_PER_TASK * self.n)
            .enumerate()
            .for_each(|(task, out_rows)| {
                let first = task * ROWS_PER_TASK;
                let rows = out_rows.len() / self.n;
                self.rows_task(
                    &x[first * self.k..(first + rows) * self.k],
                    rows,
                    out_rows,
                    epilogue,
                );
            });
    }

    /// One task: converts `rows` rows of `x`, then every 32 × 32 block of the output.
    fn rows_task(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [MaybeUninit<f32>],
        epilogue: &dyn Epilogue,
    ) {
        thread_local! {
            /// Converted rows, reused between calls on a thread instead of zero-filled anew.
            static CONVERTED: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
        }
        CONVERTED.with_borrow_mut(|a| self.rows_task_in(a, x, rows, out, epilogue));
    }

    fn rows_task_in(
        &self,
        a: &mut Vec<u16>,
        x: &[f32],
        rows: usize,
        out: &mut [MaybeUninit<f32>],
        epilogue: &dyn Epilogue,
    ) {
        let row_blocks = rows.div_ceil(BLOCK);
        // Per row: k_blocks groups of [hi 32][lo 32], k past `k` zero (the weights there are
        // zero too, but stale bits could be NaN). Rows past `rows` keep stale values: row i of
        // the output reads only row i of `a`, and those rows' outputs are dropped.
        let a_row = self.k_blocks * 2 * TILE_K;
        let needed = row_blocks * BLOCK * a_row;
        if a.len() < needed {
            a.resize(needed, 0);
        }
        for (xr, dst) in x.chunks_exact(self.k).zip(a.chunks_exact_mut(a_row)) {
            // Fixed-width groups without index arithmetic: the split vectorises.
            for (src, group) in xr.chunks(TILE_K).zip(dst.chunks_exact_mut(2 * TILE_K)) {
                let (hi, lo) = group.split_at_mut(TILE_K);
                for ((h, l), &v) in hi.iter_mut().zip(lo.iter_mut()).zip(src) {
                    (*h, *l) = split(v);
                }
                hi[src.len()..].fill(0);
                lo[src.len()..].fill(0);
            }
        }
        let mut scratch = [0f32; BLOCK * BLOCK];
        let config = TileConfig::all_full();
        // SAFETY: `available()` was checked by the caller (the permission request succeeded);
        // the configuration is valid for every tile the kernel names.
        unsafe { config.load() };
        for pair in 0..self.n_blocks / 2 {
            let col0 = pair * BLOCK;
            let cols = (self.n - col0.min(self.n)).min(BLOCK);
            if cols == 0 {
                break;
            }
            let b = &self.tiles[pair * 2 * self.k_blocks * 2 * TILE_U16..];
            for rb in 0..row_blocks {
                let valid_rows = (rows - rb * BLOCK).min(BLOCK);
                let a_block = &a[rb * BLOCK * a_row..];
                let direct = valid_rows == BLOCK && cols == BLOCK;
                let (c, c_stride) = if direct {
                    let at = rb * BLOCK * self.n + col0;
                    (out[at..].as_mut_ptr().cast::<f32>(), self.n * 4)
                } else {
                    (scratch.as_mut_ptr(), BLOCK * 4)
                };
                // SAFETY: tiles are configured; `a_block` holds 32 rows of `a_row` u16 and `b`
                // holds both column blocks' k_blocks tile pairs; `c` has 32 rows of 32 f32 at
                // `c_stride` (output rows, checked in range above, or the scratch block);
                // `bias[col0..col0 + 32]` exists since n_blocks is even.
                unsafe {
                    kernel(
                        a_block.as_ptr(),
                        a_row * 2,
                        b.as_ptr(),
                        self.k_blocks * 2 * TILE_U16 * 2,
                        self.k_blocks,
                        self.bias[col0..].as_ptr(),
                        c,
                        c_stride,
                    );
                }
                for r in 0..valid_rows {
                    let dst = (rb * BLOCK + r) * self.n + col0;
                    let row = &mut out[dst..dst + cols];
                    if !direct {
                        for (o, &v) in row.iter_mut().zip(&scratch[r * BLOCK..]) {
                            o.write(v);
                        }
                    }
                    // SAFETY: the kernel (direct) or the copy above wrote these `cols` values.
                    let row = unsafe { &mut *(row as *mut [MaybeUninit<f32>] as *mut [f32]) };
                    // While the block is still in L1.
                    epilogue(row);
                }
            }
        }
        // SAFETY: releases this thread's tile state (no tile is live past the loop).
        unsafe { TileConfig::release() };
    }
}

/// Where a weight's values come from, as columns of `k` values (`W`'s rows for `x·Wᵀ`).
#[derive(Clone, Copy)]
enum Source<'a> {
    /// Row-major `n × k`: column `col` is the contiguous row `col`.
    Rows(&'a [f32]),
    /// Row-major `k × n` (the transposed pack): column `col` is strided by `n`.
    Columns(&'a [f32]),
}

impl Source<'_> {
    /// Element `kk` of column `col`.
    #[inline(always)]
    fn value(self, n: usize, k: usize, col: usize, kk: usize) -> f32 {
        match self {
            Source::Rows(w) => w[col * k + kk],
            Source::Columns(w) => w[kk * n + col],
        }
    }
}

/// Packs column block `nb` (16 columns) of `source` into `block` (its `k_blocks` tile pairs),
/// writing every element, zero past `n` and `k`: the portable path, and the definition
/// [`vector::pack_block`] must match bit for bit.
fn pack_block(source: Source<'_>, n: usize, k: usize, nb: usize, block: &mut [u16]) {
    block.fill(0);
    let cols = TILE.min(n.saturating_sub(nb * TILE));
    // Along `k` outermost, so that a transposed source is read 16 consecutive values at a time.
    for kk in 0..k {
        let (kb, kr) = (kk / TILE_K, kk % TILE_K);
        // Row kr/2 of a tile holds, per column, the pair (k = 2p, k = 2p + 1).
        let row = kb * 2 * TILE_U16 + (kr / 2) * TILE_K + kr % 2;
        for c in 0..cols {
            let (hi, lo) = split(source.value(n, k, nb * TILE + c, kk));
            block[row + c * 2] = hi;
            block[row + c * 2 + TILE_U16] = lo;
        }
    }
}

/// The packing pass on AVX-512, which every CPU with AMX has. Scalar, packing cost more than the
/// kernel saved wherever a weight could not be packed once per run (the 1B Llama shape trained
/// at 26.4 tokens/s packing per product against gemm's 40.5); here 16 values are split at once,
/// with the same integer rounding as [`split`], so the tiles are bit for bit the scalar ones.
#[cfg(target_arch = "x86_64")]
mod vector {
    use std::arch::x86_64::*;

    use super::{Source, TILE, TILE_K, TILE_U16};

    /// Whether the vector pass runs here (checked once).
    pub(super) fn available() -> bool {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
        })
    }

    /// [`super::bf16_bits`] of 16 lanes, each in the low half of its 32 bits.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn bf16_bits(bits: __m512i) -> __m512i {
        let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
        let rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd);
        _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, rounding))
    }

    /// [`super::split`] of 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn split(v: __m512) -> (__m512i, __m512i) {
        let hi = bf16_bits(_mm512_castps_si512(v));
        let rest = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(hi)));
        (hi, bf16_bits(_mm512_castps_si512(rest)))
    }

    /// The first `count` (at most 16) lanes.
    #[inline]
    fn lanes(count: usize) -> __mmask16 {
        if count >= 16 {
            0xffff
        } else {
            (1u16 << count) - 1
        }
    }

    /// [`super::pack_block`] on AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512BW; `block` is column block `nb`'s `k.div_ceil(32)`
    /// tile pairs and `source` holds `n × k` values.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn pack_block(
        source: Source<'_>,
        n: usize,
        k: usize,
        nb: usize,
        block: &mut [u16],
    ) {
        let col0 = nb * TILE;
        let cols = TILE.min(n.saturating_sub(col0));
        let k_blocks = k.div_ceil(TILE_K);
        assert!(block.len() >= k_blocks * 2 * TILE_U16, "block too short");
        // Columns past `n` are zero. Every other value is written below, `k`'s padding
        // included (masked loads read zeros there).
        if cols < TILE {
            block.fill(0);
        }
        if cols == 0 {
            return;
        }
        let out = block.as_mut_ptr();
        match source {
            Source::Columns(w) => {
                assert!(w.len() >= k * n, "source too short");
                let mask = lanes(cols);
                // Tile row p of k block kb holds, per column, the pair (2p, 2p + 1): two
                // source rows, their 16 columns' halves interleaved.
                let row = |kk: usize| {
                    if kk < k {
                        // SAFETY: row `kk` exists; masked lanes past `cols` are not read.
                        split(unsafe { _mm512_maskz_loadu_ps(mask, w.as_ptr().add(kk * n + col0)) })
                    } else {
                        (_mm512_setzero_si512(), _mm512_setzero_si512())
                    }
                };
                for kk in (0..k_blocks * TILE_K).step_by(2) {
                    let (kb, p) = (kk / TILE_K, (kk % TILE_K) / 2);
                    let ((h0, l0), (h1, l1)) = (row(kk), row(kk + 1));
                    let at = kb * 2 * TILE_U16 + p * TILE_K;
                    // SAFETY: both 64-byte rows lie inside this k block's tile pair.
                    unsafe {
                        _mm512_storeu_si512(
                            out.add(at).cast(),
                            _mm512_or_si512(h0, _mm512_slli_epi32::<16>(h1)),
                        );
                        _mm512_storeu_si512(
                            out.add(at + TILE_U16).cast(),
                            _mm512_or_si512(l0, _mm512_slli_epi32::<16>(l1)),
                        );
                    }
                }
            }
            Source::Rows(w) => {
                assert!(w.len() >= n * k, "source too short");
                // Column c's 32 values of a k block, as 16 pairs, go down the tile's 16 rows:
                // 32-bit lane p to u32 p·16 + c.
                let rows = _mm512_setr_epi32(
                    0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240,
                );
                for kb in 0..k_blocks {
                    let k0 = kb * TILE_K;
                    let (m0, m1) = (lanes(k - k0), lanes((k - k0).saturating_sub(16)));
                    for c in 0..cols {
                        let src = w.as_ptr().wrapping_add((col0 + c) * k + k0);
                        // SAFETY: the unmasked lanes are values `k0..k` of row `col0 + c`.
                        let (a, b) = unsafe {
                            (
                                _mm512_maskz_loadu_ps(m0, src),
                                _mm512_maskz_loadu_ps(m1, src.wrapping_add(16)),
                            )
                        };
                        let ((ha, la), (hb, lb)) = (split(a), split(b));
                        let pairs = |x: __m512i, y: __m512i| {
                            _mm512_inserti64x4::<1>(
                                _mm512_castsi256_si512(_mm512_cvtepi32_epi16(x)),
                                _mm512_cvtepi32_epi16(y),
                            )
                        };
                        let at = kb * 2 * TILE_U16 + c * 2;
                        // SAFETY: every lane's offset, `at` + 32·p u16s plus one u32, lies in
                        // this k block's tile pair.
                        unsafe {
                            _mm512_i32scatter_epi32::<4>(out.add(at).cast(), rows, pairs(ha, hb));
                            _mm512_i32scatter_epi32::<4>(
                                out.add(at + TILE_U16).cast(),
                                rows,
                                pairs(la, lb),
                            );
                        }
                    }
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod vector {
    use super::Source;

    pub(super) fn available() -> bool {
        false
    }

    pub(super) unsafe fn pack_block(_: Source<'_>, _: usize, _: usize, _: usize, _: &mut [u16]) {
        unreachable!("checked by available()")
    }
}

/// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Tiles 0–7 all 16 rows × 64 bytes.
    fn all_full() -> TileConfig {
        let mut cfg = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            cfg.bytes_per_row[t] = (TILE_K * 2) as u16;
            cfg.rows[t] = TILE as u8;
        }
        cfg
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) {
        // SAFETY (caller): AMX is available.
        unsafe {
            std::arch::asm!("ldtilecfg [{0}]", in(reg) self as *const TileConfig,
                options(nostack, readonly));
        }
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn release() {
        // SAFETY (caller): AMX is available.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn load(&self) {
        unreachable!("AMX is x86-64 only")
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn release() {
        unreachable!("AMX is x86-64 only")
    }
}

/// 32 rows × 32 columns of `x·Wᵀ + b`: `C = bias`, then for each k block
/// `C += a_hi·b_hi + a_hi·b_lo + a_lo·b_hi`.
///
/// tmm0–3 accumulate the 2×2 grid of 16×16 output tiles: four independent chains, because one
/// `tdpbf16ps` takes about three times longer to finish than to issue, and two chains left the
/// tile unit idle half the time (measured: 40% of its peak). tmm4/5 hold the two row blocks'
/// `a` (hi, then lo), tmm6/7 the two column blocks' weights (hi, lo, hi again).
///
/// `a`: 32 rows of `[hi 32][lo 32]` groups, `a_stride` bytes apart; `b`: the first column
/// block's tile pairs, the second's `b_next` bytes on; `c`: 32 rows of 32 f32, `c_stride`
/// bytes apart.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    a: *const u16,
    a_stride: usize,
    b: *const u16,
    b_next: usize,
    k_blocks: usize,
    bias: *const f32,
    c: *mut f32,
    c_stride: usize,
) {
    // SAFETY (caller): tiles configured, pointers cover what the comment above says.
    unsafe {
        std::arch::asm!(
            "tileloadd tmm0, [{bias} + {zero}*1]",
            "tileloadd tmm1, [{bias} + {zero}*1 + 64]",
            "tileloadd tmm2, [{bias} + {zero}*1]",
            "tileloadd tmm3, [{bias} + {zero}*1 + 64]",
            "2:",
            "tileloadd tmm4, [{a0} + {a_stride}*1]",
            "tileloadd tmm5, [{a1} + {a_stride}*1]",
            "tileloadd tmm6, [{b0} + {b_stride}*1]",
            "tileloadd tmm7, [{b1} + {b_stride}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "tileloadd tmm6, [{b0} + {b_stride}*1 + 1024]",
            "tileloadd tmm7, [{b1} + {b_stride}*1 + 1024]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{a0} + {a_stride}*1 + 64]",
            "tileloadd tmm5, [{a1} + {a_stride}*1 + 64]",
            "tileloadd tmm6, [{b0} + {b_stride}*1]",
            "tileloadd tmm7, [{b1} + {b_stride}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a0}, 128",
            "add {a1}, 128",
            "add {b0}, 2048",
            "add {b1}, 2048",
            "dec {k_blocks}",
            "jnz 2b",
            "tilestored [{c0} + {c_stride}*1], tmm0",
            "tilestored [{c0} + {c_stride}*1 + 64], tmm1",
            "tilestored [{c1} + {c_stride}*1], tmm2",
            "tilestored [{c1} + {c_stride}*1 + 64], tmm3",
            a0 = inout(reg) a => _,
            a1 = inout(reg) a.byte_add(TILE * a_stride) => _,
            a_stride = in(reg) a_stride,
            b0 = inout(reg) b => _,
            b1 = inout(reg) b.byte_add(b_next) => _,
            b_stride = in(reg) TILE_K * 2,
            k_blocks = inout(reg) k_blocks => _,
            bias = in(reg) bias,
            zero = in(reg) 0usize,
            c0 = in(reg) c,
            c1 = in(reg) c.byte_add(TILE * c_stride),
            c_stride = in(reg) c_stride,
            options(nostack),
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    _a: *const u16,
    _a_stride: usize,
    _b: *const u16,
    _b_next: usize,
    _k_blocks: usize,
    _bias: *const f32,
    _c: *mut f32,
    _c_stride: usize,
) {
    unreachable!("AMX is x86-64 only")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// The machine's CPU flags say AMX; then `available()` must agree, or the fast path is
    /// silently lost (this test cannot pass vacuously on an AMX machine).
    #[test]
    fn amx_is_found_where_the_cpu_has_it() {
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_has = flags.contains(" amx_bf16") && flags.contains(" amx_tile");
        if switched_off() {
            assert!(
                !available(),
                "{}={} did not turn AMX off",
                SWITCH.0,
                SWITCH.1
            );
        } else if cpu_has {
            assert!(
                available(),
                "/proc/cpuinfo lists AMX but it was not enabled"
            );
        } else {
            eprintln!("no AMX on this CPU: the kernel tests below do not run here");
        }
    }

    #[test]
    fn split_keeps_sixteen_bits() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..10_000 {
            let v: f32 = rng.random_range(-100.0..100.0);
            let (hi, lo) = split(v);
            let back = bf16_value(hi) + bf16_value(lo);
            assert!(
                (back - v).abs() <= v.abs() * 2f32.powi(-16),
                "{v} -> {back}"
            );
        }
        assert_eq!(bf16_value(bf16_bits(1.0)), 1.0);
        // Round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
        assert_eq!(bf16_value(bf16_bits(1.0 + 2f32.powi(-8))), 1.0);
    }

    /// The AVX-512 packing pass writes the scalar pass's tiles bit for bit, both orientations,
    /// ragged shapes included (it needs AVX-512, not AMX, so it runs on more CPUs than the
    /// kernel tests).
    #[test]
    fn the_vector_pack_is_the_scalar_pack_bit_for_bit() {
        if !vector::available() {
            eprintln!("no AVX-512 on this CPU: the vector pack does not run here");
            return;
        }
        let mut rng = StdRng::seed_from_u64(5);
        for &(n, k) in &[
            (16usize, 32usize),
            (40, 45),
            (3, 7),
            (130, 576),
            (33, 1),
            (64, 2048),
        ] {
            // Magnitudes from 1e-30 to 1e30, both signs, zeros and ties to even included.
            let w: Vec<f32> = (0..n * k)
                .map(|i| match i % 5 {
                    0 => 0.0,
                    1 => 1.0 + 2f32.powi(-8),
                    _ => {
                        let v: f32 = rng.random_range(-1.0..1.0);
                        v * 10f32.powi(rng.random_range(-30..30))
                    }
                })
                .collect();
            let k_blocks = k.div_ceil(TILE_K);
            let block_len = k_blocks * 2 * TILE_U16;
            for source in [Source::Rows(&w), Source::Columns(&w)] {
                for nb in 0..n.div_ceil(2 * TILE) * 2 {
                    // Stale contents, as in reused memory: both must write every element.
                    let mut scalar = vec![0xa5a5u16; block_len];
                    let mut vector = vec![0x5a5au16; block_len];
                    pack_block(source, n, k, nb, &mut scalar);
                    // SAFETY: AVX-512F/BW checked above; the block is a column block's tiles.
                    unsafe { vector::pack_block(source, n, k, nb, &mut vector) };
                    assert!(scalar == vector, "{n} × {k}, column block {nb}");
                }
            }
        }
    }

    fn reference(x: &[f32], w: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|t| f64::from(x[i * k + t]) * f64::from(w[j * k + t]))
                    .sum();
                out[i * n + j] = dot + f64::from(b[j]);
            }
        }
        out
    }

    #[test]
    fn matches_f64_on_ragged_shapes() {
        if !available() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(7);
        // Full tiles, ragged rows / columns / depth, one row, more rows than one task.
        for &(m, n, k) in &[
            (32, 64, 64),
            (17, 40, 45),
            (1, 16, 32),
            (3, 2, 384),
            (150, 96, 384),
            (70, 384, 1536),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-2.0..2.0)).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-0.1..0.1)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let got = PackedWeight::new(&w, Some(&b), n, k).matmul_t(&x, m, no_epilogue);
            let want = reference(&x, &w, &b, m, n, k);
            // Scale of the error: |x|·|w| summed over k, times 16-bit operand precision.
            let bound = k as f64 * 2.0 * 0.1 * 2f64.powi(-15);
            for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - r).abs() <= bound,
                    "({m}×{k})·({k}×{n}) at {i}: {g} vs {r} (bound {bound})"
                );
            }
        }
    }

    #[test]
    fn no_bias_is_zero_bias() {
        if !available() {
            return;
        }
        let w: Vec<f32> = (0..16 * 32).map(|i| (i % 7) as f32 - 3.0).collect();
        let x: Vec<f32> = (0..2 * 32).map(|i| (i % 5) as f32).collect();
        let got = PackedWeight::new(&w, None, 16, 32).matmul_t(&x, 2, no_epilogue);
        let want = reference(&x, &w, &[0.0; 16], 2, 16, 32);
        for (g, r) in got.iter().zip(&want) {
            assert_eq!(f64::from(*g), *r, "small integers are exact");
        }
    }

    /// The input-gradient pack: `g·W` from `W (k × n)` itself, no transposed copy, written
    /// over whatever `out` held.
    #[test]
    fn the_transposed_pack_multiplies_by_w_itself() {
        if !available() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(11);
        for &(m, k, n) in &[(32, 64, 32), (19, 40, 45), (130, 576, 192)] {
            let g: Vec<f32> = (0..m * k).map(|_| rng.random_range(-2.0..2.0)).collect();
            let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-0.1..0.1)).collect();
            // Wᵀ as an n × k row-major weight: the reference computes g·(Wᵀ)ᵀ = g·W.
            let wt: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
            let want = reference(&g, &wt, &vec![0.0; n], m, n, k);
            let mut got = vec![f32::NAN; m * n];
            PackedWeight::transposed(&w, k, n).matmul_t_into(&g, m, &mut got);
            let bound = k as f64 * 2.0 * 0.1 * 2f64.powi(-15);
            for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - r).abs() <= bound,
                    "({m}×{k})·({k}×{n}) at {i}: {g} vs {r} (bound {bound})"
                );
            }
        }
    }
}
