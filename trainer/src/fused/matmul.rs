//! Matrix products over strided views of flat f32 buffers, through gemm: the fused kernels'
//! products, which read heads, transposes and sub-blocks in place instead of copying them out.

use gemm::Parallelism;

/// A strided matrix view into a buffer: element `(r, c)` is at `at + r·rs + c·cs`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mat {
    pub(super) at: usize,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) rs: usize,
    pub(super) cs: usize,
}

impl Mat {
    /// Rows `rs` apart, each `cols` consecutive elements.
    pub(super) fn rows(at: usize, rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            at,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// The transpose: the same elements with the strides swapped, no copy.
    pub(super) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r0..r1`.
    pub(super) fn row_range(self, r0: usize, r1: usize) -> Self {
        Self {
            at: self.at + r0 * self.rs,
            rows: r1 - r0,
            ..self
        }
    }

    /// The same view `by` elements further on (into the next part of a concatenated buffer).
    pub(super) fn shifted(self, by: usize) -> Self {
        Self {
            at: self.at + by,
            ..self
        }
    }

    /// One past the last element addressed.
    pub(super) fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            self.at
        } else {
            self.at + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs + 1
        }
    }
}

/// An output buffer that the tasks of one parallel loop write at the same time, each to
/// elements no other task reads or writes.
#[derive(Clone, Copy)]
pub(crate) struct Shared {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Shared` is a pointer and a length; sharing them is harmless in itself. Every access
// through it is an `unsafe` call (to `product`, or to the panel kernel through `Shared::at`)
// whose caller shows that no other task touches the elements written, and whose maker neither
// touches nor drops the buffer until its parallel loop has returned.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`.
unsafe impl Sync for Shared {}

impl Shared {
    pub(crate) fn new(buf: &mut [f32]) -> Self {
        Self {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// The element `offset` of the buffer, for a task that alone writes there.
    pub(crate) fn at(self, offset: usize) -> *mut f32 {
        debug_assert!(
            offset < self.len,
            "offset {offset} past {} floats",
            self.len
        );
        self.ptr.wrapping_add(offset)
    }
}

/// `dst ← lhs·rhs·scale`, or `dst ← dst + lhs·rhs·scale` when `accumulate`, on a task's own
/// scratch buffer.
#[allow(clippy::too_many_arguments)]
pub(super) fn product_into(
    dst: &mut [f32],
    d: Mat,
    accumulate: bool,
    lhs: &[f32],
    l: Mat,
    rhs: &[f32],
    r: Mat,
    scale: f32,
) {
    let dst = Shared::new(dst);
    // SAFETY: `dst` was borrowed mutably for this call, so nothing else reads or writes it.
    unsafe { product_on(dst, d, accumulate, lhs, l, rhs, r, scale, Parallelism::None) }
}

/// [`product_into`] on gemm's threads (rayon's pool, as many as candle's own products use):
/// for one large product, where [`product_into`] serves callers that are parallel already.
#[allow(clippy::too_many_arguments)]
pub(super) fn parallel_product_into(
    dst: &mut [f32],
    d: Mat,
    accumulate: bool,
    lhs: &[f32],
    l: Mat,
    rhs: &[f32],
    r: Mat,
    scale: f32,
) {
    let threads = candle_core::utils::get_num_threads();
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let dst = Shared::new(dst);
    // SAFETY: `dst` was borrowed mutably for this call, so nothing else reads or writes it.
    unsafe { product_on(dst, d, accumulate, lhs, l, rhs, r, scale, parallelism) }
}

/// A frozen layer's `x·Wᵀ` on gemm, as a layer without packs multiplies it: `x` (`rows ×
/// input`) by `w` (`out × input`) into `y` (`rows × out`). For benchmarks beside the packed
/// kernels ([`crate::bench::products`]).
pub(crate) fn frozen_forward_on_gemm(
    x: &[f32],
    w: &[f32],
    out: usize,
    input: usize,
    y: &mut [f32],
) {
    let rows = x.len() / input.max(1);
    let (xm, ym, wm) = (
        Mat::rows(0, rows, input, input),
        Mat::rows(0, rows, out, out),
        Mat::rows(0, out, input, input),
    );
    parallel_product_into(y, ym, false, x, xm, w, wm.t(), 1.0);
}

/// A frozen layer's input gradient `g·W` on gemm, as [`frozen_forward_on_gemm`]: `g` (`rows ×
/// out`) into `dx` (`rows × input`). The path where a packed kernel leaves `g·W` to gemm
/// ([`super::packs`]), and the benchmarks' baseline.
pub(crate) fn frozen_input_grad_on_gemm(
    g: &[f32],
    w: &[f32],
    out: usize,
    input: usize,
    dx: &mut [f32],
) {
    let rows = g.len() / out.max(1);
    let (gm, dxm, wm) = (
        Mat::rows(0, rows, out, out),
        Mat::rows(0, rows, input, input),
        Mat::rows(0, out, input, input),
    );
    parallel_product_into(dx, dxm, false, g, gm, w, wm, 1.0);
}

/// `dst ← lhs·rhs·scale`, or `dst ← dst + lhs·rhs·scale` when `accumulate`, through gemm on
/// strided views (no packing copies on our side, no threads: the callers are already parallel).
///
/// Panics if the shapes disagree or a view overruns its buffer; the callers derive both from
/// checked [`Dims`], so that would be a bug here, not a bad input.
///
/// # Safety
///
/// `dst` must describe one live buffer, and during the call no other thread (nor `lhs` or
/// `rhs`) may read or write the elements that `d` addresses in it.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product(
    dst: Shared,
    d: Mat,
    accumulate: bool,
    lhs: &[f32],
    l: Mat,
    rhs: &[f32],
    r: Mat,
    scale: f32,
) {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { product_on(dst, d, accumulate, lhs, l, rhs, r, scale, Parallelism::None) }
}

/// [`product`] with a choice of gemm's threading.
///
/// # Safety
///
/// As for [`product`].
#[allow(clippy::too_many_arguments)]
unsafe fn product_on(
    dst: Shared,
    d: Mat,
    accumulate: bool,
    lhs: &[f32],
    l: Mat,
    rhs: &[f32],
    r: Mat,
    scale: f32,
    parallelism: Parallelism,
) {
    assert!(d.rows == l.rows && d.cols == r.cols && l.cols == r.rows);
    assert!(d.end() <= dst.len && l.end() <= lhs.len() && r.end() <= rhs.len());
    let s = |x: usize| x as isize;
    // SAFETY: the asserts keep every element gemm reads or writes inside its buffer, `at ≤ len`
    // keeps the base pointers in bounds, and the caller guarantees exclusive access to `dst`'s
    // elements. gemm computes dst = 1·dst + scale·lhs·rhs when reading dst, else scale·lhs·rhs.
    unsafe {
        gemm::gemm(
            d.rows,
            d.cols,
            l.cols,
            dst.ptr.add(d.at),
            s(d.cs),
            s(d.rs),
            accumulate,
            lhs.as_ptr().add(l.at),
            s(l.cs),
            s(l.rs),
            rhs.as_ptr().add(r.at),
            s(r.cs),
            s(r.rs),
            1.0,
            scale,
            false,
            false,
            false,
            parallelism,
        )
    }
}
