//! Tiny Llama-family GGUF files written from scratch, with real tensors, for the tests that
//! post a model or load one: a valid file, and any poisoned variant (a context length of
//! 300,000,000, an embedding of the wrong height, a tensor cut short) made by editing one entry.

/// A metadata value this writer can write.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 8.
    Str(String),
    /// GGUF type 9 of type 8.
    StrArray(Vec<String>),
}

/// One tensor: its llama.cpp name, shape (outermost first) and f32 values.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Outermost dimension first.
    pub shape: Vec<u64>,
    /// Its values; shorter than the shape says makes a file whose data is cut short.
    pub data: Vec<f32>,
}

/// A GGUF file to write: its metadata in order and its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyGguf {
    /// Metadata entries, written in this order.
    pub metadata: Vec<(String, MetaValue)>,
    /// Tensors, written in this order.
    pub tensors: Vec<TensorSpec>,
}

/// The chat template of SmolLM2-135M-Instruct (ChatML with a default system prompt).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

impl TinyGguf {
    /// A `llama` model: hidden 16, FFN 32, 2 layers, 4 heads (2 key/value), a 32-token
    /// byte-level BPE vocabulary, context 64, small deterministic weights, with the ChatML
    /// template when `chat_template`.
    pub fn llama(chat_template: bool) -> TinyGguf {
        let (hidden, ffn, layers, heads, kv, vocab) = (16u64, 32u64, 2u64, 4u64, 2u64, 32u64);
        let head_dim = hidden / heads;
        let mut tokens: Vec<String> = (0..vocab - 2).map(|i| format!("t{i}")).collect();
        tokens.push("<|im_start|>".into());
        tokens.push("<|im_end|>".into());
        let mut metadata = vec![
            (
                "general.architecture".to_owned(),
                MetaValue::Str("llama".into()),
            ),
            ("llama.context_length".to_owned(), MetaValue::U32(64)),
            (
                "llama.embedding_length".to_owned(),
                MetaValue::U32(hidden as u32),
            ),
            (
                "llama.feed_forward_length".to_owned(),
                MetaValue::U32(ffn as u32),
            ),
            (
                "llama.block_count".to_owned(),
                MetaValue::U32(layers as u32),
            ),
            (
                "llama.attention.head_count".to_owned(),
                MetaValue::U32(heads as u32),
            ),
            (
                "llama.attention.head_count_kv".to_owned(),
                MetaValue::U32(kv as u32),
            ),
            ("llama.rope.freq_base".to_owned(), MetaValue::F32(10_000.0)),
            (
                "llama.attention.layer_norm_rms_epsilon".to_owned(),
                MetaValue::F32(1e-5),
            ),
            (
                "tokenizer.ggml.model".to_owned(),
                MetaValue::Str("gpt2".into()),
            ),
            (
                "tokenizer.ggml.tokens".to_owned(),
                MetaValue::StrArray(tokens),
            ),
            (
                "tokenizer.ggml.merges".to_owned(),
                MetaValue::StrArray(Vec::new()),
            ),
            (
                "tokenizer.ggml.eos_token_id".to_owned(),
                MetaValue::U32(vocab as u32 - 1),
            ),
        ];
        if chat_template {
            metadata.push((
                "tokenizer.chat_template".to_owned(),
                MetaValue::Str(CHATML_TEMPLATE.into()),
            ));
        }
        let mut tensors = Vec::new();
        let mut add = |name: String, shape: Vec<u64>| {
            let n: u64 = shape.iter().product();
            let seed = tensors.len() as f32;
            let data = (0..n)
                .map(|i| ((i as f32 * 0.37 + seed).sin()) * 0.05)
                .collect();
            tensors.push(TensorSpec { name, shape, data });
        };
        add("token_embd.weight".into(), vec![vocab, hidden]);
        for i in 0..layers {
            let p = |t: &str| format!("blk.{i}.{t}.weight");
            add(p("attn_norm"), vec![hidden]);
            add(p("attn_q"), vec![heads * head_dim, hidden]);
            add(p("attn_k"), vec![kv * head_dim, hidden]);
            add(p("attn_v"), vec![kv * head_dim, hidden]);
            add(p("attn_output"), vec![hidden, heads * head_dim]);
            add(p("ffn_norm"), vec![hidden]);
            add(p("ffn_gate"), vec![ffn, hidden]);
            add(p("ffn_up"), vec![ffn, hidden]);
            add(p("ffn_down"), vec![hidden, ffn]);
        }
        add("output_norm.weight".into(), vec![hidden]);
        TinyGguf { metadata, tensors }
    }

    /// Replaces (or adds) the metadata entry `key`.
    pub fn set(mut self, key: &str, value: MetaValue) -> TinyGguf {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        self
    }

    /// The file's bytes (GGUF v3, f32 tensors, 32-byte alignment).
    pub fn bytes(&self) -> Vec<u8> {
        fn string(out: &mut Vec<u8>, s: &str) {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        }
        fn pad(out: &mut Vec<u8>) {
            while !out.len().is_multiple_of(32) {
                out.push(0);
            }
        }
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            string(&mut out, key);
            match value {
                MetaValue::U32(v) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                MetaValue::U64(v) => {
                    out.extend(10u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                MetaValue::F32(v) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                MetaValue::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    string(&mut out, s);
                }
                MetaValue::StrArray(items) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    for s in items {
                        string(&mut out, s);
                    }
                }
            }
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            string(&mut out, &t.name);
            out.extend((t.shape.len() as u32).to_le_bytes());
            for d in t.shape.iter().rev() {
                out.extend(d.to_le_bytes());
            }
            out.extend(0u32.to_le_bytes());
            out.extend(offset.to_le_bytes());
            let n: u64 = t.shape.iter().product();
            offset += (n * 4).div_ceil(32) * 32;
        }
        pad(&mut out);
        for t in &self.tensors {
            for v in &t.data {
                out.extend(v.to_le_bytes());
            }
            pad(&mut out);
        }
        out
    }
}
