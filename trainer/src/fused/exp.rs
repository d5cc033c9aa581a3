//! `eˣ` for `x ≤ 0`, in a form a loop vectorises: the exponentials of the kernels' softmaxes
//! (arguments after subtracting the row's max or log-sum-exp), of the normal density in
//! GELU's gradient and of SwiGLU's sigmoid (of `−|x|`).
//!
//! `f32::exp` is a libm call per element that the compiler cannot vectorise: two exponentials
//! per logit (50 M per SmolLM2 batch, each way) cost as much as the matrix products, the
//! attention kernel's forward pass took twice as long with it, and GELU's gradient spent 1.7% of
//! a MiniLM training step there. This is Cephes' `expf` without branches.

/// `exp(x)` for `x ≤ 0`, to about 1 ulp; a NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // Below ln(f32::MIN_POSITIVE) the result would be subnormal: flush it to 0. The
    // comparison, not `f32::max`, lets a NaN through.
    const LOWEST: f32 = -87.336_54;
    let underflow = x < LOWEST;
    let x = if underflow { LOWEST } else { x };
    // k = round(x / ln 2) by the 1.5·2²³ trick: the sum's low mantissa bits are k.
    let shifted = x * std::f32::consts::LOG2_E + 12_582_912.0;
    let k = shifted - 12_582_912.0;
    let k_bits = (shifted.to_bits() as i32).wrapping_sub(0x4B40_0000);
    // r = x − k·ln 2 in two parts, so that r keeps its low bits.
    let r = x - k * 0.693_359_4 - k * -2.121_944_4e-4;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^k for −126 ≤ k ≤ 0, built from its exponent bits.
    let scale = f32::from_bits((k_bits.wrapping_add(127) << 23) as u32);
    if underflow { 0.0 } else { y * scale }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_nonpositive_is_close_to_exp() {
        let mut worst = 0f32;
        for i in 0..=200_000 {
            let x = -90.0 * i as f32 / 200_000.0;
            let (fast, exact) = (exp_nonpositive(x), x.exp());
            if exact >= f32::MIN_POSITIVE {
                worst = worst.max((fast - exact).abs() / exact);
            } else {
                assert!(fast <= f32::MIN_POSITIVE);
            }
        }
        assert!(worst < 3e-7, "relative error up to {worst}");
        assert!(exp_nonpositive(f32::NAN).is_nan());
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn exp_is_exact_at_zero_and_negligible_below_the_normals() {
        assert_eq!(exp_nonpositive(0.0), 1.0);
        for x in [-87.5, -100.0, -1e4] {
            assert_eq!(exp_nonpositive(x), 0.0, "{x}");
        }
    }
}
