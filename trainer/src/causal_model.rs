//! A causal language model ready to train or score: the Llama-family decoder and its tokenizer,
//! from a GGUF file or a Hugging Face folder (Llama, Qwen2, SmolLM), laid out as
//! `shardwork_core::protocol::model_files` defines.
//!
//! Every error names the file at fault: a truncated safetensors shard, a `config.json` naming
//! an architecture the decoder does not implement, a `tokenizer.json` that does not parse.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use shardwork_core::protocol::model_files::{
    self, CONFIG_JSON, LLAMA_MODEL_TYPES, TOKENIZER_CONFIG_JSON, TOKENIZER_JSON, WEIGHTS,
    WEIGHTS_INDEX,
};

use crate::chat_template::ChatTemplate;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::llama::{Config, DEFAULT_MAX_POSITIONS, Llama, QuantizedWeights};
use crate::tokenizer_gguf::LmTokenizer;

/// Where a causal LM's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CausalModelFiles {
    /// One GGUF file.
    Gguf(PathBuf),
    /// A Hugging Face folder.
    Folder(PathBuf),
}

impl CausalModelFiles {
    /// What `path` holds: a `.gguf` file, a folder with `config.json` (Hugging Face), or a
    /// folder with exactly one `.gguf` file (a model bundle fetched by a node).
    pub fn locate(path: &Path) -> Result<CausalModelFiles> {
        if path.is_file() {
            return if path.extension().is_some_and(|e| e == "gguf") {
                Ok(CausalModelFiles::Gguf(path.to_owned()))
            } else {
                Err(Error::Invalid(format!(
                    "{}: a causal LM is a .gguf file or a Hugging Face folder",
                    path.display()
                )))
            };
        }
        if path.join(CONFIG_JSON).is_file() {
            return Ok(CausalModelFiles::Folder(path.to_owned()));
        }
        let entries = std::fs::read_dir(path).map_err(|e| Error::io(path, e))?;
        let mut ggufs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
            .collect();
        ggufs.sort();
        match ggufs.len() {
            1 => Ok(CausalModelFiles::Gguf(ggufs.remove(0))),
            0 => Err(Error::Invalid(format!(
                "{}: holds neither {CONFIG_JSON} (a Hugging Face folder) nor a .gguf file",
                path.display()
            ))),
            n => Err(Error::Invalid(format!(
                "{}: holds {n} .gguf files; a GGUF model is one file",
                path.display()
            ))),
        }
    }

    /// A name for the model in adapter configs (`base_model_name_or_path`): the config's
    /// `_name_or_path` when a folder has one, else the file or folder name.
    pub fn name(&self) -> String {
        let path = match self {
            CausalModelFiles::Gguf(p) => p,
            CausalModelFiles::Folder(dir) => {
                let named = std::fs::read_to_string(dir.join(CONFIG_JSON))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .and_then(|v| v["_name_or_path"].as_str().map(str::to_owned))
                    .filter(|n| !n.is_empty());
                if let Some(name) = named {
                    return name;
                }
                dir
            }
        };
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// A loaded causal LM: the decoder (f32, on the device it was loaded to) and its tokenizer.
pub struct CausalModel {
    /// The decoder, without LoRA until one is attached.
    pub model: Llama,
    /// The tokenizer, with the special tokens and chat template of the model.
    pub tokenizer: LmTokenizer,
    /// Where it was loaded from.
    pub files: CausalModelFiles,
}

/// How a model's frozen projections are held in memory while it trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BaseWeights {
    /// In f32, as the scoring kernels and merges need them.
    #[default]
    F32,
    /// A GGUF file's block-quantized projections kept in their block format and expanded a
    /// layer at a time ([`crate::quantized`]): the same training, bit for bit, in less memory.
    /// Adapted projections are still held in f32; a Hugging Face folder (plain floats) is
    /// refused.
    Quantized,
}

impl CausalModel {
    /// Loads the model at `path` (see [`CausalModelFiles::locate`]).
    pub fn load(path: &Path, device: &Device) -> Result<CausalModel> {
        Self::load_with(path, device, BaseWeights::F32)
    }

    /// [`CausalModel::load`] with the projections held as `base` says.
    pub fn load_with(path: &Path, device: &Device, base: BaseWeights) -> Result<CausalModel> {
        Self::load_for(path, device, base, DEFAULT_MAX_POSITIONS)
    }

    /// [`CausalModel::load_with`] for sequences of at most `max_positions` tokens (a job's
    /// `max_seq_len`): the RoPE tables are sized by it, never by the context length the model
    /// declares. Every size the files declare is checked against
    /// `shardwork_core::protocol::model_files::limits` before anything is sized by it.
    pub fn load_for(
        path: &Path,
        device: &Device,
        base: BaseWeights,
        max_positions: usize,
    ) -> Result<CausalModel> {
        let files = CausalModelFiles::locate(path)?;
        let (model, tokenizer) = match &files {
            CausalModelFiles::Gguf(file) => load_gguf(file, device, base, max_positions)?,
            CausalModelFiles::Folder(dir) if base == BaseWeights::Quantized => {
                return Err(Error::Invalid(format!(
                    "{}: a Hugging Face folder holds plain floats, so there is no quantized \
                     base to keep; only a GGUF file's block-quantized projections can be",
                    dir.display()
                )));
            }
            CausalModelFiles::Folder(dir) => load_folder(dir, device, max_positions)?,
        };
        Ok(CausalModel {
            model,
            tokenizer,
            files,
        })
    }
}

fn load_gguf(
    path: &Path,
    device: &Device,
    base: BaseWeights,
    max_positions: usize,
) -> Result<(Llama, LmTokenizer)> {
    let file = GgufFile::open(path).map_err(|e| Error::Invalid(e.to_string()))?;
    // Every declared size before the tokenizer or the model is built from them.
    file.check().map_err(|e| Error::Invalid(e.to_string()))?;
    let tokenizer = LmTokenizer::from_gguf(&file).map_err(|e| Error::Tokenizer(e.to_string()))?;
    let model = file
        .load_model_for(device, base == BaseWeights::Quantized, max_positions)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    Ok((model, tokenizer))
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Config {
        path: path.to_owned(),
        detail: format!("not valid JSON: {e}"),
    })
}

fn load_folder(dir: &Path, device: &Device, max_positions: usize) -> Result<(Llama, LmTokenizer)> {
    let config_path = dir.join(CONFIG_JSON);
    let raw = read_json(&config_path)?;
    model_files::check_model_type(&raw, shardwork_core::protocol::Architecture::Llama).map_err(
        |detail| Error::Config {
            path: config_path.clone(),
            detail,
        },
    )?;
    model_files::check_config_sizes(&raw).map_err(|p| Error::Config {
        path: config_path.clone(),
        detail: p.to_string(),
    })?;
    let cfg = Config::from_file(&config_path).map_err(|e| Error::Config {
        path: config_path.clone(),
        detail: e.to_string(),
    })?;
    let tensors = read_weights(dir, device)?;
    let weights_name = if dir.join(WEIGHTS_INDEX).exists() {
        WEIGHTS_INDEX
    } else {
        WEIGHTS
    };
    let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
    let model = Llama::load_for(vb, &cfg, QuantizedWeights::new(), max_positions).map_err(|e| {
        Error::Safetensors {
            path: dir.join(weights_name),
            detail: e.to_string(),
        }
    })?;
    let tokenizer = folder_tokenizer(dir, &raw)?;
    Ok((model, tokenizer))
}

/// The tensors of `model.safetensors`, or of every shard `model.safetensors.index.json` names.
fn read_weights(dir: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let index_path = dir.join(WEIGHTS_INDEX);
    if !index_path.exists() {
        return crate::safetensors_file::load(&dir.join(WEIGHTS), device);
    }
    let index = read_json(&index_path)?;
    let map = index["weight_map"]
        .as_object()
        .ok_or_else(|| Error::Config {
            path: index_path.clone(),
            detail: "has no \"weight_map\" object".into(),
        })?;
    let mut shards = BTreeSet::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| Error::Config {
            path: index_path.clone(),
            detail: format!("weight_map[{tensor:?}] is not a file name"),
        })?;
        // A shard outside the folder (`../x`) is not part of the model.
        if file.contains('/') || file.contains('\\') || file.starts_with('.') {
            return Err(Error::Config {
                path: index_path.clone(),
                detail: format!("weight_map[{tensor:?}] names {file:?}, not a file of the folder"),
            });
        }
        shards.insert(file.to_owned());
    }
    let mut tensors = HashMap::new();
    for shard in shards {
        tensors.extend(crate::safetensors_file::load(&dir.join(&shard), device)?);
    }
    for tensor in map.keys() {
        if !tensors.contains_key(tensor) {
            return Err(Error::Safetensors {
                path: index_path.clone(),
                detail: format!(
                    "tensor {tensor} is listed in weight_map but not in the shard it names"
                ),
            });
        }
    }
    Ok(tensors)
}

/// `tokenizer.json` with the special tokens and chat template of `tokenizer_config.json`.
fn folder_tokenizer(dir: &Path, config: &serde_json::Value) -> Result<LmTokenizer> {
    let tokenizer_path = dir.join(TOKENIZER_JSON);
    let tokenizer = crate::guarded_tokenizer::read(&tokenizer_path).map_err(|e| Error::Config {
        path: tokenizer_path.clone(),
        detail: format!("not a tokenizer the tokenizers library can read: {e}"),
    })?;
    let settings_path = dir.join(TOKENIZER_CONFIG_JSON);
    let settings = if settings_path.exists() {
        read_json(&settings_path)?
    } else {
        serde_json::Value::Null
    };
    let token_id = |text: &str, key: &str| {
        tokenizer.token_to_id(text).ok_or_else(|| Error::Config {
            path: settings_path.clone(),
            detail: format!("{key} {text:?} is not in the vocabulary of {TOKENIZER_JSON}"),
        })
    };
    let eos_text = model_files::special_token(&settings, "eos_token");
    let eos_token_id = match eos_text {
        Some(text) => token_id(text, "eos_token")?,
        None => config["eos_token_id"]
            .as_u64()
            .map(|id| id as u32)
            .ok_or_else(|| Error::Config {
                path: settings_path.clone(),
                detail: format!(
                    "names no eos_token, and {CONFIG_JSON} has no eos_token_id: the end of a \
                     turn cannot be learned"
                ),
            })?,
    };
    let bos_text = model_files::special_token(&settings, "bos_token");
    let bos = bos_text.map(|t| token_id(t, "bos_token")).transpose()?;
    // The BOS is "added" when the tokenizer's post-processor prepends it, as Llama 3's does.
    let added_bos = crate::guarded_tokenizer::encode(&tokenizer, "a", true)
        .map_err(|e| Error::Config {
            path: tokenizer_path.clone(),
            detail: format!("cannot tokenize with it: {e}"),
        })?
        .get_ids()
        .first()
        .copied()
        .filter(|first| Some(*first) == bos);
    let eos_name = tokenizer.id_to_token(eos_token_id).unwrap_or_default();
    let chat_template = model_files::chat_template(&settings)
        .map(|source| {
            ChatTemplate::new(
                source,
                bos_text.unwrap_or_default().to_owned(),
                eos_name.clone(),
            )
            .map_err(|e| Error::Config {
                path: settings_path.clone(),
                detail: format!("chat_template: {e}"),
            })
        })
        .transpose()?;
    Ok(LmTokenizer {
        tokenizer,
        bos_token_id: added_bos,
        eos_token_id,
        chat_template,
    })
}

/// Writes `model` as a Hugging Face folder at `dir` (config.json, model.safetensors in `dtype`,
/// tokenizer.json, tokenizer_config.json with `chat_template`), the layout
/// [`CausalModel::load`] reads back: how a GGUF model becomes a safetensors one, and how the
/// tests get a Hugging Face folder of a real model without a hub.
pub fn write_folder(
    model: &Llama,
    tokenizer: &LmTokenizer,
    chat_template: Option<&str>,
    dtype: DType,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let cfg = model.config();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": cfg.model_type.as_deref().filter(|t| LLAMA_MODEL_TYPES.contains(t)).unwrap_or("llama"),
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_kv_heads(),
        "head_dim": cfg.head_dim(),
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": cfg.attention_bias,
        "hidden_act": cfg.hidden_act,
        "eos_token_id": tokenizer.eos_token_id,
        "torch_dtype": match dtype {
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            _ => "float32",
        },
    });
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))
    };
    write(
        CONFIG_JSON,
        serde_json::to_vec_pretty(&config).map_err(|e| Error::Invalid(e.to_string()))?,
    )?;
    let tensors: HashMap<String, Tensor> = model
        .base_tensors()
        .map_err(|e| Error::Invalid(e.to_string()))?
        .into_iter()
        .map(|(name, t)| Ok((name, t.to_dtype(dtype)?)))
        .collect::<Result<_>>()?;
    let weights = dir.join(WEIGHTS);
    candle_core::safetensors::save(&tensors, &weights).map_err(|e| Error::Safetensors {
        path: weights.clone(),
        detail: e.to_string(),
    })?;
    let tokenizer_path = dir.join(TOKENIZER_JSON);
    tokenizer
        .tokenizer
        .save(&tokenizer_path, false)
        .map_err(|e| Error::Config {
            path: tokenizer_path.clone(),
            detail: e.to_string(),
        })?;
    let name = |id: Option<u32>| id.and_then(|id| tokenizer.tokenizer.id_to_token(id));
    let mut settings = serde_json::json!({
        "eos_token": name(Some(tokenizer.eos_token_id)),
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    if let Some(bos) = name(tokenizer.bos_token_id) {
        settings["bos_token"] = bos.into();
    }
    if let Some(template) = chat_template {
        settings["chat_template"] = template.into();
    }
    write(
        TOKENIZER_CONFIG_JSON,
        serde_json::to_vec_pretty(&settings).map_err(|e| Error::Invalid(e.to_string()))?,
    )
}
