//! A short LoRA SFT of SmolLM2-135M-Instruct (from GGUF) on chatterbot-corpus conversations,
//! run through the real JSONL path: held-out loss must fall and the base must stay untouched.

mod llama_support;

use std::io::Write;
use std::path::Path;

use candle_core::Device;
use shardwork_trainer::data::split;
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::optim::OptimConfig;
use shardwork_trainer::tokenizer_gguf::LmTokenizer;
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::sft::{self, SftConfig};
use shardwork_trainer::train::sft_data::read_sft_jsonl;

const SUITE: &str = "worker llama_sft (SmolLM2 GGUF + chatterbot-corpus)";

/// Every chatterbot conversation as a `{"messages"}` line of `out`; returns how many.
fn chatterbot_to_jsonl(dir: &Path, out: &Path) -> usize {
    let records = shardwork_trainer::data::chatterbot::conversations(dir).unwrap();
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    for r in &records {
        writeln!(w, "{r}").unwrap();
    }
    records.len()
}

#[test]
fn lora_sft_on_chatterbot_lowers_held_out_loss_and_keeps_base_weights() {
    let (Some(gguf), Some(corpus)) = (
        llama_support::smollm2_gguf(SUITE),
        llama_support::chatterbot_english(SUITE),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("chatterbot.jsonl");
    let written = chatterbot_to_jsonl(&corpus, &jsonl);
    let records = read_sft_jsonl(&jsonl).unwrap();
    assert_eq!(records.len(), written);
    assert!(records.len() > 300, "{} conversations", records.len());

    let file = GgufFile::open(&gguf).unwrap();
    let tok = LmTokenizer::from_gguf(&file).unwrap();
    let mut model = file.load_model(&Device::Cpu).unwrap();
    let pad = tok.eos_token_id;

    // A fixed seeded split: 16 held-out conversations the training never sees.
    let order = split::permutation(records.len(), 20261122);
    let held_out: Vec<_> = order[..16].iter().map(|&i| records[i].clone()).collect();
    let train: Vec<_> = order[16..].iter().map(|&i| records[i].clone()).collect();
    let max_len = 64;
    let held_out = sft::encode_dataset(&tok, &held_out, max_len).unwrap();
    let train = sft::encode_dataset(&tok, &train, max_len).unwrap();

    let before = sft::evaluate(&model, &held_out, 16).unwrap();
    let frozen_before: Vec<(String, Vec<f32>)> = model
        .base_tensors()
        .unwrap()
        .into_iter()
        .filter(|(name, _)| name.contains("q_proj") || name.contains("v_proj"))
        .map(|(name, t)| (name, t.flatten_all().unwrap().to_vec1().unwrap()))
        .collect();

    // CI-sized: 6 steps of 4 conversations (12 steps of 8 went 3.71 -> 2.39 nats).
    let steps = 6;
    let cfg = SftConfig {
        lora: LoraConfig::new(8, 16.0, 0.05, &["q_proj", "v_proj"], &[]).unwrap(),
        optim: OptimConfig {
            lr: 4e-3,
            warmup_steps: 2,
            total_steps: steps,
            ..OptimConfig::default()
        },
        batch_size: 4,
        max_seq_len: max_len,
        seed: 7,
    };
    let trainables = sft::attach_lora(&mut model, &cfg.lora, cfg.seed).unwrap();
    assert_eq!(trainables.len(), 2 * 2 * model.layers.len());
    let mut seen: Vec<Progress> = Vec::new();
    let report = sft::train(&model, &trainables, &train, &cfg, pad, &mut |p| {
        seen.push(*p)
    })
    .unwrap();
    let after = sft::evaluate(&model, &held_out, 16).unwrap();
    eprintln!(
        "SmolLM2 LoRA SFT: held-out loss {:.4} -> {:.4} (perplexity {:.2} -> {:.2}) over {} tokens; \
         {} steps, {:.1} learned tokens/s, {:.1}s",
        before.loss,
        after.loss,
        before.perplexity,
        after.perplexity,
        after.tokens,
        report.steps,
        report.tokens_per_sec,
        report.seconds
    );

    assert_eq!(seen.len(), steps);
    assert_eq!(seen.last().map(|p| p.step), Some(steps));
    assert!(
        seen.iter()
            .all(|p| p.loss.is_finite() && p.tokens_per_sec > 0.0)
    );
    assert!(
        after.loss < before.loss - 0.1,
        "held-out loss {:.4} -> {:.4} did not fall",
        before.loss,
        after.loss
    );

    // Only adapter tensors changed: the wrapped base projections are bit-identical.
    let frozen_after: Vec<(String, Vec<f32>)> = model
        .base_tensors()
        .unwrap()
        .into_iter()
        .filter(|(name, _)| name.contains("q_proj") || name.contains("v_proj"))
        .map(|(name, t)| (name, t.flatten_all().unwrap().to_vec1().unwrap()))
        .collect();
    assert_eq!(frozen_before.len(), frozen_after.len());
    for ((name, a), (_, b)) in frozen_before.iter().zip(&frozen_after) {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} changed during training"
        );
    }
}
