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
    /// The bytes given end before the metadata does: read more of the file.
    #[error("the metadata continues past the first {0} bytes")]
    NeedMore(usize),
    /// Not a GGUF file, or a malformed header.
    #[error("{0}")]
    Invalid(String),
}

/// The metadata keys and values of a GGUF file, read from its first bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufHeader {
    /// Metadata by key (`general.architecture`, `tokenizer.chat_template`, …).
    pub metadata: BTreeMap<String, GgufValue>,
}

impl GgufHeader {
    /// Reads the header and metadata from `bytes`, a prefix of the file;
    /// [`GgufHeaderError::NeedMore`] when the prefix is too short.
    pub fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufHeaderError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != b"GGUF" {
            return Err(GgufHeaderError::Invalid(
                "not a GGUF file (no GGUF magic)".into(),
            ));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufHeaderError::Invalid(format!(
                "GGUF version {version} is not supported (2 or 3)"
            )));
        }
        let _tensors = r.u64()?;
        let count = r.u64()?;
        if count > 1 << 20 {
            return Err(GgufHeaderError::Invalid(format!(
                "{count} metadata entries is not a plausible header"
            )));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..count {
            let key = r.string()?;
            let ty = r.u32()?;
            let value = r.value(ty)?;
            metadata.insert(key, value);
        }
        Ok(GgufHeader { metadata })
    }

    /// A string value.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.metadata.get(key)? {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
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
            .ok_or_else(|| GgufHeaderError::Invalid("a length overflows".into()))?;
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

    fn len(&mut self) -> Result<usize, GgufHeaderError> {
        let n = self.u64()?;
        // Strings and arrays of a real header are far below 2^32 entries.
        usize::try_from(n)
            .ok()
            .filter(|n| *n < 1 << 32)
            .ok_or_else(|| GgufHeaderError::Invalid(format!("a length of {n} is not plausible")))
    }

    fn string(&mut self) -> Result<String, GgufHeaderError> {
        let n = self.len()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| GgufHeaderError::Invalid("a metadata string is not UTF-8".into()))
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

    fn value(&mut self, ty: u32) -> Result<GgufValue, GgufHeaderError> {
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
            8 => Ok(GgufValue::Str(self.string()?)),
            9 => {
                let item = self.u32()?;
                let n = self.len()?;
                match Self::scalar_size(item) {
                    Some(size) => {
                        self.take(n.checked_mul(size).ok_or_else(|| {
                            GgufHeaderError::Invalid("an array length overflows".into())
                        })?)?;
                    }
                    None if item == 8 => {
                        for _ in 0..n {
                            let len = self.len()?;
                            self.take(len)?;
                        }
                    }
                    None => {
                        return Err(GgufHeaderError::Invalid(format!(
                            "arrays of type {item} are not supported"
                        )));
                    }
                }
                Ok(GgufValue::Array(n as u64))
            }
            other => Err(GgufHeaderError::Invalid(format!(
                "metadata type {other} is not a GGUF type"
            ))),
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
