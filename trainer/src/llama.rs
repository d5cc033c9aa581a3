//! Llama-family decoder (Llama, Qwen2, SmolLM): grouped-query attention, rotary position
//! embeddings in the Hugging Face `rotate_half` layout, RMSNorm, SwiGLU MLP, optionally tied
//! input/output embeddings.
//!
//! Weights are named exactly as in a Hugging Face checkpoint (`model.layers.3.self_attn.q_proj.weight`),
//! so the same `load` serves safetensors files and GGUF files renamed by [`crate::gguf`].
//!
//! Every operation on the training path has a backward pass: candle's fused `rms_norm`, `rope`
//! and `softmax_last_dim` kernels have none and would silently cut the gradient to the LoRA
//! factors, so the norms, rotary embeddings, attention and SwiGLU gate run through
//! [`crate::fused`]'s kernels (which do), and generation with a cache through composed ops.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};

use crate::lora::{LoraBuilder, LoraLinear};
use crate::quantized::QuantizedWeight;
use serde::Deserialize;

/// Why a model could not be configured or run.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// `config.json` could not be read.
    #[error("{path}: cannot read: {source}")]
    ReadConfig {
        /// The config file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON or lacks a field the model needs.
    #[error("{path}: line {line}, column {column}: {message}")]
    ParseConfig {
        /// The config file.
        path: PathBuf,
        /// Line of the error, counting from 1.
        line: usize,
        /// Column of the error, counting from 1.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The config fails validation, or the input or LoRA targets do not fit the model.
    #[error("model config: {0}")]
    InvalidConfig(String),
    /// A checkpoint tensor is missing or has the wrong shape.
    #[error("model weights: {0}")]
    Weights(#[source] candle_core::Error),
    /// A tensor operation in the forward pass failed.
    #[error("model forward: {0}")]
    Forward(#[from] candle_core::Error),
    /// A LoRA layer could not be built or run.
    #[error("lora: {0}")]
    Lora(#[source] crate::error::Error),
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}

fn default_max_positions() -> usize {
    2048
}

fn default_hidden_act() -> String {
    "silu".to_owned()
}

/// The subset of a Hugging Face `config.json` a Llama-family decoder needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Config {
    /// `model_type` from the config, e.g. `llama` or `qwen2`.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Number of token ids the embedding and output projection cover.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP's gate and up projections.
    pub intermediate_size: usize,
    /// Number of decoder blocks.
    pub num_hidden_layers: usize,
    /// Number of query heads per attention layer.
    pub num_attention_heads: usize,
    /// Absent in original Llama configs, where every head has its own key/value head.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Only set when it differs from `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RoPE base frequency; 10000 when absent.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// Epsilon of every RMSNorm; 1e-6 when absent.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Longest sequence the RoPE tables cover; 2048 when absent.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// Whether the output projection reuses the input embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Llama's flag for biases on q/k/v/o; Qwen2 has q/k/v biases without stating it.
    #[serde(default)]
    pub attention_bias: bool,
    /// MLP activation; only `silu` is supported.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Kept only to refuse scaled RoPE variants this model does not implement.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
}

impl Config {
    /// Reads and validates a `config.json`; syntax and type errors name the file, line and column.
    pub fn from_file(path: &Path) -> Result<Self, LlamaError> {
        let text = std::fs::read_to_string(path).map_err(|source| LlamaError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        let cfg: Config = serde_json::from_str(&text).map_err(|e| LlamaError::ParseConfig {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        cfg.validate()
            .map_err(|e| LlamaError::InvalidConfig(format!("{}: {e}", path.display())))?;
        Ok(cfg)
    }

    /// Key/value heads (grouped-query attention); the query head count when unset.
    pub fn num_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Qwen2 checkpoints carry q/k/v biases although their config has no flag for it.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias || self.model_type.as_deref() == Some("qwen2")
    }

    /// Checks the shape arithmetic the forward pass relies on, so a bad config fails at load
    /// with a message instead of deep inside a matmul.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_kv_heads()),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("{name} must be positive"));
            }
        }
        // The same limits the API checked at posting: a node never trusts that check, and a
        // size past them would be allocated before any tensor is read.
        use shardwork_core::protocol::model_files::limits::*;
        let bounded = [
            ("vocab_size", self.vocab_size, MAX_VOCAB_SIZE),
            ("hidden_size", self.hidden_size, MAX_HIDDEN_SIZE),
            (
                "intermediate_size",
                self.intermediate_size,
                MAX_INTERMEDIATE_SIZE,
            ),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_kv_heads(), MAX_HEADS),
            ("head_dim", self.head_dim(), MAX_HEAD_DIM),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                MAX_CONTEXT_LENGTH,
            ),
        ];
        for (name, value, max) in bounded {
            if (value as u64) > max {
                return Err(format!("{name} {value} is more than {max}"));
            }
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.num_attention_heads.is_multiple_of(self.num_kv_heads()) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.num_kv_heads()
            ));
        }
        if self.head_dim() == 0 || !self.head_dim().is_multiple_of(2) {
            return Err(format!(
                "head_dim {} must be even and positive",
                self.head_dim()
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!(
                "rope_theta {} must be a positive number",
                self.rope_theta
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(format!(
                "rms_norm_eps {} must be a positive number",
                self.rms_norm_eps
            ));
        }
        if self.hidden_act != "silu" {
            return Err(format!(
                "hidden_act {:?} is not supported (only \"silu\")",
                self.hidden_act
            ));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err("rope_scaling is not supported".to_owned());
        }
        Ok(())
    }
}

/// Projection weights kept in their GGUF block format, by Hugging Face tensor name
/// (`model.layers.0.mlp.up_proj.weight`): [`Llama::load_quantized`] builds those projections
/// from here instead of from f32 tensors.
pub type QuantizedWeights = HashMap<String, QuantizedWeight>;

/// A projection inside a decoder block: the frozen checkpoint layer, or the same layer wrapped
/// by [`Llama::apply_lora`].
pub enum Proj {
    /// The checkpoint layer as loaded, frozen.
    Base(Linear),
    /// The checkpoint layer kept in its block format, frozen (and its f32 bias, if any).
    Quantized(QuantizedWeight, Option<Tensor>),
    /// The layer with a LoRA branch added.
    Lora(LoraLinear),
}

impl std::fmt::Debug for Proj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proj::Base(l) => f.debug_tuple("Base").field(&l.weight().dims()).finish(),
            Proj::Quantized(w, _) => f.debug_tuple("Quantized").field(w).finish(),
            Proj::Lora(l) => f.debug_tuple("Lora").field(&l.name()).finish(),
        }
    }
}

impl Proj {
    fn load(
        vb: VarBuilder,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
        quantized: &mut QuantizedWeights,
    ) -> candle_core::Result<Self> {
        let name = format!("{}.weight", vb.prefix());
        if let Some(w) = quantized.remove(&name) {
            if w.dims() != (out_dim, in_dim) {
                candle_core::bail!(
                    "{name}: shape {:?} where the config asks for {:?}",
                    w.dims(),
                    (out_dim, in_dim)
                );
            }
            let bias = bias.then(|| vb.get(out_dim, "bias")).transpose()?;
            return Ok(Proj::Quantized(w, bias));
        }
        let linear = if bias {
            candle_nn::linear(in_dim, out_dim, vb)?
        } else {
            candle_nn::linear_no_bias(in_dim, out_dim, vb)?
        };
        Ok(Proj::Base(linear))
    }

    /// The same frozen layer, sharing its weights; `None` once LoRA is attached (a LoRA
    /// branch's variables would be shared too, and each twin must train its own).
    fn share(&self) -> Option<Proj> {
        match self {
            Proj::Base(l) => Some(Proj::Base(l.clone())),
            Proj::Quantized(w, b) => Some(Proj::Quantized(w.clone(), b.clone())),
            Proj::Lora(_) => None,
        }
    }

    /// The frozen base weight (out, in) in f32 (expanded, for a quantized one) and its bias.
    pub fn base(&self) -> Result<(Tensor, Option<Tensor>), LlamaError> {
        Ok(match self {
            Proj::Base(l) => (l.weight().clone(), l.bias().cloned()),
            Proj::Quantized(w, b) => (w.dequantize().map_err(LlamaError::Lora)?, b.clone()),
            Proj::Lora(l) => (l.weight().clone(), l.bias().cloned()),
        })
    }

    fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, LlamaError> {
        match self {
            Proj::Base(l) => frozen_linear(xs, l.weight(), l.bias()),
            Proj::Quantized(w, b) => quantized_linear(xs, w, b.as_ref()),
            Proj::Lora(l) => l.forward(xs, train).map_err(LlamaError::Lora),
        }
    }
}

/// [`frozen_linear`] for a weight kept quantized: the same product on the same f32 values,
/// expanded for the call.
fn quantized_linear(
    xs: &Tensor,
    w: &QuantizedWeight,
    bias: Option<&Tensor>,
) -> Result<Tensor, LlamaError> {
    on_rows(xs, w.dims().0, bias, |rows| w.matmul_t(rows))?
        .ok_or_else(|| LlamaError::InvalidConfig("a projection of a scalar".into()))
}

/// `xs (..., in) · wᵀ + bias` for frozen weights: one node of the graph whose backward computes
/// only the input gradient ([`crate::fused::linear`]). candle-nn's `Linear` broadcasts `w` over
/// the batch, so its backward computed a (batch, in, out) weight gradient per projection (then
/// summed it) that nothing reads: in SmolLM2 SFT with LoRA on the attention only, that was the
/// MLP's share of a step's time and most of its peak memory.
fn frozen_linear(xs: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, LlamaError> {
    Ok(crate::fused::linear::linear(xs, w, bias, None)?)
}

/// `product` (a `(rows, in) -> (rows, out)` frozen projection) applied to `xs (..., in)` viewed
/// as rows, plus `bias`, back in `xs`'s leading shape; `None` for a scalar `xs`.
fn on_rows(
    xs: &Tensor,
    out_dim: usize,
    bias: Option<&Tensor>,
    product: impl FnOnce(&Tensor) -> crate::error::Result<Tensor>,
) -> Result<Option<Tensor>, LlamaError> {
    let dims = xs.dims();
    let Some((&in_dim, lead)) = dims.split_last() else {
        return Ok(None);
    };
    let rows: usize = lead.iter().product();
    let y = product(&xs.reshape((rows, in_dim))?).map_err(LlamaError::Lora)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out_dims = lead.to_vec();
    out_dims.push(out_dim);
    Ok(Some(y.reshape(out_dims)?))
}

/// RMSNorm from differentiable ops (see the module comment for why not candle's kernel).
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(vb: VarBuilder, dim: usize, eps: f64) -> candle_core::Result<Self> {
        Ok(Self {
            weight: vb.get(dim, "weight")?,
            eps,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        crate::fused::norm::rms_norm(xs, &self.weight, self.eps)
    }
}

/// Positions the RoPE tables cover when the loader names no job: the longest `max_seq_len` a
/// job may ask for. A model's declared context is not trusted to size them (a GGUF declaring
/// 300,000,000 positions asked for a 38 GB table).
pub const DEFAULT_MAX_POSITIONS: usize = shardwork_core::protocol::job_spec::MAX_SEQ_LEN as usize;

/// Precomputed RoPE tables, shaped (positions, head_dim / 2): one angle per pair of features
/// `(i, i + head_dim / 2)`, as HF's `rotate_half` formulation pairs them.
#[derive(Debug, Clone)]
struct Rotary {
    cos: Tensor,
    sin: Tensor,
    positions: usize,
}

impl Rotary {
    /// Tables for the first `positions` positions (the caller bounds it by the job).
    fn new(cfg: &Config, positions: usize, device: &Device) -> candle_core::Result<Self> {
        let dim = cfg.head_dim();
        let inv_freq: Vec<f32> = (0..dim / 2)
            .map(|i| (1.0 / cfg.rope_theta.powf(2.0 * i as f64 / dim as f64)) as f32)
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, dim / 2), device)?;
        let positions_t = Tensor::arange(0u32, positions as u32, device)?
            .to_dtype(DType::F32)?
            .unsqueeze(1)?;
        let freqs = positions_t.broadcast_mul(&inv_freq)?;
        Ok(Self {
            cos: freqs.cos()?,
            sin: freqs.sin()?,
            positions,
        })
    }

    /// The cos and sin rows of `positions`, in order: the tables of a packed row, whose
    /// sequences each start again after the same past.
    fn rows(&self, positions: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        Ok((
            self.cos.index_select(positions, 0)?,
            self.sin.index_select(positions, 0)?,
        ))
    }

    /// Rotates `xs` (batch, seq, heads, head_dim) for positions `offset..offset + seq`.
    fn apply(&self, xs: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
        let seq = xs.dim(1)?;
        crate::fused::rotary::rotary(
            xs,
            &self.cos.narrow(0, offset, seq)?,
            &self.sin.narrow(0, offset, seq)?,
        )
    }
}

/// Key/value tensors of earlier positions, one entry per layer, each (batch, seq, kv heads,
/// head dim): for incremental decoding and for scoring after a shared prefix.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    /// An empty cache for a model with `num_layers` decoder blocks.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
        }
    }

    /// Number of positions already cached.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .and_then(|(k, _)| k.dim(1).ok())
            .unwrap_or(0)
    }

    /// Whether no position is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Grouped-query self-attention of one decoder block, with rotary position embeddings.
#[derive(Debug)]
pub struct Attention {
    /// Query projection (`q_proj`).
    pub q_proj: Proj,
    /// Key projection (`k_proj`).
    pub k_proj: Proj,
    /// Value projection (`v_proj`).
    pub v_proj: Proj,
    /// Output projection (`o_proj`).
    pub o_proj: Proj,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn load(vb: VarBuilder, cfg: &Config, q: &mut QuantizedWeights) -> candle_core::Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let bias = cfg.qkv_bias();
        Ok(Self {
            q_proj: Proj::load(vb.pp("q_proj"), h, cfg.num_attention_heads * hd, bias, q)?,
            k_proj: Proj::load(vb.pp("k_proj"), h, cfg.num_kv_heads() * hd, bias, q)?,
            v_proj: Proj::load(vb.pp("v_proj"), h, cfg.num_kv_heads() * hd, bias, q)?,
            o_proj: Proj::load(
                vb.pp("o_proj"),
                cfg.num_attention_heads * hd,
                h,
                cfg.attention_bias,
                q,
            )?,
            num_heads: cfg.num_attention_heads,
            num_kv_heads: cfg.num_kv_heads(),
            head_dim: hd,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        rotary: &Rotary,
        offset: usize,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        train: bool,
    ) -> Result<Tensor, LlamaError> {
        let (b, t, _) = xs.dims3()?;
        // (batch, seq, heads, head_dim): the projections' own layout, no copy.
        let heads = |p: &Proj, n: usize| -> Result<Tensor, LlamaError> {
            Ok(p.forward(xs, train)?.reshape((b, t, n, self.head_dim))?)
        };
        let q = rotary.apply(&heads(&self.q_proj, self.num_heads)?, offset)?;
        let k = rotary.apply(&heads(&self.k_proj, self.num_kv_heads)?, offset)?;
        let v = heads(&self.v_proj, self.num_kv_heads)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let Some(slot) = cache else {
            // A whole sequence: the fused kernel keeps only q, k and v for the backward pass.
            let out = crate::fused::attention::causal_attention(&q, &k, &v, scale)?;
            return self
                .o_proj
                .forward(&out.reshape((b, t, self.num_heads * self.head_dim))?, train);
        };
        // After a cache (generation, or scoring after a shared prefix): the new positions
        // attend to the cached ones and to themselves. The cache keeps keys and values in the
        // projections' (batch, seq, heads, dim) layout, which the fused kernel reads.
        let (k, v) = match slot.as_ref() {
            Some((pk, pv)) => (Tensor::cat(&[pk, &k], 1)?, Tensor::cat(&[pv, &v], 1)?),
            None => (k.contiguous()?, v.contiguous()?),
        };
        *slot = Some((k.clone(), v.clone()));
        let out = crate::fused::attention::causal_attention_after(&q, &k, &v, scale)?;
        self.o_proj
            .forward(&out.reshape((b, t, self.num_heads * self.head_dim))?, train)
    }

    /// [`Attention::forward`] of a packed row (`xs`: (1, total, hidden)), without gradients:
    /// the projections run on the whole row at once, and each of `packing`'s sequences
    /// attends, causally, to the `past` keys and values (a cache of one sequence, shared by
    /// all of them) and to its own positions only.
    fn forward_packed(
        &self,
        xs: &Tensor,
        packing: &Packing<'_>,
        past: Option<&(Tensor, Tensor)>,
    ) -> Result<Tensor, LlamaError> {
        let (b, t, _) = xs.dims3()?;
        let heads = |p: &Proj, n: usize| -> Result<Tensor, LlamaError> {
            Ok(p.forward(xs, false)?.reshape((b, t, n, self.head_dim))?)
        };
        let rotate = |x: Tensor| crate::fused::rotary::rotary(&x, &packing.cos, &packing.sin);
        let q = rotate(heads(&self.q_proj, self.num_heads)?)?;
        let k = rotate(heads(&self.k_proj, self.num_kv_heads)?)?;
        let v = heads(&self.v_proj, self.num_kv_heads)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut outs = Vec::with_capacity(packing.lengths.len());
        let mut start = 0;
        for &len in packing.lengths {
            let own = |x: &Tensor| x.narrow(1, start, len);
            let (k, v) = match past {
                Some((pk, pv)) => (
                    Tensor::cat(&[pk, &own(&k)?], 1)?,
                    Tensor::cat(&[pv, &own(&v)?], 1)?,
                ),
                None => (own(&k)?, own(&v)?),
            };
            outs.push(crate::fused::attention::causal_attention_after(
                &own(&q)?,
                &k,
                &v,
                scale,
            )?);
            start += len;
        }
        let out = Tensor::cat(&outs, 1)?;
        self.o_proj
            .forward(&out.reshape((b, t, self.num_heads * self.head_dim))?, false)
    }
}

/// Several sequences packed end to end in one batch row, each continuing the same past: their
/// lengths, and the rotary tables of every position of the row.
struct Packing<'a> {
    lengths: &'a [usize],
    cos: Tensor,
    sin: Tensor,
}

/// SwiGLU feed-forward of one decoder block: `down(silu(gate(x)) · up(x))`.
#[derive(Debug)]
pub struct Mlp {
    /// Gate projection (`gate_proj`).
    pub gate_proj: Proj,
    /// Up projection (`up_proj`).
    pub up_proj: Proj,
    /// Down projection (`down_proj`).
    pub down_proj: Proj,
}

impl Mlp {
    fn load(vb: VarBuilder, cfg: &Config, q: &mut QuantizedWeights) -> candle_core::Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_proj: Proj::load(vb.pp("gate_proj"), h, i, false, q)?,
            up_proj: Proj::load(vb.pp("up_proj"), h, i, false, q)?,
            down_proj: Proj::load(vb.pp("down_proj"), i, h, false, q)?,
        })
    }

    fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, LlamaError> {
        let gated = crate::fused::swiglu::swiglu(
            &self.gate_proj.forward(xs, train)?,
            &self.up_proj.forward(xs, train)?,
        )?;
        self.down_proj.forward(&gated, train)
    }
}

/// One pre-norm decoder block: RMSNorm, attention, RMSNorm, MLP, each with a residual add.
#[derive(Debug)]
pub struct Block {
    /// The block's self-attention.
    pub self_attn: Attention,
    /// The block's feed-forward.
    pub mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl Block {
    fn load(vb: VarBuilder, cfg: &Config, q: &mut QuantizedWeights) -> candle_core::Result<Self> {
        Ok(Self {
            self_attn: Attention::load(vb.pp("self_attn"), cfg, q)?,
            mlp: Mlp::load(vb.pp("mlp"), cfg, q)?,
            input_layernorm: RmsNorm::load(
                vb.pp("input_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
            post_attention_layernorm: RmsNorm::load(
                vb.pp("post_attention_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        rotary: &Rotary,
        offset: usize,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        train: bool,
    ) -> Result<Tensor, LlamaError> {
        self.forward_with(xs, train, |attention, normed| {
            attention.forward(normed, rotary, offset, cache, train)
        })
    }

    /// The block around an attention `attend` computes from the normed input.
    fn forward_with(
        &self,
        xs: &Tensor,
        train: bool,
        attend: impl FnOnce(&Attention, &Tensor) -> Result<Tensor, LlamaError>,
    ) -> Result<Tensor, LlamaError> {
        let attn = attend(&self.self_attn, &self.input_layernorm.forward(xs)?)?;
        let xs = (xs + attn)?;
        let mlp = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&xs)?, train)?;
        Ok((xs + mlp)?)
    }
}

/// A Llama-family causal language model.
#[derive(Debug)]
pub struct Llama {
    embed_tokens: Embedding,
    /// The decoder blocks, in order (`model.layers.N`).
    pub layers: Vec<Block>,
    norm: RmsNorm,
    /// `None` when the output projection is tied to `embed_tokens`.
    lm_head: Option<Linear>,
    rotary: Rotary,
    cfg: Config,
}

impl Llama {
    /// Loads the weights under their Hugging Face names (`model.…`, `lm_head.weight`).
    /// A checkpoint without `lm_head.weight` uses the tied embedding even when the config does
    /// not say so, as transformers does for SmolLM exports.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self, LlamaError> {
        Self::load_quantized(vb, cfg, QuantizedWeights::new())
    }

    /// [`Llama::load`], with the projections named in `quantized` kept in their block format
    /// (`vb` need not hold those weights). Every weight in `quantized` must be used.
    pub fn load_quantized(
        vb: VarBuilder,
        cfg: &Config,
        quantized: QuantizedWeights,
    ) -> Result<Self, LlamaError> {
        Self::load_for(vb, cfg, quantized, DEFAULT_MAX_POSITIONS)
    }

    /// [`Llama::load_quantized`] with RoPE tables for `max_positions` positions (a job's
    /// `max_seq_len`), or the model's declared context when that is shorter.
    pub fn load_for(
        vb: VarBuilder,
        cfg: &Config,
        mut quantized: QuantizedWeights,
        max_positions: usize,
    ) -> Result<Self, LlamaError> {
        cfg.validate().map_err(LlamaError::InvalidConfig)?;
        let positions = cfg.max_position_embeddings.min(max_positions.max(1));
        let model =
            Self::load_inner(vb, cfg, &mut quantized, positions).map_err(LlamaError::Weights)?;
        if let Some(name) = quantized.keys().min() {
            return Err(LlamaError::InvalidConfig(format!(
                "{name} is not a projection of this model"
            )));
        }
        Ok(model)
    }

    fn load_inner(
        vb: VarBuilder,
        cfg: &Config,
        quantized: &mut QuantizedWeights,
        positions: usize,
    ) -> candle_core::Result<Self> {
        let m = vb.pp("model");
        let embed_tokens =
            candle_nn::embedding(cfg.vocab_size, cfg.hidden_size, m.pp("embed_tokens"))?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Block::load(m.pp(format!("layers.{i}")), cfg, quantized))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = RmsNorm::load(m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps)?;
        let lm_head = if cfg.tie_word_embeddings || !vb.contains_tensor("lm_head.weight") {
            None
        } else {
            Some(candle_nn::linear_no_bias(
                cfg.hidden_size,
                cfg.vocab_size,
                vb.pp("lm_head"),
            )?)
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rotary: Rotary::new(cfg, positions, vb.device())?,
            cfg: cfg.clone(),
        })
    }

    /// A second model on the same frozen weights (no tensor copied), for a job that scores
    /// adapters while a training run holds the first: each takes LoRA of its own. `None` once
    /// LoRA is attached.
    pub fn twin(&self) -> Option<Llama> {
        let layers = self
            .layers
            .iter()
            .map(|b| {
                let (a, m) = (&b.self_attn, &b.mlp);
                Some(Block {
                    self_attn: Attention {
                        q_proj: a.q_proj.share()?,
                        k_proj: a.k_proj.share()?,
                        v_proj: a.v_proj.share()?,
                        o_proj: a.o_proj.share()?,
                        num_heads: a.num_heads,
                        num_kv_heads: a.num_kv_heads,
                        head_dim: a.head_dim,
                    },
                    mlp: Mlp {
                        gate_proj: m.gate_proj.share()?,
                        up_proj: m.up_proj.share()?,
                        down_proj: m.down_proj.share()?,
                    },
                    input_layernorm: b.input_layernorm.clone(),
                    post_attention_layernorm: b.post_attention_layernorm.clone(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Llama {
            embed_tokens: self.embed_tokens.clone(),
            layers,
            norm: self.norm.clone(),
            lm_head: self.lm_head.clone(),
            rotary: self.rotary.clone(),
            cfg: self.cfg.clone(),
        })
    }

    /// The config the model was loaded with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Positions the RoPE tables cover: the longest sequence the model runs.
    pub fn max_positions(&self) -> usize {
        self.rotary.positions
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        self.embed_tokens.embeddings().device()
    }

    /// Every frozen base tensor under its Hugging Face name, for saving a merged model and for
    /// checking that training left the base untouched (quantized projections expanded to f32).
    pub fn base_tensors(&self) -> Result<Vec<(String, Tensor)>, LlamaError> {
        let mut out = vec![(
            "model.embed_tokens.weight".to_owned(),
            self.embed_tokens.embeddings().clone(),
        )];
        let linear =
            |out: &mut Vec<(String, Tensor)>, name: String, (w, b): (Tensor, Option<Tensor>)| {
                out.push((format!("{name}.weight"), w));
                if let Some(b) = b {
                    out.push((format!("{name}.bias"), b));
                }
            };
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            for (n, proj) in layer.projections() {
                linear(&mut out, format!("{p}.{n}"), proj.base()?);
            }
            out.push((
                format!("{p}.input_layernorm.weight"),
                layer.input_layernorm.weight.clone(),
            ));
            out.push((
                format!("{p}.post_attention_layernorm.weight"),
                layer.post_attention_layernorm.weight.clone(),
            ));
        }
        out.push(("model.norm.weight".to_owned(), self.norm.weight.clone()));
        if let Some(head) = &self.lm_head {
            linear(
                &mut out,
                "lm_head".to_owned(),
                (head.weight().clone(), head.bias().cloned()),
            );
        }
        Ok(out)
    }

    /// Final hidden states (batch, seq, hidden) for a full sequence, without a cache: the
    /// training path (`train` turns on LoRA dropout). Right padding needs no extra mask: the
    /// causal mask keeps real tokens from seeing the padding after them, and padded positions
    /// are excluded from the loss.
    pub fn forward_hidden(&self, input_ids: &Tensor, train: bool) -> Result<Tensor, LlamaError> {
        let mut xs = self.embed_tokens.forward(input_ids)?;
        self.check_positions(xs.dim(1)?, 0)?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &self.rotary, 0, None, train)?;
        }
        Ok(self.norm.forward(&xs)?)
    }

    /// The frozen output projection (vocab, hidden) and its bias: `lm_head`, or the input
    /// embeddings it is tied to.
    pub fn head(&self) -> (&Tensor, Option<&Tensor>) {
        match &self.lm_head {
            Some(head) => (head.weight(), head.bias()),
            None => (self.embed_tokens.embeddings(), None),
        }
    }

    /// Vocabulary logits for hidden states of any leading shape.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor, LlamaError> {
        // The head (or the input embeddings it is tied to) is frozen: no weight gradient.
        match &self.lm_head {
            Some(head) => frozen_linear(hidden, head.weight(), head.bias()),
            None => frozen_linear(hidden, self.embed_tokens.embeddings(), None),
        }
    }

    /// Logits (batch, seq, vocab) for every position of `input_ids` (batch, seq).
    pub fn forward(&self, input_ids: &Tensor) -> Result<Tensor, LlamaError> {
        self.logits(&self.forward_hidden(input_ids, false)?)
    }

    /// Logits (batch, vocab) for the last of `input_ids` (batch, seq), which continue the
    /// positions already in `cache`; the cache is extended with them.
    pub fn forward_cached(
        &self,
        input_ids: &Tensor,
        cache: &mut KvCache,
    ) -> Result<Tensor, LlamaError> {
        let hidden = self.forward_hidden_cached(input_ids, cache)?;
        let t = hidden.dim(1)?;
        self.logits(&hidden.narrow(1, t - 1, 1)?.squeeze(1)?)
    }

    /// Final hidden states (batch, seq, hidden) of `input_ids` (batch, seq), which continue the
    /// positions already in `cache`; the cache is extended with them. Without gradients: for
    /// generation and scoring.
    pub fn forward_hidden_cached(
        &self,
        input_ids: &Tensor,
        cache: &mut KvCache,
    ) -> Result<Tensor, LlamaError> {
        if cache.layers.len() != self.layers.len() {
            *cache = KvCache::new(self.layers.len());
        }
        let offset = cache.len();
        let mut xs = self.embed_tokens.forward(input_ids)?;
        let t = xs.dim(1)?;
        self.check_positions(t, offset)?;
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            xs = layer.forward(&xs, &self.rotary, offset, Some(slot), false)?;
        }
        Ok(self.norm.forward(&xs)?)
    }

    /// Final hidden states (1, total, hidden) of sequences packed end to end in `input_ids`
    /// (1, total), `lengths` long in order, each continuing the positions in `past` (a cache
    /// of one sequence, or empty): the hidden states each would get alone, without padding
    /// any of them to the longest. Without gradients: for scoring.
    pub fn forward_hidden_packed(
        &self,
        input_ids: &Tensor,
        lengths: &[usize],
        past: &KvCache,
    ) -> Result<Tensor, LlamaError> {
        let total = input_ids.dim(1)?;
        if input_ids.dim(0)? != 1 || lengths.contains(&0) || lengths.iter().sum::<usize>() != total
        {
            return Err(LlamaError::InvalidConfig(format!(
                "a packed row of {:?} tokens does not hold sequences of lengths {lengths:?}",
                input_ids.dims()
            )));
        }
        let one_sequence = past
            .layers
            .iter()
            .flatten()
            .all(|(k, _)| k.dim(0).ok() == Some(1));
        if !(past.is_empty() || past.layers.len() == self.layers.len() && one_sequence) {
            return Err(LlamaError::InvalidConfig(
                "a packed row continues a cache of one sequence of this model's layers".to_owned(),
            ));
        }
        let offset = past.len();
        self.check_positions(lengths.iter().copied().max().unwrap_or(0), offset)?;
        let positions: Vec<u32> = lengths
            .iter()
            .flat_map(|&len| (offset..offset + len).map(|p| p as u32))
            .collect();
        let (cos, sin) =
            self.rotary
                .rows(&Tensor::from_vec(positions, total, input_ids.device())?)?;
        let packing = Packing { lengths, cos, sin };
        let mut xs = self.embed_tokens.forward(input_ids)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let slot = past.layers.get(i).and_then(Option::as_ref);
            xs = layer.forward_with(&xs, false, |attention, normed| {
                attention.forward_packed(normed, &packing, slot)
            })?;
        }
        Ok(self.norm.forward(&xs)?)
    }

    /// Wraps every projection the builder's config targets (PEFT suffix rule on module paths
    /// such as `model.layers.0.self_attn.q_proj`) in a LoRA layer; returns how many were wrapped.
    /// The trainable tensors are registered in `builder` under PEFT names.
    pub fn apply_lora(&mut self, builder: &mut LoraBuilder) -> Result<usize, LlamaError> {
        let mut wrapped = 0;
        for (i, layer) in self.layers.iter_mut().enumerate() {
            for (name, proj) in layer.projections_mut() {
                let path = format!("model.layers.{i}.{name}");
                if !builder.config().is_target(&path) {
                    continue;
                }
                if let Proj::Lora(_) = proj {
                    return Err(LlamaError::InvalidConfig(format!(
                        "{path} already has a LoRA adapter"
                    )));
                }
                // An adapted projection's base is kept in f32 (expanded once, if it was
                // quantized): scoring folds the adapter into it.
                let (weight, bias) = proj.base()?;
                let lora = builder
                    .linear(&path, weight, bias)
                    .map_err(LlamaError::Lora)?;
                *proj = Proj::Lora(lora);
                wrapped += 1;
            }
        }
        if wrapped == 0 {
            return Err(LlamaError::InvalidConfig(format!(
                "lora target_modules {:?} match no projection (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                builder.config().target_modules
            )));
        }
        Ok(wrapped)
    }

    fn check_positions(&self, t: usize, offset: usize) -> Result<(), LlamaError> {
        if t == 0 {
            return Err(LlamaError::InvalidConfig("empty input sequence".to_owned()));
        }
        if offset + t > self.rotary.positions {
            return Err(LlamaError::InvalidConfig(format!(
                "sequence of {} positions exceeds the {} the model was loaded for \
                 (max_position_embeddings {}, or the job's max_seq_len when shorter)",
                offset + t,
                self.rotary.positions,
                self.cfg.max_position_embeddings
            )));
        }
        Ok(())
    }
}

impl Block {
    /// The seven projections under their HF module names, the names LoRA targets use.
    pub fn projections(&self) -> [(&'static str, &Proj); 7] {
        [
            ("self_attn.q_proj", &self.self_attn.q_proj),
            ("self_attn.k_proj", &self.self_attn.k_proj),
            ("self_attn.v_proj", &self.self_attn.v_proj),
            ("self_attn.o_proj", &self.self_attn.o_proj),
            ("mlp.gate_proj", &self.mlp.gate_proj),
            ("mlp.up_proj", &self.mlp.up_proj),
            ("mlp.down_proj", &self.mlp.down_proj),
        ]
    }

    /// Mutable access to the projections, for wrapping them in LoRA layers.
    pub fn projections_mut(&mut self) -> [(&'static str, &mut Proj); 7] {
        [
            ("self_attn.q_proj", &mut self.self_attn.q_proj),
            ("self_attn.k_proj", &mut self.self_attn.k_proj),
            ("self_attn.v_proj", &mut self.self_attn.v_proj),
            ("self_attn.o_proj", &mut self.self_attn.o_proj),
            ("mlp.gate_proj", &mut self.mlp.gate_proj),
            ("mlp.up_proj", &mut self.mlp.up_proj),
            ("mlp.down_proj", &mut self.mlp.down_proj),
        ]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use super::*;

    pub(crate) fn tiny_config() -> Config {
        serde_json::from_str(
            r#"{"vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                "tie_word_embeddings": true}"#,
        )
        .unwrap()
    }

    /// A model with random weights under the HF names, built from a seeded generator.
    pub(crate) fn tiny_model(cfg: &Config) -> Llama {
        let dev = Device::Cpu;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rand = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.5
                })
                .collect();
            Tensor::from_vec(v, shape, &dev).unwrap()
        };
        let (h, i, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim());
        let mut t = HashMap::new();
        t.insert(
            "model.embed_tokens.weight".to_owned(),
            rand(&[cfg.vocab_size, h]),
        );
        t.insert("model.norm.weight".to_owned(), (rand(&[h]) + 1.0).unwrap());
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let shapes = [
                (
                    "self_attn.q_proj.weight",
                    vec![cfg.num_attention_heads * hd, h],
                ),
                ("self_attn.k_proj.weight", vec![cfg.num_kv_heads() * hd, h]),
                ("self_attn.v_proj.weight", vec![cfg.num_kv_heads() * hd, h]),
                (
                    "self_attn.o_proj.weight",
                    vec![h, cfg.num_attention_heads * hd],
                ),
                ("mlp.gate_proj.weight", vec![i, h]),
                ("mlp.up_proj.weight", vec![i, h]),
                ("mlp.down_proj.weight", vec![h, i]),
            ];
            for (name, shape) in shapes {
                t.insert(format!("{p}.{name}"), rand(&shape));
            }
            t.insert(
                format!("{p}.input_layernorm.weight"),
                (rand(&[h]) + 1.0).unwrap(),
            );
            t.insert(
                format!("{p}.post_attention_layernorm.weight"),
                (rand(&[h]) + 1.0).unwrap(),
            );
        }
        Llama::load(VarBuilder::from_tensors(t, DType::F32, &dev), cfg).unwrap()
    }

    pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    /// The validator scores on a twin while a replay trains on the model: the twin must run the
    /// same frozen weights (not copies), refuse to be made once LoRA is attached, and keep
    /// LoRA of its own, untouched by what the other's LoRA holds.
    #[test]
    fn a_twin_runs_the_same_frozen_weights_with_lora_of_its_own() {
        let cfg = tiny_config();
        let mut model = tiny_model(&cfg);
        let mut twin = model.twin().expect("no LoRA attached yet");
        let input = Tensor::new(&[[3u32, 17, 5, 9, 30]], &Device::Cpu).unwrap();
        let base = model.forward(&input).unwrap();
        assert_eq!(max_abs_diff(&base, &twin.forward(&input).unwrap()), 0.0);
        let storage = |m: &Llama| {
            let (s, _) = m.embed_tokens.embeddings().storage_and_layout();
            match &*s {
                candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => v.as_ptr(),
                _ => unreachable!("f32 on the CPU"),
            }
        };
        assert_eq!(storage(&model), storage(&twin), "the embedding is shared");

        let lora = crate::lora::LoraConfig::new(4, 8.0, 0.0, &["q_proj", "v_proj"], &[]).unwrap();
        let trained = crate::train::sft::attach_lora(&mut model, &lora, 7).unwrap();
        assert!(model.twin().is_none(), "LoRA would be shared");
        crate::train::sft::attach_lora(&mut twin, &lora, 7).unwrap();
        let fresh = twin.forward(&input).unwrap();
        assert_eq!(max_abs_diff(&fresh, &model.forward(&input).unwrap()), 0.0);
        let moved = trained
            .snapshot()
            .unwrap()
            .into_iter()
            .map(|(name, v)| (name, (v + 0.1).unwrap()))
            .collect();
        trained.load(&moved).unwrap();
        assert!(max_abs_diff(&fresh, &model.forward(&input).unwrap()) > 1e-4);
        assert_eq!(
            max_abs_diff(&fresh, &twin.forward(&input).unwrap()),
            0.0,
            "the twin's LoRA did not move with the model's"
        );
    }

    #[test]
    fn cached_decoding_matches_the_full_causal_forward() {
        let cfg = tiny_config();
        let model = tiny_model(&cfg);
        let ids: Vec<u32> = vec![3, 17, 5, 9, 30, 1, 12];
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let full = model.forward(&input).unwrap().squeeze(0).unwrap();

        // Prompt of 4 in one call, then one token at a time.
        let mut cache = KvCache::new(cfg.num_hidden_layers);
        let first = model
            .forward_cached(&input.narrow(1, 0, 4).unwrap(), &mut cache)
            .unwrap();
        assert!(max_abs_diff(&first.squeeze(0).unwrap(), &full.get(3).unwrap()) < 1e-5);
        for pos in 4..ids.len() {
            let step = model
                .forward_cached(&input.narrow(1, pos, 1).unwrap(), &mut cache)
                .unwrap();
            let d = max_abs_diff(&step.squeeze(0).unwrap(), &full.get(pos).unwrap());
            assert!(d < 1e-5, "position {pos}: cached logits differ by {d}");
        }
        assert_eq!(cache.len(), ids.len());
    }

    #[test]
    fn a_packed_row_gives_each_sequence_its_own_hidden_states() {
        let cfg = tiny_config();
        let model = tiny_model(&cfg);
        let row = |ids: &[u32]| {
            Tensor::new(ids, &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap()
        };
        let prefix = [3u32, 17, 5];
        let sequences: [&[u32]; 3] = [&[9, 30, 1], &[12], &[7, 7, 2, 28, 4]];
        let lengths: Vec<usize> = sequences.iter().map(|s| s.len()).collect();
        let packed_ids = row(&sequences.concat());
        for with_prefix in [false, true] {
            let mut past = KvCache::new(cfg.num_hidden_layers);
            if with_prefix {
                model
                    .forward_hidden_cached(&row(&prefix), &mut past)
                    .unwrap();
            }
            let packed = model
                .forward_hidden_packed(&packed_ids, &lengths, &past)
                .unwrap()
                .squeeze(0)
                .unwrap();
            let mut start = 0;
            for s in sequences {
                // Each sequence alone: the prefix and it in one causal forward.
                let whole: Vec<u32> = if with_prefix {
                    [&prefix[..], s].concat()
                } else {
                    s.to_vec()
                };
                let alone = model
                    .forward_hidden(&row(&whole), false)
                    .unwrap()
                    .squeeze(0)
                    .unwrap();
                let own = alone.narrow(0, whole.len() - s.len(), s.len()).unwrap();
                let d = max_abs_diff(&packed.narrow(0, start, s.len()).unwrap(), &own);
                assert!(
                    d < 1e-5,
                    "sequence {s:?} (prefix: {with_prefix}) differs by {d}"
                );
                start += s.len();
            }
        }
        let past = KvCache::new(cfg.num_hidden_layers);
        let err = model
            .forward_hidden_packed(&packed_ids, &[3, 1], &past)
            .unwrap_err();
        assert!(err.to_string().contains("lengths [3, 1]"), "{err}");
    }

    #[test]
    fn later_tokens_do_not_change_earlier_logits() {
        let model = tiny_model(&tiny_config());
        let a = Tensor::new(&[[4u32, 8, 15, 16, 23]], &Device::Cpu).unwrap();
        let b = Tensor::new(&[[4u32, 8, 15, 31, 0]], &Device::Cpu).unwrap();
        let la = model.forward(&a).unwrap().narrow(1, 0, 3).unwrap();
        let lb = model.forward(&b).unwrap().narrow(1, 0, 3).unwrap();
        assert_eq!(max_abs_diff(&la, &lb), 0.0);
    }

    #[test]
    fn training_forward_passes_gradient_through_every_layer() {
        let cfg = tiny_config();
        let mut model = tiny_model(&cfg);
        let lora = crate::lora::LoraConfig::new(2, 4.0, 0.0, &["q_proj", "v_proj"], &[]).unwrap();
        let mut builder = LoraBuilder::new(lora, 3).unwrap();
        assert_eq!(model.apply_lora(&mut builder).unwrap(), 4);
        let trainables = builder.finish();
        // With B at zero A's gradient is zero by construction; move B off zero so every
        // factor must receive a gradient through the differentiable norm, RoPE and softmax.
        for (name, var) in trainables.iter() {
            if name.contains("lora_B") {
                var.set(&Tensor::ones(var.shape(), DType::F32, &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        let input = Tensor::new(&[[1u32, 2, 3, 4, 5]], &Device::Cpu).unwrap();
        // The training path: scoring (`forward`) reads the factors detached.
        let hidden = model.forward_hidden(&input, true).unwrap();
        let loss = model
            .logits(&hidden)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        for (name, var) in trainables.iter() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            let norm: f32 = g.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert!(norm > 0.0, "{name} has a zero gradient");
        }
    }

    #[test]
    fn config_syntax_error_names_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(
            &path,
            "{\n  \"vocab_size\": 32,\n  \"hidden_size\": oops\n}\n",
        )
        .unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("config.json: line 3, column"), "{err}");
    }

    #[test]
    fn config_with_inconsistent_heads_is_rejected_naming_the_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let mut v: serde_json::Value = serde_json::to_value(serde_json::json!({
            "vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3
        }))
        .unwrap();
        std::fs::write(&path, v.to_string()).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("num_key_value_heads 3"), "{err}");
        v["num_key_value_heads"] = 2.into();
        v["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0});
        std::fs::write(&path, v.to_string()).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("rope_scaling"), "{err}");
    }

    #[test]
    fn missing_weight_is_reported_by_name() {
        let cfg = tiny_config();
        let vb = VarBuilder::from_tensors(HashMap::new(), DType::F32, &Device::Cpu);
        let err = Llama::load(vb, &cfg).unwrap_err().to_string();
        assert!(err.contains("model.embed_tokens.weight"), "{err}");
    }
}
