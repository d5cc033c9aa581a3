//! A frozen linear layer packed for the AMX kernel, as a candle op without a gradient.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};

use crate::amx::{self, PackedWeight};
use crate::error::{Error, Result};

/// Which matrix kernel scoring's linear layers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoringKernel {
    /// Intel AMX through the split-bf16 kernel ([`amx`]), on CPUs that have it.
    Amx,
    /// candle's f32 matmul: every other CPU, and every GPU.
    Portable,
}

impl ScoringKernel {
    /// The fastest kernel for `device` and `dtype`.
    pub fn detect(device: &candle_core::Device, dtype: DType) -> ScoringKernel {
        if device.is_cpu() && dtype == DType::F32 && amx::available() {
            ScoringKernel::Amx
        } else {
            ScoringKernel::Portable
        }
    }
}

/// What follows the product in each output block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Epilogue {
    /// Nothing: the block is `x·Wᵀ + b`.
    None,
    /// BERT's exact-erf GELU.
    GeluErf,
}

/// `x·Wᵀ + b` with `W` and `b` packed once, optionally followed by an activation applied as
/// each output block is made (no separate pass over the output).
#[derive(Clone)]
pub struct PackedLinear {
    weight: Arc<PackedWeight>,
    epilogue: Epilogue,
}

impl PackedLinear {
    /// Packs `weight` `(out, in)` and `bias` `(out)` (f32, CPU). Only for
    /// [`ScoringKernel::Amx`].
    pub fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<PackedLinear> {
        if !amx::available() {
            return Err(Error::Invalid(
                "the AMX scoring kernel was asked for on a CPU without AMX".into(),
            ));
        }
        let (n, k) = weight.dims2()?;
        let w: Vec<f32> = weight.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let b: Option<Vec<f32>> = bias
            .map(|b| b.to_dtype(DType::F32)?.to_vec1())
            .transpose()?;
        Ok(PackedLinear {
            weight: Arc::new(PackedWeight::new(&w, b.as_deref(), n, k)),
            epilogue: Epilogue::None,
        })
    }

    /// The same layer followed by the exact-erf GELU (BERT's `"gelu"`).
    pub fn with_gelu_erf(&self) -> PackedLinear {
        PackedLinear {
            weight: self.weight.clone(),
            epilogue: Epilogue::GeluErf,
        }
    }

    /// `x (…, in) → (…, out)`, bias and activation included. No gradient flows through it.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.contiguous()?.apply_op1_no_bwd(self)?)
    }
}

impl CustomOp1 for PackedLinear {
    fn name(&self) -> &'static str {
        "amx-linear"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let values = super::contiguous_f32(self.name(), storage, layout)?;
        let dims = layout.shape().dims();
        let Some((&k, lead)) = dims.split_last() else {
            candle_core::bail!("amx-linear: input is a scalar");
        };
        if k != self.weight.in_features() {
            candle_core::bail!(
                "amx-linear: input has {k} features, layer expects {}",
                self.weight.in_features()
            );
        }
        let m: usize = lead.iter().product();
        let out = match self.epilogue {
            Epilogue::None => self.weight.matmul_t(values, m, amx::no_epilogue),
            Epilogue::GeluErf => self.weight.matmul_t(values, m, |row: &mut [f32]| {
                row.iter_mut().for_each(|v| *v = super::gelu_erf_scalar(*v));
            }),
        };
        let mut shape = lead.to_vec();
        shape.push(self.weight.out_features());
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }
}
