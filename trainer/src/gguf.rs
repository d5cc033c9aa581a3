//! Loading a Llama-family model from a llama.cpp GGUF file, dequantized to f32 for training.
//!
//! llama.cpp stores tensors under its own names (`blk.3.attn_q.weight`) and, for the `llama`
//! architecture, with the rows of Q and K permuted so that its interleaved RoPE kernel matches
//! Hugging Face's `rotate_half` RoPE. This module renames tensors to the Hugging Face names
//! [`crate::llama::Llama::load`] expects and undoes that permutation, so one model
//! implementation serves both sources. Qwen2 GGUFs use the NeoX RoPE layout and are stored
//! unpermuted.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use shardwork_core::protocol::model_files::{GgufHeader, GgufHeaderError, GgufModel, limits};

use crate::llama::{Config, DEFAULT_MAX_POSITIONS, Llama, QuantizedWeights};
use crate::quantized::QuantizedWeight;

/// Why a GGUF file could not be used; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened.
    #[error("{path}: cannot open: {source}")]
    Open {
        /// The GGUF file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a GGUF file candle can parse.
    #[error("{path}: not a readable GGUF file: {source}")]
    Format {
        /// The GGUF file.
        path: PathBuf,
        /// The parser's error.
        source: candle_core::Error,
    },
    /// A metadata key is missing or holds the wrong type or an unsupported value.
    #[error("{path}: metadata key {key}: {problem}")]
    Metadata {
        /// The GGUF file.
        path: PathBuf,
        /// The metadata key, e.g. `llama.block_count`.
        key: String,
        /// What is wrong with its value.
        problem: String,
    },
    /// A tensor is missing, unknown, mis-shaped, unsupported or cannot be dequantized.
    #[error("{path}: tensor {name}: {problem}")]
    Tensor {
        /// The GGUF file.
        path: PathBuf,
        /// The tensor's GGUF name, e.g. `blk.3.attn_q.weight`.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The tensors do not make a model the config describes.
    #[error("{path}: {source}")]
    Model {
        /// The GGUF file.
        path: PathBuf,
        /// The model loader's error.
        source: crate::llama::LlamaError,
    },
}

/// An opened GGUF file: its metadata and tensor directory, read without loading tensor data.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    /// The same header read by core's bounded reader, which every size is checked with.
    header: GgufHeader,
    /// Bytes of the file, which its tensors must fit in.
    file_size: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens `path` and reads its header: metadata and tensor directory, not tensor data.
    ///
    /// The file is untrusted (it came from whoever posted the job): its header is first read by
    /// `shardwork_core`'s reader, which bounds every count and length by
    /// `model_files::limits` before using it, from at most `MAX_GGUF_HEADER_BYTES` of the file;
    /// only a header that passes is handed to candle's reader, which allocates what it declares.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let open_err = |source| GgufError::Open {
            path: path.to_owned(),
            source,
        };
        let file_size = std::fs::metadata(path).map_err(open_err)?.len();
        let header = read_header(path, file_size)?;
        let file = File::open(path).map_err(open_err)?;
        let content =
            Content::read(&mut BufReader::new(file)).map_err(|source| GgufError::Format {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            content,
            header,
            file_size,
        })
    }

    /// The header as core's bounded reader read it.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The model the header describes, checked as the API checks it at posting: every
    /// declared size against `model_files::limits`, every tensor's shape against them, and
    /// every tensor's data against the file's length. Nothing is sized by the file before this.
    pub fn check(&self) -> Result<GgufModel, GgufError> {
        self.header.check_model(self.file_size).map_err(|p| {
            match p.field.strip_prefix("tensors.") {
                Some(name) => self.tensor_err(name, p.message),
                None => self.meta_err(&p.field, p.message),
            }
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every metadata key and value in the header.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    fn meta_err(&self, key: &str, problem: impl Into<String>) -> GgufError {
        GgufError::Metadata {
            path: self.path.clone(),
            key: key.to_owned(),
            problem: problem.into(),
        }
    }

    fn get(&self, key: &str) -> Result<&Value, GgufError> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// Reads an integer stored with any of GGUF's integer types.
    pub fn get_usize(&self, key: &str) -> Result<usize, GgufError> {
        let value = self.get(key)?;
        let n = match value {
            Value::U8(v) => *v as u64,
            Value::U16(v) => *v as u64,
            Value::U32(v) => *v as u64,
            Value::U64(v) => *v,
            Value::I8(v) if *v >= 0 => *v as u64,
            Value::I16(v) if *v >= 0 => *v as u64,
            Value::I32(v) if *v >= 0 => *v as u64,
            Value::I64(v) if *v >= 0 => *v as u64,
            other => {
                return Err(self.meta_err(
                    key,
                    format!("expected an unsigned integer, found {other:?}"),
                ));
            }
        };
        usize::try_from(n).map_err(|_| self.meta_err(key, format!("{n} does not fit in memory")))
    }

    /// Reads a float stored as f32 or f64.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        match self.get(key)? {
            Value::F32(v) => Ok(*v as f64),
            Value::F64(v) => Ok(*v),
            other => Err(self.meta_err(key, format!("expected a float, found {other:?}"))),
        }
    }

    /// Reads a string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        match self.get(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.meta_err(key, format!("expected a string, found {other:?}"))),
        }
    }

    fn architecture(&self) -> Result<&str, GgufError> {
        let arch = self.get_str("general.architecture")?;
        match arch {
            "llama" | "qwen2" => Ok(arch),
            other => Err(self.meta_err(
                "general.architecture",
                format!("{other:?} is not a Llama-family architecture this loader supports (llama, qwen2)"),
            )),
        }
    }

    /// The model configuration from the `<arch>.*` metadata keys.
    pub fn config(&self) -> Result<Config, GgufError> {
        self.check()?;
        let arch = self.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let hidden_size = self.get_usize(&key("embedding_length"))?;
        let num_attention_heads = self.get_usize(&key("attention.head_count"))?;
        let num_key_value_heads = match self.content.metadata.get(&key("attention.head_count_kv")) {
            Some(_) => self.get_usize(&key("attention.head_count_kv"))?,
            None => num_attention_heads,
        };
        let embed = self.tensor_shape("token_embd.weight")?;
        let [vocab_size, embed_width] = embed[..] else {
            return Err(self.tensor_err(
                "token_embd.weight",
                format!("expected 2 dimensions, found {embed:?}"),
            ));
        };
        if embed_width != hidden_size {
            return Err(self.tensor_err(
                "token_embd.weight",
                format!("width {embed_width} differs from {arch}.embedding_length {hidden_size}"),
            ));
        }
        let head_dim = match self.content.metadata.get(&key("rope.dimension_count")) {
            Some(_) => Some(self.get_usize(&key("rope.dimension_count"))?),
            None => None,
        };
        if self.content.tensor_infos.contains_key("rope_freqs.weight") {
            return Err(self.tensor_err(
                "rope_freqs.weight",
                "scaled RoPE (Llama 3.1 style) is not supported",
            ));
        }
        let optional_f64 = |k: &str, default: f64| match self.content.metadata.get(k) {
            Some(_) => self.get_f64(k),
            None => Ok(default),
        };
        let cfg = Config {
            model_type: Some(arch.to_owned()),
            vocab_size,
            hidden_size,
            intermediate_size: self.get_usize(&key("feed_forward_length"))?,
            num_hidden_layers: self.get_usize(&key("block_count"))?,
            num_attention_heads,
            num_key_value_heads: Some(num_key_value_heads),
            head_dim,
            rope_theta: optional_f64(&key("rope.freq_base"), 10_000.0)?,
            rms_norm_eps: optional_f64(&key("attention.layer_norm_rms_epsilon"), 1e-6)?,
            max_position_embeddings: self.get_usize(&key("context_length"))?,
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
            attention_bias: false,
            hidden_act: "silu".to_owned(),
            rope_scaling: None,
        };
        cfg.validate()
            .map_err(|problem| self.meta_err(&format!("{arch}.*"), problem))?;
        Ok(cfg)
    }

    fn tensor_err(&self, name: &str, problem: impl Into<String>) -> GgufError {
        GgufError::Tensor {
            path: self.path.clone(),
            name: name.to_owned(),
            problem: problem.into(),
        }
    }

    fn tensor_shape(&self, name: &str) -> Result<Vec<usize>, GgufError> {
        self.content
            .tensor_infos
            .get(name)
            .map(|info| info.shape.dims().to_vec())
            .ok_or_else(|| self.tensor_err(name, "missing"))
    }

    /// Every tensor dequantized to f32 under its Hugging Face name, with llama.cpp's Q/K row
    /// permutation undone for the `llama` architecture.
    pub fn hf_tensors(
        &self,
        cfg: &Config,
        device: &Device,
    ) -> Result<HashMap<String, Tensor>, GgufError> {
        Ok(self.read_tensors(cfg, device, false)?.0)
    }

    /// The tensors under their Hugging Face names: the projection weights stored in a block
    /// format kept that way when `keep_quantized` (second map), every other tensor dequantized
    /// to f32 (first map); llama.cpp's Q/K row permutation undone either way.
    fn read_tensors(
        &self,
        cfg: &Config,
        device: &Device,
        keep_quantized: bool,
    ) -> Result<(HashMap<String, Tensor>, QuantizedWeights), GgufError> {
        let arch = self.architecture()?;
        let file = File::open(&self.path).map_err(|source| GgufError::Open {
            path: self.path.clone(),
            source,
        })?;
        let mut reader = BufReader::new(file);
        let mut out = HashMap::with_capacity(self.content.tensor_infos.len());
        let mut quantized = QuantizedWeights::new();
        for name in self.content.tensor_infos.keys() {
            let hf_name = hf_name(name)
                .ok_or_else(|| self.tensor_err(name, "not a tensor of a Llama-family model"))?;
            let err = |e: &dyn std::fmt::Display| self.tensor_err(name, e.to_string());
            let q = self
                .content
                .tensor(&mut reader, name, device)
                .map_err(|e| err(&e))?;
            // Rows of a query or key weight in llama.cpp's rotary order, by head count.
            let permuted_heads = if arch == "llama" && name.contains(".attn_q.") {
                Some(cfg.num_attention_heads)
            } else if arch == "llama" && name.contains(".attn_k.") {
                Some(cfg.num_kv_heads())
            } else {
                None
            };
            // The decoder's seven projections (`self_attn.q_proj`, ..., `mlp.down_proj`).
            let projection = hf_name.ends_with("_proj.weight");
            if keep_quantized
                && projection
                && device.is_cpu()
                && QuantizedWeight::is_block_format(q.dtype())
            {
                let w = QuantizedWeight::new(q).map_err(|e| err(&e))?;
                let w = match permuted_heads {
                    Some(heads) => {
                        let order = unpermuted_row_order(w.dims().0, heads).map_err(|e| err(&e))?;
                        w.permute_rows(&order).map_err(|e| err(&e))?
                    }
                    None => w,
                };
                quantized.insert(hf_name, w);
                continue;
            }
            out.insert(hf_name, self.f32_tensor(name, q, device, permuted_heads)?);
        }
        Ok((out, quantized))
    }

    /// `q` dequantized to f32, its rows unpermuted over `permuted_heads` heads when given.
    fn f32_tensor(
        &self,
        name: &str,
        q: candle_core::quantized::QTensor,
        device: &Device,
        permuted_heads: Option<usize>,
    ) -> Result<Tensor, GgufError> {
        let tensor = q
            .dequantize(device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| self.tensor_err(name, e.to_string()))?;
        match permuted_heads {
            Some(heads) => unpermute_rows(&tensor, heads),
            None => Ok(tensor),
        }
        .map_err(|e| self.tensor_err(name, e.to_string()))
    }

    /// Builds the model; weights whose shapes disagree with the metadata are reported by name.
    pub fn load_model(&self, device: &Device) -> Result<Llama, GgufError> {
        self.load_model_with(device, false)
    }

    /// [`GgufFile::load_model`], with the projections stored in a block format kept in it
    /// (training expands them a layer at a time: [`crate::quantized`]) when `keep_quantized`.
    pub fn load_model_with(
        &self,
        device: &Device,
        keep_quantized: bool,
    ) -> Result<Llama, GgufError> {
        self.load_model_for(device, keep_quantized, DEFAULT_MAX_POSITIONS)
    }

    /// [`GgufFile::load_model_with`] with RoPE tables for `max_positions` positions (the job's
    /// `max_seq_len`), never for the context length the file declares.
    pub fn load_model_for(
        &self,
        device: &Device,
        keep_quantized: bool,
        max_positions: usize,
    ) -> Result<Llama, GgufError> {
        let cfg = self.config()?;
        let (tensors, quantized) = self.read_tensors(&cfg, device, keep_quantized)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        Llama::load_for(vb, &cfg, quantized, max_positions).map_err(|source| GgufError::Model {
            path: self.path.clone(),
            source,
        })
    }
}

/// Reads the header of the GGUF file at `path` with core's bounded reader, from a prefix of
/// at most `MAX_GGUF_HEADER_BYTES`, grown only while the header continues past it.
fn read_header(path: &Path, file_size: u64) -> Result<GgufHeader, GgufError> {
    use std::io::Read;
    let max = limits::MAX_GGUF_HEADER_BYTES.min(file_size);
    let mut want = (1u64 << 20).min(max);
    loop {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|f| f.take(want).read_to_end(&mut bytes))
            .map_err(|source| GgufError::Open {
                path: path.to_owned(),
                source,
            })?;
        match GgufHeader::parse(&bytes) {
            Ok(header) => return Ok(header),
            Err(GgufHeaderError::NeedMore(_)) if want < max => want = (want * 4).min(max),
            Err(GgufHeaderError::NeedMore(n)) => {
                return Err(GgufError::Metadata {
                    path: path.to_owned(),
                    key: "header".into(),
                    problem: format!(
                        "does not end within the first {n} bytes (the file has {file_size}; \
                         a header may have {})",
                        limits::MAX_GGUF_HEADER_BYTES
                    ),
                });
            }
            Err(GgufHeaderError::Invalid(p)) => {
                return Err(GgufError::Metadata {
                    path: path.to_owned(),
                    key: p.field,
                    problem: p.message,
                });
            }
        }
    }
}

/// Maps a llama.cpp tensor name to the Hugging Face one.
pub fn hf_name(gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_owned());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, param) = rest.rsplit_once('.')?;
    if param != "weight" && param != "bias" {
        return None;
    }
    let hf_module = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf_module}.{param}"))
}

/// Inverse of llama.cpp's converter permutation. The converter turns each head's rows
/// `[first half; second half]` (HF's rotate_half pairing i with i + d/2) into interleaved pairs
/// `(i, i + d/2)` adjacent: rows viewed as (heads, 2, d/2) are transposed to (heads, d/2, 2).
/// Here we view them as (heads, d/2, 2) and transpose back. Works for weights and biases.
pub fn unpermute_rows(t: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let dims = t.dims().to_vec();
    let rows = dims[0];
    if heads == 0 || !rows.is_multiple_of(heads * 2) {
        candle_core::bail!("{rows} rows cannot be split into {heads} heads of even size");
    }
    let half = rows / heads / 2;
    let mut view = vec![heads, half, 2];
    view.extend_from_slice(&dims[1..]);
    t.reshape(view)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)
}

/// [`unpermute_rows`] as a row order: row `i` of the unpermuted tensor is row `order[i]` of
/// the stored one (for weights kept in a block format, whose rows move as whole byte runs).
pub fn unpermuted_row_order(rows: usize, heads: usize) -> candle_core::Result<Vec<usize>> {
    if heads == 0 || !rows.is_multiple_of(heads * 2) {
        candle_core::bail!("{rows} rows cannot be split into {heads} heads of even size");
    }
    let half = rows / heads / 2;
    // Stored as (heads, half, 2), wanted as (heads, 2, half): the wanted row (h, s, i) is the
    // stored row (h, i, s).
    Ok((0..rows)
        .map(|r| {
            let (h, rest) = (r / (2 * half), r % (2 * half));
            let (s, i) = (rest / half, rest % half);
            h * 2 * half + i * 2 + s
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's `permute` from convert_hf_to_gguf.py, written independently for the check.
    fn llama_cpp_permute(rows: &[Vec<f32>], heads: usize) -> Vec<Vec<f32>> {
        let per_head = rows.len() / heads;
        let half = per_head / 2;
        let mut out = Vec::with_capacity(rows.len());
        for h in 0..heads {
            for i in 0..half {
                out.push(rows[h * per_head + i].clone());
                out.push(rows[h * per_head + half + i].clone());
            }
        }
        out
    }

    #[test]
    fn unpermute_inverts_llama_cpp_qk_permutation() {
        let heads = 3;
        let rows: Vec<Vec<f32>> = (0..heads * 8)
            .map(|r| (0..5).map(|c| (r * 10 + c) as f32).collect())
            .collect();
        let permuted = llama_cpp_permute(&rows, heads);
        let t = Tensor::new(permuted, &Device::Cpu).unwrap();
        let restored = unpermute_rows(&t, heads).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(restored, rows);
    }

    #[test]
    fn the_row_order_moves_rows_as_unpermute_does() {
        let (rows, heads, cols) = (24, 3, 2);
        let values: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
        let t = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        let want: Vec<Vec<f32>> = unpermute_rows(&t, heads).unwrap().to_vec2().unwrap();
        let stored: Vec<Vec<f32>> = t.to_vec2().unwrap();
        let order = unpermuted_row_order(rows, heads).unwrap();
        let got: Vec<Vec<f32>> = order.iter().map(|&r| stored[r].clone()).collect();
        assert_eq!(got, want);
        assert!(unpermuted_row_order(10, 3).is_err());
    }

    #[test]
    fn unpermute_rejects_rows_that_do_not_split_into_heads() {
        let t = Tensor::zeros((10, 4), DType::F32, &Device::Cpu).unwrap();
        assert!(unpermute_rows(&t, 3).is_err());
    }

    #[test]
    fn llama_cpp_names_map_to_hugging_face_names() {
        assert_eq!(
            hf_name("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            hf_name("blk.12.attn_output.weight").as_deref(),
            Some("model.layers.12.self_attn.o_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight").as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("blk.1.attn_q.scales"), None);
        assert_eq!(hf_name("vision.patch_embd.weight"), None);
    }
}
