//! Frozen base weights kept in their GGUF block format (QLoRA-style training on a quantized
//! base): a projection LoRA does not adapt stays quantized in memory and is expanded to f32 one
//! layer at a time, when a step needs it, then dropped.
//!
//! The expansion is the one the loader uses to build an f32 model from the same file (candle's
//! `to_float` of the block type), and the product is the same f32 matmul as
//! [`crate::nn::frozen_matmul_t`]'s, so training on a quantized base computes bit for bit what
//! training on the dequantized model does: held-out results cannot move, only memory and speed.
//! A step pays two expansions per frozen projection (forward, and the input gradient backward),
//! spread over the CPU's threads by rows.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8K, GgmlType,
};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};

use rayon::prelude::*;

use crate::error::{Error, Result};

/// A frozen `(out, in)` weight in a GGUF block format, on the CPU.
#[derive(Clone)]
pub struct QuantizedWeight {
    q: Arc<QTensor>,
    rows: usize,
    cols: usize,
}

impl std::fmt::Debug for QuantizedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QuantizedWeight({:?}, {}x{})",
            self.q.dtype(),
            self.rows,
            self.cols
        )
    }
}

impl QuantizedWeight {
    /// Whether weights stored as `dtype` are kept this way: the block formats llama.cpp
    /// quantizes projections to; not plain floats (f32, f16, bf16: loaded as ordinary
    /// tensors), nor Q8_1, which only holds activations.
    pub fn is_block_format(dtype: GgmlDType) -> bool {
        !matches!(
            dtype,
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 | GgmlDType::Q8_1
        )
    }

    /// Wraps a 2-D CPU tensor in a block format ([`Self::is_block_format`]) whose rows hold
    /// whole blocks.
    pub fn new(q: QTensor) -> Result<QuantizedWeight> {
        if !Self::is_block_format(q.dtype()) {
            return Err(Error::Invalid(format!(
                "{:?} is not a block format to keep weights in",
                q.dtype()
            )));
        }
        if !matches!(q.device(), Device::Cpu) {
            return Err(Error::Invalid(
                "a quantized base weight must live on the CPU".into(),
            ));
        }
        let (rows, cols) = q.shape().dims2()?;
        if !cols.is_multiple_of(q.dtype().block_size()) {
            return Err(Error::Invalid(format!(
                "a {rows}x{cols} weight does not split into {:?} blocks of {}",
                q.dtype(),
                q.dtype().block_size()
            )));
        }
        Ok(QuantizedWeight {
            q: Arc::new(q),
            rows,
            cols,
        })
    }

    /// Quantizes an f32 `(out, in)` weight to `dtype` (random-weight benches; a GGUF file's
    /// weights are taken as stored instead).
    pub fn quantize(w: &Tensor, dtype: GgmlDType) -> Result<QuantizedWeight> {
        QuantizedWeight::new(QTensor::quantize(w, dtype)?)
    }

    /// `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The block format.
    pub fn dtype(&self) -> GgmlDType {
        self.q.dtype()
    }

    /// Bytes the weight takes in memory.
    pub fn size_in_bytes(&self) -> usize {
        self.q.storage_size_in_bytes()
    }

    fn row_bytes(&self) -> usize {
        self.cols / self.q.dtype().block_size() * self.q.dtype().type_size()
    }

    /// The same weight with its rows reordered: row `i` of the result is row `order[i]` of
    /// this one (blocks never straddle rows, so this moves bytes, not values).
    pub fn permute_rows(&self, order: &[usize]) -> Result<QuantizedWeight> {
        if order.len() != self.rows || order.iter().any(|&r| r >= self.rows) {
            return Err(Error::Invalid(format!(
                "a row order of {} entries for a weight of {} rows",
                order.len(),
                self.rows
            )));
        }
        let data = self.q.data()?;
        let row = self.row_bytes();
        let mut out = Vec::with_capacity(data.len());
        for &r in order {
            out.extend_from_slice(&data[r * row..(r + 1) * row]);
        }
        let storage = QStorage::from_data(out.into(), &Device::Cpu, self.q.dtype())?;
        let q = QTensor::new(storage, (self.rows, self.cols))?;
        Ok(QuantizedWeight {
            q: Arc::new(q),
            rows: self.rows,
            cols: self.cols,
        })
    }

    /// The weight in f32, expanded over rayon's threads by rows.
    pub fn dequantize(&self) -> Result<Tensor> {
        let values = self.expand()?;
        Ok(Tensor::from_vec(
            values,
            (self.rows, self.cols),
            &Device::Cpu,
        )?)
    }

    fn expand(&self) -> Result<Vec<f32>> {
        let data = self.q.data()?;
        let mut out = vec![0f32; self.rows * self.cols];
        match self.q.dtype() {
            GgmlDType::Q4_0 => expand_rows::<BlockQ4_0>(&data, &mut out, self.cols),
            GgmlDType::Q4_1 => expand_rows::<BlockQ4_1>(&data, &mut out, self.cols),
            GgmlDType::Q5_0 => expand_rows::<BlockQ5_0>(&data, &mut out, self.cols),
            GgmlDType::Q5_1 => expand_rows::<BlockQ5_1>(&data, &mut out, self.cols),
            GgmlDType::Q8_0 => expand_rows::<BlockQ8_0>(&data, &mut out, self.cols),
            GgmlDType::Q2K => expand_rows::<BlockQ2K>(&data, &mut out, self.cols),
            GgmlDType::Q3K => expand_rows::<BlockQ3K>(&data, &mut out, self.cols),
            GgmlDType::Q4K => expand_rows::<BlockQ4K>(&data, &mut out, self.cols),
            GgmlDType::Q5K => expand_rows::<BlockQ5K>(&data, &mut out, self.cols),
            GgmlDType::Q6K => expand_rows::<BlockQ6K>(&data, &mut out, self.cols),
            GgmlDType::Q8K => expand_rows::<BlockQ8K>(&data, &mut out, self.cols),
            other => {
                return Err(Error::Invalid(format!(
                    "{other:?} weights are not kept quantized"
                )));
            }
        }
        Ok(out)
    }

    /// `x (m, in) · wᵀ`, whose backward computes only the input gradient (the weight is
    /// frozen), expanding the weight for each.
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        if !x.device().is_cpu() {
            return Err(Error::Invalid(
                "a quantized base weight multiplies inputs on the CPU only".into(),
            ));
        }
        Ok(x.contiguous()?.apply_op1(FrozenQuantizedMatmulT {
            weight: self.clone(),
            packed: crate::fused::packs::quantized_uses_packs(
                Arc::as_ptr(&self.q) as usize,
                self.rows,
                self.cols,
                x.elem_count() / self.cols.max(1),
            ),
        })?)
    }
}

/// Expands whole rows of blocks of type `T` in `data` into `out`, rows spread over rayon.
fn expand_rows<T: GgmlType>(data: &[u8], out: &mut [f32], cols: usize) {
    let per_row = cols / T::BLCK_SIZE;
    let block_bytes = std::mem::size_of::<T>();
    debug_assert_eq!(data.len(), out.len() / cols * per_row * block_bytes);
    // Rows per task: enough work (~64k values) to amortise rayon's hand-off.
    let rows_per_task = (65_536 / cols).max(1);
    out.par_chunks_mut(cols * rows_per_task)
        .enumerate()
        .for_each(|(task, ys)| {
            let first = task * rows_per_task * per_row;
            let blocks = ys.len() / T::BLCK_SIZE;
            let bytes = &data[first * block_bytes..(first + blocks) * block_bytes];
            // SAFETY: `data` is the byte view of candle's `Vec<T>` of this very block type
            // (checked by the dtype match above), so it is aligned for `T` and whole blocks
            // start at multiples of `size_of::<T>()`; the range covers `blocks` whole blocks.
            let xs = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), blocks) };
            T::to_float(xs, ys);
        });
}

/// [`QuantizedWeight::matmul_t`] as a candle op on the input.
struct FrozenQuantizedMatmulT {
    weight: QuantizedWeight,
    /// Multiply by packs (AMX or panels), packing the expanded weight for each product,
    /// wherever its f32 expansion would be multiplied by packs ([`crate::fused::packs`]); else
    /// through gemm, as that would.
    packed: bool,
}

const NAME: &str = "frozen-quantized-matmul-t";

impl CustomOp1 for FrozenQuantizedMatmulT {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(&self, x: &CpuStorage, xl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = self.weight.dims();
        if k != k2 {
            candle_core::bail!("{NAME}: x has {k} columns, w has {k2}");
        }
        let w = self.weight.expand().map_err(candle_core::Error::wrap)?;
        if self.packed {
            let xs = crate::fused::f32s(NAME, "x", x, xl)?;
            let mut y = vec![0f32; m * n];
            crate::fused::packs::once_forward_into(&w, n, k, xs, &mut y);
            return Ok((CpuStorage::F32(y), Shape::from((m, n))));
        }
        let w = CpuStorage::F32(w);
        let wl = Layout::contiguous((n, k)).transpose(0, 1)?;
        let out = x.matmul(&w, (1, m, n, k), xl, &wl)?;
        Ok((out, Shape::from((m, n))))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        if self.packed {
            let op = QuantizedInputGrad(self.weight.clone());
            return Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&op)?));
        }
        let w = self.weight.dequantize().map_err(candle_core::Error::wrap)?;
        Ok(Some(grad.matmul(&w)?))
    }
}

/// `g·W` on AMX for a weight kept quantized: [`FrozenQuantizedMatmulT`]'s input gradient.
struct QuantizedInputGrad(QuantizedWeight);

impl CustomOp1 for QuantizedInputGrad {
    fn name(&self) -> &'static str {
        "frozen-quantized-input-grad"
    }

    fn cpu_fwd(&self, g: &CpuStorage, gl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, n) = gl.shape().dims2()?;
        let (n2, k) = self.0.dims();
        if n != n2 {
            candle_core::bail!("{}: g has {n} columns, w has {n2} rows", self.name());
        }
        let w = self.0.expand().map_err(candle_core::Error::wrap)?;
        let g = crate::fused::f32s(self.name(), "g", g, gl)?;
        let mut dx = vec![0f32; m * k];
        crate::fused::packs::once_input_grad_into(&w, n, k, g, &mut dx);
        Ok((CpuStorage::F32(dx), Shape::from((m, k))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::max_abs_diff;
    use candle_core::Var;

    #[test]
    fn parallel_expansion_equals_candles_dequantize_for_every_kept_format() {
        let dev = Device::Cpu;
        // 300 rows of 256: several rayon tasks, and whole super-blocks for the k-quants.
        let w = Tensor::randn(0f32, 1.0, (300, 256), &dev).unwrap();
        for dtype in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let want = q.dequantize(&dev).unwrap();
            let got = QuantizedWeight::new(q).unwrap().dequantize().unwrap();
            assert_eq!(max_abs_diff(&got, &want), 0.0, "{dtype:?}");
        }
        let plain = QTensor::quantize(&w, GgmlDType::F32).unwrap();
        assert!(QuantizedWeight::new(plain).is_err());
    }

    /// `q`'s product with a random `rows × in` input and its input gradient equal, to the
    /// bit, what `f32_product` (given the input and `q` expanded) computes.
    fn assert_same_product_and_input_gradient(
        q: &QuantizedWeight,
        rows: usize,
        f32_product: impl Fn(&Tensor, &Tensor) -> Tensor,
    ) {
        let dev = Device::Cpu;
        let (out, input) = q.dims();
        let expanded = q.dequantize().unwrap();
        let x = Var::randn(0f32, 1.0, (rows, input), &dev).unwrap();
        let y = q.matmul_t(x.as_tensor()).unwrap();
        let want = f32_product(x.as_tensor(), &expanded);
        assert_eq!(max_abs_diff(&y, &want), 0.0);
        let up = Tensor::randn(0f32, 1.0, (rows, out), &dev).unwrap();
        let input_grad = |y: &Tensor| {
            let g = (y * &up).unwrap().sum_all().unwrap().backward().unwrap();
            g.get(x.as_tensor()).unwrap().clone()
        };
        assert_eq!(max_abs_diff(&input_grad(&y), &input_grad(&want)), 0.0);
    }

    #[test]
    fn the_product_and_its_input_gradient_equal_the_f32_weights_bit_for_bit() {
        let w = Tensor::randn(0f32, 1.0, (96, 64), &Device::Cpu).unwrap();
        let q = QuantizedWeight::quantize(&w, GgmlDType::Q4_1).unwrap();
        assert_same_product_and_input_gradient(&q, 7, |x, w| {
            crate::nn::frozen_matmul_t(x, w).unwrap()
        });
    }

    /// Inside a training run on an AMX CPU the f32 weights multiply on AMX: a weight kept
    /// quantized must then too, or the two would train differently.
    #[test]
    fn inside_a_training_run_it_multiplies_as_the_fused_f32_layer_does_bit_for_bit() {
        let w = Tensor::randn(0f32, 1.0, (96, 64), &Device::Cpu).unwrap();
        let q = QuantizedWeight::quantize(&w, GgmlDType::Q8_0).unwrap();
        let _run = crate::fused::packs::PackScope::enter();
        assert_same_product_and_input_gradient(&q, 40, |x, w| {
            crate::fused::linear::linear(x, w, None, None).unwrap()
        });
    }

    #[test]
    fn permuting_rows_moves_whole_rows() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (4, 64), &dev).unwrap();
        let q = QuantizedWeight::quantize(&w, GgmlDType::Q8_0).unwrap();
        let order = [2, 0, 3, 1];
        let moved = q.permute_rows(&order).unwrap().dequantize().unwrap();
        let full = q.dequantize().unwrap();
        for (i, &r) in order.iter().enumerate() {
            let d = max_abs_diff(&moved.get(i).unwrap(), &full.get(r).unwrap());
            assert_eq!(d, 0.0);
        }
        assert!(q.permute_rows(&[0, 1]).is_err());
        assert!(q.permute_rows(&[0, 1, 2, 4]).is_err());
    }
}
