//! A small BERT-family model and a sentiment dataset generated on the spot, so the demo and the
//! end-to-end tests run on any fresh machine (no fixture packages) and in seconds: a 2-layer,
//! 32-wide encoder with a word-level tokenizer, and short "reviews" whose label is the majority
//! polarity of the opinion words in them. The untrained model is at chance; LoRA on
//! query/value plus the classification head learns the task within a few epochs.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::{Error, Result};

const POSITIVE: [&str; 12] = [
    "good",
    "great",
    "superb",
    "moving",
    "brilliant",
    "funny",
    "charming",
    "clever",
    "fresh",
    "touching",
    "delightful",
    "wonderful",
];
const NEGATIVE: [&str; 12] = [
    "bad", "dull", "boring", "awful", "tedious", "clumsy", "stale", "weak", "messy", "flat",
    "tiresome", "dreadful",
];
const NEUTRAL: [&str; 20] = [
    "the",
    "film",
    "movie",
    "story",
    "cast",
    "plot",
    "a",
    "is",
    "was",
    "and",
    "with",
    "its",
    "direction",
    "script",
    "ending",
    "scenes",
    "very",
    "quite",
    "rather",
    "overall",
];
const SPECIAL: [&str; 4] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"];

const HIDDEN: usize = 32;
const LAYERS: usize = 2;
const HEADS: usize = 2;
const INTERMEDIATE: usize = 64;
const MAX_POSITIONS: usize = 64;

fn vocabulary() -> Vec<&'static str> {
    SPECIAL
        .iter()
        .chain(POSITIVE.iter())
        .chain(NEGATIVE.iter())
        .chain(NEUTRAL.iter())
        .copied()
        .collect()
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{}: {e}", path.display()))
}

/// Writes config.json, model.safetensors and tokenizer.json of the sample model into `dir`.
/// The same `seed` gives the same bytes (so the same model CID).
pub fn write_model(dir: &Path, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let vocab = vocabulary();
    let config = json!({
        "architectures": ["BertModel"], "model_type": "bert",
        "vocab_size": vocab.len(), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "pad_token_id": 0,
    });
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&config).unwrap_or_default(),
    )
    .map_err(|e| io(&path, e))?;

    let mut rng = StdRng::seed_from_u64(seed);
    let device = Device::Cpu;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut normal = |shape: &[usize]| -> Result<Tensor> {
        let n: usize = shape.iter().product();
        // Box–Muller from the seeded generator: reproducible bytes across candle versions.
        let values: Vec<f32> = (0..n)
            .map(|_| {
                let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
                (0.02 * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
            })
            .collect();
        Ok(Tensor::from_vec(values, shape, &device)?)
    };
    let ones = |n: usize| Tensor::ones(n, DType::F32, &device);
    let zeros = |n: usize| Tensor::zeros(n, DType::F32, &device);
    tensors.insert(
        "embeddings.word_embeddings.weight".into(),
        // Larger word embeddings than the 0.02 default so words, not positions, dominate.
        (normal(&[vocab.len(), HIDDEN])? * 25.0)?,
    );
    tensors.insert(
        "embeddings.position_embeddings.weight".into(),
        normal(&[MAX_POSITIONS, HIDDEN])?,
    );
    tensors.insert(
        "embeddings.token_type_embeddings.weight".into(),
        normal(&[2, HIDDEN])?,
    );
    tensors.insert("embeddings.LayerNorm.weight".into(), ones(HIDDEN)?);
    tensors.insert("embeddings.LayerNorm.bias".into(), zeros(HIDDEN)?);
    for i in 0..LAYERS {
        let p = format!("encoder.layer.{i}");
        for (name, out, inp) in [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", INTERMEDIATE, HIDDEN),
            ("output.dense", HIDDEN, INTERMEDIATE),
        ] {
            tensors.insert(format!("{p}.{name}.weight"), (normal(&[out, inp])? * 5.0)?);
            tensors.insert(format!("{p}.{name}.bias"), zeros(out)?);
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            tensors.insert(format!("{p}.{norm}.weight"), ones(HIDDEN)?);
            tensors.insert(format!("{p}.{norm}.bias"), zeros(HIDDEN)?);
        }
    }
    // The classification head reads [CLS] through the pooler, as transformers'
    // BertForSequenceClassification does; drawn last so the encoder's bytes stay as they were.
    tensors.insert(
        "pooler.dense.weight".into(),
        (normal(&[HIDDEN, HIDDEN])? * 5.0)?,
    );
    tensors.insert("pooler.dense.bias".into(), zeros(HIDDEN)?);
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).map_err(|e| io(&path, e))?;

    let ids: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, w)| ((*w).to_owned(), json!(i)))
        .collect();
    let special = |id: usize, token: &str| {
        json!({ "id": id, "content": token, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true })
    };
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"), special(3, "[SEP]")],
        "normalizer": { "type": "Lowercase" },
        "pre_tokenizer": { "type": "Whitespace" },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                { "SpecialToken": { "id": "[CLS]", "type_id": 0 } },
                { "Sequence": { "id": "A", "type_id": 0 } },
                { "SpecialToken": { "id": "[SEP]", "type_id": 0 } }
            ],
            "pair": [
                { "SpecialToken": { "id": "[CLS]", "type_id": 0 } },
                { "Sequence": { "id": "A", "type_id": 0 } },
                { "SpecialToken": { "id": "[SEP]", "type_id": 0 } },
                { "Sequence": { "id": "B", "type_id": 1 } },
                { "SpecialToken": { "id": "[SEP]", "type_id": 1 } }
            ],
            "special_tokens": {
                "[CLS]": { "id": "[CLS]", "ids": [2], "tokens": ["[CLS]"] },
                "[SEP]": { "id": "[SEP]", "ids": [3], "tokens": ["[SEP]"] }
            }
        },
        "decoder": null,
        "model": { "type": "WordLevel", "vocab": ids, "unk_token": "[UNK]" }
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&tokenizer).unwrap_or_default(),
    )
    .map_err(|e| io(&path, e))?;
    Ok(())
}

/// `n` JSONL records `{"text", "label"}` (1 = positive), balanced, reproducible from `seed`.
pub fn dataset(n: usize, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = String::new();
    for i in 0..n {
        let label = i % 2;
        let (major, minor) = if label == 1 {
            (&POSITIVE, &NEGATIVE)
        } else {
            (&NEGATIVE, &POSITIVE)
        };
        let mut words: Vec<&str> = Vec::new();
        for _ in 0..rng.random_range(2..=3) {
            words.push(major[rng.random_range(0..major.len())]);
        }
        if rng.random_bool(0.4) {
            words.push(minor[rng.random_range(0..minor.len())]);
        }
        for _ in 0..rng.random_range(3..=6) {
            words.push(NEUTRAL[rng.random_range(0..NEUTRAL.len())]);
        }
        // Fisher–Yates with the same generator: word order carries no label.
        for j in (1..words.len()).rev() {
            words.swap(j, rng.random_range(0..=j));
        }
        out.push_str(&json!({ "text": words.join(" "), "label": label }).to_string());
        out.push('\n');
    }
    out
}
