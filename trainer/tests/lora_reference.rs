//! The LoRA forward pass against an independent numpy computation from the saved PEFT files.

mod common;

use std::process::Command;

use candle_core::{Device, Tensor};
use shardwork_trainer::fixtures;
use shardwork_trainer::lora::{LoraBuilder, LoraConfig};
use shardwork_trainer::peft::{Adapter, AdapterConfig};

const SUITE: &str = "worker lora_reference";

#[test]
fn candle_lora_forward_matches_numpy_from_saved_peft_adapter() {
    let Some(model_dir) = common::fixture(fixtures::minilm_dir(), SUITE, "all-MiniLM-L6-v2") else {
        return;
    };
    let Some(numpy) = common::fixture(fixtures::numpy_path(), SUITE, "numpy") else {
        return;
    };
    let dev = Device::Cpu;
    let model_path = model_dir.join("model.safetensors");
    let base = shardwork_trainer::safetensors_file::load(&model_path, &dev).unwrap();
    let cfg = LoraConfig::new(8, 16.0, 0.1, &["query", "value"], &[]).unwrap();
    let mut lb = LoraBuilder::new(cfg.clone(), 11).unwrap();
    let mut layers = Vec::new();
    for i in 0..6 {
        for m in ["query", "value"] {
            let key = format!("encoder.layer.{i}.attention.self.{m}");
            let w = base[&format!("{key}.weight")].clone();
            let b = base[&format!("{key}.bias")].clone();
            let layer = lb.linear(&format!("bert.{key}"), w, Some(b)).unwrap();
            assert!(layer.is_lora());
            layers.push((layer, key));
        }
    }
    let trainables = lb.finish();
    // Stand-in for training: B is zero at init, which would make the check vacuous.
    for (_, var) in trainables.iter() {
        let noise = Tensor::randn(0f32, 0.05, var.shape(), &dev).unwrap();
        var.set(&noise).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let adapter_dir = dir.path().join("adapter");
    let adapter = Adapter::from_trainables(
        AdapterConfig::from_lora(
            &cfg,
            "SEQ_CLS",
            Some("sentence-transformers/all-MiniLM-L6-v2"),
        ),
        &trainables,
    )
    .unwrap();
    adapter.save(&adapter_dir).unwrap();
    let cases = dir.path().join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    for (i, (layer, key)) in layers.iter().enumerate() {
        let x = Tensor::randn(0f32, 1.0, (3, 5, 384), &dev).unwrap();
        let y = layer.forward(&x, false).unwrap();
        x.write_npy(cases.join(format!("x_{i}.npy"))).unwrap();
        y.write_npy(cases.join(format!("y_{i}.npy"))).unwrap();
        std::fs::write(
            cases.join(format!("module_{i}.txt")),
            format!("{}\n{key}\n", layer.name()),
        )
        .unwrap();
    }
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/lora_forward.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&model_path)
        .arg(&adapter_dir)
        .arg(&cases)
        .env("PYTHONPATH", &numpy)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["modules"], 12, "{result}");
    let err = result["max_rel_err"].as_f64().unwrap();
    eprintln!("candle vs numpy: max relative error {err:.3e} over 12 modules");
    assert!(err < 1e-4, "candle vs numpy relative error {err}");
}
