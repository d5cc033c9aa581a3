//! SmolLM2-135M-Instruct loaded from its llama.cpp GGUF: tokenizer from the metadata, the Q/K
//! permutation undone, and a chat answer a person can check.

mod llama_support;

use std::io::Write;

use candle_core::Device;
use shardwork_trainer::chat_template::ChatMessage;
use shardwork_trainer::generate::{GenerateOptions, Sampling, generate};
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::tokenizer_gguf::LmTokenizer;

const SUITE: &str = "worker llama_gguf (SmolLM2 GGUF)";

#[test]
fn smollm2_from_gguf_answers_a_chat_question_correctly() {
    let Some(path) = llama_support::smollm2_gguf(SUITE) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let cfg = file.config().unwrap();
    assert_eq!((cfg.hidden_size, cfg.num_hidden_layers), (576, 30));
    assert_eq!((cfg.num_attention_heads, cfg.num_kv_heads()), (9, 3));
    assert!(cfg.tie_word_embeddings);
    let tok = LmTokenizer::from_gguf(&file).unwrap();
    let model = file.load_model(&Device::Cpu).unwrap();

    let template = tok
        .chat_template
        .as_ref()
        .expect("SmolLM2 ships a chat template");
    let prompt = template
        .render(
            &[ChatMessage::new("user", "What is the capital of France?")],
            true,
        )
        .unwrap();
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt:?}");
    let ids = tok.encode(&prompt).unwrap();
    let out = generate(
        &model,
        &ids,
        &GenerateOptions {
            max_new_tokens: 24,
            sampling: Sampling::Greedy,
            stop_tokens: vec![tok.eos_token_id],
        },
    )
    .unwrap();
    let answer = tok.decode(&out).unwrap();
    assert!(answer.contains("Paris"), "answer: {answer:?}");
    assert_eq!(
        out.last(),
        Some(&tok.eos_token_id),
        "a short answer ends its turn: {answer:?}"
    );
}

#[test]
fn gguf_tokenizer_matches_smollm2_conventions() {
    let Some(path) = llama_support::smollm2_gguf(SUITE) else {
        return;
    };
    let tok = LmTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    // Control tokens are single tokens in text, as in SmolLM2's tokenizer.json (ids 0..2).
    assert_eq!(
        tok.encode("<|endoftext|><|im_start|><|im_end|>").unwrap(),
        [0, 1, 2]
    );
    assert_eq!(tok.eos_token_id, 2);
    // SmolLM's pre-tokenizer splits every digit.
    assert_eq!(tok.encode("12345").unwrap().len(), 5);
    // Byte-level BPE round-trips any text, including spaces, accents and emoji.
    let text = "Hello, world!  Ça va?\n\tnaïve 🦀 x=42";
    let ids = tok.encode(text).unwrap();
    assert!(ids.len() < text.len(), "BPE merges: {ids:?}");
    assert_eq!(tok.decode(&ids).unwrap(), text);
}

#[test]
fn truncated_or_foreign_gguf_errors_name_the_file() {
    let Some(path) = llama_support::smollm2_gguf(SUITE) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    let not_gguf = dir.path().join("weights.gguf");
    std::fs::write(&not_gguf, b"PK\x03\x04 this is a zip, not a gguf").unwrap();
    let err = GgufFile::open(&not_gguf).unwrap_err().to_string();
    assert!(err.contains("weights.gguf"), "{err}");

    // Header and metadata intact, tensor data cut short: the error names file and tensor.
    let bytes = std::fs::read(&path).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::File::create(&truncated)
        .unwrap()
        .write_all(&bytes[..bytes.len() / 2])
        .unwrap();
    let file = GgufFile::open(&truncated).unwrap();
    let err = file.load_model(&Device::Cpu).unwrap_err().to_string();
    assert!(
        err.contains("truncated.gguf") && err.contains(": tensor "),
        "{err}"
    );

    // Cut inside the metadata: reading the header fails, naming the file.
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..4096]).unwrap();
    let err = GgufFile::open(&cut).unwrap_err().to_string();
    assert!(err.contains("cut.gguf"), "{err}");
}
