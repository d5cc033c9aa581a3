//! A linear layer over the last dimension, `x·Wᵀ + bias` with `W` and `bias` frozen, plus
//! optionally a LoRA branch `scale·(dropout(x)·Aᵀ)·Bᵀ`, as one candle op.
//!
//! Composed of candle's ops, a LoRA projection was about eleven graph nodes (reshapes to rows
//! and back, the frozen product, the bias broadcast and add, `Aᵀ`, `Bᵀ`, two products, the
//! scaling, the add) and a frozen one with a bias five. candle's backward pass gives every node's
//! input a fresh zeroed buffer and adds the gradient into it, reshapes included, and the add of
//! a frozen bias still makes a zeroed `rows × out` gradient for it that nobody reads: in a MiniLM
//! training step, these adds and fills were 16% of the CPU time, next to 52% in the products
//! themselves. Here the graph node keeps only `x`, `A` and `B`; the forward pass writes the
//! bias, the frozen product and the low-rank update into one buffer, and the backward pass
//! writes `[dx | dA | dB]` into another.
//!
//! The dropout mask is a pure function of its stream position ([`DropoutDraw`]), element `i`
//! of `x` in row-major order, as in the composed form: the backward pass recomputes it rather
//! than keeping `dropout(x)`, and a seed drops the same inputs either way.

use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::dropout::DropoutDraw;
use super::matmul::{Mat, parallel_product_into};
use super::packs::{Frozen, packs_for};
use super::{f32s, split_gradients, with_f32s};

const NAME: &str = "fused-linear";
const LORA_NAME: &str = "fused-lora-linear";
const LORA_BWD_NAME: &str = "fused-lora-linear-backward";
const INPUT_GRAD_NAME: &str = "fused-linear-input-grad";

/// The trainable low-rank branch of a LoRA layer.
#[derive(Debug, Clone, Copy)]
pub struct LoraBranch<'a> {
    /// `(r, in)`.
    pub a: &'a Tensor,
    /// `(out, r)`.
    pub b: &'a Tensor,
    /// `lora_alpha / r`.
    pub scale: f64,
    /// Dropout on the branch's input, drawn over `x` in row-major order.
    pub dropout: Option<DropoutDraw>,
}

/// `x (..., in) · Wᵀ + bias (+ scale·(dropout(x)·Aᵀ)·Bᵀ)` → `(..., out)`, with gradients for
/// `x`, `A` and `B` only (`W (out, in)` and `bias (out)` are frozen).
///
/// On the CPU with f32 operands this is one fused op; elsewhere, or for other dtypes, it is the
/// composite of candle ops it replaces, with the same results up to float rounding.
pub fn linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    lora: Option<LoraBranch<'_>>,
) -> candle_core::Result<Tensor> {
    let dims = Dims::of(x, weight, bias, lora.as_ref())?;
    let cpu_f32 = |t: &Tensor| t.dtype() == DType::F32 && t.device().is_cpu();
    let fused = cpu_f32(x)
        && cpu_f32(weight)
        && bias.is_none_or(cpu_f32)
        && lora.as_ref().is_none_or(|l| cpu_f32(l.a) && cpu_f32(l.b));
    if !fused {
        return composite(x, weight, bias, lora, dims);
    }
    let base = Base {
        packs: packs_for(NAME, weight, dims.rows)?,
        weight: weight.contiguous()?,
        bias: bias.map(Tensor::contiguous).transpose()?,
        dims,
    };
    let x = x.contiguous()?;
    match lora {
        None => x.apply_op1(FrozenLinear { base }),
        Some(l) => x.apply_op3(
            &l.a.contiguous()?,
            &l.b.contiguous()?,
            LoraLinear {
                base,
                scale: l.scale,
                dropout: l.dropout,
            },
        ),
    }
}

/// The candle ops [`linear`] replaces: the fallback off the CPU and for other dtypes, and the
/// tests' reference.
fn composite(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    lora: Option<LoraBranch<'_>>,
    dims: Dims,
) -> candle_core::Result<Tensor> {
    let rows = x.reshape((dims.rows, dims.input))?;
    let mut y = rows.matmul(&weight.t()?)?;
    if let Some(b) = bias {
        y = y.broadcast_add(b)?;
    }
    if let Some(l) = lora {
        let xd = match l.dropout {
            Some(draw) => draw.apply(&rows)?,
            None => rows,
        };
        y = (y + xd
            .matmul(&l.a.t()?)?
            .matmul(&l.b.t()?)?
            .affine(l.scale, 0.0)?)?;
    }
    let mut out = x.dims().to_vec();
    *out.last_mut().expect("Dims::of checked the rank") = dims.output;
    y.reshape(out)
}

/// The sizes of one call, checked once so that the kernels can trust them.
#[derive(Debug, Clone, Copy)]
struct Dims {
    rows: usize,
    input: usize,
    output: usize,
    /// The LoRA rank (0 without a branch).
    rank: usize,
}

impl Dims {
    fn of(
        x: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        lora: Option<&LoraBranch<'_>>,
    ) -> candle_core::Result<Self> {
        let Some((&input, lead)) = x.dims().split_last() else {
            candle_core::bail!("{NAME}: the input is a scalar");
        };
        let (output, w_in) = weight.dims2()?;
        if w_in != input {
            candle_core::bail!(
                "{NAME}: the input has {input} features, the weight {:?} takes {w_in}",
                weight.dims()
            );
        }
        if let Some(b) = bias
            && b.dims() != [output]
        {
            candle_core::bail!("{NAME}: bias {:?} is not ({output})", b.dims());
        }
        let rank = match lora {
            None => 0,
            Some(l) => {
                let (rank, a_in) = l.a.dims2()?;
                if a_in != input || l.b.dims() != [output, rank] {
                    candle_core::bail!(
                        "{LORA_NAME}: A {:?} and B {:?} do not fit a ({output}, {input}) weight",
                        l.a.dims(),
                        l.b.dims()
                    );
                }
                rank
            }
        };
        Ok(Self {
            rows: lead.iter().product(),
            input,
            output,
            rank,
        })
    }

    fn x(&self) -> Mat {
        Mat::rows(0, self.rows, self.input, self.input)
    }

    fn y(&self) -> Mat {
        Mat::rows(0, self.rows, self.output, self.output)
    }

    fn weight(&self) -> Mat {
        Mat::rows(0, self.output, self.input, self.input)
    }

    fn a(&self) -> Mat {
        Mat::rows(0, self.rank, self.input, self.input)
    }

    fn b(&self) -> Mat {
        Mat::rows(0, self.output, self.rank, self.rank)
    }

    /// A `rows × rank` product (`x·Aᵀ`, `g·B`).
    fn low(&self) -> Mat {
        Mat::rows(0, self.rows, self.rank, self.rank)
    }

    /// The output shape: `x`'s with the last dimension `output`.
    fn out_shape(&self, x: &Layout) -> Shape {
        let mut dims = x.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = self.output;
        }
        Shape::from(dims)
    }
}

/// The frozen half of a layer, held by the op rather than passed as an input: a custom op takes
/// at most three, and the frozen weight needs no gradient.
#[derive(Debug, Clone)]
struct Base {
    /// How the weight multiplies on AMX, inside a training run on a CPU that has it
    /// ([`super::packs`]); `None`: the products go through gemm.
    packs: Option<Frozen>,
    weight: Tensor,
    bias: Option<Tensor>,
    dims: Dims,
}

impl Base {
    /// `x·Wᵀ + bias` for `x` as rows. The bias is added after the product, as candle's
    /// composite does, so the sum rounds the same way: a projection kept quantized
    /// ([`crate::quantized`]) must train bit for bit as its expanded f32 weight does.
    fn forward(&self, op: &str, x: &[f32]) -> candle_core::Result<Vec<f32>> {
        let d = self.dims;
        let mut y = vec![0f32; d.rows * d.output];
        with_f32s(op, "the weight", &self.weight, |w| {
            match &self.packs {
                Some(packs) => packs.forward_into(w, d.output, d.input, x, &mut y),
                None => {
                    parallel_product_into(&mut y, d.y(), false, x, d.x(), w, d.weight().t(), 1.0)
                }
            }
            Ok(())
        })?;
        if let Some(bias) = &self.bias {
            with_f32s(op, "the bias", bias, |bias| {
                y.par_chunks_mut(d.output).for_each(|row| {
                    for (y, &b) in row.iter_mut().zip(bias) {
                        *y += b;
                    }
                });
                Ok(())
            })?;
        }
        Ok(y)
    }

    /// `g·W`: the input gradient of the frozen product, for `g` as rows.
    fn input_grad(&self, op: &str, g: &[f32], dx: &mut [f32]) -> candle_core::Result<()> {
        let d = self.dims;
        with_f32s(op, "the weight", &self.weight, |w| {
            match &self.packs {
                Some(packs) => packs.input_grad_into(w, d.output, d.input, g, dx),
                None => parallel_product_into(dx, d.x(), false, g, d.y(), w, d.weight(), 1.0),
            }
            Ok(())
        })
    }
}

/// `g·W` of a packed frozen layer as a candle op on `g` (rows × out), for [`FrozenLinear`]'s
/// backward pass.
struct InputGrad<'a> {
    base: &'a Base,
}

impl CustomOp1 for InputGrad<'_> {
    fn name(&self) -> &'static str {
        INPUT_GRAD_NAME
    }

    fn cpu_fwd(&self, g: &CpuStorage, gl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.base.dims;
        let g = f32s(INPUT_GRAD_NAME, "the output gradient", g, gl)?;
        if g.len() != d.rows * d.output {
            candle_core::bail!(
                "{INPUT_GRAD_NAME}: the output gradient has {} elements, not {} × {}",
                g.len(),
                d.rows,
                d.output
            );
        }
        let mut dx = vec![0f32; d.rows * d.input];
        self.base.input_grad(INPUT_GRAD_NAME, g, &mut dx)?;
        Ok((CpuStorage::F32(dx), Shape::from((d.rows, d.input))))
    }
}

/// `x·Wᵀ + bias`, frozen.
struct FrozenLinear {
    base: Base,
}

impl CustomOp1 for FrozenLinear {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(&self, x: &CpuStorage, xl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = f32s(NAME, "x", x, xl)?;
        let y = self.base.forward(NAME, xs)?;
        Ok((CpuStorage::F32(y), self.base.dims.out_shape(xl)))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let d = self.base.dims;
        let g = grad.contiguous()?.reshape((d.rows, d.output))?;
        let dx = if self.base.packs.is_some() {
            g.apply_op1_no_bwd(&InputGrad { base: &self.base })?
        } else {
            g.matmul(&self.base.weight)?
        };
        Ok(Some(dx.reshape(x.shape())?))
    }
}

/// `x·Wᵀ + bias + scale·(dropout(x)·Aᵀ)·Bᵀ`, keeping only `x`, `A` and `B`.
struct LoraLinear {
    base: Base,
    scale: f64,
    dropout: Option<DropoutDraw>,
}

impl LoraLinear {
    /// `x` with the branch's dropout applied, or `x` itself.
    fn dropped<'a>(&self, x: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        match &self.dropout {
            None => x.into(),
            Some(draw) => draw.masked(x).into(),
        }
    }
}

impl CustomOp3 for LoraLinear {
    fn name(&self) -> &'static str {
        LORA_NAME
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        a: &CpuStorage,
        al: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.base.dims;
        let (xs, a, b) = (
            f32s(LORA_NAME, "x", x, xl)?,
            f32s(LORA_NAME, "A", a, al)?,
            f32s(LORA_NAME, "B", b, bl)?,
        );
        let mut y = self.base.forward(LORA_NAME, xs)?;
        let xd = self.dropped(xs);
        let mut u = vec![0f32; d.rows * d.rank];
        parallel_product_into(&mut u, d.low(), false, &xd, d.x(), a, d.a().t(), 1.0);
        parallel_product_into(
            &mut y,
            d.y(),
            true,
            &u,
            d.low(),
            b,
            d.b().t(),
            self.scale as f32,
        );
        Ok((CpuStorage::F32(y), d.out_shape(xl)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let op = LoraLinearBackward {
            forward: LoraLinear {
                base: self.base.clone(),
                scale: self.scale,
                dropout: self.dropout,
            },
            grad: grad.contiguous()?,
        };
        // One op for the three gradients: `g·B` feeds both dx and dA.
        let all = x.apply_op3_no_bwd(a, b, &op)?;
        let [dx, da, db] = split_gradients(&all, [x.shape(), a.shape(), b.shape()])?;
        Ok((Some(dx), Some(da), Some(db)))
    }
}

/// The gradients of [`LoraLinear`] for the output gradient `grad`, as one flat tensor
/// `[dx | dA | dB]` in the layouts of `x`, `A` and `B`.
struct LoraLinearBackward {
    forward: LoraLinear,
    grad: Tensor,
}

impl CustomOp3 for LoraLinearBackward {
    fn name(&self) -> &'static str {
        LORA_BWD_NAME
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        a: &CpuStorage,
        al: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let f = &self.forward;
        let d = f.base.dims;
        let s = f.scale as f32;
        let (xs, a, b) = (
            f32s(LORA_BWD_NAME, "x", x, xl)?,
            f32s(LORA_BWD_NAME, "A", a, al)?,
            f32s(LORA_BWD_NAME, "B", b, bl)?,
        );
        let (nx, na, nb) = (d.rows * d.input, d.rank * d.input, d.output * d.rank);
        let mut all = vec![0f32; nx + na + nb];
        let (dx, rest) = all.split_at_mut(nx);
        let (da, db) = rest.split_at_mut(na);
        with_f32s(LORA_BWD_NAME, "the output gradient", &self.grad, |g| {
            if g.len() != d.rows * d.output {
                candle_core::bail!(
                    "{LORA_BWD_NAME}: the output gradient has {} elements, not {} × {}",
                    g.len(),
                    d.rows,
                    d.output
                );
            }
            let xd = f.dropped(xs);
            // gB = g·B, u = dropout(x)·Aᵀ.
            let mut gb = vec![0f32; d.rows * d.rank];
            parallel_product_into(&mut gb, d.low(), false, g, d.y(), b, d.b(), 1.0);
            let mut u = vec![0f32; d.rows * d.rank];
            parallel_product_into(&mut u, d.low(), false, &xd, d.x(), a, d.a().t(), 1.0);
            // dA = s·gBᵀ·dropout(x), dB = s·gᵀ·u.
            parallel_product_into(da, d.a(), false, &gb, d.low().t(), &xd, d.x(), s);
            parallel_product_into(db, d.b(), false, g, d.y().t(), &u, d.low(), s);
            // dx = g·W + dropout'(s·gB·A): the dropout's backward is its own mask.
            f.base.input_grad(LORA_BWD_NAME, g, dx)?;
            match &f.dropout {
                None => parallel_product_into(dx, d.x(), true, &gb, d.low(), a, d.a(), s),
                Some(draw) => {
                    let mut branch = vec![0f32; nx];
                    parallel_product_into(&mut branch, d.x(), false, &gb, d.low(), a, d.a(), s);
                    draw.add_masked(dx, &branch);
                }
            }
            Ok(())
        })?;
        let len = all.len();
        Ok((CpuStorage::F32(all), Shape::from(len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::{assert_each_close, max_abs_diff, probe_backward};
    use candle_core::{Device, Var};

    /// `(lead dims, in, out, rank)`.
    fn case(
        lead: &[usize],
        input: usize,
        output: usize,
        rank: usize,
    ) -> (Var, Tensor, Tensor, Var, Var, Tensor) {
        let dev = Device::Cpu;
        let mut xd = lead.to_vec();
        xd.push(input);
        let mut yd = lead.to_vec();
        yd.push(output);
        let x = Var::randn(0f32, 1.0, xd, &dev).unwrap();
        let w = Tensor::randn(0f32, 0.2, (output, input), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, output, &dev).unwrap();
        let a = Var::randn(0f32, 0.3, (rank, input), &dev).unwrap();
        let b = Var::randn(0f32, 0.3, (output, rank), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, yd, &dev).unwrap();
        (x, w, bias, a, b, probe)
    }

    /// The output and the gradients of `x`, `A` and `B` of `Σ out ⊙ probe`, fused and composed.
    fn both(
        lead: &[usize],
        (input, output, rank): (usize, usize, usize),
        with_bias: bool,
        dropout: Option<DropoutDraw>,
    ) -> [[Tensor; 4]; 2] {
        let (x, w, bias, a, b, probe) = case(lead, input, output, rank);
        let bias = with_bias.then_some(&bias);
        let branch = LoraBranch {
            a: a.as_tensor(),
            b: b.as_tensor(),
            scale: 2.5,
            dropout,
        };
        let dims = Dims::of(x.as_tensor(), &w, bias, Some(&branch)).unwrap();
        let grads = |out: Tensor| {
            let g = probe_backward(&out, &probe);
            let get = |v: &Var| g.get(v.as_tensor()).unwrap().clone();
            [out, get(&x), get(&a), get(&b)]
        };
        let fused = grads(linear(x.as_tensor(), &w, bias, Some(branch)).unwrap());
        let composed = grads(composite(x.as_tensor(), &w, bias, Some(branch), dims).unwrap());
        [fused, composed]
    }

    fn assert_close([fused, composed]: &[[Tensor; 4]; 2], what: &str) {
        assert_each_close(&["out", "dx", "dA", "dB"], fused, composed, 1e-3, what);
    }

    #[test]
    fn the_lora_layer_matches_the_composite() {
        assert_close(
            &both(&[3, 7], (24, 40, 4), true, None),
            "(3, 7) rows with a bias",
        );
        assert_close(
            &both(&[5], (16, 8, 2), false, None),
            "5 rows without a bias",
        );
    }

    /// Inside a training run on an AMX CPU the frozen products use the packed weight, forward
    /// and for the input gradient; the results must still be the composite's (gemm's), LoRA
    /// layer and frozen layer alike.
    #[test]
    fn inside_a_training_run_the_packed_products_match_the_composite() {
        let _run = super::super::packs::PackScope::enter();
        assert_close(
            &both(
                &[6, 11],
                (72, 40, 4),
                true,
                Some(DropoutDraw::new(5, 0, 0.1)),
            ),
            "packed, (6, 11) rows with a bias and dropout",
        );
        let (x, w, bias, _, _, probe) = case(&[70], 64, 96, 2);
        let dims = Dims::of(x.as_tensor(), &w, Some(&bias), None).unwrap();
        let out = linear(x.as_tensor(), &w, Some(&bias), None).unwrap();
        let want = composite(x.as_tensor(), &w, Some(&bias), None, dims).unwrap();
        assert!(max_abs_diff(&out, &want) < 1e-4);
        let gx = |out: &Tensor| {
            let g = probe_backward(out, &probe);
            g.get(x.as_tensor()).unwrap().clone()
        };
        assert!(max_abs_diff(&gx(&out), &gx(&want)) < 1e-4);
        assert_eq!(
            super::super::packs::PackScope::packed_bytes() > 0,
            crate::fused::packs::kernel_available(),
            "the frozen weights were packed exactly where the CPU has AMX"
        );
    }

    #[test]
    fn the_lora_layer_drops_the_inputs_the_composite_drops() {
        let draw = DropoutDraw::new(3, 999, 0.25);
        let runs = both(&[2, 9], (20, 12, 3), true, Some(draw));
        assert_close(&runs, "dropout 0.25");
        let undropped = both(&[2, 9], (20, 12, 3), true, None);
        assert!(max_abs_diff(&runs[0][2], &undropped[0][2]) > 1e-3);
    }

    #[test]
    fn the_frozen_layer_matches_the_composite_and_passes_only_the_input_gradient() {
        let (x, w, bias, _, _, probe) = case(&[4, 3], 10, 6, 2);
        let go = |fused: bool| {
            let dims = Dims::of(x.as_tensor(), &w, Some(&bias), None).unwrap();
            let out = if fused {
                linear(x.as_tensor(), &w, Some(&bias), None).unwrap()
            } else {
                composite(x.as_tensor(), &w, Some(&bias), None, dims).unwrap()
            };
            let g = probe_backward(&out, &probe);
            assert!(g.get(&w).is_none() && g.get(&bias).is_none());
            [out.clone(), g.get(x.as_tensor()).unwrap().clone()]
        };
        let (fused, composed) = (go(true), go(false));
        assert_eq!(fused[0].dims(), [4, 3, 6]);
        for (f, c) in fused.iter().zip(&composed) {
            assert!(max_abs_diff(f, c) < 1e-4);
        }
    }

    #[test]
    fn other_dtypes_fall_back_to_the_composite() {
        let (x, w, bias, a, b, _) = case(&[3], 8, 5, 2);
        let run = |dtype: DType| {
            let t = |t: &Tensor| t.to_dtype(dtype).unwrap();
            let (a, b) = (t(a.as_tensor()), t(b.as_tensor()));
            let lora = LoraBranch {
                a: &a,
                b: &b,
                scale: 0.5,
                dropout: None,
            };
            linear(&t(x.as_tensor()), &t(&w), Some(&t(&bias)), Some(lora)).unwrap()
        };
        let composed = run(DType::F64);
        assert_eq!(composed.dtype(), DType::F64);
        let composed = composed.to_dtype(DType::F32).unwrap();
        assert!(max_abs_diff(&run(DType::F32), &composed) < 1e-4);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let (x, w, bias, a, b, _) = case(&[2], 6, 4, 2);
        let lora = |a, b| {
            Some(LoraBranch {
                a,
                b,
                scale: 1.0,
                dropout: None,
            })
        };
        // The weight takes other features, a bias of the wrong width, A and B swapped.
        assert!(linear(x.as_tensor(), &w.t().unwrap(), None, None).is_err());
        let short = bias.narrow(0, 0, 3).unwrap();
        assert!(linear(x.as_tensor(), &w, Some(&short), None).is_err());
        let err = linear(x.as_tensor(), &w, None, lora(b.as_tensor(), a.as_tensor())).unwrap_err();
        assert!(err.to_string().contains(LORA_NAME), "{err}");
        let scalar = Tensor::new(1f32, &Device::Cpu).unwrap();
        assert!(linear(&scalar, &w, None, None).is_err());
    }

    #[test]
    fn two_runs_are_bit_identical() {
        let draw = DropoutDraw::new(8, 0, 0.1);
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.into_iter().map(f32::to_bits).collect()
        };
        let (x, w, bias, a, b, probe) = case(&[64, 9], 48, 40, 8);
        let run = || {
            let lora = LoraBranch {
                a: a.as_tensor(),
                b: b.as_tensor(),
                scale: 2.0,
                dropout: Some(draw),
            };
            let out = linear(x.as_tensor(), &w, Some(&bias), Some(lora)).unwrap();
            let g = probe_backward(&out, &probe);
            [
                out.clone(),
                g.get(a.as_tensor()).unwrap().clone(),
                g.get(x.as_tensor()).unwrap().clone(),
            ]
        };
        let first = run();
        for _ in 0..3 {
            for (p, q) in first.iter().zip(&run()) {
                assert_eq!(bits(p), bits(q));
            }
        }
    }
}
