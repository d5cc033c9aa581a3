//! A `tokenizers::Tokenizer` rebuilt from the `tokenizer.ggml.*` metadata of a GGUF file, so
//! a GGUF model needs no separate tokenizer.json.
//!
//! Only GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is supported: SmolLM's
//! and other GPT-2 derived vocabularies; SentencePiece (`"llama"`) files are refused by name. The pre-tokenizer follows `tokenizer.ggml.pre`:
//! llama.cpp names the split rule there instead of storing the regex, so each name maps to the
//! Hugging Face pre-tokenizer of the model family it was converted from.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::chat_template::{ChatTemplate, ChatTemplateError};
use crate::gguf::GgufFile;

/// llama.cpp's token type for control tokens such as `<|im_start|>`.
const TOKEN_TYPE_CONTROL: i64 = 3;
/// llama.cpp's token type for user-defined tokens, which are also matched whole.
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Why a tokenizer could not be built from GGUF metadata, or failed on a text.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A `tokenizer.*` metadata key is missing, malformed or names an unsupported tokenizer.
    #[error("{path}: tokenizer metadata {key}: {problem}")]
    Metadata {
        /// The GGUF file, for the message.
        path: String,
        /// The metadata key, e.g. `tokenizer.ggml.tokens`.
        key: String,
        /// What is wrong with its value.
        problem: String,
    },
    /// The vocabulary, merges or special tokens do not make a valid BPE tokenizer.
    #[error("{path}: cannot build tokenizer: {message}")]
    Build {
        /// The GGUF file, for the message.
        path: String,
        /// The tokenizers library's error.
        message: String,
    },
    /// `tokenizer.chat_template` does not compile.
    #[error("{path}: {source}")]
    Template {
        /// The GGUF file, for the message.
        path: String,
        /// The template compiler's error.
        source: ChatTemplateError,
    },
    /// Encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Encode(String),
}

/// Token ids with the byte range of `text` each one covers.
pub type Encoded = (Vec<u32>, Vec<(usize, usize)>);

/// A tokenizer with the special tokens and chat template a language model needs.
#[derive(Debug, Clone)]
pub struct LmTokenizer {
    /// The byte-level BPE tokenizer itself.
    pub tokenizer: Tokenizer,
    /// The BOS token prepended to every encoding, when the model adds one.
    pub bos_token_id: Option<u32>,
    /// The end-of-sequence token that ends an assistant turn or a generation.
    pub eos_token_id: u32,
    /// The model's chat template, when the file has one.
    pub chat_template: Option<ChatTemplate>,
}

impl LmTokenizer {
    /// Token ids of `text`, with the BOS token when the model expects one.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        Ok(self.encode_with_offsets(text)?.0)
    }

    /// Token ids and their byte ranges in `text`; added BOS tokens get an empty range at 0.
    pub fn encode_with_offsets(&self, text: &str) -> Result<Encoded, TokenizerError> {
        let enc = crate::guarded_tokenizer::encode(&self.tokenizer, text, true)
            .map_err(TokenizerError::Encode)?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    /// The text of `ids`, with special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        crate::guarded_tokenizer::decode(&self.tokenizer, ids, true).map_err(TokenizerError::Encode)
    }

    /// Builds the tokenizer from a GGUF file's metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        from_metadata(file.metadata(), &file.path().display().to_string())
    }
}

fn meta_err(path: &str, key: &str, problem: impl Into<String>) -> TokenizerError {
    TokenizerError::Metadata {
        path: path.to_owned(),
        key: key.to_owned(),
        problem: problem.into(),
    }
}

fn string_array<'a>(
    meta: &'a HashMap<String, Value>,
    path: &str,
    key: &str,
) -> Result<Vec<&'a str>, TokenizerError> {
    let Some(Value::Array(items)) = meta.get(key) else {
        return Err(meta_err(path, key, "missing or not an array"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.as_str()),
            other => Err(meta_err(
                path,
                key,
                format!("element {i} is {other:?}, not a string"),
            )),
        })
        .collect()
}

fn optional_id(
    meta: &HashMap<String, Value>,
    path: &str,
    key: &str,
    vocab: usize,
) -> Result<Option<u32>, TokenizerError> {
    let Some(value) = meta.get(key) else {
        return Ok(None);
    };
    let id = value
        .to_u32()
        .or_else(|_| value.to_i32().map(|v| v as u32))
        .map_err(|_| meta_err(path, key, format!("{value:?} is not a token id")))?;
    if id as usize >= vocab {
        return Err(meta_err(
            path,
            key,
            format!("token id {id} is outside the vocabulary of {vocab}"),
        ));
    }
    Ok(Some(id))
}

/// Builds an [`LmTokenizer`] from GGUF metadata; `path` is only used in error messages.
pub fn from_metadata(
    meta: &HashMap<String, Value>,
    path: &str,
) -> Result<LmTokenizer, TokenizerError> {
    let model = match meta.get("tokenizer.ggml.model") {
        Some(Value::String(s)) => s.as_str(),
        _ => {
            return Err(meta_err(
                path,
                "tokenizer.ggml.model",
                "missing or not a string",
            ));
        }
    };
    if model != "gpt2" {
        return Err(meta_err(
            path,
            "tokenizer.ggml.model",
            format!("{model:?} is not supported (only byte-level BPE, \"gpt2\")"),
        ));
    }
    let tokens = string_array(meta, path, "tokenizer.ggml.tokens")?;
    let merges = string_array(meta, path, "tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| {
                    meta_err(
                        path,
                        "tokenizer.ggml.merges",
                        format!("element {i} {m:?} is not two tokens"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| ((*t).to_owned(), i as u32))
        .collect();
    if vocab.len() != tokens.len() {
        return Err(meta_err(
            path,
            "tokenizer.ggml.tokens",
            "contains duplicate tokens",
        ));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| TokenizerError::Build {
            path: path.to_owned(),
            message: e.to_string(),
        })?;

    let mut tokenizer = Tokenizer::new(bpe);
    let pre = match meta.get("tokenizer.ggml.pre") {
        Some(Value::String(s)) => s.as_str(),
        _ => "default",
    };
    let byte_level = ByteLevel::new(false, true, true);
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        // SmolLM's tokenizer.json: every digit is its own pre-token, then GPT-2's split.
        "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into(),
        "gpt2" | "default" => byte_level.into(),
        other => {
            return Err(meta_err(
                path,
                "tokenizer.ggml.pre",
                format!("pre-tokenizer {other:?} is not supported (smollm, gpt2, default)"),
            ));
        }
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    // Control tokens must be matched whole in text (`<|im_start|>` is one token, not seven).
    if let Some(Value::Array(types)) = meta.get("tokenizer.ggml.token_type") {
        if types.len() != tokens.len() {
            return Err(meta_err(
                path,
                "tokenizer.ggml.token_type",
                format!("{} entries for {} tokens", types.len(), tokens.len()),
            ));
        }
        let special: Vec<AddedToken> = types
            .iter()
            .zip(&tokens)
            .filter(|(ty, _)| {
                let ty = ty.to_i32().map(i64::from).unwrap_or_default();
                ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED
            })
            .map(|(_, t)| AddedToken::from((*t).to_owned(), true))
            .collect();
        tokenizer.add_special_tokens(&special);
    }

    let bos = optional_id(meta, path, "tokenizer.ggml.bos_token_id", tokens.len())?;
    let eos = optional_id(meta, path, "tokenizer.ggml.eos_token_id", tokens.len())?
        .ok_or_else(|| meta_err(path, "tokenizer.ggml.eos_token_id", "missing"))?;
    let add_bos = matches!(
        meta.get("tokenizer.ggml.add_bos_token"),
        Some(Value::Bool(true))
    );
    if let (true, Some(bos)) = (add_bos, bos) {
        let bos_text = tokens[bos as usize].to_owned();
        let post = TemplateProcessing::builder()
            .try_single(format!("{bos_text} $A"))
            .and_then(|b| b.try_pair(format!("{bos_text} $A $B")))
            .map_err(|e| TokenizerError::Build {
                path: path.to_owned(),
                message: e.to_string(),
            })?
            .special_tokens(vec![(bos_text.clone(), bos)])
            .build()
            .map_err(|e| TokenizerError::Build {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        tokenizer.with_post_processor(Some(post));
    }

    let chat_template = match meta.get("tokenizer.chat_template") {
        Some(Value::String(source)) => Some(
            ChatTemplate::new(
                source,
                bos.map(|b| tokens[b as usize].to_owned())
                    .unwrap_or_default(),
                tokens[eos as usize].to_owned(),
            )
            .map_err(|source| TokenizerError::Template {
                path: path.to_owned(),
                source,
            })?,
        ),
        Some(other) => {
            return Err(meta_err(
                path,
                "tokenizer.chat_template",
                format!("{other:?} is not a string"),
            ));
        }
        None => None,
    };
    Ok(LmTokenizer {
        tokenizer,
        bos_token_id: if add_bos { bos } else { None },
        eos_token_id: eos,
        chat_template,
    })
}
