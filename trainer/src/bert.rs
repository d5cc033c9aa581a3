//! BERT-family encoder (BERT, MiniLM) with a sequence-classification head, laid out and
//! computed as Hugging Face's `BertForSequenceClassification` so LoRA and `modules_to_save`
//! names are the ones PEFT uses (`bert.encoder.layer.N.attention.self.query`, `classifier`)
//! and an adapter scores the same when a requester loads it with
//! `AutoModelForSequenceClassification` + `PeftModel.from_pretrained`.
//!
//! The head is transformers' own: the [CLS] token's final hidden state through the
//! checkpoint's frozen `pooler.dense` and tanh, dropout, then `classifier`. Sentence-transformers
//! models such as all-MiniLM-L6-v2 were trained to be mean-pooled instead, but a head that
//! pooled differently from transformers' gives a requester a different, near-random classifier
//! in the tool they load it with (issue 14).
//!
//! Weights come from a `model.safetensors` written for `BertModel` (keys `encoder.…`, as in
//! all-MiniLM-L6-v2) or for `BertForSequenceClassification` (keys `bert.encoder.…`); either
//! must carry the pooler (`pooler.dense.weight`, `pooler.dense.bias`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::inference::{AddLayerNorm, FusedAttention, PackedLinear, ScoringKernel};
use crate::lora::{DropoutRng, LoraBuilder, LoraConfig, LoraLinear, Trainables};
use crate::{inference, nn};

/// The fields of a BERT `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Number of token ids the word embedding covers.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer; `hidden_size` must be a multiple of it.
    pub num_attention_heads: usize,
    /// Width of each layer's feed-forward (intermediate) projection.
    pub intermediate_size: usize,
    /// Feed-forward activation: `gelu` (erf), `gelu_new` (tanh approximation) or `relu`.
    #[serde(default = "gelu")]
    pub hidden_act: String,
    /// Dropout on embeddings and sublayer outputs during training.
    #[serde(default)]
    pub hidden_dropout_prob: f32,
    /// Dropout on attention probabilities during training.
    #[serde(default)]
    pub attention_probs_dropout_prob: f32,
    /// Longest sequence the position embedding covers.
    pub max_position_embeddings: usize,
    /// Number of token-type (segment) ids; 2 when absent.
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// Epsilon of every layer norm; 1e-12 when absent.
    #[serde(default = "ln_eps")]
    pub layer_norm_eps: f64,
    /// Token id used for padding; 0 when absent.
    #[serde(default)]
    pub pad_token_id: u32,
    /// Standard deviation of a fresh head's weights (transformers' `_init_weights`); 0.02 when
    /// absent.
    #[serde(default = "init_range")]
    pub initializer_range: f64,
    /// Dropout before the classifier during training; `hidden_dropout_prob` when absent, as in
    /// `BertForSequenceClassification`.
    #[serde(default)]
    pub classifier_dropout: Option<f32>,
    /// What transformers saved the model from (a Hub id or a path), if it wrote one.
    #[serde(default, rename = "_name_or_path")]
    pub name_or_path: Option<String>,
}

fn gelu() -> String {
    "gelu".into()
}
fn two() -> usize {
    2
}
fn ln_eps() -> f64 {
    1e-12
}
fn init_range() -> f64 {
    0.02
}

impl BertConfig {
    /// Parses `config.json`; a syntax error or missing field names the file, line and column.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let cfg: Self = serde_json::from_str(&text).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let bad = |detail: String| Error::Config {
            path: path.to_path_buf(),
            detail,
        };
        // The same bounds on every declared size the API checked at posting: a node checks its
        // own copy again.
        let raw: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        shardwork_core::protocol::model_files::check_config_sizes(&raw)
            .map_err(|p| bad(p.to_string()))?;
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            )));
        }
        if !matches!(cfg.hidden_act.as_str(), "gelu" | "gelu_new" | "relu") {
            return Err(bad(format!(
                "hidden_act {:?} is not supported (gelu, gelu_new, relu)",
                cfg.hidden_act
            )));
        }
        Ok(cfg)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// The base weights, read once and shared by every model built from them (the federated
/// experiment builds several adapters over one base).
pub struct BertWeights {
    /// The checkpoint's `config.json`.
    pub config: BertConfig,
    tensors: HashMap<String, Tensor>,
    path: PathBuf,
    /// `"bert."` when the checkpoint was saved from a model with a head, `""` for `BertModel`.
    key_prefix: &'static str,
    name: String,
}

impl BertWeights {
    /// Reads `config.json` and `model.safetensors` from `dir`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = BertConfig::load(&dir.join("config.json"))?;
        let path = dir.join("model.safetensors");
        let tensors = crate::safetensors_file::load(&path, device)?;
        let key_prefix = if tensors.contains_key("bert.embeddings.word_embeddings.weight") {
            "bert."
        } else {
            ""
        };
        // PEFT's `base_model_name_or_path`: what transformers would record for this folder.
        let name = match config.name_or_path.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => dir
                .canonicalize()
                .unwrap_or_else(|_| dir.to_path_buf())
                .file_name()
                .map_or_else(
                    || dir.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                ),
        };
        Ok(Self {
            config,
            tensors,
            path,
            key_prefix,
            name,
        })
    }

    /// The model's name for an adapter's `base_model_name_or_path`: config.json's
    /// `_name_or_path` when it has one, else the folder's name.
    ///
    /// transformers writes `_name_or_path` as the model the weights were loaded from before
    /// saving, so a fine-tuned export can name its parent: all-MiniLM-L6-v2's says
    /// `nreimers/MiniLM-L6-H384-uncased`. It is a label; loading an adapter needs the base
    /// model itself.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The checkpoint tensor for module path `bert.<rest>` (or `<rest>`), as F32, checked
    /// against the shape the config implies.
    fn get(&self, rest: &str, shape: &[usize]) -> Result<Tensor> {
        let key = format!("{}{rest}", self.key_prefix);
        let t = self.tensors.get(&key).ok_or_else(|| Error::Safetensors {
            path: self.path.clone(),
            detail: format!("tensor {key} is missing"),
        })?;
        if t.dims() != shape {
            return Err(Error::Safetensors {
                path: self.path.clone(),
                detail: format!(
                    "tensor {key} has shape {:?}, config.json implies {shape:?}",
                    t.dims()
                ),
            });
        }
        Ok(t.to_dtype(DType::F32)?)
    }

    /// The pooler's tensors, which the classification head reads as transformers' does. Some
    /// exports drop them (`BertModel(add_pooling_layer=False)`); say so rather than report a
    /// bare missing tensor.
    fn require_pooler(&self) -> Result<()> {
        for part in ["weight", "bias"] {
            let key = format!("{}pooler.dense.{part}", self.key_prefix);
            if !self.tensors.contains_key(&key) {
                return Err(Error::Safetensors {
                    path: self.path.clone(),
                    detail: format!(
                        "tensor {key} is missing: the classification head is transformers' \
                         BertForSequenceClassification ([CLS] -> pooler.dense -> tanh -> \
                         classifier), which needs the checkpoint's pooler; this one was saved \
                         without it"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every base tensor by checkpoint name, for checking that training left them untouched.
    pub fn tensors(&self) -> &HashMap<String, Tensor> {
        &self.tensors
    }
}

#[derive(Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn load(w: &BertWeights, prefix: &str) -> Result<Self> {
        let h = w.config.hidden_size;
        Ok(Self {
            weight: w.get(&format!("{prefix}.weight"), &[h])?,
            bias: w.get(&format!("{prefix}.bias"), &[h])?,
            eps: w.config.layer_norm_eps,
        })
    }

    /// `norm(x + residual)` in one pass, for scoring on the CPU (no gradient).
    fn add_forward(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let op = AddLayerNorm {
            weight: self.weight.to_dtype(DType::F32)?.to_vec1()?,
            bias: self.bias.to_dtype(DType::F32)?.to_vec1()?,
            eps: self.eps as f32,
        };
        Ok(x.contiguous()?
            .apply_op2_no_bwd(&residual.contiguous()?, &op)?)
    }

    fn forward(&self, x: &Tensor, pass: Pass) -> Result<Tensor> {
        match pass {
            Pass::Infer => inference::layer_norm(x, &self.weight, &self.bias, self.eps),
            Pass::Train | Pass::Eval => nn::layer_norm(x, &self.weight, &self.bias, self.eps),
        }
    }
}

/// Which kernels a forward pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Differentiable, with dropout.
    Train,
    /// Differentiable, without dropout.
    Eval,
    /// Fused kernels that stop gradients ([`crate::inference`]): scoring only.
    Infer,
}

impl Pass {
    fn train(self) -> bool {
        self == Pass::Train
    }
}

struct Layer {
    query: LoraLinear,
    key: LoraLinear,
    value: LoraLinear,
    /// A folded model's fused projections on the AMX kernel.
    packed: Option<PackedLayer>,
    attn_out: LoraLinear,
    attn_norm: LayerNorm,
    intermediate: LoraLinear,
    output: LoraLinear,
    out_norm: LayerNorm,
}

/// Projections a folded layer on the AMX kernel runs fused.
struct PackedLayer {
    /// `[query | key | value]` as one projection: each layer's input is converted for the
    /// kernel once instead of three times.
    qkv: PackedLinear,
    /// The intermediate projection with the erf GELU applied to each output block as it is
    /// made (when that is the model's activation).
    intermediate_gelu: Option<PackedLinear>,
}

/// Builds linear `bert.<rest>` through the LoRA builder, which decides frozen/LoRA/trainable.
fn linear(
    w: &BertWeights,
    lb: &mut LoraBuilder,
    rest: &str,
    out_dim: usize,
    in_dim: usize,
) -> Result<LoraLinear> {
    let weight = w.get(&format!("{rest}.weight"), &[out_dim, in_dim])?;
    let bias = w.get(&format!("{rest}.bias"), &[out_dim])?;
    lb.linear(&format!("bert.{rest}"), weight, Some(bias))
}

/// Settings for building a classifier over base weights.
#[derive(Debug, Clone)]
pub struct ClassifierSpec {
    /// Number of classes the head predicts (at least 2).
    pub num_labels: usize,
    /// LoRA rank, alpha, dropout, target modules and modules to save.
    pub lora: LoraConfig,
    /// Dropout inside the frozen encoder during training (HF's `hidden_dropout_prob` /
    /// `attention_probs_dropout_prob`); `None` uses the values in config.json. Like
    /// `hidden_dropout_prob` it also sets the dropout before the classifier, unless
    /// config.json names a `classifier_dropout`.
    pub encoder_dropout: Option<f32>,
    /// Seeds `A`, the head initialisation and every dropout mask.
    pub seed: u64,
}

/// A BERT encoder with LoRA layers and a classification head, laid out as PEFT names it.
pub struct BertClassifier {
    cfg: BertConfig,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    /// `bert.pooler.dense`: frozen, or LoRA-adapted when a target names it (`dense`), as PEFT
    /// would wrap it.
    pooler: LoraLinear,
    classifier: LoraLinear,
    hidden_dropout: f32,
    attn_dropout: f32,
    /// Dropout on the pooled vector before the classifier.
    head_dropout: f32,
    rng: DropoutRng,
    num_labels: usize,
}

impl BertClassifier {
    /// Builds the classifier; returns it with the registry of its trainable tensors (LoRA
    /// factors and the head). `classifier` is always a module to save, as PEFT makes it for
    /// `SEQ_CLS`. A checkpoint without the pooler is an error naming the tensor and the file.
    pub fn new(w: &BertWeights, spec: &ClassifierSpec) -> Result<(Self, Trainables)> {
        if spec.num_labels < 2 {
            return Err(Error::Invalid(format!(
                "num_labels: {} is below the minimum 2",
                spec.num_labels
            )));
        }
        let mut lora = spec.lora.clone();
        if !lora.modules_to_save.iter().any(|m| m == "classifier") {
            lora.modules_to_save.push("classifier".into());
        }
        let mut lb = LoraBuilder::new(lora, spec.seed)?;
        let c = &w.config;
        let h = c.hidden_size;
        let word = w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?;
        let position = w.get(
            "embeddings.position_embeddings.weight",
            &[c.max_position_embeddings, h],
        )?;
        let token_type = w.get(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab_size, h],
        )?;
        let emb_norm = LayerNorm::load(w, "embeddings.LayerNorm")?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                query: linear(w, &mut lb, &format!("{p}.attention.self.query"), h, h)?,
                key: linear(w, &mut lb, &format!("{p}.attention.self.key"), h, h)?,
                value: linear(w, &mut lb, &format!("{p}.attention.self.value"), h, h)?,
                packed: None,
                attn_out: linear(w, &mut lb, &format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: LayerNorm::load(w, &format!("{p}.attention.output.LayerNorm"))?,
                intermediate: linear(
                    w,
                    &mut lb,
                    &format!("{p}.intermediate.dense"),
                    c.intermediate_size,
                    h,
                )?,
                output: linear(
                    w,
                    &mut lb,
                    &format!("{p}.output.dense"),
                    h,
                    c.intermediate_size,
                )?,
                out_norm: LayerNorm::load(w, &format!("{p}.output.LayerNorm"))?,
            });
        }
        w.require_pooler()?;
        let pooler = linear(w, &mut lb, "pooler.dense", h, h)?;
        let classifier = lb.new_head(
            "classifier",
            spec.num_labels,
            h,
            c.initializer_range,
            word.device(),
        )?;
        let (hidden_dropout, attn_dropout) = match spec.encoder_dropout {
            Some(p) => (p, p),
            None => (c.hidden_dropout_prob, c.attention_probs_dropout_prob),
        };
        let head_dropout = c.classifier_dropout.unwrap_or(hidden_dropout);
        let rng = DropoutRng::new(spec.seed.wrapping_add(0x5eed));
        let model = Self {
            cfg: c.clone(),
            word,
            position,
            token_type,
            emb_norm,
            layers,
            pooler,
            classifier,
            hidden_dropout,
            attn_dropout,
            head_dropout,
            rng,
            num_labels: spec.num_labels,
        };
        let mut trainables = lb.finish();
        trainables.add_dropout_stream(model.rng.clone());
        Ok((model, trainables))
    }

    /// The base model's config.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// Number of classes the head predicts.
    pub fn num_labels(&self) -> usize {
        self.num_labels
    }

    /// Every frozen tensor the forward pass reads, by checkpoint module path (for checking
    /// that training leaves the base untouched).
    pub fn frozen_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![
            (
                "embeddings.word_embeddings.weight".to_string(),
                self.word.clone(),
            ),
            (
                "embeddings.position_embeddings.weight".into(),
                self.position.clone(),
            ),
            (
                "embeddings.token_type_embeddings.weight".into(),
                self.token_type.clone(),
            ),
            (
                "embeddings.LayerNorm.weight".into(),
                self.emb_norm.weight.clone(),
            ),
            (
                "embeddings.LayerNorm.bias".into(),
                self.emb_norm.bias.clone(),
            ),
        ];
        let mut push_linear = |l: &LoraLinear| {
            let name = l.name().trim_start_matches("bert.").to_string();
            out.push((format!("{name}.weight"), l.weight().clone()));
            if let Some(b) = l.bias() {
                out.push((format!("{name}.bias"), b.clone()));
            }
        };
        for l in &self.layers {
            for lin in [
                &l.query,
                &l.key,
                &l.value,
                &l.attn_out,
                &l.intermediate,
                &l.output,
            ] {
                push_linear(lin);
            }
        }
        push_linear(&self.pooler);
        for (i, l) in self.layers.iter().enumerate() {
            for (part, norm) in [
                ("attention.output.LayerNorm", &l.attn_norm),
                ("output.LayerNorm", &l.out_norm),
            ] {
                out.push((
                    format!("encoder.layer.{i}.{part}.weight"),
                    norm.weight.clone(),
                ));
                out.push((format!("encoder.layer.{i}.{part}.bias"), norm.bias.clone()));
            }
        }
        out
    }

    fn dropout(&self, x: &Tensor, p: f32, train: bool) -> Result<Tensor> {
        if train && p > 0.0 {
            self.rng.apply(x, p)
        } else {
            Ok(x.clone())
        }
    }

    /// `input_ids: (b, t)` u32, `attention_mask: (b, t)` f32 with 1 for tokens and 0 for padding.
    /// Returns logits `(b, num_labels)`, differentiable; dropout applies when `train`.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: &Tensor,
        train: bool,
    ) -> Result<Tensor> {
        let pass = if train { Pass::Train } else { Pass::Eval };
        self.run(input_ids, attention_mask, pass)
    }

    /// The logits of [`Self::forward`] without dropout, through fused kernels that carry no
    /// gradient: for scoring. Call it on [`Self::folded`] so LoRA layers cost nothing extra.
    pub fn infer(&self, input_ids: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
        self.run(input_ids, attention_mask, Pass::Infer)
    }

    /// A copy of this model with every LoRA update folded into its base weight and every
    /// layer frozen: the same function, cheaper to score, on the fastest kernel this machine
    /// has for it.
    pub fn folded(&self) -> Result<BertClassifier> {
        self.folded_with(ScoringKernel::detect(self.word.device(), self.word.dtype()))
    }

    /// [`Self::folded`] on a chosen kernel (benchmarks and tests compare them).
    pub fn folded_with(&self, kernel: ScoringKernel) -> Result<BertClassifier> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                // q, k and v are packed once, together, rather than each on its own.
                let (query, key, value) = (
                    l.query.folded(ScoringKernel::Portable)?,
                    l.key.folded(ScoringKernel::Portable)?,
                    l.value.folded(ScoringKernel::Portable)?,
                );
                let intermediate = l.intermediate.folded(kernel)?;
                let packed = match kernel {
                    ScoringKernel::Amx => {
                        let weight =
                            Tensor::cat(&[query.weight(), key.weight(), value.weight()], 0)?;
                        let biases: Option<Vec<&Tensor>> =
                            [&query, &key, &value].iter().map(|l| l.bias()).collect();
                        let bias = biases.map(|b| Tensor::cat(&b, 0)).transpose()?;
                        let erf_gelu = !matches!(self.cfg.hidden_act.as_str(), "relu" | "gelu_new");
                        Some(PackedLayer {
                            qkv: PackedLinear::new(&weight, bias.as_ref())?,
                            intermediate_gelu: match intermediate.packed() {
                                Some(p) if erf_gelu => Some(p.with_gelu_erf()),
                                _ => None,
                            },
                        })
                    }
                    ScoringKernel::Portable => None,
                };
                Ok(Layer {
                    query,
                    key,
                    value,
                    packed,
                    attn_out: l.attn_out.folded(kernel)?,
                    attn_norm: l.attn_norm.clone(),
                    intermediate,
                    output: l.output.folded(kernel)?,
                    out_norm: l.out_norm.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BertClassifier {
            cfg: self.cfg.clone(),
            word: self.word.clone(),
            position: self.position.clone(),
            token_type: self.token_type.clone(),
            emb_norm: self.emb_norm.clone(),
            layers,
            pooler: self.pooler.folded(kernel)?,
            classifier: self.classifier.folded(kernel)?,
            hidden_dropout: 0.0,
            attn_dropout: 0.0,
            head_dropout: 0.0,
            rng: self.rng.clone(),
            num_labels: self.num_labels,
        })
    }

    fn run(&self, input_ids: &Tensor, attention_mask: &Tensor, pass: Pass) -> Result<Tensor> {
        let train = pass.train();
        let (b, t) = input_ids.dims2()?;
        if t > self.cfg.max_position_embeddings {
            return Err(Error::Invalid(format!(
                "sequence length {t} exceeds max_position_embeddings {}",
                self.cfg.max_position_embeddings
            )));
        }
        if attention_mask.dims() != [b, t] {
            return Err(Error::Invalid(format!(
                "attention_mask shape {:?} differs from input_ids {:?}",
                attention_mask.dims(),
                [b, t]
            )));
        }
        let h = self.cfg.hidden_size;
        let ids = input_ids.flatten_all()?;
        let words = self.word.index_select(&ids, 0)?.reshape((b, t, h))?;
        let pos = self.position.narrow(0, 0, t)?;
        // Single-sequence classification: every token has type 0.
        let typ = self.token_type.narrow(0, 0, 1)?;
        let x = words.broadcast_add(&pos)?.broadcast_add(&typ)?;
        let mut x = self.dropout(
            &self.emb_norm.forward(&x, pass)?,
            self.hidden_dropout,
            train,
        )?;
        let token_mask = attention_mask.to_dtype(DType::F32)?.contiguous()?;
        // Scoring on the CPU runs each layer through the inference kernels (no gradient);
        // training, and scoring elsewhere, through the differentiable ones.
        if pass == Pass::Infer && x.device().is_cpu() && x.dtype() == DType::F32 {
            for layer in &self.layers {
                x = self.layer_infer_cpu(layer, &x, &token_mask)?;
            }
        } else {
            for layer in &self.layers {
                x = self.layer_forward(layer, &x, &token_mask, pass)?;
            }
        }
        // BertPooler, then BertForSequenceClassification's dropout and classifier.
        let cls = x.narrow(1, 0, 1)?.squeeze(1)?;
        let pooled = self.pooler.forward(&cls, train)?.tanh()?;
        let pooled = self.dropout(&pooled, self.head_dropout, train)?;
        self.classifier.forward(&pooled, train)
    }

    /// One encoder layer, differentiable. `token_mask`: `(b, t)` f32, 1 for a token.
    fn layer_forward(
        &self,
        l: &Layer,
        x: &Tensor,
        token_mask: &Tensor,
        pass: Pass,
    ) -> Result<Tensor> {
        let train = pass.train();
        let (b, t, h) = x.dims3()?;
        let nh = self.cfg.num_attention_heads;
        let hd = self.cfg.head_dim();
        // (b, t, heads, head size) is the projections' own layout: no transpose, no copy.
        let heads = |y: Tensor| y.reshape((b, t, nh, hd));
        let q = heads(l.query.forward(x, train)?)?;
        let k = heads(l.key.forward(x, train)?)?;
        let v = heads(l.value.forward(x, train)?)?;
        // The dropout draws the positions the composed form's dropout over the (b, nh, t, t)
        // probabilities drew, so a seed drops the same probabilities either way.
        let dropout = if train {
            self.rng.draw(b * nh * t * t, self.attn_dropout)
        } else {
            None
        };
        let scale = 1.0 / (hd as f64).sqrt();
        let ctx =
            crate::fused::attention::padded_attention(&q, &k, &v, scale, token_mask, dropout)?
                .reshape((b, t, h))?;
        let attn = self.dropout(
            &l.attn_out.forward(&ctx, train)?,
            self.hidden_dropout,
            train,
        )?;
        let x = l.attn_norm.forward(&(attn + x)?, pass)?;
        let inter = l.intermediate.forward(&x, train)?;
        let inter = match self.cfg.hidden_act.as_str() {
            "relu" => inter.relu()?,
            "gelu_new" => inter.gelu()?,
            _ if pass == Pass::Infer => inference::gelu_erf(&inter)?,
            _ => crate::fused::gelu::gelu_erf(&inter)?,
        };
        let out = self.dropout(
            &l.output.forward(&inter, train)?,
            self.hidden_dropout,
            train,
        )?;
        l.out_norm.forward(&(out + x)?, pass)
    }

    /// [`Self::layer_forward`] for scoring on the CPU: one projection to `[q | k | v]`, fused
    /// attention, and residual adds fused into the layer norms. `token_mask`: `(b, t)` f32.
    fn layer_infer_cpu(&self, l: &Layer, x: &Tensor, token_mask: &Tensor) -> Result<Tensor> {
        let qkv = match &l.packed {
            Some(packed) => packed.qkv.forward(x)?,
            None => Tensor::cat(
                &[
                    l.query.forward(x, false)?,
                    l.key.forward(x, false)?,
                    l.value.forward(x, false)?,
                ],
                2,
            )?,
        };
        let attention = FusedAttention {
            heads: self.cfg.num_attention_heads,
        };
        let ctx = qkv.contiguous()?.apply_op2_no_bwd(token_mask, &attention)?;
        let attn = l.attn_out.forward(&ctx, false)?;
        let x = l.attn_norm.add_forward(&attn, x)?;
        let fused_gelu = l.packed.as_ref().and_then(|p| p.intermediate_gelu.as_ref());
        let inter = match (fused_gelu, self.cfg.hidden_act.as_str()) {
            (Some(packed), _) => packed.forward(&x)?,
            (None, "relu") => l.intermediate.forward(&x, false)?.relu()?,
            (None, "gelu_new") => l.intermediate.forward(&x, false)?.gelu()?,
            (None, _) => inference::gelu_erf(&l.intermediate.forward(&x, false)?)?,
        };
        let out = l.output.forward(&inter, false)?;
        l.out_norm.add_forward(&out, &x)
    }

    /// Multiply-accumulates of one forward pass over `tokens` tokens at sequence length `t`,
    /// for MFU: the linear layers plus attention's two batched matmuls.
    pub fn forward_flops_per_token(&self, t: usize) -> f64 {
        let c = &self.cfg;
        let h = c.hidden_size as f64;
        let i = c.intermediate_size as f64;
        let per_layer = 4.0 * h * h + 2.0 * h * i + 2.0 * t as f64 * h;
        2.0 * c.num_hidden_layers as f64 * per_layer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ClassifierSpec {
        ClassifierSpec {
            num_labels: 2,
            lora: LoraConfig::new(2, 4.0, 0.0, &["query", "value"], &[]).unwrap(),
            encoder_dropout: Some(0.0),
            seed: 3,
        }
    }

    #[test]
    fn a_checkpoint_without_the_pooler_is_refused_naming_the_tensor_and_file() {
        let dir = tempfile::tempdir().unwrap();
        crate::sample::write_model(dir.path(), 1).unwrap();
        let path = dir.path().join("model.safetensors");
        let mut tensors = crate::safetensors_file::load(&path, &Device::Cpu).unwrap();
        tensors.retain(|k, _| !k.starts_with("pooler."));
        candle_core::safetensors::save(&tensors, &path).unwrap();
        let weights = BertWeights::load(dir.path(), &Device::Cpu).unwrap();
        let msg = BertClassifier::new(&weights, &spec())
            .err()
            .unwrap()
            .to_string();
        assert!(
            msg.contains("model.safetensors")
                && msg.contains("tensor pooler.dense.weight is missing"),
            "{msg}"
        );
    }

    /// The head is [CLS] -> pooler -> tanh -> classifier: with the pooler's output made
    /// constant, every text gets the same logits whatever the encoder computes.
    #[test]
    fn the_head_reads_the_pooler_and_only_the_pooler() {
        let dir = tempfile::tempdir().unwrap();
        crate::sample::write_model(dir.path(), 1).unwrap();
        let weights = BertWeights::load(dir.path(), &Device::Cpu).unwrap();
        let tok =
            crate::text::TextTokenizer::from_file(&dir.path().join("tokenizer.json"), 16).unwrap();
        let texts = ["good great film", "dull boring plot and cast", "the movie"];
        let logits = |weights: &BertWeights| {
            let (model, trainables) = BertClassifier::new(weights, &spec()).unwrap();
            for (name, var) in trainables.iter() {
                if name.contains("lora_B") {
                    var.set(&Tensor::ones(var.shape(), DType::F32, &Device::Cpu).unwrap())
                        .unwrap();
                }
            }
            let seqs: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t).unwrap()).collect();
            let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
            let batch = crate::text::pad(&refs, tok.pad_id(), &Device::Cpu).unwrap();
            let train = model.forward(&batch.ids, &batch.mask, false).unwrap();
            let infer = model
                .folded()
                .unwrap()
                .infer(&batch.ids, &batch.mask)
                .unwrap();
            (
                train.to_vec2::<f32>().unwrap(),
                infer.to_vec2::<f32>().unwrap(),
            )
        };
        let (varied, _) = logits(&weights);
        assert!(varied[0] != varied[1], "texts should differ: {varied:?}");

        // pooler.dense = 0·x + b, so tanh(pooler) = tanh(b) for every text.
        let mut constant = weights;
        let h = constant.config.hidden_size;
        constant.tensors.insert(
            "pooler.dense.weight".into(),
            Tensor::zeros((h, h), DType::F32, &Device::Cpu).unwrap(),
        );
        constant.tensors.insert(
            "pooler.dense.bias".into(),
            Tensor::full(0.5f32, h, &Device::Cpu).unwrap(),
        );
        let (train, infer) = logits(&constant);
        for rows in [train, infer] {
            let same = rows
                .iter()
                .flatten()
                .zip(rows[0].iter().cycle())
                .all(|(a, b)| (a - b).abs() < 1e-6);
            assert!(same, "{rows:?}");
        }
    }

    #[test]
    fn the_adapter_names_the_base_as_config_json_does_or_by_its_folder() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("my-bert");
        crate::sample::write_model(&dir, 1).unwrap();
        assert_eq!(
            BertWeights::load(&dir, &Device::Cpu).unwrap().name(),
            "my-bert"
        );
        let cfg = dir.join("config.json");
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        json["_name_or_path"] = "org/some-bert".into();
        std::fs::write(&cfg, json.to_string()).unwrap();
        assert_eq!(
            BertWeights::load(&dir, &Device::Cpu).unwrap().name(),
            "org/some-bert"
        );
    }
}
