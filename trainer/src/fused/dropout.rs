//! Inverted dropout as one op whose mask is a pure function of the seed and the element's
//! position in the run's stream of dropout draws.
//!
//! The composed form drew each element from one ChaCha generator behind a mutex, on one
//! thread, built the mask as a tensor, multiplied, and kept the mask alive for the backward
//! pass: 6.9% of a MiniLM training step's CPU time in a `perf` profile, all of it serial. Here
//! element `i` of a draw that starts at stream position `offset` is kept when a SplitMix64 hash
//! of `(seed, offset + i)` falls below the keep probability, so any thread can decide any
//! element, in any order, with the same answer (training stays reproducible and independent of
//! the thread count), and the backward pass recomputes the mask instead of keeping it: dropout
//! is `x ⊙ m`, so its input gradient is the same op applied to the output gradient.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::inference::{CHUNK, contiguous_f32};

/// One draw of a dropout mask: which stream, where in it, and how much is kept.
#[derive(Debug, Clone, Copy)]
pub struct DropoutDraw {
    /// The stream's seed, already mixed ([`DropoutDraw::new`]).
    stream: u64,
    /// The stream position of this draw's first element.
    offset: u64,
    /// Probability that an element is kept, in (0, 1].
    keep: f32,
}

impl DropoutDraw {
    /// The draw of `seed`'s stream that starts at `offset`, dropping with probability `p`
    /// (in [0, 1)).
    pub fn new(seed: u64, offset: u64, p: f32) -> Self {
        DropoutDraw {
            stream: splitmix64(seed),
            offset,
            keep: 1.0 - p,
        }
    }

    /// The mask value of the draw's element `i`: `1 / keep` when kept, else 0.
    #[inline]
    pub(crate) fn factor(&self, i: u64) -> f32 {
        // The top 24 bits as a uniform in [0, 1): exact in f32.
        let bits = splitmix64(self.stream ^ self.offset.wrapping_add(i)) >> 40;
        if (bits as f32) * (1.0 / (1u64 << 24) as f32) < self.keep {
            1.0 / self.keep
        } else {
            0.0
        }
    }

    /// The first `n` mask values, for devices and dtypes the CPU kernel does not serve.
    pub fn mask(&self, n: usize) -> Vec<f32> {
        (0..n as u64).map(|i| self.factor(i)).collect()
    }

    /// `x ⊙ mask` for the draw's first `x.len()` elements, on every core: the kernel behind
    /// [`Self::apply`], and dropout inside larger kernels.
    pub(crate) fn masked(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        self.zip_factors(&mut out, x, |y, x, f| *y = x * f);
        out
    }

    /// `dst += src ⊙ mask` for the draw's first `dst.len()` elements: the input gradient of a
    /// dropout whose output gradient `src` is to be added into `dst`.
    pub(crate) fn add_masked(&self, dst: &mut [f32], src: &[f32]) {
        self.zip_factors(dst, src, |d, s, f| *d += s * f);
    }

    /// Calls `op(dst[i], src[i], factor(i))` for every element, chunk-parallel.
    fn zip_factors(&self, dst: &mut [f32], src: &[f32], op: impl Fn(&mut f32, f32, f32) + Sync) {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .enumerate()
            .for_each(|(c, (dst, src))| {
                let start = (c * CHUNK) as u64;
                for (j, (d, &s)) in dst.iter_mut().zip(src).enumerate() {
                    op(d, s, self.factor(start + j as u64));
                }
            });
    }

    /// `x ⊙ mask`, differentiable.
    pub fn apply(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            return x.contiguous()?.apply_op1(*self);
        }
        let mask = Tensor::from_vec(
            self.mask(x.elem_count()),
            x.shape(),
            &candle_core::Device::Cpu,
        )?
        .to_device(x.device())?
        .to_dtype(x.dtype())?;
        x.mul(&mask)
    }
}

/// SplitMix64's finalizer over a Weyl step: a bijective 64-bit mix whose outputs pass BigCrush
/// for consecutive inputs, which is what stream positions are.
#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl CustomOp1 for DropoutDraw {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(self.name(), x, layout)?;
        Ok((CpuStorage::F32(self.masked(xs)), layout.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(self.apply(grad)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn the_kernel_multiplies_by_the_mask_the_fallback_builds() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (3, 50_001), &dev).unwrap();
        let draw = DropoutDraw::new(7, 123_456, 0.1);
        let fused = draw.apply(&x).unwrap();
        let mask = Tensor::from_vec(draw.mask(x.elem_count()), x.shape(), &dev).unwrap();
        let composed = x.mul(&mask).unwrap();
        assert_eq!(crate::fused::max_abs_diff(&fused, &composed), 0.0);
    }

    #[test]
    fn it_keeps_the_asked_share_and_the_expectation() {
        let n = 1_000_000;
        for p in [0.1f32, 0.5] {
            let mask = DropoutDraw::new(42, 0, p).mask(n);
            let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / n as f64;
            // Binomial standard deviation at n = 1e6 is at most 5e-4.
            assert!((kept - (1.0 - p as f64)).abs() < 3e-3, "p {p}: kept {kept}");
            let mean = mask.iter().map(|&m| m as f64).sum::<f64>() / n as f64;
            assert!((mean - 1.0).abs() < 6e-3, "p {p}: mean {mean}");
        }
    }

    #[test]
    fn draws_depend_on_seed_and_offset_but_not_on_threads() {
        let a = DropoutDraw::new(1, 0, 0.5).mask(4096);
        assert_eq!(a, DropoutDraw::new(1, 0, 0.5).mask(4096));
        assert_ne!(a, DropoutDraw::new(2, 0, 0.5).mask(4096));
        assert_ne!(a, DropoutDraw::new(1, 4096, 0.5).mask(4096));
        // A draw at offset k is the tail of the draw at 0 from k on: positions, not calls.
        assert_eq!(&a[100..], &DropoutDraw::new(1, 100, 0.5).mask(3996)[..]);
        let x = Tensor::ones((5, 70_000), DType::F32, &Device::Cpu).unwrap();
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| DropoutDraw::new(3, 9, 0.2).apply(&x).unwrap())
        };
        assert_eq!(crate::fused::max_abs_diff(&on(1), &on(3)), 0.0);
    }

    #[test]
    fn its_gradient_is_the_mask() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (4, 9000), &dev).unwrap();
        let draw = DropoutDraw::new(5, 77, 0.3);
        let grads = draw
            .apply(x.as_tensor())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let grad = grads.get(x.as_tensor()).unwrap();
        let mask = Tensor::from_vec(draw.mask(x.elem_count()), x.shape(), &dev).unwrap();
        assert_eq!(crate::fused::max_abs_diff(grad, &mask), 0.0);
    }
}
