//! What the API can tell of a posted job's base model before anything is funded: that its
//! bundle is a model of the family and format the spec names, laid out as the nodes load it
//! (`shardwork_core::protocol::model_files`), with a tokenizer the trainer can use and, for
//! chat data, a chat template; and its dimensions, which size the job's memory.
//!
//! Only small files and prefixes are read: config files, the GGUF header (metadata and tensor
//! directory), the safetensors headers (checked against the file size the store records, which
//! catches a truncated file). The model is untrusted: every size it declares (context length,
//! vocabulary, widths, layer and head counts, tensor shapes, metadata lengths) is checked
//! against `model_files::limits` and against the tensors the files hold, and its chat template
//! is test-rendered on the nodes' budget; a refusal names the declaration
//! (`base_model.llama.context_length`). The nodes check their copy again before loading it.
//! A bundle naming one content twice, or more bytes than `limits::MAX_MODEL_BYTES`, is refused.

use futures::StreamExt;
use shardwork_core::chat_template::ChatTemplate;
use shardwork_core::protocol::model_files::{
    self, CONFIG_JSON, GgufHeader, GgufHeaderError, ModelLayout, ModelProblem,
    TOKENIZER_CONFIG_JSON, TOKENIZER_JSON, WEIGHTS, WEIGHTS_INDEX, limits,
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

/// A problem with one declared size or tensor of the model, reported under
/// `base_model.<where>.<field>` (`base_model.llama.context_length`,
/// `base_model.config.json.vocab_size`) so the requester sees which declaration is refused.
fn declared(place: &str, file: &str, problem: ModelProblem) -> DomainError {
    let path = if place.is_empty() {
        format!("base_model.{}", problem.field)
    } else {
        format!("base_model.{place}.{}", problem.field)
    };
    DomainError::invalid(path, format!("{file}: {}", problem.message))
}

/// Compiles the chat template and test-renders a short conversation on the budget every node
/// renders with: a template that loops for ever (three nested `range(100000)`) or writes
/// without end is refused here instead of stalling a validator's scoring.
fn check_template(field: &str, file: &str, source: &str) -> Result<(), DomainError> {
    ChatTemplate::new(source, String::new(), String::new())
        .and_then(|t| t.check())
        .map_err(|e| DomainError::invalid(field, format!("{file}: {e}")))
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
    // Every node writes every file: their sizes together are bounded before any is read.
    let mut total: u64 = 0;
    for (name, cid) in &bundle.files {
        total = total.saturating_add(store.stat(&cid.0).await.map_err(store_failed)?.size);
        if total > limits::MAX_MODEL_BYTES {
            return Err(invalid(format!(
                "the model bundle's files are more than {} GiB together (at {name})",
                limits::MAX_MODEL_BYTES >> 30
            )));
        }
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
            model_files::check_config_sizes(&config)
                .map_err(|p| declared(CONFIG_JSON, CONFIG_JSON, p))?;
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
                    match model_files::chat_template(&settings) {
                        Some(source) => {
                            check_template(
                                &format!("base_model.{TOKENIZER_CONFIG_JSON}.chat_template"),
                                TOKENIZER_CONFIG_JSON,
                                source,
                            )?;
                            true
                        }
                        None => false,
                    }
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
            let mut tensors = serde_json::Map::new();
            for name in &weights {
                tensors.extend(check_safetensors(store, name, file(name)?).await?);
            }
            check_embedding(model.architecture, &tensors, &shape, vocab_size)?;
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
) -> Result<serde_json::Map<String, serde_json::Value>, DomainError> {
    let size = store.stat(&cid.0).await.map_err(store_failed)?.size;
    let head = prefix(store, cid, 8).await?;
    let header_len = safetensors_header_len(&head, size, MAX_SAFETENSORS_HEADER)
        .map_err(|m| invalid(format!("{name}: {m}")))?;
    let bytes = prefix(store, cid, 8 + header_len as usize).await?;
    safetensors_header(&bytes, header_len, size).map_err(|fault| match fault.tensor {
        Some(tensor) => DomainError::invalid(
            format!("base_model.{name}.{tensor}"),
            format!("{name}: {}", fault.message),
        ),
        None => invalid(format!("{name}: {}", fault.message)),
    })
}

/// The header length a safetensors file of `size` bytes announces in its first 8 bytes
/// (`head`), at most `max_header`.
pub(crate) fn safetensors_header_len(
    head: &[u8],
    size: u64,
    max_header: u64,
) -> Result<u64, String> {
    let Some(announced) = head.get(..8) else {
        return Err(format!("{size} bytes is too short for a safetensors file"));
    };
    let header_len = u64::from_le_bytes(announced.try_into().unwrap_or_default());
    if header_len > max_header || 8 + header_len > size {
        return Err(format!(
            "the header claims {header_len} bytes but the file is {size}: truncated or not a \
             safetensors file"
        ));
    }
    Ok(header_len)
}

/// What is wrong with a safetensors header: the tensor at fault, if one is.
pub(crate) struct HeaderFault {
    /// The tensor whose entry is wrong; `None` for the header as a whole.
    pub tensor: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The header of a safetensors file of `size` bytes, from its first `8 + header_len` bytes
/// (`bytes`): valid JSON, at most `limits::MAX_TENSORS` tensors, each entry's extent as the
/// nodes' reader demands (a shape that declares more than its bytes is refused here, not when
/// a node sizes it), and the tensors ending where the file does.
pub(crate) fn safetensors_header(
    bytes: &[u8],
    header_len: u64,
    size: u64,
) -> Result<serde_json::Map<String, serde_json::Value>, HeaderFault> {
    let whole = |message: String| HeaderFault {
        tensor: None,
        message,
    };
    let text = bytes
        .get(8..8 + header_len as usize)
        .ok_or_else(|| whole("the file ends inside its header".into()))?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(text)
        .map_err(|e| whole(format!("the safetensors header is not valid JSON: {e}")))?;
    if header.len() as u64 > limits::MAX_TENSORS {
        return Err(whole(format!(
            "{} tensors is more than {}",
            header.len(),
            limits::MAX_TENSORS
        )));
    }
    let tensors = || header.iter().filter(|(k, _)| *k != "__metadata__");
    for (tensor, info) in tensors() {
        safetensors_extent(info).map_err(|message| HeaderFault {
            tensor: Some(tensor.clone()),
            message,
        })?;
    }
    let data_end = tensors()
        .filter_map(|(_, v)| v["data_offsets"][1].as_u64())
        .max()
        .unwrap_or(0);
    if 8 + header_len + data_end != size {
        return Err(whole(format!(
            "its tensors need {} bytes but the file is {size}: truncated",
            8 + header_len + data_end
        )));
    }
    Ok(header)
}

/// Checks one safetensors header entry: a known dtype, a bounded shape, and data offsets
/// exactly as long as the shape needs.
fn safetensors_extent(info: &serde_json::Value) -> Result<(), String> {
    let width: u64 = match info["dtype"].as_str() {
        Some("F64" | "I64" | "U64") => 8,
        Some("F32" | "I32" | "U32") => 4,
        Some("F16" | "BF16" | "I16" | "U16") => 2,
        Some("I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2") => 1,
        other => return Err(format!("dtype {other:?} is not one the nodes read")),
    };
    let dims = info["shape"]
        .as_array()
        .ok_or("has no shape")?
        .iter()
        .map(|d| d.as_u64().ok_or("a dimension is not a whole number"))
        .collect::<Result<Vec<u64>, _>>()?;
    let elements = dims
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(*d))
        .filter(|n| *n <= limits::MAX_TENSOR_ELEMENTS)
        .ok_or_else(|| {
            format!(
                "shape {dims:?} is more than {} elements",
                limits::MAX_TENSOR_ELEMENTS
            )
        })?;
    let (begin, end) = match (
        info["data_offsets"][0].as_u64(),
        info["data_offsets"][1].as_u64(),
    ) {
        (Some(b), Some(e)) if b <= e => (b, e),
        _ => return Err("its data_offsets are not a range".into()),
    };
    if end - begin != elements * width {
        return Err(format!(
            "shape {dims:?} of {:?} needs {} bytes; its data_offsets hold {}",
            info["dtype"],
            elements * width,
            end - begin
        ));
    }
    Ok(())
}

/// The input embedding's shape against the config: its rows are the vocabulary and its width
/// the hidden size (a Llama folder must have one; a BERT folder is checked when it has one).
fn check_embedding(
    architecture: Architecture,
    tensors: &serde_json::Map<String, serde_json::Value>,
    shape: &ModelShape,
    vocab: u64,
) -> Result<(), DomainError> {
    let (name, required) = match architecture {
        Architecture::Llama => ("model.embed_tokens.weight".to_owned(), true),
        Architecture::Bert => match tensors
            .keys()
            .find(|k| k.ends_with("embeddings.word_embeddings.weight"))
        {
            Some(k) => (k.clone(), true),
            None => (String::new(), false),
        },
    };
    if !required {
        return Ok(());
    }
    let want = serde_json::json!([vocab, shape.hidden_size]);
    match tensors.get(&name) {
        None => Err(DomainError::invalid(
            format!("base_model.{name}"),
            format!("the weights have no {name}"),
        )),
        Some(info) if info["shape"] == want => Ok(()),
        Some(info) => Err(DomainError::invalid(
            format!("base_model.{name}"),
            format!(
                "{name} has shape {}; {CONFIG_JSON}'s vocab_size and hidden_size make it {want}",
                info["shape"]
            ),
        )),
    }
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
    // Read more of the file only while the header continues past what was read.
    let max_header = limits::MAX_GGUF_HEADER_BYTES as usize;
    let mut want = 1 << 20;
    let header = loop {
        let bytes = prefix(store, cid, want).await?;
        match GgufHeader::parse(&bytes) {
            Ok(header) => break header,
            Err(GgufHeaderError::NeedMore(_)) if bytes.len() >= want && want < max_header => {
                want = (want * 4).min(max_header);
            }
            Err(GgufHeaderError::NeedMore(n)) => {
                return Err(invalid(format!(
                    "{name}: the GGUF header does not end within {n} bytes: truncated"
                )));
            }
            Err(GgufHeaderError::Invalid(p)) => return Err(declared("", name, p)),
        }
    };
    match header.str("tokenizer.ggml.model") {
        Some("gpt2") => {}
        other => {
            return Err(DomainError::invalid(
                "base_model.tokenizer.ggml.model",
                format!(
                    "{name}: tokenizer.ggml.model {other:?} is not supported (only byte-level \
                     BPE, \"gpt2\")"
                ),
            ));
        }
    }
    // Every declared size against the limits and against the tensors the file holds.
    let size = store.stat(&cid.0).await.map_err(store_failed)?.size;
    let checked = header
        .check_model(size)
        .map_err(|p| declared("", name, p))?;
    let shape = ModelShape {
        hidden_size: checked.hidden_size,
        intermediate_size: checked.intermediate_size,
        num_hidden_layers: checked.num_hidden_layers,
        num_attention_heads: checked.num_attention_heads,
        num_key_value_heads: Some(checked.num_key_value_heads),
    };
    shape
        .validate()
        .map_err(|(field, message)| invalid(format!("{name}: {field}: {message}")))?;
    let template = header.str("tokenizer.chat_template");
    if let Some(source) = template {
        check_template("base_model.tokenizer.chat_template", name, source)?;
    }
    Ok(ModelFacts {
        parameters: parameters(Architecture::Llama, &shape, checked.vocab_size),
        shape,
        vocab_size: checked.vocab_size,
        has_chat_template: template.is_some(),
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
