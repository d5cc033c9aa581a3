//! Tokenising text into padded batches for the encoder.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{Error, Result};

/// A Hugging Face `tokenizer.json` tokenizer with truncation to `max_len` tokens (special
/// tokens included) and no padding (batches pad to their own longest sequence instead).
pub struct TextTokenizer {
    inner: Tokenizer,
    path: PathBuf,
    pad_id: u32,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` at `path`, truncating every encoding to `max_len` tokens, and
    /// encodes a word with it once, so a file that cannot tokenize fails here, at load.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let invalid = |detail: String| Error::Config {
            path: path.to_path_buf(),
            detail,
        };
        let mut inner = crate::guarded_tokenizer::read(path)
            .map_err(|e| invalid(format!("not a tokenizer.json: {e}")))?;
        inner
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| Error::Config {
                path: path.to_path_buf(),
                detail: format!("truncation to {max_len}: {e}"),
            })?;
        inner.with_padding(None);
        let pad_id = inner.token_to_id("[PAD]").unwrap_or(0);
        let tokenizer = Self {
            inner,
            path: path.to_path_buf(),
            pad_id,
        };
        tokenizer
            .encode("a")
            .map_err(|e| invalid(format!("cannot tokenize with it: {e}")))?;
        Ok(tokenizer)
    }

    /// Token ids with the model's special tokens ([CLS] … [SEP] for BERT).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let failed = |detail: String| {
            Error::Tokenizer(format!(
                "{}: encoding {text:?}: {detail}",
                self.path.display()
            ))
        };
        let enc = crate::guarded_tokenizer::encode(&self.inner, text, true).map_err(failed)?;
        Ok(enc.get_ids().to_vec())
    }

    /// [`Self::encode`] for every text, in order.
    pub fn encode_all(&self, texts: &[String]) -> Result<Vec<Vec<u32>>> {
        texts.iter().map(|t| self.encode(t)).collect()
    }

    /// Id of `[PAD]`, or 0 when the vocabulary has none.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }
}

/// A padded batch: `ids (b, t)` u32, `mask (b, t)` f32, and the number of real tokens.
pub struct Batch {
    /// Token ids `(b, t)`, right-padded with the pad id.
    pub ids: Tensor,
    /// `(b, t)`: 1.0 for real tokens, 0.0 for padding.
    pub mask: Tensor,
    /// Real (non-padding) tokens in the batch.
    pub tokens: usize,
}

/// Right-pads `seqs` to the longest one.
pub fn pad(seqs: &[&[u32]], pad_id: u32, device: &Device) -> Result<Batch> {
    let b = seqs.len();
    let t = seqs.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
    let mut ids = vec![pad_id; b * t];
    let mut mask = vec![0f32; b * t];
    let mut tokens = 0;
    for (i, s) in seqs.iter().enumerate() {
        ids[i * t..i * t + s.len()].copy_from_slice(s);
        mask[i * t..i * t + s.len()].fill(1.0);
        tokens += s.len();
    }
    Ok(Batch {
        ids: Tensor::from_vec(ids, (b, t), device)?,
        mask: Tensor::from_vec(mask, (b, t), device)?,
        tokens,
    })
}
