//! Norms of LoRA updates `ΔW = scale·B·A`: the validator's norm rule and the merge's clipping.

use candle_core::{DType, Tensor};
use shardwork_trainer::peft::Adapter;

use crate::NodeError;
use crate::work::Work;

fn lora_scale(adapter: &Adapter) -> f64 {
    adapter.config.lora_alpha / adapter.config.r.max(1) as f64
}

/// `‖t‖_F²`, summed in f32 as the tensor's own precision allows.
fn frobenius_sq(t: &Tensor) -> Result<f64, NodeError> {
    let sq = t
        .to_dtype(DType::F32)
        .and_then(|t| t.sqr())
        .and_then(|t| t.sum_all())
        .and_then(|t| t.to_scalar::<f32>())
        .map_err(shardwork_trainer::Error::from)?;
    Ok(f64::from(sq))
}

fn frobenius(t: &Tensor) -> Result<f64, NodeError> {
    Ok(frobenius_sq(t)?.sqrt())
}

/// `‖ΔW‖_F` over all the adapter's modules (the quantity the merge clips).
pub fn update_norm(adapter: &Adapter) -> Result<f64, NodeError> {
    let scale = lora_scale(adapter);
    let mut sum = 0.0;
    for pair in adapter.lora_pairs()?.values() {
        let delta = pair
            .b
            .matmul(&pair.a)
            .map_err(shardwork_trainer::Error::from)?;
        sum += frobenius_sq(&delta)? * scale * scale;
    }
    Ok(sum.sqrt())
}

/// Whether every value of the adapter is finite.
pub fn all_finite(adapter: &Adapter) -> Result<bool, NodeError> {
    for t in adapter.tensors.values() {
        let values: Vec<f32> = t
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(shardwork_trainer::Error::from)?;
        if values.iter().any(|v| !v.is_finite()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Largest `‖scale·B·A‖_F / ‖W‖_F` over the adapter's modules (infinite when a module has no
/// base weight to compare with: an adapter for modules the model lacks is malformed).
pub fn max_relative_norm(work: &dyn Work, adapter: &Adapter) -> Result<f64, NodeError> {
    let scale = lora_scale(adapter);
    let mut worst: f64 = 0.0;
    for (module, pair) in adapter.lora_pairs()? {
        let Some(w) = work.base_weight(&module)? else {
            return Ok(f64::INFINITY);
        };
        let delta = pair
            .b
            .matmul(&pair.a)
            .map_err(shardwork_trainer::Error::from)?;
        let ratio = scale * frobenius(&delta)? / frobenius(&w)?.max(1e-12);
        if !ratio.is_finite() {
            return Ok(f64::INFINITY);
        }
        worst = worst.max(ratio);
    }
    Ok(worst)
}
