//! Frozen weights packed once into f32 panels, for CPUs with AVX-512 and no AMX: the kernel
//! [`crate::fused::packs`] uses there in place of AMX, both ways on AMD Zen 4 and for `x·Wᵀ`
//! only on Intel ([`available`], [`input_grad_in_place`]; decision 0050). An AVX2 kernel
//! ([`Isa::Avx2`]) runs the same layout on CPUs without AVX-512; no AVX2 kind measured faster
//! than gemm yet, so it runs only where `SHARDWORK_PANELS` asks.
//!
//! gemm packs both operands on every product, the frozen weight included. A training step's
//! products have 256 rows (a pass of [`crate::train::sft::TOKENS_PER_PASS`] tokens), so packing a
//! 576 × 1536 weight again each time costs about as much memory traffic as the product itself uses:
//! gemm's packing was 10.4% of all CPU samples of the README's demo on a 2-core Zen 4, against 42%
//! in its microkernel. Here each frozen weight is laid out once per run in panels of [`PANEL`]
//! output features, `k`-major, so the kernel reads a panel front to back and the input rows in
//! place. The input gradient `g·W` needs no pack at all: a run of [`PANEL`] values of a weight row
//! is already what the kernel reads at each step ([`matmul_into`]), so a run holds one copy of its
//! frozen weights more, not two (SmolLM2-135M: 0.55 GB). The arithmetic is f32 multiply-adds in a
//! fixed order (each output element sums its `k` products in order, in [`K_BLOCK`] chunks), so a
//! product gives the same bits on every run and thread count; it differs from gemm's in the last
//! bits, as AMX's does.
//!
//! Measured on the step's shapes (2-core AMD EPYC Zen 4, 256 rows, quiet; docs/performance.md):
//! 176–211 GFLOP/s against gemm's 137–209 (the FMA units' peak is about 224).
//!
//! On Intel's AVX-512 (two 512-bit FMA units) the packed `x·Wᵀ` beat gemm (whose kernel is
//! as fast there, but whose packing of a transposed weight is not), while `g·W` read in place
//! lost to gemm: SmolLM2's 1536-wide rows sit 6 KiB apart, in 2 of an L1's 64 sets. So Intel
//! runs `x·Wᵀ` in panels and `g·W` on gemm (2-core Xeon, Ice Lake, 2026-12-06: SmolLM2 training
//! 1.10x gemm, held-out scoring 1.22x; docs/performance.md). `SHARDWORK_PANELS` names a plan
//! for a process, to measure another kind: `off`, `on` (both ways, on any CPU with AVX-512F or
//! AVX2 and FMA) or `forward` ([`SWITCH`], [`FORCE`], [`FORWARD`]); `shardwork bench products`
//! sets the two kernels side by side on one kind's products.
//!
//! On AVX2 (16 registers of 8 lanes) the register block is 6 rows by 16 columns, and a panel is
//! packed as four 16-column strips, each `k × 16` in one run of memory. Each element still sums
//! its products in `k` order with one fused multiply-add at a time, so the AVX2 and AVX-512
//! kernels give the same bits. On a 2-core AMD EPYC Zen 1 (2026-12-07) it ran level with gemm
//! (whose microkernel is at the FMA units' peak there and whose packing is 5% of a step), so
//! AVX2 CPUs stay on gemm by default ([`measured_plan`]).

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::fused::Shared;

/// Output features a panel holds: four 16-lane vectors.
pub const PANEL: usize = 64;
/// Rows one kernel call makes: with four vectors a row, 24 accumulators of the 32 registers.
const ROWS: usize = 6;
/// Inner-dimension values a panel chunk holds while the rows sweep past it: 64 × 128 floats,
/// 32 KiB, an L1 data cache of Zen 4.
pub const K_BLOCK: usize = 128;
/// Tasks a rayon thread gets at least, so that a product of few panels still splits by rows.
/// At 4, a 576-output product (9 panels: SmolLM2's q, o and down projections, half its FLOPs)
/// ran as 9 tasks on 2 threads, one thread idle while the other did the ninth; at 8 it runs as
/// 18. Measured on a 2-core Zen 4 (same binary, alternating): held-out scoring passes 3.5%
/// faster, the SmolLM2 training step 1.8%, the same bits (rows never change an element's sums).
const TASKS_PER_THREAD: usize = 8;

/// The environment variable that turns the panels off, and the value that does it.
pub const SWITCH: (&str, &str) = ("SHARDWORK_PANELS", "off");
/// The value of [`SWITCH`]'s variable that uses the panels wherever the CPU can run them, both
/// ways (`x·Wᵀ` packed, `g·W` in place).
pub const FORCE: &str = "on";
/// The value of [`SWITCH`]'s variable that uses the panels for `x·Wᵀ` only, leaving `g·W` to
/// gemm (the plan Intel CPUs get by default).
pub const FORWARD: &str = "forward";

/// Which products run in panels on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// None: gemm multiplies every frozen weight.
    Off,
    /// `x·Wᵀ` from the packs; `g·W` on gemm.
    Forward,
    /// `x·Wᵀ` from the packs and `g·W` with the weight read in place.
    Both,
}

/// The plan, decided once: where the CPU can ([`supported`]), what the CPU kind was measured
/// fastest with ([`measured_plan`]) unless `SHARDWORK_PANELS` names one (`off`, `on`,
/// `forward`).
fn plan() -> Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    *PLAN.get_or_init(|| {
        if !supported() {
            return Plan::Off;
        }
        match std::env::var(SWITCH.0).as_deref() {
            Ok(v) if v == SWITCH.1 => Plan::Off,
            Ok(v) if v == FORCE => Plan::Both,
            Ok(v) if v == FORWARD => Plan::Forward,
            _ => measured_plan(),
        }
    })
}

/// Whether the trainer multiplies frozen weights `x·Wᵀ` in panels on this CPU.
pub fn available() -> bool {
    plan() != Plan::Off
}

/// Whether the input gradient `g·W` runs in panels too, the weight read in place
/// ([`matmul_into`]); otherwise it stays on gemm.
pub fn input_grad_in_place() -> bool {
    plan() == Plan::Both
}

/// The vector unit the panel kernel runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 16-lane vectors, 32 registers: a 6 × 64 register block.
    Avx512,
    /// 8-lane vectors with fused multiply-add, 16 registers: a 6 × 16 register block, four to
    /// a panel.
    Avx2,
}

impl Isa {
    /// Columns of its register block: the width of the strips a panel is packed in.
    fn strip(self) -> usize {
        match self {
            Isa::Avx512 => PANEL,
            Isa::Avx2 => 16,
        }
    }

    /// The instruction set's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "AVX-512",
            Isa::Avx2 => "AVX2",
        }
    }
}

/// The kernel this CPU runs, decided once: AVX-512F where present, else AVX2 with FMA; `None`
/// where neither (the products stay on gemm).
pub fn isa() -> Option<Isa> {
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(Isa::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Some(Isa::Avx2);
            }
        }
        None
    })
}

/// Whether this CPU can run the panel kernel: AVX-512F, or AVX2 with FMA.
pub fn supported() -> bool {
    isa().is_some()
}

/// The plan `bench train` measured fastest on this kind of CPU (decision 0050). Only AVX-512
/// kinds are listed: on AVX2 the kernel ran level with gemm on Zen 1, and Zen 3 and Intel's
/// AVX2 cores are unmeasured. AMD family 19h
/// with AVX-512, which is Zen 4 (Zen 3, the same family, has no AVX-512): both ways, AVX-512 on
/// 256-bit units, where gemm's repacking costs as much as its product. Intel (family 6) with
/// AVX-512: `x·Wᵀ` only. With two 512-bit FMA units the packed forward beat gemm by up to 2×
/// on the step's 256-row shapes, but reading a weight in place for `g·W` strides its rows
/// 6 KiB apart (SmolLM2's 1536 columns), which an L1 of 64 sets holds in 2 of them, and
/// gemm's own packing won there (docs/performance.md). AMX, where present, takes precedence
/// over either ([`crate::fused::packs`]). Zen 5 (family 1Ah): unmeasured, gemm.
#[cfg(target_arch = "x86_64")]
fn measured_plan() -> Plan {
    use std::arch::x86_64::__cpuid;
    let vendor: Vec<u8> = {
        let v = __cpuid(0);
        [v.ebx, v.edx, v.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect()
    };
    let signature = __cpuid(1).eax;
    let (base, extended) = ((signature >> 8) & 0xf, (signature >> 20) & 0xff);
    let family = if base == 0xf { base + extended } else { base };
    rule(isa(), vendor.as_slice(), family)
}

/// [`measured_plan`]'s table, by kernel, CPUID vendor and family.
fn rule(isa: Option<Isa>, vendor: &[u8], family: u32) -> Plan {
    match (isa, vendor, family) {
        (Some(Isa::Avx512), b"AuthenticAMD", 0x19) => Plan::Both,
        (Some(Isa::Avx512), b"GenuineIntel", 6) => Plan::Forward,
        _ => Plan::Off,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn measured_plan() -> Plan {
    Plan::Off
}

/// A frozen weight laid out for `x·Bᵀ` in panels: `B` is `n × k` (the product has `n` output
/// features and sums over `k`).
pub struct PanelWeight {
    n: usize,
    k: usize,
    /// Columns of each contiguous `k × strip` block: the kernel's register block's width.
    strip: usize,
    /// `ceil(n / PANEL)` panels of `k × PANEL` floats, zero past `n`, each `PANEL / strip`
    /// blocks of `k × strip` floats, `k`-major.
    panels: Vec<f32>,
}

impl PanelWeight {
    /// Packs `weight` (row-major `n × k`, as a linear layer stores it) for `x·Wᵀ` on this
    /// CPU's kernel.
    pub fn new(weight: &[f32], n: usize, k: usize) -> PanelWeight {
        let isa = isa().expect("the panel kernel needs AVX-512F or AVX2 with FMA");
        PanelWeight::for_isa(isa, weight, n, k)
    }

    /// [`PanelWeight::new`] for the kernel on `isa`. Each block of `strip` columns is one
    /// run of memory, so the kernel reads it front to back (a 16-column block of a 64-wide
    /// layout would sit 256 bytes a row apart, in a quarter of the L1's sets).
    fn for_isa(isa: Isa, weight: &[f32], n: usize, k: usize) -> PanelWeight {
        assert_eq!(weight.len(), n * k, "weight is not n × k");
        let strip = isa.strip();
        let mut panels = vec![0f32; n.div_ceil(PANEL) * k * PANEL];
        panels
            .par_chunks_mut(k * strip)
            .enumerate()
            .for_each(|(block, values)| {
                let first = block * strip;
                for j in 0..strip.min(n.saturating_sub(first)) {
                    let row = &weight[(first + j) * k..(first + j + 1) * k];
                    for (kk, &v) in row.iter().enumerate() {
                        values[kk * strip + j] = v;
                    }
                }
            });
        PanelWeight {
            n,
            k,
            strip,
            panels,
        }
    }

    /// Output features `n`.
    pub fn out_features(&self) -> usize {
        self.n
    }

    /// Summed features `k`.
    pub fn in_features(&self) -> usize {
        self.k
    }

    /// Bytes the panels take.
    pub fn size_in_bytes(&self) -> usize {
        self.panels.len() * std::mem::size_of::<f32>()
    }

    /// `x·Bᵀ` into `out` (`m × n`, overwritten) for row-major `x` (`m × k`), on the rayon pool.
    /// Call only when [`available`] is true.
    pub fn matmul_t_into(&self, x: &[f32], m: usize, out: &mut [f32]) {
        let isa = isa().expect("the panel kernel needs AVX-512F or AVX2 with FMA");
        assert_eq!(self.strip, isa.strip(), "packed for another kernel");
        self.multiply_on(isa, x, m, out);
    }

    fn multiply_on(&self, isa: Isa, x: &[f32], m: usize, out: &mut [f32]) {
        let (n, k, strip) = (self.n, self.k, self.strip);
        multiply_on(isa, x, m, k, n, out, |p| PanelView {
            values: &self.panels[p * k * PANEL..(p + 1) * k * PANEL],
            stride: strip,
            next_strip: k * strip,
        });
    }
}

/// `x·W` into `out` (`m × n`, overwritten) for row-major `x` (`m × k`) and `w` (`k × n`), read
/// in place: a frozen layer's input gradient `g·W` from the layer's own `(out, in)` weight.
/// Call only when [`available`] is true.
pub fn matmul_into(x: &[f32], m: usize, w: &[f32], k: usize, n: usize, out: &mut [f32]) {
    assert_eq!(w.len(), k * n, "w is not k × n");
    let isa = isa().expect("the panel kernel needs AVX-512F or AVX2 with FMA");
    multiply_on(isa, x, m, k, n, out, |p| PanelView {
        values: &w[p * PANEL..],
        stride: n,
        next_strip: isa.strip(),
    });
}

/// Panel `p` of `B` (columns `p·PANEL..`) as a kernel reads it: row `r` of the panel's strip
/// `s` (its columns `s·strip..`, `strip` the kernel's register block width) starts at
/// `s · next_strip + r · stride` in `values`.
#[derive(Clone, Copy)]
struct PanelView<'w> {
    values: &'w [f32],
    stride: usize,
    next_strip: usize,
}

/// `out (m × n) = x (m × k) · B` on the kernel for `isa`, which the CPU must have, where
/// `panel(p)` gives panel `p` of `B`.
fn multiply_on<'w>(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    out: &mut [f32],
    panel: impl Fn(usize) -> PanelView<'w> + Sync,
) {
    assert_eq!(x.len(), m * k, "x is not m × k");
    assert_eq!(out.len(), m * n, "out is not m × n");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let panels = n.div_ceil(PANEL);
    // Split the rows too where there are few panels, in whole kernel calls.
    let want = (TASKS_PER_THREAD * rayon::current_num_threads()).div_ceil(panels);
    let chunk = m.div_ceil(want.max(1)).div_ceil(ROWS) * ROWS;
    let chunks = m.div_ceil(chunk);
    let out_at = Shared::new(out);
    (0..panels * chunks).into_par_iter().for_each(|task| {
        let (p, c) = (task / chunks, task % chunks);
        let rows = c * chunk..((c + 1) * chunk).min(m);
        let view = panel(p);
        let width = PANEL.min(n - p * PANEL);
        let strips = width.div_ceil(isa.strip());
        let last_width = width - (strips - 1) * isa.strip();
        assert!(
            view.values.len()
                >= (strips - 1) * view.next_strip + (k - 1) * view.stride + last_width,
            "panel {p} is short"
        );
        let c = out_at.at(p * PANEL);
        // SAFETY: `isa` was detected on this CPU above; each task writes only rows `rows` of
        // columns `p·PANEL..p·PANEL + width`, which no other task writes; the kernel reads
        // `width` values of each of `k` panel rows (asserted inside `view`) and rows `rows` of
        // `x`.
        unsafe {
            match isa {
                Isa::Avx512 => x86::panel_rows(x, k, view.values, view.stride, rows, c, n, width),
                Isa::Avx2 => x86::avx2::panel_rows(x, k, view, rows, c, n, width),
            }
        };
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{K_BLOCK, PANEL, ROWS};

    /// Rows `rows` of `x (·, k)` times one panel, into `out` (row stride `ldc`, `width ≤ PANEL`
    /// columns from `out`).
    ///
    /// # Safety
    ///
    /// AVX-512F must be available; `x` holds the rows, `panel` holds `width` values from each
    /// `r · stride` for `r < k`, and `out` is valid for rows `rows` of `width` columns at
    /// stride `ldc`, written by no one else.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel_rows(
        x: &[f32],
        k: usize,
        panel: &[f32],
        stride: usize,
        rows: Range<usize>,
        out: *mut f32,
        ldc: usize,
        width: usize,
    ) {
        let mut k0 = 0;
        while k0 < k {
            let kc = K_BLOCK.min(k - k0);
            let mut r = rows.start;
            while r < rows.end {
                let take = ROWS.min(rows.end - r);
                // SAFETY: rows `r..r + take` and columns `k0..k0 + kc` are inside `x`; the
                // panel chunk `k0..k0 + kc` inside `panel`; the output block inside `out`.
                unsafe {
                    let a = x.as_ptr().add(r * k + k0);
                    let b = Panel {
                        at: panel.as_ptr().add(k0 * stride),
                        stride,
                        width,
                    };
                    let c = out.add(r * ldc);
                    let first = k0 == 0;
                    match take {
                        6 => tile::<6>(a, k, b, kc, c, ldc, first),
                        5 => tile::<5>(a, k, b, kc, c, ldc, first),
                        4 => tile::<4>(a, k, b, kc, c, ldc, first),
                        3 => tile::<3>(a, k, b, kc, c, ldc, first),
                        2 => tile::<2>(a, k, b, kc, c, ldc, first),
                        _ => tile::<1>(a, k, b, kc, c, ldc, first),
                    }
                }
                r += take;
            }
            k0 += kc;
        }
    }

    /// A chunk of a panel: `width` values from each `at + p · stride`.
    #[derive(Clone, Copy)]
    struct Panel {
        at: *const f32,
        stride: usize,
        width: usize,
    }

    /// `R` rows times a `kc`-deep panel chunk, added to the output block (or written, on the
    /// first chunk). The sums run in `k` order, one multiply-add at a time. A partial panel is
    /// read with masked loads (the last one read in place may end at its buffer's end).
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const R: usize>(
        a: *const f32,
        lda: usize,
        b: Panel,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        first: bool,
    ) {
        let width = b.width;
        let masks = [
            lanes(width, 0),
            lanes(width, 1),
            lanes(width, 2),
            lanes(width, 3),
        ];
        // SAFETY (whole body): the caller's contract bounds every row, panel and output
        // pointer; masked loads and stores touch only the `width` valid columns.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; R];
            if !first {
                for (r, row) in acc.iter_mut().enumerate() {
                    for (v, lane) in row.iter_mut().enumerate() {
                        *lane = _mm512_maskz_loadu_ps(masks[v], c.add(r * ldc + v * 16));
                    }
                }
            }
            let full = width == PANEL;
            for p in 0..kc {
                let bp = b.at.add(p * b.stride);
                let (b0, b1, b2, b3) = if full {
                    (
                        _mm512_loadu_ps(bp),
                        _mm512_loadu_ps(bp.add(16)),
                        _mm512_loadu_ps(bp.add(32)),
                        _mm512_loadu_ps(bp.add(48)),
                    )
                } else {
                    (
                        _mm512_maskz_loadu_ps(masks[0], bp),
                        _mm512_maskz_loadu_ps(masks[1], bp.add(16)),
                        _mm512_maskz_loadu_ps(masks[2], bp.add(32)),
                        _mm512_maskz_loadu_ps(masks[3], bp.add(48)),
                    )
                };
                for (r, row) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*a.add(r * lda + p));
                    row[0] = _mm512_fmadd_ps(x, b0, row[0]);
                    row[1] = _mm512_fmadd_ps(x, b1, row[1]);
                    row[2] = _mm512_fmadd_ps(x, b2, row[2]);
                    row[3] = _mm512_fmadd_ps(x, b3, row[3]);
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (v, lane) in row.iter().enumerate() {
                    _mm512_mask_storeu_ps(c.add(r * ldc + v * 16), masks[v], *lane);
                }
            }
        }
    }

    /// The lanes of vector `v` (16 columns from `16·v`) that fall inside `width`.
    fn lanes(width: usize, v: usize) -> __mmask16 {
        let left = width.saturating_sub(v * 16).min(16);
        if left == 16 {
            0xffff
        } else {
            ((1u32 << left) - 1) as __mmask16
        }
    }

    /// The AVX2 kernel: a panel is four strips of 16 columns, each swept by a 6-row by
    /// 16-column register block (12 of the 16 vector registers, two for the strip's row and
    /// one for the broadcast input). Each output element sums its `k` products in the same
    /// order, one fused multiply-add at a time, as the AVX-512 kernel does, so the two give
    /// the same bits.
    pub(in crate::panels) mod avx2 {
        use std::arch::x86_64::*;
        use std::ops::Range;

        use super::super::{PanelView, ROWS};
        use super::Panel;

        /// Columns one register block covers: two 8-lane vectors ([`super::super::Isa::strip`]).
        const STRIP: usize = 16;
        /// Inner-dimension values a strip chunk holds while the rows sweep past it: 16 × 256
        /// floats, 16 KiB, half an L1 data cache of Zen 1 to 3 (the AVX-512 kernel's
        /// [`super::super::K_BLOCK`] is sized for its 64 columns). Chunking never changes a
        /// sum's order: the accumulators carry it in the output exactly.
        const K_CHUNK: usize = 256;

        /// [`super::panel_rows`] on AVX2, for one panel given as a [`PanelView`]: within each
        /// `k` chunk, the strips one after another, each swept by every row block, so a
        /// strip's chunk ([`K_CHUNK`] × 16 floats, 16 KiB, contiguous when packed) stays in L1
        /// while the rows stream past it.
        ///
        /// # Safety
        ///
        /// As [`super::panel_rows`], with AVX2 and FMA in place of AVX-512F and the panel's
        /// `width` columns read through `view` (asserted to lie inside its values).
        #[target_feature(enable = "avx2,fma")]
        pub(in crate::panels) unsafe fn panel_rows(
            x: &[f32],
            k: usize,
            view: PanelView<'_>,
            rows: Range<usize>,
            out: *mut f32,
            ldc: usize,
            width: usize,
        ) {
            let mut k0 = 0;
            while k0 < k {
                let kc = K_CHUNK.min(k - k0);
                let first = k0 == 0;
                for (strip, s) in (0..width).step_by(STRIP).enumerate() {
                    // SAFETY: the strip's `kc` rows from `k0` are inside `view` (the caller
                    // asserted its extent); rows `r..r + take` and columns `k0..k0 + kc` are
                    // inside `x`; the output block inside `out`, as the caller promised.
                    unsafe {
                        let b = Panel {
                            at: view
                                .values
                                .as_ptr()
                                .add(strip * view.next_strip + k0 * view.stride),
                            stride: view.stride,
                            width: STRIP.min(width - s),
                        };
                        let mut r = rows.start;
                        while r < rows.end {
                            let take = ROWS.min(rows.end - r);
                            let a = x.as_ptr().add(r * k + k0);
                            let c = out.add(r * ldc + s);
                            match take {
                                6 => tile::<6>(a, k, b, kc, c, ldc, first),
                                5 => tile::<5>(a, k, b, kc, c, ldc, first),
                                4 => tile::<4>(a, k, b, kc, c, ldc, first),
                                3 => tile::<3>(a, k, b, kc, c, ldc, first),
                                2 => tile::<2>(a, k, b, kc, c, ldc, first),
                                _ => tile::<1>(a, k, b, kc, c, ldc, first),
                            }
                            r += take;
                        }
                    }
                }
                k0 += kc;
            }
        }

        /// `R` rows times a `kc`-deep strip chunk of up to 16 columns, added to the output
        /// block (or written, on the first chunk). A partial strip is read and written with
        /// masked loads and stores (the last strip read in place may end at its buffer's end);
        /// a full one plainly.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn tile<const R: usize>(
            a: *const f32,
            lda: usize,
            b: Panel,
            kc: usize,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            let masks = [lanes(b.width, 0), lanes(b.width, 1)];
            let full = b.width == STRIP;
            // SAFETY (whole body): the caller's contract bounds every row, strip and output
            // pointer; masked loads and stores touch only the strip's valid columns.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; R];
                if !first {
                    for (r, row) in acc.iter_mut().enumerate() {
                        for (v, lane) in row.iter_mut().enumerate() {
                            let at = c.add(r * ldc + v * 8);
                            *lane = if full {
                                _mm256_loadu_ps(at)
                            } else {
                                _mm256_maskload_ps(at, masks[v])
                            };
                        }
                    }
                }
                if full {
                    for p in 0..kc {
                        let bp = b.at.add(p * b.stride);
                        let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8)));
                        for (r, row) in acc.iter_mut().enumerate() {
                            let x = _mm256_broadcast_ss(&*a.add(r * lda + p));
                            row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                            row[1] = _mm256_fmadd_ps(x, b1, row[1]);
                        }
                    }
                } else {
                    for p in 0..kc {
                        let bp = b.at.add(p * b.stride);
                        let b0 = _mm256_maskload_ps(bp, masks[0]);
                        let b1 = _mm256_maskload_ps(bp.add(8), masks[1]);
                        for (r, row) in acc.iter_mut().enumerate() {
                            let x = _mm256_broadcast_ss(&*a.add(r * lda + p));
                            row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                            row[1] = _mm256_fmadd_ps(x, b1, row[1]);
                        }
                    }
                }
                // A masked store is slow on AMD's cores (microcoded on Zen 1 and 2: it was a
                // tenth of the kernel's time), so a full strip stores plainly.
                for (r, row) in acc.iter().enumerate() {
                    for (v, lane) in row.iter().enumerate() {
                        let at = c.add(r * ldc + v * 8);
                        if full {
                            _mm256_storeu_ps(at, *lane);
                        } else {
                            _mm256_maskstore_ps(at, masks[v], *lane);
                        }
                    }
                }
            }
        }

        /// The lanes of vector `v` (8 columns from `8·v`) that fall inside `width`, as the
        /// sign bits AVX2's masked loads and stores read.
        #[target_feature(enable = "avx2")]
        fn lanes(width: usize, v: usize) -> __m256i {
            let left = width.saturating_sub(v * 8).min(8) as i32;
            _mm256_cmpgt_epi32(
                _mm256_set1_epi32(left),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            )
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use std::ops::Range;

    /// Never called: [`super::available`] is false off x86-64.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel_rows(
        _: &[f32],
        _: usize,
        _: &[f32],
        _: usize,
        _: Range<usize>,
        _: *mut f32,
        _: usize,
        _: usize,
    ) {
        unreachable!("the panel kernel runs on x86-64 only")
    }

    pub(in crate::panels) mod avx2 {
        use std::ops::Range;

        use super::super::PanelView;

        /// Never called: [`super::super::available`] is false off x86-64.
        pub(in crate::panels) unsafe fn panel_rows(
            _: &[f32],
            _: usize,
            _: PanelView<'_>,
            _: Range<usize>,
            _: *mut f32,
            _: usize,
            _: usize,
        ) {
            unreachable!("the panel kernel runs on x86-64 only")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` values drawn from a standard normal (the same tool the packs' tests use).
    fn values(len: usize) -> Vec<f32> {
        candle_core::Tensor::randn(0f32, 1.0, len, &candle_core::Device::Cpu)
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// `x·Wᵀ` in f64, for `x (m × k)` and `w (n × k)`.
    fn reference(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p]))
                    .sum();
            }
        }
        out
    }

    fn worst(got: &[f32], want: &[f64]) -> f64 {
        got.iter()
            .zip(want)
            .map(|(&g, &w)| (f64::from(g) - w).abs())
            .fold(0.0, f64::max)
    }

    /// Shapes with a partial panel, a partial last kernel call, several `k` chunks (one
    /// partial), and a single row.
    const SHAPES: [(usize, usize, usize); 4] =
        [(13, 300, 70), (1, 129, 64), (40, 24, 200), (7, 256, 5)];

    #[test]
    fn packed_products_match_f64_both_ways_and_repeat_to_the_bit() {
        if !supported() {
            eprintln!("skipped: neither AVX-512F nor AVX2 with FMA");
            return;
        }
        for (m, k, n) in SHAPES {
            let x = values(m * k);
            let w = values(n * k);
            let want = reference(&x, &w, m, k, n);
            let forward = PanelWeight::new(&w, n, k);
            let mut y = vec![f32::NAN; m * n];
            forward.matmul_t_into(&x, m, &mut y);
            assert!(worst(&y, &want) < 1e-5 * k as f64, "{m}×{k}×{n} forward");
            let mut again = vec![0f32; m * n];
            forward.matmul_t_into(&x, m, &mut again);
            assert_eq!(y, again, "{m}×{k}×{n}: a second product differs");

            // The same product from the transpose's layout: w is k × n there.
            let wt: Vec<f32> = (0..k)
                .flat_map(|p| (0..n).map(move |j| (p, j)))
                .map(|(p, j)| w[j * k + p])
                .collect();
            let mut z = vec![f32::NAN; m * n];
            matmul_into(&x, m, &wt, k, n, &mut z);
            assert_eq!(y, z, "{m}×{k}×{n}: the packed and in-place layouts differ");
        }
    }

    /// The CPU rule read from CPUID agrees with what the kernel reports in `/proc/cpuinfo`:
    /// an AMD CPU of family 25 (19h) is a kind the panels were measured faster on, no other is.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn the_cpu_rule_reads_vendor_and_family_as_the_kernel_does() {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_else(|| panic!("/proc/cpuinfo has no {name}"))
        };
        let family: u32 = field("cpu family").parse().unwrap();
        let vendor = field("vendor_id");
        let flags = field("flags");
        let flag = |name: &str| flags.split_whitespace().any(|f| f == name);
        let isa = if flag("avx512f") {
            Some(Isa::Avx512)
        } else if flag("avx2") && flag("fma") {
            Some(Isa::Avx2)
        } else {
            None
        };
        assert_eq!(
            self::isa(),
            isa,
            "the kernel's ISA and /proc/cpuinfo's flags differ"
        );
        assert_eq!(measured_plan(), rule(isa, vendor.as_bytes(), family));
    }

    /// Where the CPU has AVX-512 (and so AVX2), both kernels give the same bits: each sums
    /// every element's products in `k` order with one fused multiply-add at a time, so two
    /// CPUs that run the panels on different vector units replay each other's runs to the bit.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_and_avx512_kernels_give_the_same_bits() {
        if isa() != Some(Isa::Avx512) || !std::arch::is_x86_feature_detected!("fma") {
            eprintln!("skipped: needs AVX-512F and AVX2 with FMA");
            return;
        }
        for (m, k, n) in SHAPES {
            let x = values(m * k);
            let w = values(n * k);
            let mut by = [vec![0f32; m * n], vec![0f32; m * n]];
            for (isa, out) in [Isa::Avx512, Isa::Avx2].into_iter().zip(by.iter_mut()) {
                PanelWeight::for_isa(isa, &w, n, k).multiply_on(isa, &x, m, out);
            }
            assert_eq!(by[0], by[1], "{m}×{k}×{n}");
        }
    }

    #[test]
    fn the_split_over_threads_does_not_change_a_bit() {
        if !supported() {
            eprintln!("skipped: neither AVX-512F nor AVX2 with FMA");
            return;
        }
        let (m, k, n) = (50, 200, 130);
        let x = values(m * k);
        let w = PanelWeight::new(&values(n * k), n, k);
        let mut many = vec![0f32; m * n];
        w.matmul_t_into(&x, m, &mut many);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut single = vec![0f32; m * n];
        one.install(|| w.matmul_t_into(&x, m, &mut single));
        assert_eq!(many, single);
    }
}
