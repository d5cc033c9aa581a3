//! Broken adapter, config and weight files give errors that name the file (and the line or
//! tensor); nothing panics.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use shardwork_trainer::bert::{BertConfig, BertWeights};
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::peft::{Adapter, AdapterConfig, CONFIG_FILE, WEIGHTS_FILE};

fn good_adapter(dir: &Path) -> Adapter {
    let dev = Device::Cpu;
    let cfg = LoraConfig::new(2, 4.0, 0.0, &["q"], &[]).unwrap();
    let mut tensors = BTreeMap::new();
    tensors.insert(
        "m.q.lora_A.weight".to_string(),
        Tensor::ones((2, 3), DType::F32, &dev).unwrap(),
    );
    tensors.insert(
        "m.q.lora_B.weight".to_string(),
        Tensor::ones((5, 2), DType::F32, &dev).unwrap(),
    );
    let a = Adapter {
        config: AdapterConfig::from_lora(&cfg, "CAUSAL_LM", None),
        tensors,
    };
    a.save(dir).unwrap();
    a
}

#[test]
fn adapter_round_trips_with_peft_prefixed_names() {
    let dir = tempfile::tempdir().unwrap();
    let a = good_adapter(dir.path());
    let raw = candle_core::safetensors::load(dir.path().join(WEIGHTS_FILE), &Device::Cpu).unwrap();
    assert!(raw.contains_key("base_model.model.m.q.lora_A.weight"));
    let b = Adapter::load(dir.path(), &Device::Cpu).unwrap();
    assert_eq!(a.config, b.config);
    assert_eq!(b.tensors.len(), 2);
}

#[test]
fn config_syntax_error_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    good_adapter(dir.path());
    std::fs::write(
        dir.path().join(CONFIG_FILE),
        "{\n  \"r\": 2,\n  \"lora_alpha\": ,\n}",
    )
    .unwrap();
    let msg = Adapter::load(dir.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(msg.contains(CONFIG_FILE) && msg.contains("line 3"), "{msg}");
}

#[test]
fn unsupported_peft_options_are_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    good_adapter(dir.path());
    let path = dir.path().join(CONFIG_FILE);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["use_dora"] = serde_json::json!(true);
    std::fs::write(&path, cfg.to_string()).unwrap();
    let msg = Adapter::load(dir.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("use_dora"), "{msg}");
}

#[test]
fn truncated_or_garbage_safetensors_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    good_adapter(dir.path());
    let path = dir.path().join(WEIGHTS_FILE);
    let bytes = std::fs::read(&path).unwrap();
    for broken in [
        &bytes[..bytes.len() - 7],
        &bytes[..5],
        b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk".as_slice(),
    ] {
        std::fs::write(&path, broken).unwrap();
        let msg = Adapter::load(dir.path(), &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(WEIGHTS_FILE), "{msg}");
    }
}

#[test]
fn adapter_rank_disagreeing_with_config_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    good_adapter(dir.path());
    let path = dir.path().join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"r\": 2", "\"r\": 3");
    std::fs::write(&path, text).unwrap();
    let msg = Adapter::load(dir.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("config r 3"), "{msg}");
}

#[test]
fn bert_config_and_missing_tensor_errors_name_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, "{\"vocab_size\": 10,\n \"hidden_size\": 6}").unwrap();
    let msg = BertConfig::load(&cfg).unwrap_err().to_string();
    assert!(
        msg.contains("config.json") && msg.contains("missing field"),
        "{msg}"
    );

    std::fs::write(
        &cfg,
        r#"{"vocab_size": 10, "hidden_size": 6, "num_hidden_layers": 1, "num_attention_heads": 4,
            "intermediate_size": 8, "max_position_embeddings": 16}"#,
    )
    .unwrap();
    let msg = BertConfig::load(&cfg).unwrap_err().to_string();
    assert!(
        msg.contains("not a multiple of num_attention_heads 4"),
        "{msg}"
    );

    std::fs::write(
        &cfg,
        r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 8, "max_position_embeddings": 16}"#,
    )
    .unwrap();
    let mut t = HashMap::new();
    t.insert(
        "embeddings.word_embeddings.weight".to_string(),
        Tensor::zeros((10, 7), DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&t, dir.path().join("model.safetensors")).unwrap();
    let weights = BertWeights::load(dir.path(), &Device::Cpu).unwrap();
    let spec = shardwork_trainer::bert::ClassifierSpec {
        num_labels: 2,
        lora: LoraConfig::new(2, 4.0, 0.0, &["query"], &[]).unwrap(),
        encoder_dropout: None,
        seed: 0,
    };
    let msg = shardwork_trainer::bert::BertClassifier::new(&weights, &spec)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("model.safetensors")
            && msg.contains("word_embeddings.weight has shape [10, 7]"),
        "{msg}"
    );
}
