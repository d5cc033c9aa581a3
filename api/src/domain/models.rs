//! What the API can tell of a posted job's base model before anything is funded: that its
//! bundle is a model of the family and format the spec names, laid out as the nodes load it
//! (`shardwork_core::protocol::model_files`), with a tokenizer the trainer can use and, for
//! chat data, a chat template; and its dimensions, which size the job's memory.
//!
//! Only small files and prefixes are read: config files, the GGUF header, the safetensors
//! headers (checked against the file size the store records, which catches a truncated file).
//! What cannot be told without the weights (a tensor of the wrong shape) is found by the worker
//! that loads them, and fails the task with the file named.

use futures::StreamExt;
use shardwork_core::protocol::model_files::{
    self, CONFIG_JSON, GgufHeader, GgufHeaderError, ModelLayout, TOKENIZER_CONFIG_JSON,
    TOKENIZER_JSON, WEIGHTS, WEIGHTS_INDEX,
};
use shardwork_core::protocol::{Architecture, Bundle, ContentId, JobSpec};
use shardwork_core::store::{ContentStore, StoreError};

use crate::domain::DomainError;
use crate::domain::sizing::ModelShape;

/// The spec field every model problem is reported under.
const FIELD: &str = "base_model.cid";
/// Largest bundle document read.
const MAX_BUNDLE_BYTES: u64 = 1 << 20;
/// Largest config file read (config.json, tokenizer_config.json, a weights index).
const MAX_CONFIG_BYTES: u64 = 4 << 20;
/// Largest tokenizer.json read (Llama 3's is 9 MB).
const MAX_TOKENIZER_BYTES: u64 = 64 << 20;
/// Largest GGUF metadata read (vocabulary and merges of a 256k-token model fit well within).
const MAX_GGUF_HEADER_BYTES: usize = 96 << 20;
/// Largest safetensors header accepted (the format's own readers cap it at 100 MB).
const MAX_SAFETENSORS_HEADER: u64 = 100 << 20;

/// What posting learned of the base model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFacts {
    /// Its dimensions.
    pub shape: ModelShape,
    /// Tokens in its vocabulary (the width of a causal LM's logits).
    pub vocab_size: u64,
    /// Parameters of the base model, from its dimensions.
    pub parameters: u128,
    /// Whether its tokenizer carries a chat template (`messages` records need one).
    pub has_chat_template: bool,
}

fn invalid(message: impl Into<String>) -> DomainError {
    DomainError::invalid(FIELD, message)
}

fn store_failed(err: StoreError) -> DomainError {
    match err {
        StoreError::NotFound(cid) => invalid(format!("{cid} is not in the content store")),
        StoreError::TooLarge { .. } => invalid(err.to_string()),
        other => DomainError::internal("reading the base model", other),
    }
}

async fn read(
    store: &dyn ContentStore,
    cid: &ContentId,
    limit: u64,
) -> Result<bytes::Bytes, DomainError> {
    store.get_bytes(&cid.0, limit).await.map_err(store_failed)
}

/// The first bytes of `cid`, at least `want` of them when the file has that many.
async fn prefix(
    store: &dyn ContentStore,
    cid: &ContentId,
    want: usize,
) -> Result<Vec<u8>, DomainError> {
    let mut stream = store.get(&cid.0).await.map_err(store_failed)?;
    let mut out = Vec::with_capacity(want.min(1 << 20));
    while out.len() < want {
        match stream.next().await {
            Some(chunk) => out.extend_from_slice(&chunk.map_err(store_failed)?),
            None => break,
        }
    }
    Ok(out)
}

fn parse_json(name: &str, bytes: &[u8]) -> Result<serde_json::Value, DomainError> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("{name}: not valid JSON: {e}")))
}

/// Reads and checks the model bundle `spec.base_model.cid` names.
pub async fn inspect(store: &dyn ContentStore, spec: &JobSpec) -> Result<ModelFacts, DomainError> {
    let model = &spec.base_model;
    let doc = read(store, &model.cid, MAX_BUNDLE_BYTES).await?;
    let bundle = Bundle::decode(&doc)
        .map_err(|e| invalid(format!("{} is not a model bundle: {e}", model.cid)))?;
    if bundle.kind != "model" {
        return Err(invalid(format!(
            "{} is a bundle of kind {:?}, not a model",
            model.cid, bundle.kind
        )));
    }
    let names: Vec<&str> = bundle.files.keys().map(String::as_str).collect();
    let layout = ModelLayout::of(&names, model.format)
        .map_err(|e| invalid(format!("the model bundle {e}")))?;
    let file = |name: &str| {
        bundle
            .files
            .get(name)
            .ok_or_else(|| invalid(format!("the model bundle has no {name}")))
    };
    match layout {
        ModelLayout::Gguf(name) => inspect_gguf(store, spec, &name, file(&name)?).await,
        ModelLayout::Folder { sharded } => {
            let config_bytes = read(store, file(CONFIG_JSON)?, MAX_CONFIG_BYTES).await?;
            let config = parse_json(CONFIG_JSON, &config_bytes)?;
            model_files::check_model_type(&config, model.architecture)
                .map_err(|e| invalid(format!("{CONFIG_JSON}: {e}")))?;
            let (shape, vocab_size) = shape_of_config(&config)?;
            let tokenizer = read(store, file(TOKENIZER_JSON)?, MAX_TOKENIZER_BYTES).await?;
            let tokenizer = parse_json(TOKENIZER_JSON, &tokenizer)?;
            if !tokenizer.get("model").is_some_and(|m| m.is_object()) {
                return Err(invalid(format!(
                    "{TOKENIZER_JSON}: has no \"model\" object: not a tokenizers file"
                )));
            }
            let has_chat_template = match bundle.files.get(TOKENIZER_CONFIG_JSON) {
                Some(cid) => {
                    let bytes = read(store, cid, MAX_CONFIG_BYTES).await?;
                    let settings = parse_json(TOKENIZER_CONFIG_JSON, &bytes)?;
                    model_files::chat_template(&settings).is_some()
                }
                None => false,
            };
            let weights: Vec<String> = if sharded {
                let index = read(store, file(WEIGHTS_INDEX)?, MAX_CONFIG_BYTES).await?;
                let index = parse_json(WEIGHTS_INDEX, &index)?;
                let map = index["weight_map"].as_object().ok_or_else(|| {
                    invalid(format!("{WEIGHTS_INDEX}: has no \"weight_map\" object"))
                })?;
                let mut shards: Vec<String> = map
                    .values()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect();
                shards.sort();
                shards.dedup();
                shards
            } else {
                vec![WEIGHTS.to_owned()]
            };
            for name in &weights {
                check_safetensors(store, name, file(name)?).await?;
            }
            Ok(ModelFacts {
                parameters: parameters(model.architecture, &shape, vocab_size),
                shape,
                vocab_size,
                has_chat_template,
            })
        }
    }
}

fn dimension(config: &serde_json::Value, key: &str) -> Result<u64, DomainError> {
    config[key].as_u64().ok_or_else(|| {
        invalid(format!(
            "{CONFIG_JSON}: {key} is missing or not a whole number"
        ))
    })
}

fn shape_of_config(config: &serde_json::Value) -> Result<(ModelShape, u64), DomainError> {
    let shape = ModelShape {
        hidden_size: dimension(config, "hidden_size")?,
        intermediate_size: dimension(config, "intermediate_size")?,
        num_hidden_layers: dimension(config, "num_hidden_layers")?,
        num_attention_heads: dimension(config, "num_attention_heads")?,
        num_key_value_heads: config["num_key_value_heads"].as_u64(),
    };
    shape
        .validate()
        .map_err(|(field, message)| invalid(format!("{CONFIG_JSON}: {field}: {message}")))?;
    Ok((shape, dimension(config, "vocab_size")?))
}

/// A safetensors file's header must parse and its tensors must end where the file does: a
/// truncated upload is refused here, not after a worker fetched gigabytes.
async fn check_safetensors(
    store: &dyn ContentStore,
    name: &str,
    cid: &ContentId,
) -> Result<(), DomainError> {
    let size = store.stat(&cid.0).await.map_err(store_failed)?.size;
    let head = prefix(store, cid, 8).await?;
    if head.len() < 8 {
        return Err(invalid(format!(
            "{name}: {size} bytes is too short for a safetensors file"
        )));
    }
    let header_len = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    if header_len > MAX_SAFETENSORS_HEADER || 8 + header_len > size {
        return Err(invalid(format!(
            "{name}: the header claims {header_len} bytes but the file is {size}: truncated or \
             not a safetensors file"
        )));
    }
    let bytes = prefix(store, cid, 8 + header_len as usize).await?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + header_len as usize]).map_err(|e| {
            invalid(format!(
                "{name}: the safetensors header is not valid JSON: {e}"
            ))
        })?;
    let data_end = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, v)| v["data_offsets"][1].as_u64())
        .max()
        .unwrap_or(0);
    if 8 + header_len + data_end != size {
        return Err(invalid(format!(
            "{name}: its tensors need {} bytes but the file is {size}: truncated",
            8 + header_len + data_end
        )));
    }
    Ok(())
}

async fn inspect_gguf(
    store: &dyn ContentStore,
    spec: &JobSpec,
    name: &str,
    cid: &ContentId,
) -> Result<ModelFacts, DomainError> {
    if spec.base_model.architecture != Architecture::Llama {
        return Err(invalid(format!(
            "{name}: GGUF models are Llama-family decoders; the spec names {:?}",
            spec.base_model.architecture
        )));
    }
    // Read more of the file only while the metadata continues past what was read.
    let mut want = 1 << 20;
    let header = loop {
        let bytes = prefix(store, cid, want).await?;
        match GgufHeader::parse(&bytes) {
            Ok(header) => break header,
            Err(GgufHeaderError::NeedMore(_))
                if bytes.len() >= want && want < MAX_GGUF_HEADER_BYTES =>
            {
                want = (want * 4).min(MAX_GGUF_HEADER_BYTES);
            }
            Err(GgufHeaderError::NeedMore(n)) => {
                return Err(invalid(format!(
                    "{name}: the GGUF metadata does not end within {n} bytes: truncated"
                )));
            }
            Err(GgufHeaderError::Invalid(e)) => return Err(invalid(format!("{name}: {e}"))),
        }
    };
    let arch = header.str("general.architecture").unwrap_or_default();
    if !model_files::GGUF_LLAMA_ARCHITECTURES.contains(&arch) {
        return Err(invalid(format!(
            "{name}: general.architecture {arch:?} is not one the nodes run ({})",
            model_files::GGUF_LLAMA_ARCHITECTURES.join(", ")
        )));
    }
    match header.str("tokenizer.ggml.model") {
        Some("gpt2") => {}
        other => {
            return Err(invalid(format!(
                "{name}: tokenizer.ggml.model {other:?} is not supported (only byte-level BPE, \
                 \"gpt2\")"
            )));
        }
    }
    let number = |key: String| -> Result<u64, DomainError> {
        match header.metadata.get(&key) {
            Some(model_files::GgufValue::Number(n)) if *n >= 0.0 => Ok(*n as u64),
            _ => Err(invalid(format!("{name}: metadata {key} is missing"))),
        }
    };
    let heads = number(format!("{arch}.attention.head_count"))?;
    let shape = ModelShape {
        hidden_size: number(format!("{arch}.embedding_length"))?,
        intermediate_size: number(format!("{arch}.feed_forward_length"))?,
        num_hidden_layers: number(format!("{arch}.block_count"))?,
        num_attention_heads: heads,
        num_key_value_heads: number(format!("{arch}.attention.head_count_kv")).ok(),
    };
    shape
        .validate()
        .map_err(|(field, message)| invalid(format!("{name}: {field}: {message}")))?;
    let vocab_size = match header.metadata.get("tokenizer.ggml.tokens") {
        Some(model_files::GgufValue::Array(n)) => *n,
        _ => {
            return Err(invalid(format!(
                "{name}: metadata tokenizer.ggml.tokens is missing"
            )));
        }
    };
    Ok(ModelFacts {
        parameters: parameters(Architecture::Llama, &shape, vocab_size),
        shape,
        vocab_size,
        has_chat_template: header.str("tokenizer.chat_template").is_some(),
    })
}

/// Parameters of a model of `shape` (embeddings counted once, as tied models store them).
pub fn parameters(architecture: Architecture, shape: &ModelShape, vocab: u64) -> u128 {
    let h = u128::from(shape.hidden_size);
    let i = u128::from(shape.intermediate_size);
    let layers = u128::from(shape.num_hidden_layers);
    let heads = u128::from(shape.num_attention_heads.max(1));
    let kv = u128::from(
        shape
            .num_key_value_heads
            .unwrap_or(shape.num_attention_heads),
    ) * (h / heads);
    let per_layer = match architecture {
        Architecture::Llama => 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h,
        Architecture::Bert => 4 * h * h + 2 * h * i + 9 * h + i,
    };
    layers * per_layer + u128::from(vocab) * h
}
