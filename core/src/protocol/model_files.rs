//! What a base model's files must be, in one place: the API checks a posted job's model bundle
//! against it, and the trainer loads a model folder by it.
//!
//! Two layouts are understood:
//! * **GGUF**: exactly one `*.gguf` file (weights, tokenizer and chat template in its metadata);
//! * **Hugging Face folder**: `config.json`, the weights as `model.safetensors` or as shards
//!   named by `model.safetensors.index.json`, `tokenizer.json`, and for causal LMs
//!   `tokenizer_config.json` (special tokens and the chat template).
//!
//! Also here, because the API needs it without linking the trainer: a reader of the GGUF
//! header's metadata that works on a prefix of the file, so the API can tell a model's
//! architecture and whether it has a chat template without fetching gigabytes of weights.

use std::collections::BTreeMap;

use crate::protocol::job_spec::{Architecture, ModelFormat};

/// `config.json` `model_type`s the Llama-family decoder implements (SmolLM exports say `llama`).
pub const LLAMA_MODEL_TYPES: &[&str] = &["llama", "qwen2"];
/// `config.json` `model_type`s the BERT-family encoder implements.
pub const BERT_MODEL_TYPES: &[&str] = &["bert"];
/// GGUF `general.architecture` values of the Llama family (llama.cpp calls SmolLM `llama`).
pub const GGUF_LLAMA_ARCHITECTURES: &[&str] = &["llama", "qwen2"];

/// The model's config file in a Hugging Face folder.
pub const CONFIG_JSON: &str = "config.json";
/// Single-file weights of a Hugging Face folder.
pub const WEIGHTS: &str = "model.safetensors";
/// Index of sharded weights: `weight_map` names the shard file of every tensor.
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
/// The tokenizer of a Hugging Face folder.
pub const TOKENIZER_JSON: &str = "tokenizer.json";
/// Special tokens and the chat template of a Hugging Face folder.
pub const TOKENIZER_CONFIG_JSON: &str = "tokenizer_config.json";

/// How a model's files are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelLayout {
    /// One GGUF file, by its name.
    Gguf(String),
    /// A Hugging Face folder.
    Folder {
        /// Whether the weights are sharded (`model.safetensors.index.json`).
        sharded: bool,
    },
}

impl ModelLayout {
    /// The layout of a model whose files are `names`, checked against the format the spec
    /// declares; the error says which file is missing or extra.
    pub fn of(names: &[&str], format: ModelFormat) -> Result<ModelLayout, String> {
        let ggufs: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.ends_with(".gguf"))
            .collect();
        match format {
            ModelFormat::Gguf => match ggufs.as_slice() {
                [one] => Ok(ModelLayout::Gguf((*one).to_owned())),
                [] => Err("holds no .gguf file (the spec's format is gguf)".into()),
                many => Err(format!(
                    "holds {} .gguf files ({}); a GGUF model is one file",
                    many.len(),
                    many.join(", ")
                )),
            },
            ModelFormat::Safetensors => {
                let has = |n: &str| names.contains(&n);
                if !has(CONFIG_JSON) {
                    return Err(format!("has no {CONFIG_JSON}"));
                }
                if !has(TOKENIZER_JSON) {
                    return Err(format!("has no {TOKENIZER_JSON}"));
                }
                if has(WEIGHTS_INDEX) {
                    Ok(ModelLayout::Folder { sharded: true })
                } else if has(WEIGHTS) {
                    Ok(ModelLayout::Folder { sharded: false })
                } else {
                    Err(format!("has neither {WEIGHTS} nor {WEIGHTS_INDEX}"))
                }
            }
        }
    }
}

/// Checks a `config.json`'s `model_type` against the family the spec names; the error is the
/// problem with the file (the caller names the file).
pub fn check_model_type(
    config: &serde_json::Value,
    architecture: Architecture,
) -> Result<(), String> {
    let supported = match architecture {
        Architecture::Llama => LLAMA_MODEL_TYPES,
        Architecture::Bert => BERT_MODEL_TYPES,
    };
    match config.get("model_type").and_then(|t| t.as_str()) {
        Some(t) if supported.contains(&t) => Ok(()),
        Some(t) => Err(format!(
            "model_type {t:?} is not a {architecture:?}-family architecture the nodes run ({})",
            supported.join(", ")
        )),
        None => Err("has no model_type".into()),
    }
}

/// The sizes a `config.json` declares, by key, with the most each may be: the required ones
/// first (a missing one is the caller's to report), then the optional ones.
const CONFIG_SIZES: &[(&str, u64, bool)] = &[
    ("vocab_size", MAX_VOCAB_SIZE, true),
    ("hidden_size", MAX_HIDDEN_SIZE, true),
    ("intermediate_size", MAX_INTERMEDIATE_SIZE, true),
    ("num_hidden_layers", MAX_LAYERS, true),
    ("num_attention_heads", MAX_HEADS, true),
    ("num_key_value_heads", MAX_HEADS, false),
    ("head_dim", MAX_HEAD_DIM, false),
    ("max_position_embeddings", MAX_CONTEXT_LENGTH, false),
    // BERT's token types (2 in every published checkpoint).
    ("type_vocab_size", 1 << 10, false),
];

/// Checks every size a `config.json` declares against [`limits`]: each present is a whole
/// number in `1..=max`, so nothing sized by it can exhaust a node. The problem names the key.
pub fn check_config_sizes(config: &serde_json::Value) -> Result<(), ModelProblem> {
    for &(key, max, required) in CONFIG_SIZES {
        match config.get(key) {
            None | Some(serde_json::Value::Null) if !required => {}
            None | Some(serde_json::Value::Null) => {
                return Err(ModelProblem::new(key, "is missing"));
            }
            Some(v) => match v.as_u64() {
                Some(n) if (1..=max).contains(&n) => {}
                _ => {
                    return Err(ModelProblem::new(
                        key,
                        format!("{v} is not a whole number in 1..={max}"),
                    ));
                }
            },
        }
    }
    Ok(())
}

/// The chat template a `tokenizer_config.json` carries: a string, or transformers' list of
/// named templates (the one named `default`).
pub fn chat_template(tokenizer_config: &serde_json::Value) -> Option<&str> {
    match tokenizer_config.get("chat_template")? {
        serde_json::Value::String(s) => Some(s.as_str()),
        serde_json::Value::Array(named) => named.iter().find_map(|t| {
            (t.get("name")?.as_str()? == "default").then_some(t.get("template")?.as_str()?)
        }),
        _ => None,
    }
}

/// A special token as `tokenizer_config.json` writes it: a string or `{"content": …}`.
pub fn special_token<'a>(tokenizer_config: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    match tokenizer_config.get(key)? {
        serde_json::Value::String(s) => Some(s.as_str()),
        serde_json::Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

/// Limits on what a model's files may declare, defined once: the API checks a posted model
/// against them and every node checks its copy again before any declared size allocates
/// anything (a node never trusts the API's check). Each is far above the published models the
/// nodes run (Llama 3.1 405B: hidden 16,384, 126 layers, 128 heads, FFN 53,248, context
/// 131,072; Gemma's vocabulary 262,144) and far below what lets one file exhaust a node: a GGUF
/// whose `llama.context_length` said 300,000,000 made every node that loaded it abort.
pub mod limits {
    /// Longest context a model may declare (`<arch>.context_length`, `max_position_embeddings`).
    /// No table is sized by it (the RoPE tables are sized by the job's `max_seq_len`), but a
    /// declaration beyond it is no model the nodes run.
    pub const MAX_CONTEXT_LENGTH: u64 = 1 << 21;
    /// Largest vocabulary (`tokenizer.ggml.tokens`, `vocab_size`).
    pub const MAX_VOCAB_SIZE: u64 = 1 << 20;
    /// Widest hidden state (`<arch>.embedding_length`, `hidden_size`).
    pub const MAX_HIDDEN_SIZE: u64 = 1 << 16;
    /// Widest feed-forward layer (`<arch>.feed_forward_length`, `intermediate_size`).
    pub const MAX_INTERMEDIATE_SIZE: u64 = 1 << 18;
    /// Most decoder or encoder layers (`<arch>.block_count`, `num_hidden_layers`).
    pub const MAX_LAYERS: u64 = 1 << 10;
    /// Most attention heads, query or key/value (`<arch>.attention.head_count[_kv]`).
    pub const MAX_HEADS: u64 = 1 << 10;
    /// Widest attention head (`<arch>.rope.dimension_count`, `head_dim`).
    pub const MAX_HEAD_DIM: u64 = 1 << 10;
    /// Most tensors in one file.
    pub const MAX_TENSORS: u64 = 1 << 16;
    /// Most dimensions of one GGUF tensor (ggml's own maximum).
    pub const MAX_TENSOR_DIMS: u32 = 4;
    /// Most elements of one tensor (a 2^20-token embedding 2^16 wide).
    pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 36;
    /// Most metadata entries in a GGUF header.
    pub const MAX_GGUF_METADATA_ENTRIES: u64 = 1 << 16;
    /// Longest metadata array (vocabularies and merges of a 2^20-token model fit).
    pub const MAX_GGUF_ARRAY_LEN: u64 = 1 << 22;
    /// Longest metadata string or key.
    pub const MAX_GGUF_STRING_BYTES: u64 = 1 << 20;
    /// Largest GGUF header (metadata and tensor directory) read: vocabulary and merges of a
    /// 256k-token model fit well within.
    pub const MAX_GGUF_HEADER_BYTES: u64 = 96 << 20;
    /// Longest chat template (published ones are under 20 KB, tool-use ones included).
    pub const MAX_CHAT_TEMPLATE_BYTES: u64 = 256 << 10;
    /// Most bytes of a model bundle's files together.
    pub const MAX_MODEL_BYTES: u64 = 256 << 30;
}

use limits::*;

/// What is wrong with a model file, by the field at fault: a metadata key
/// (`llama.context_length`), a config key (`max_position_embeddings`), a tensor
/// (`tensors.token_embd.weight`) or the file's structure (`header`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ModelProblem {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ModelProblem {
    fn new(field: impl Into<String>, message: impl Into<String>) -> ModelProblem {
        ModelProblem {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A GGUF metadata value, as much of it as the checks need.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// A string.
    Str(String),
    /// Any number or boolean, as f64.
    Number(f64),
    /// An array, by its length (vocabularies are large and not needed here).
    Array(u64),
}

/// Why a GGUF header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgufHeaderError {
    /// The bytes given end before the header does: read more of the file.
    #[error("the header continues past the first {0} bytes")]
    NeedMore(usize),
    /// Not a GGUF file, a malformed header, or one declaring more than [`limits`] allow.
    #[error("{0}")]
    Invalid(ModelProblem),
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> GgufHeaderError {
    GgufHeaderError::Invalid(ModelProblem::new(field, message))
}

/// One entry of a GGUF file's tensor directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// llama.cpp's name, e.g. `blk.3.attn_q.weight`.
    pub name: String,
    /// Its shape, outermost dimension first (as candle and PyTorch write it; GGUF stores the
    /// innermost first).
    pub shape: Vec<u64>,
    /// Its ggml type (0 f32, 1 f16, 2 q4_0, …).
    pub ggml_type: u32,
    /// Where its data starts, from the start of the data section.
    pub offset: u64,
}

/// The metadata and tensor directory of a GGUF file, read from its first bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufHeader {
    /// Metadata by key (`general.architecture`, `tokenizer.chat_template`, …).
    pub metadata: BTreeMap<String, GgufValue>,
    /// The tensor directory, in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// Where the data section starts (the header's end, aligned).
    pub data_start: u64,
}

/// Elements per block and bytes per block of a ggml type, for the types candle reads.
pub fn ggml_block(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // f32
        1 | 30 => (1, 2), // f16, bf16
        2 => (32, 18),    // q4_0
        3 => (32, 20),    // q4_1
        6 => (32, 22),    // q5_0
        7 => (32, 24),    // q5_1
        8 => (32, 34),    // q8_0
        9 => (32, 36),    // q8_1
        10 => (256, 84),  // q2_k
        11 => (256, 110), // q3_k
        12 => (256, 144), // q4_k
        13 => (256, 176), // q5_k
        14 => (256, 210), // q6_k
        15 => (256, 292), // q8_k
        _ => return None,
    })
}

impl GgufTensorInfo {
    /// Elements of the tensor (the directory's parse bounded it by
    /// [`limits::MAX_TENSOR_ELEMENTS`]).
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes of its data; the problem when its type is unknown or its rows do not fill blocks.
    pub fn byte_size(&self) -> Result<u64, ModelProblem> {
        let field = || format!("tensors.{}", self.name);
        let (block, bytes) = ggml_block(self.ggml_type).ok_or_else(|| {
            ModelProblem::new(
                field(),
                format!("ggml type {} is not one the nodes read", self.ggml_type),
            )
        })?;
        let inner = self.shape.last().copied().unwrap_or(1);
        if inner % block != 0 {
            return Err(ModelProblem::new(
                field(),
                format!("rows of {inner} elements do not fill blocks of {block}"),
            ));
        }
        Ok(self.elements() / block * bytes)
    }
}

/// What a GGUF file's header says of the Llama-family model in it, checked against
/// [`limits`] and against its tensor directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufModel {
    /// `general.architecture` (`llama` or `qwen2`).
    pub architecture: String,
    /// `<arch>.embedding_length`.
    pub hidden_size: u64,
    /// `<arch>.feed_forward_length`.
    pub intermediate_size: u64,
    /// `<arch>.block_count`.
    pub num_hidden_layers: u64,
    /// `<arch>.attention.head_count`.
    pub num_attention_heads: u64,
    /// `<arch>.attention.head_count_kv`, the query head count when absent.
    pub num_key_value_heads: u64,
    /// `<arch>.rope.dimension_count`, or the hidden size over the head count.
    pub head_dim: u64,
    /// Entries of `tokenizer.ggml.tokens`: the rows of `token_embd.weight`.
    pub vocab_size: u64,
    /// `<arch>.context_length`.
    pub context_length: u64,
}

impl GgufHeader {
    /// Reads the header, metadata and tensor directory from `bytes`, a prefix of the file;
    /// [`GgufHeaderError::NeedMore`] when the prefix is too short. Every count and length is
    /// checked against [`limits`] before it is used, and nothing is allocated by a declared
    /// size, so any bytes at all parse in bounded memory.
    pub fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufHeaderError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != b"GGUF" {
            return Err(bad("header", "not a GGUF file (no GGUF magic)"));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(bad(
                "header",
                format!("GGUF version {version} is not supported (2 or 3)"),
            ));
        }
        let tensor_count = r.u64()?;
        if tensor_count > MAX_TENSORS {
            return Err(bad(
                "header.tensor_count",
                format!("{tensor_count} tensors is more than {MAX_TENSORS}"),
            ));
        }
        let count = r.u64()?;
        if count > MAX_GGUF_METADATA_ENTRIES {
            return Err(bad(
                "header.metadata_count",
                format!("{count} metadata entries is more than {MAX_GGUF_METADATA_ENTRIES}"),
            ));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..count {
            let key = r.string("header")?;
            let ty = r.u32()?;
            let value = r.value(ty, &key)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(bad(key, "appears twice in the metadata"));
            }
        }
        let mut tensors = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..tensor_count {
            let name = r.string("header")?;
            let field = format!("tensors.{name}");
            let n_dims = r.u32()?;
            if !(1..=MAX_TENSOR_DIMS).contains(&n_dims) {
                return Err(bad(
                    field,
                    format!("{n_dims} dimensions is outside 1..={MAX_TENSOR_DIMS}"),
                ));
            }
            let mut shape = Vec::new();
            let mut elements: u64 = 1;
            for _ in 0..n_dims {
                let d = r.u64()?;
                elements = elements
                    .checked_mul(d)
                    .filter(|e| (1..=MAX_TENSOR_ELEMENTS).contains(e))
                    .ok_or_else(|| {
                        bad(
                            field.clone(),
                            format!("a dimension of {d} makes it empty or more than {MAX_TENSOR_ELEMENTS} elements"),
                        )
                    })?;
                shape.push(d);
            }
            shape.reverse();
            let ggml_type = r.u32()?;
            let offset = r.u64()?;
            if !names.insert(name.clone()) {
                return Err(bad(field, "appears twice in the tensor directory"));
            }
            tensors.push(GgufTensorInfo {
                name,
                shape,
                ggml_type,
                offset,
            });
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(GgufValue::Number(n))
                if n.fract() == 0.0
                    && (1.0..=65536.0).contains(n)
                    && (*n as u64).is_power_of_two() =>
            {
                *n as u64
            }
            Some(other) => {
                return Err(bad(
                    "general.alignment",
                    format!("{other:?} is not a power of two up to 65536"),
                ));
            }
        };
        let data_start = (r.at as u64).div_ceil(alignment) * alignment;
        Ok(GgufHeader {
            metadata,
            tensors,
            data_start,
        })
    }

    /// A string value.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.metadata.get(key)? {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A whole number in `1..=max` under `key`; absent is `Ok(None)`.
    fn dimension(&self, key: &str, max: u64) -> Result<Option<u64>, ModelProblem> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(GgufValue::Number(n)) if n.fract() == 0.0 && *n >= 1.0 && *n <= max as f64 => {
                Ok(Some(*n as u64))
            }
            Some(GgufValue::Number(n)) => {
                Err(ModelProblem::new(key, format!("{n} is outside 1..={max}")))
            }
            Some(other) => Err(ModelProblem::new(
                key,
                format!("expected a whole number, found {other:?}"),
            )),
        }
    }

    fn required(&self, key: &str, max: u64) -> Result<u64, ModelProblem> {
        self.dimension(key, max)?
            .ok_or_else(|| ModelProblem::new(key, "is missing"))
    }

    /// The Llama-family model the header describes, checked before anything is sized by it:
    /// every dimension against [`limits`], every tensor's shape against the dimensions (the
    /// embedding's rows against the vocabulary, each layer's projections against the widths and
    /// head counts), the tensor names against the layers declared, and every tensor's data
    /// against the `file_size` bytes the file has.
    pub fn check_model(&self, file_size: u64) -> Result<GgufModel, ModelProblem> {
        let arch = self.str("general.architecture").unwrap_or_default();
        if !GGUF_LLAMA_ARCHITECTURES.contains(&arch) {
            return Err(ModelProblem::new(
                "general.architecture",
                format!(
                    "{arch:?} is not one the nodes run ({})",
                    GGUF_LLAMA_ARCHITECTURES.join(", ")
                ),
            ));
        }
        let key = |k: &str| format!("{arch}.{k}");
        let hidden = self.required(&key("embedding_length"), MAX_HIDDEN_SIZE)?;
        let ffn = self.required(&key("feed_forward_length"), MAX_INTERMEDIATE_SIZE)?;
        let layers = self.required(&key("block_count"), MAX_LAYERS)?;
        let heads = self.required(&key("attention.head_count"), MAX_HEADS)?;
        let kv = self
            .dimension(&key("attention.head_count_kv"), MAX_HEADS)?
            .unwrap_or(heads);
        let context_length = self.required(&key("context_length"), MAX_CONTEXT_LENGTH)?;
        let head_dim = match self.dimension(&key("rope.dimension_count"), MAX_HEAD_DIM)? {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(ModelProblem::new(
                    key("attention.head_count"),
                    format!(
                        "{heads} does not divide {} {hidden}",
                        key("embedding_length")
                    ),
                ));
            }
        };
        if head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM {
            return Err(ModelProblem::new(
                key("rope.dimension_count"),
                format!("a head {head_dim} wide is not even and at most {MAX_HEAD_DIM}"),
            ));
        }
        if heads % kv != 0 {
            return Err(ModelProblem::new(
                key("attention.head_count_kv"),
                format!(
                    "{kv} does not divide {} {heads}",
                    key("attention.head_count")
                ),
            ));
        }
        let vocab = match self.metadata.get("tokenizer.ggml.tokens") {
            Some(GgufValue::Array(n)) if (1..=MAX_VOCAB_SIZE).contains(n) => *n,
            Some(GgufValue::Array(n)) => {
                return Err(ModelProblem::new(
                    "tokenizer.ggml.tokens",
                    format!("{n} tokens is outside 1..={MAX_VOCAB_SIZE}"),
                ));
            }
            _ => return Err(ModelProblem::new("tokenizer.ggml.tokens", "is missing")),
        };
        if let Some(template) = self.str("tokenizer.chat_template")
            && template.len() as u64 > MAX_CHAT_TEMPLATE_BYTES
        {
            return Err(ModelProblem::new(
                "tokenizer.chat_template",
                format!(
                    "{} bytes is longer than {MAX_CHAT_TEMPLATE_BYTES}",
                    template.len()
                ),
            ));
        }
        let model = GgufModel {
            architecture: arch.to_owned(),
            hidden_size: hidden,
            intermediate_size: ffn,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim,
            vocab_size: vocab,
            context_length,
        };
        let data = file_size.saturating_sub(self.data_start);
        if file_size < self.data_start {
            return Err(ModelProblem::new(
                "header",
                format!("the file ends at byte {file_size}, inside its header"),
            ));
        }
        for tensor in &self.tensors {
            let field = format!("tensors.{}", tensor.name);
            let expected = model.expected_shape(&tensor.name).ok_or_else(|| {
                ModelProblem::new(
                    &field,
                    format!("is not a tensor of a {layers}-layer Llama-family model"),
                )
            })?;
            if tensor.shape != expected {
                return Err(ModelProblem::new(
                    &field,
                    format!(
                        "has shape {:?}; the metadata makes it {expected:?}",
                        tensor.shape
                    ),
                ));
            }
            let size = tensor.byte_size()?;
            if tensor.offset.checked_add(size).is_none_or(|end| end > data) {
                return Err(ModelProblem::new(
                    &field,
                    format!(
                        "its {size} bytes at offset {} end past the {data} bytes of data the \
                         file has: truncated",
                        tensor.offset
                    ),
                ));
            }
        }
        let present: std::collections::BTreeSet<&str> =
            self.tensors.iter().map(|t| t.name.as_str()).collect();
        for name in model.required_tensors() {
            if !present.contains(name.as_str()) {
                return Err(ModelProblem::new(format!("tensors.{name}"), "is missing"));
            }
        }
        Ok(model)
    }
}

impl GgufModel {
    /// The shape (outermost first) a tensor called `name` has in this model; `None` for a name
    /// that is no tensor of it.
    pub fn expected_shape(&self, name: &str) -> Option<Vec<u64>> {
        let (h, f) = (self.hidden_size, self.intermediate_size);
        let (q, kv) = (
            self.num_attention_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
        );
        match name {
            "token_embd.weight" | "output.weight" => return Some(vec![self.vocab_size, h]),
            "output_norm.weight" => return Some(vec![h]),
            _ => {}
        }
        let rest = name.strip_prefix("blk.")?;
        let (digits, rest) = rest.split_once('.')?;
        let layer: u64 = digits.parse().ok()?;
        // `blk.01.` would name layer 1 a second time.
        if layer >= self.num_hidden_layers || digits != layer.to_string() {
            return None;
        }
        Some(match rest {
            "attn_norm.weight" | "ffn_norm.weight" => vec![h],
            "attn_q.weight" => vec![q, h],
            "attn_k.weight" | "attn_v.weight" => vec![kv, h],
            "attn_output.weight" => vec![h, q],
            "attn_q.bias" => vec![q],
            "attn_k.bias" | "attn_v.bias" => vec![kv],
            "attn_output.bias" => vec![h],
            "ffn_gate.weight" | "ffn_up.weight" => vec![f, h],
            "ffn_down.weight" => vec![h, f],
            _ => return None,
        })
    }

    /// The tensors every model of this shape must have (`output.weight` is absent when the
    /// output projection is tied to the embedding; biases are optional).
    pub fn required_tensors(&self) -> Vec<String> {
        let mut names = vec![
            "token_embd.weight".to_owned(),
            "output_norm.weight".to_owned(),
        ];
        for i in 0..self.num_hidden_layers {
            for t in [
                "attn_norm",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_norm",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            ] {
                names.push(format!("blk.{i}.{t}.weight"));
            }
        }
        names
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufHeaderError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or_else(|| bad("header", "a length overflows"))?;
        if end > self.bytes.len() {
            return Err(GgufHeaderError::NeedMore(self.bytes.len()));
        }
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, GgufHeaderError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, GgufHeaderError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length up to `max`, as a usize; past it the problem is `field`'s.
    fn len(&mut self, field: &str, max: u64, what: &str) -> Result<usize, GgufHeaderError> {
        let n = self.u64()?;
        if n > max {
            return Err(bad(field, format!("{what} of {n} is more than {max}")));
        }
        usize::try_from(n).map_err(|_| bad(field, format!("{what} of {n} does not fit")))
    }

    fn string(&mut self, field: &str) -> Result<String, GgufHeaderError> {
        let n = self.len(field, MAX_GGUF_STRING_BYTES, "a string length")?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| bad(field, "a string is not UTF-8"))
    }

    /// Bytes of a fixed-size scalar of GGUF type `ty`.
    fn scalar_size(ty: u32) -> Option<usize> {
        match ty {
            0 | 1 | 7 => Some(1), // u8, i8, bool
            2 | 3 => Some(2),     // u16, i16
            4..=6 => Some(4),     // u32, i32, f32
            10..=12 => Some(8),   // u64, i64, f64
            _ => None,
        }
    }

    fn value(&mut self, ty: u32, key: &str) -> Result<GgufValue, GgufHeaderError> {
        if let Some(size) = Self::scalar_size(ty) {
            let b = self.take(size)?;
            let number = match ty {
                0 | 7 => f64::from(b[0]),
                1 => f64::from(b[0] as i8),
                2 => f64::from(u16::from_le_bytes([b[0], b[1]])),
                3 => f64::from(i16::from_le_bytes([b[0], b[1]])),
                4 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                5 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                6 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                10 => u64::from_le_bytes(b.try_into().unwrap_or_default()) as f64,
                11 => i64::from_le_bytes(b.try_into().unwrap_or_default()) as f64,
                _ => f64::from_le_bytes(b.try_into().unwrap_or_default()),
            };
            return Ok(GgufValue::Number(number));
        }
        match ty {
            8 => Ok(GgufValue::Str(self.string(key)?)),
            9 => {
                let item = self.u32()?;
                let n = self.len(key, MAX_GGUF_ARRAY_LEN, "an array length")?;
                match Self::scalar_size(item) {
                    Some(size) => {
                        // n ≤ 2^22 and size ≤ 8: no overflow.
                        self.take(n * size)?;
                    }
                    None if item == 8 => {
                        for _ in 0..n {
                            let len = self.len(key, MAX_GGUF_STRING_BYTES, "a string length")?;
                            self.take(len)?;
                        }
                    }
                    None => {
                        return Err(bad(key, format!("arrays of type {item} are not supported")));
                    }
                }
                Ok(GgufValue::Array(n as u64))
            }
            other => Err(bad(
                key,
                format!("metadata type {other} is not a GGUF type"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((entries.len() as u64).to_le_bytes());
        for (key, ty, value) in entries {
            out.extend((key.len() as u64).to_le_bytes());
            out.extend(key.as_bytes());
            out.extend(ty.to_le_bytes());
            out.extend(value);
        }
        out
    }

    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend(s.as_bytes());
        v
    }

    #[test]
    fn a_header_is_read_from_a_prefix_and_a_short_prefix_asks_for_more() {
        let mut tokens = 8u32.to_le_bytes().to_vec();
        tokens.extend(2u64.to_le_bytes());
        tokens.extend(string("a"));
        tokens.extend(string("b"));
        let bytes = header(&[
            ("general.architecture", 8, string("llama")),
            ("llama.block_count", 4, 30u32.to_le_bytes().to_vec()),
            ("tokenizer.ggml.tokens", 9, tokens),
            ("tokenizer.chat_template", 8, string("{{ x }}")),
        ]);
        let parsed = GgufHeader::parse(&bytes).unwrap();
        assert_eq!(parsed.str("general.architecture"), Some("llama"));
        assert_eq!(
            parsed.metadata["llama.block_count"],
            GgufValue::Number(30.0)
        );
        assert_eq!(
            parsed.metadata["tokenizer.ggml.tokens"],
            GgufValue::Array(2)
        );
        assert!(parsed.str("tokenizer.chat_template").is_some());
        assert_eq!(
            GgufHeader::parse(&bytes[..bytes.len() - 3]),
            Err(GgufHeaderError::NeedMore(bytes.len() - 3))
        );
        assert!(matches!(
            GgufHeader::parse(b"PK\x03\x04rest"),
            Err(GgufHeaderError::Invalid(_))
        ));
    }

    use crate::testkit::gguf::{MetaValue, TinyGguf};

    fn check(file: &TinyGguf) -> Result<GgufModel, ModelProblem> {
        let bytes = file.bytes();
        let header = GgufHeader::parse(&bytes).map_err(|e| match e {
            GgufHeaderError::Invalid(p) => p,
            other => ModelProblem::new("test", other.to_string()),
        })?;
        header.check_model(bytes.len() as u64)
    }

    #[test]
    fn a_well_formed_model_passes_with_its_dimensions() {
        let model = check(&TinyGguf::llama(true)).unwrap();
        assert_eq!(
            (model.hidden_size, model.num_hidden_layers, model.vocab_size),
            (16, 2, 32)
        );
        assert_eq!((model.head_dim, model.num_key_value_heads), (4, 2));
        assert_eq!(model.context_length, 64);
    }

    #[test]
    fn declared_sizes_past_the_limits_are_refused_by_key() {
        let cases = [
            ("llama.context_length", MetaValue::U32(300_000_000)),
            ("llama.block_count", MetaValue::U64(1 << 40)),
            ("llama.embedding_length", MetaValue::U32(0)),
            ("llama.attention.head_count", MetaValue::Str("nine".into())),
        ];
        for (key, value) in cases {
            let err = check(&TinyGguf::llama(false).set(key, value)).unwrap_err();
            assert_eq!(err.field, key, "{err}");
        }
    }

    #[test]
    fn tensors_must_match_the_declared_dimensions_and_the_file() {
        // The embedding's rows are the vocabulary.
        let mut file = TinyGguf::llama(false);
        file.tensors[0].shape = vec![31, 16];
        file.tensors[0].data.truncate(31 * 16);
        let err = check(&file).unwrap_err();
        assert_eq!(err.field, "tensors.token_embd.weight", "{err}");
        // A layer the metadata does not declare.
        let mut file = TinyGguf::llama(false);
        let mut extra = file.tensors[1].clone();
        extra.name = "blk.2.attn_norm.weight".into();
        file.tensors.push(extra);
        assert_eq!(
            check(&file).unwrap_err().field,
            "tensors.blk.2.attn_norm.weight"
        );
        // A declared layer without its tensors.
        let file = TinyGguf::llama(false).set("llama.block_count", MetaValue::U32(3));
        assert_eq!(
            check(&file).unwrap_err().field,
            "tensors.blk.2.attn_norm.weight"
        );
        // Data cut short.
        let mut file = TinyGguf::llama(false);
        let last = file.tensors.len() - 1;
        file.tensors[last].data.truncate(3);
        let err = check(&file).unwrap_err();
        assert_eq!(err.field, "tensors.output_norm.weight", "{err}");
        assert!(err.message.contains("truncated"), "{err}");
    }

    #[test]
    fn the_header_parse_bounds_every_length_before_reading_it() {
        let bytes = TinyGguf::llama(false).bytes();
        // The tensor count, then a string length, each set to 2^60.
        let mut huge = bytes.clone();
        huge[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            GgufHeader::parse(&huge),
            Err(GgufHeaderError::Invalid(p)) if p.field == "header.tensor_count"
        ));
        let mut huge = bytes.clone();
        huge[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            GgufHeader::parse(&huge),
            Err(GgufHeaderError::Invalid(_))
        ));
        // Every prefix either asks for more or is refused; none panics.
        for cut in (0..bytes.len()).step_by(7) {
            let _ = GgufHeader::parse(&bytes[..cut]);
        }
    }

    #[test]
    fn config_sizes_are_bounded_by_key() {
        let ok = serde_json::json!({"vocab_size": 32000, "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "max_position_embeddings": 8192, "head_dim": null});
        check_config_sizes(&ok).unwrap();
        let mut poisoned = ok.clone();
        poisoned["max_position_embeddings"] = serde_json::json!(300_000_000);
        assert_eq!(
            check_config_sizes(&poisoned).unwrap_err().field,
            "max_position_embeddings"
        );
        let mut poisoned = ok;
        poisoned["vocab_size"] = serde_json::json!(-1);
        assert_eq!(
            check_config_sizes(&poisoned).unwrap_err().field,
            "vocab_size"
        );
    }

    #[test]
    fn layouts_name_what_is_missing() {
        assert_eq!(
            ModelLayout::of(&["m.gguf"], ModelFormat::Gguf),
            Ok(ModelLayout::Gguf("m.gguf".into()))
        );
        assert!(
            ModelLayout::of(&["config.json"], ModelFormat::Gguf)
                .unwrap_err()
                .contains("no .gguf")
        );
        let folder = [
            "config.json",
            "model.safetensors.index.json",
            "tokenizer.json",
        ];
        assert_eq!(
            ModelLayout::of(&folder, ModelFormat::Safetensors),
            Ok(ModelLayout::Folder { sharded: true })
        );
        assert!(
            ModelLayout::of(
                &["config.json", "model.safetensors"],
                ModelFormat::Safetensors
            )
            .unwrap_err()
            .contains("tokenizer.json")
        );
    }

    #[test]
    fn model_types_and_chat_templates() {
        let qwen = serde_json::json!({"model_type": "qwen2"});
        assert!(check_model_type(&qwen, Architecture::Llama).is_ok());
        let neox = serde_json::json!({"model_type": "gpt_neox"});
        assert!(
            check_model_type(&neox, Architecture::Llama)
                .unwrap_err()
                .contains("\"gpt_neox\"")
        );
        let named = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "t"},
            {"name": "default", "template": "d"}], "eos_token": {"content": "</s>"}});
        assert_eq!(chat_template(&named), Some("d"));
        assert_eq!(special_token(&named, "eos_token"), Some("</s>"));
        assert_eq!(chat_template(&serde_json::json!({})), None);
    }
}
