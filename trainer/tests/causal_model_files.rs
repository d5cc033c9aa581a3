//! Causal LMs from Hugging Face folders (single-file and sharded safetensors) and from GGUF
//! load to the same model, and broken files give errors naming the file at fault.

mod llama_support;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::json;
use shardwork_core::protocol::DatasetRecord;
use shardwork_trainer::causal_model::{CausalModel, write_folder};
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::train::sft;

const SUITE: &str = "trainer causal_model_files (SmolLM2 GGUF)";

fn records() -> Vec<DatasetRecord> {
    [
        r#"{"instruction":"Name a colour.","output":"Blue is a colour."}"#,
        r#"{"prompt":"The capital of France is","completion":" Paris."}"#,
        r#"{"messages":[{"role":"user","content":"Hello"},{"role":"assistant","content":"Hi! How can I help?"}]}"#,
        r#"{"text":"A short plain text record to learn every token of."}"#,
    ]
    .iter()
    .map(|l| DatasetRecord::parse(l.as_bytes()).unwrap())
    .collect()
}

fn loss(model: &CausalModel, records: &[DatasetRecord]) -> (Vec<Vec<u32>>, f64) {
    let examples = sft::encode_dataset(&model.tokenizer, records, 64).unwrap();
    let ids = examples.iter().map(|e| e.ids.clone()).collect();
    let eval = sft::evaluate(&model.model, &examples, 4).unwrap();
    (ids, eval.loss)
}

/// The SmolLM2 fixture loaded from GGUF, the GGUF file's chat template source beside it.
fn smollm2() -> Option<(CausalModel, String)> {
    let gguf = llama_support::smollm2_gguf(SUITE)?;
    let template = match GgufFile::open(&gguf)
        .unwrap()
        .metadata()
        .get("tokenizer.chat_template")
    {
        Some(candle_core::quantized::gguf_file::Value::String(s)) => s.clone(),
        other => panic!("SmolLM2 has a chat template: {other:?}"),
    };
    Some((CausalModel::load(&gguf, &Device::Cpu).unwrap(), template))
}

#[test]
fn a_gguf_model_and_its_hugging_face_folder_score_alike() {
    let Some((gguf, template)) = smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_folder(
        &gguf.model,
        &gguf.tokenizer,
        Some(&template),
        DType::F32,
        dir.path(),
    )
    .unwrap();
    let folder = CausalModel::load(dir.path(), &Device::Cpu).unwrap();
    assert!(folder.tokenizer.chat_template.is_some());
    assert_eq!(folder.tokenizer.eos_token_id, gguf.tokenizer.eos_token_id);
    let records = records();
    let (ids_gguf, loss_gguf) = loss(&gguf, &records);
    let (ids_folder, loss_folder) = loss(&folder, &records);
    assert_eq!(ids_gguf, ids_folder, "the two tokenizers encode alike");
    assert!(
        (loss_gguf - loss_folder).abs() < 1e-4,
        "GGUF {loss_gguf} vs folder {loss_folder}"
    );

    // The same weights cut into two shards with an index, as large checkpoints are.
    let all =
        candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu).unwrap();
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let mut shards = [HashMap::new(), HashMap::new()];
    let mut map = serde_json::Map::new();
    for (i, (name, t)) in all.into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i % 2 + 1);
        map.insert(name.clone(), file.into());
        shards[i % 2].insert(name, t);
    }
    for (i, shard) in shards.iter().enumerate() {
        let path = dir
            .path()
            .join(format!("model-0000{}-of-00002.safetensors", i + 1));
        candle_core::safetensors::save(shard, path).unwrap();
    }
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        json!({ "metadata": {}, "weight_map": map }).to_string(),
    )
    .unwrap();
    let sharded = CausalModel::load(dir.path(), &Device::Cpu).unwrap();
    let (_, loss_sharded) = loss(&sharded, &records);
    assert!((loss_sharded - loss_folder).abs() < 1e-6);
}

/// A tiny Llama-family folder (random weights, SmolLM2's tokenizer) for the error cases.
fn tiny_folder(dir: &Path, gguf: &CausalModel) {
    let (vocab, h, i, layers) = (49_152usize, 16usize, 32usize, 2usize);
    let dev = Device::Cpu;
    let mut tensors: std::collections::HashMap<String, Tensor> = Default::default();
    let mut put = |name: String, shape: &[usize]| {
        tensors.insert(name, Tensor::randn(0f32, 0.02, shape, &dev).unwrap());
    };
    put("model.embed_tokens.weight".into(), &[vocab, h]);
    put("model.norm.weight".into(), &[h]);
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            put(format!("{p}.self_attn.{proj}.weight"), &[h, h]);
        }
        put(format!("{p}.mlp.gate_proj.weight"), &[i, h]);
        put(format!("{p}.mlp.up_proj.weight"), &[i, h]);
        put(format!("{p}.mlp.down_proj.weight"), &[h, i]);
        put(format!("{p}.input_layernorm.weight"), &[h]);
        put(format!("{p}.post_attention_layernorm.weight"), &[h]);
    }
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        json!({ "model_type": "llama", "vocab_size": vocab, "hidden_size": h,
                "intermediate_size": i, "num_hidden_layers": layers, "num_attention_heads": 2,
                "num_key_value_heads": 2, "tie_word_embeddings": true, "rms_norm_eps": 1e-5 })
        .to_string(),
    )
    .unwrap();
    gguf.tokenizer
        .tokenizer
        .save(dir.join("tokenizer.json"), false)
        .unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({ "eos_token": "<|im_end|>" }).to_string(),
    )
    .unwrap();
}

fn load_error(dir: &Path) -> String {
    match CausalModel::load(dir, &Device::Cpu) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn broken_model_files_are_named() {
    let Some((gguf, _)) = smollm2() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    tiny_folder(base.path(), &gguf);
    let good = CausalModel::load(base.path(), &Device::Cpu).unwrap();
    assert!(good.tokenizer.chat_template.is_none());
    assert!(loss(&good, &records()[..2]).1.is_finite());

    let copy = || {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(base.path()).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
        dir
    };

    let truncated = copy();
    let weights = truncated.path().join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_error(truncated.path());
    assert!(e.contains("model.safetensors"), "{e}");

    let unknown = copy();
    std::fs::write(
        unknown.path().join("config.json"),
        json!({ "model_type": "gpt_neox", "vocab_size": 10, "hidden_size": 4 }).to_string(),
    )
    .unwrap();
    let e = load_error(unknown.path());
    assert!(e.contains("config.json") && e.contains("gpt_neox"), "{e}");

    let tokenizer = copy();
    std::fs::write(
        tokenizer.path().join("tokenizer.json"),
        b"{\"model\": [1, 2",
    )
    .unwrap();
    let e = load_error(tokenizer.path());
    assert!(e.contains("tokenizer.json"), "{e}");

    let eos = copy();
    std::fs::write(
        eos.path().join("tokenizer_config.json"),
        json!({ "eos_token": "<no such token>" }).to_string(),
    )
    .unwrap();
    let e = load_error(eos.path());
    assert!(
        e.contains("tokenizer_config.json") && e.contains("eos_token"),
        "{e}"
    );

    let missing_shard = copy();
    std::fs::write(
        missing_shard.path().join("model.safetensors.index.json"),
        json!({ "weight_map": { "model.norm.weight": "model-00002-of-00002.safetensors" } })
            .to_string(),
    )
    .unwrap();
    let e = load_error(missing_shard.path());
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}
