//! Fused training kernels, each with its backward pass, on the CPU.
//!
//! Built from candle's tensor ops, one decoder layer of SmolLM2 kept about 28k floats per token
//! alive for the backward pass (every intermediate of the composed RMSNorm, rotary embedding,
//! mask, softmax and SwiGLU is an input of some node of the graph) and ran most of them as
//! single-threaded passes over memory; PyTorch + PEFT keeps about a third of that and trained
//! twice as fast (issue 17). Each kernel here is one candle custom op that keeps only its inputs,
//! recomputes what its backward needs, and runs row- or head-parallel. On other devices, or for
//! dtypes other than f32, each falls back to the composed ops it replaces, so results and
//! gradients are the same everywhere up to float rounding (the tests bound the difference).

pub mod attention;
pub mod cross_entropy;
pub mod dropout;
mod exp;
pub mod gelu;
pub mod linear;
mod matmul;
pub(crate) use matmul::{Shared, frozen_forward_on_gemm, frozen_input_grad_on_gemm};
pub mod norm;
pub mod packs;
pub mod rotary;
pub mod softmax;
pub mod swiglu;

/// The contiguous f32 data a layout describes. The kernels' entry points make their operands
/// contiguous, so anything else is a caller bug, reported as an error naming `op` and `what`.
pub(crate) fn f32s<'a>(
    op: &str,
    what: &str,
    storage: &'a candle_core::CpuStorage,
    layout: &candle_core::Layout,
) -> candle_core::Result<&'a [f32]> {
    let candle_core::CpuStorage::F32(data) = storage else {
        candle_core::bail!("{op}: {what} must be f32");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: {what} must be contiguous");
    };
    match data.get(start..end) {
        Some(data) => Ok(data),
        None => candle_core::bail!("{op}: {what}'s layout overruns its storage"),
    }
}

/// Runs `f` on the f32 values of a tensor an op holds rather than takes as an input (a frozen
/// weight, a bias, an output gradient), which must be contiguous on the CPU.
pub(crate) fn with_f32s<T>(
    op: &str,
    what: &str,
    tensor: &candle_core::Tensor,
    f: impl FnOnce(&[f32]) -> candle_core::Result<T>,
) -> candle_core::Result<T> {
    let (storage, layout) = tensor.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("{op}: {what} is not on the CPU");
    };
    f(f32s(op, what, cpu, layout)?)
}

/// The three gradients a backward op wrote as one flat tensor `[d0 | d1 | d2]`, each viewed in
/// the shape of its input.
pub(crate) fn split_gradients(
    all: &candle_core::Tensor,
    shapes: [&candle_core::Shape; 3],
) -> candle_core::Result<[candle_core::Tensor; 3]> {
    let mut at = 0;
    let mut part = |shape: &candle_core::Shape| {
        let n = shape.elem_count();
        let grad = all.narrow(0, at, n)?.reshape(shape);
        at += n;
        grad
    };
    Ok([part(shapes[0])?, part(shapes[1])?, part(shapes[2])?])
}

/// The largest absolute difference between two tensors of one shape: how far a kernel is from
/// its composed reference, in every module's tests.
#[cfg(test)]
pub(crate) fn max_abs_diff(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap();
    diff.max(0).unwrap().to_scalar().unwrap()
}

/// The gradients of `loss = Σ out ⊙ probe`: a probe of random weights checks every element's
/// gradient, where `Σ out` would check only their sum. How every kernel's tests drive a
/// backward pass.
#[cfg(test)]
pub(crate) fn probe_backward(
    out: &candle_core::Tensor,
    probe: &candle_core::Tensor,
) -> candle_core::backprop::GradStore {
    (out * probe)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap()
}

/// A fused kernel's output against its composed reference's, within `forward`, and the
/// gradient of `Σ out ⊙ probe` with respect to each of `inputs`, within `backward`: the test
/// every elementwise and row kernel here opens with.
#[cfg(test)]
pub(crate) fn assert_matches_composed(
    fused: &candle_core::Tensor,
    reference: &candle_core::Tensor,
    probe: &candle_core::Tensor,
    inputs: &[&candle_core::Var],
    (forward, backward): (f32, f32),
    what: &str,
) {
    let diff = max_abs_diff(fused, reference);
    assert!(diff < forward, "{what}: the output differs by {diff}");
    let (g1, g2) = (
        probe_backward(fused, probe),
        probe_backward(reference, probe),
    );
    for (i, x) in inputs.iter().enumerate() {
        let (a, b) = (
            g1.get(x.as_tensor()).unwrap(),
            g2.get(x.as_tensor()).unwrap(),
        );
        let diff = max_abs_diff(a, b);
        assert!(
            diff < backward,
            "{what}: input {i}'s gradient differs by {diff}"
        );
    }
}

/// Each of `fused` within `tolerance` of the same of `reference`, named in the message by
/// `names` (the output and the gradients a kernel's test collected).
#[cfg(test)]
pub(crate) fn assert_each_close(
    names: &[&str],
    fused: &[candle_core::Tensor],
    reference: &[candle_core::Tensor],
    tolerance: f32,
    what: &str,
) {
    assert_eq!(
        (names.len(), fused.len()),
        (reference.len(), reference.len())
    );
    for (name, (a, b)) in names.iter().zip(fused.iter().zip(reference)) {
        let diff = max_abs_diff(a, b);
        assert!(diff < tolerance, "{name} differs by {diff} for {what}");
    }
}
