//! The trainer from the terminal: `shardwork train`, `shardwork eval` and `shardwork merge` on
//! the generated BERT-family sample model, as a user runs them.
//!
//! Checked: two adapters trained on two halves of the data each beat the base model on the
//! held-out file; `eval` reproduces the score `train` reported; `merge` (exact) writes a PEFT
//! adapter that also beats the base and reports its truncation error, and naive averaging is
//! reported beside it; a malformed data line is refused naming the file and the line. On the
//! chat model (SmolLM2), `train` and `eval` print the held-out loss a verdict records.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn shardwork(args: &[&str]) -> Output {
    Command::new(shardwork_tests::binary())
        .args(args)
        .env("SHARDWORK_LOG", "warn")
        .output()
        .expect("run shardwork")
}

fn ok_json(out: Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn train_eval_and_merge_adapters_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = d.join("model");
    assert!(shardwork(&["model", "sample", &p(&model)]).status.success());
    let all = d.join("all.jsonl");
    assert!(
        shardwork(&[
            "model",
            "sample-data",
            &p(&all),
            "--records",
            "800",
            "--seed",
            "5"
        ])
        .status
        .success()
    );
    let lines: Vec<String> = std::fs::read_to_string(&all)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let write = |name: &str, part: &[String]| {
        let path = d.join(name);
        std::fs::write(&path, part.join("\n") + "\n").unwrap();
        path
    };
    let held_out = write("held_out.jsonl", &lines[..160]);
    let shard_a = write("a.jsonl", &lines[160..480]);
    let shard_b = write("b.jsonl", &lines[480..]);

    let train = |data: &Path, out: &Path| {
        ok_json(shardwork(&[
            "train",
            "--model",
            &p(&model),
            "--data",
            &p(data),
            "--held-out",
            &p(&held_out),
            "--out",
            &p(out),
            "--epochs",
            "3",
            "--lr",
            "0.01",
            "--max-seq-len",
            "16",
            "--dropout",
            "0",
            "--json",
        ]))
    };
    let a = train(&shard_a, &d.join("adapter-a"));
    let b = train(&shard_b, &d.join("adapter-b"));
    for report in [&a, &b] {
        let before = report["held_out_before"]["accuracy"].as_f64().unwrap();
        let after = report["held_out_after"]["accuracy"].as_f64().unwrap();
        assert!(
            after > before + 0.1,
            "held-out accuracy {before} -> {after}"
        );
        assert!(report["steps"].as_u64().unwrap() > 0);
    }
    let config: Value =
        serde_json::from_slice(&std::fs::read(d.join("adapter-a/adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["peft_type"], "LORA");
    assert_eq!(config["task_type"], "SEQ_CLS");

    let eval = |adapter: Option<&Path>| {
        let mut args = vec![
            "eval".to_owned(),
            "--model".into(),
            p(&model),
            "--data".into(),
            p(&held_out),
            "--max-seq-len".into(),
            "16".into(),
            "--json".into(),
        ];
        if let Some(adapter) = adapter {
            args.extend(["--adapter".into(), p(adapter)]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ok_json(shardwork(&refs))
    };
    let a_eval = eval(Some(&d.join("adapter-a")));
    assert_eq!(
        a_eval["accuracy"], a["held_out_after"]["accuracy"],
        "eval agrees with train"
    );

    let merged = ok_json(shardwork(&[
        "merge",
        &format!("{}=320", p(&d.join("adapter-a"))),
        &format!("{}=320", p(&d.join("adapter-b"))),
        "--out",
        &p(&d.join("merged")),
        "--json",
    ]));
    assert!(
        merged["max_relative_error"].as_f64().unwrap() < 0.5,
        "{merged}"
    );
    let merged_eval = eval(Some(&d.join("merged")));
    let base = a["held_out_before"]["accuracy"].as_f64().unwrap();
    assert!(
        merged_eval["accuracy"].as_f64().unwrap() > base + 0.1,
        "merged {merged_eval} vs base {base}"
    );
    let naive = ok_json(shardwork(&[
        "merge",
        &p(&d.join("adapter-a")),
        &p(&d.join("adapter-b")),
        "--mode",
        "naive",
        "--out",
        &p(&d.join("naive")),
        "--json",
    ]));
    assert!(
        naive["max_relative_error"].as_f64().unwrap() > 0.0,
        "{naive}"
    );
    // A step past the merge from a start, as a round after the first would take it: the
    // report carries the rate, and a rate out of range is refused by name with nothing written.
    let stepped = ok_json(shardwork(&[
        "merge",
        &p(&d.join("adapter-a")),
        &p(&d.join("adapter-b")),
        "--start",
        &p(&d.join("naive")),
        "--server-learning-rate",
        "1.5",
        "--out",
        &p(&d.join("stepped")),
        "--json",
    ]));
    assert_eq!(stepped["server_learning_rate"], 1.5, "{stepped}");
    assert!(d.join("stepped/adapter_model.safetensors").exists());
    let out = shardwork(&[
        "merge",
        &p(&d.join("adapter-a")),
        &p(&d.join("adapter-b")),
        "--server-learning-rate",
        "0",
        "--out",
        &p(&d.join("never-merged")),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("server learning rate 0"), "{stderr}");
    assert!(!d.join("never-merged").exists());

    // A broken line is named, with its file; nothing panics.
    let broken = d.join("broken.jsonl");
    std::fs::write(&broken, format!("{}\n{{\"text\": \"no label\"\n", lines[0])).unwrap();
    let out = shardwork(&[
        "train",
        "--model",
        &p(&model),
        "--data",
        &p(&broken),
        "--out",
        &p(&d.join("never")),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("broken.jsonl:2"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !d.join("never").exists(),
        "nothing written for a refused run"
    );
}

/// A requester checking a verdict from the terminal: `shardwork train --held-out` and
/// `shardwork eval` on a chat model print the held-out loss the validator's verdict records for
/// the same adapter, to the last digit, on whichever kernel this CPU gives the validator (AMX,
/// panels or gemm). Before, both scored outside the validator's kept packs, on gemm, and
/// differed from the verdict in the last digits where the validator ran AMX or panels.
#[test]
fn a_chat_adapters_held_out_loss_from_the_terminal_is_the_verdicts() {
    use shardwork_node::work::Work;
    use shardwork_node::work::causal_lm::CausalLmJob;

    let Some(gguf) = shardwork_trainer::fixtures::smollm2_gguf() else {
        let why = "SmolLM2 not found (run scripts/install/python-fixtures)";
        assert!(
            !shardwork_core::testkit::services::services_required(),
            "{why}, and SHARDWORK_REQUIRE_SERVICES=1"
        );
        shardwork_core::testkit::services::record_skip("trainer_cli chat held-out loss", why);
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let chats = |path: &Path, pairs: &[(&str, &str)]| {
        let lines: String = pairs
            .iter()
            .map(|(q, a)| {
                serde_json::json!({ "messages": [
                    { "role": "user", "content": q },
                    { "role": "assistant", "content": a },
                ]})
                .to_string()
                    + "\n"
            })
            .collect();
        std::fs::write(path, lines).unwrap();
    };
    let (train, held_out) = (d.join("train.jsonl"), d.join("held-out.jsonl"));
    chats(
        &train,
        &[
            (
                "What is the capital of France?",
                "Paris is the capital of France.",
            ),
            ("What colour is the sky?", "The sky is blue on a clear day."),
            ("How many legs has a spider?", "A spider has eight legs."),
            ("What do bees make?", "Bees make honey and wax."),
        ],
    );
    chats(
        &held_out,
        &[
            (
                "What is the capital of Italy?",
                "Rome is the capital of Italy.",
            ),
            ("What colour is grass?", "Grass is green."),
            ("How many legs has an ant?", "An ant has six legs."),
        ],
    );
    let model = p(&gguf);
    let trained = ok_json(shardwork(&[
        "train",
        "--model",
        &model,
        "--data",
        &p(&train),
        "--held-out",
        &p(&held_out),
        "--out",
        &p(&d.join("adapter")),
        "--steps",
        "1",
        "--batch-size",
        "4",
        "--max-seq-len",
        "48",
        "--lr",
        "0.01",
        "--json",
    ]));
    let evaluated = ok_json(shardwork(&[
        "eval",
        "--model",
        &model,
        "--data",
        &p(&held_out),
        "--adapter",
        &p(&d.join("adapter")),
        "--max-seq-len",
        "48",
        "--json",
    ]));

    // The validator's own scoring of that adapter, for a job with the same LoRA and length.
    let adapter =
        shardwork_trainer::peft::Adapter::load(&d.join("adapter"), &candle_core::Device::Cpu)
            .unwrap();
    let spec = serde_json::from_value(serde_json::json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy",
                        "format": "gguf", "architecture": "llama", "task": "causal_lm" },
        "lora": { "r": adapter.config.r, "alpha": adapter.config.lora_alpha, "dropout": 0.05,
                  "target_modules": adapter.config.target_modules },
        "training": { "epochs": 1, "learning_rate": 1e-2, "batch_size": 4,
                      "max_seq_len": 48, "seed": 42 },
        "shards": 1, "rounds": 1, "held_out_fraction": 0.1,
        "deadline": "2030-01-01T00:00:00Z",
        "stake": { "amount": "1" }
    }))
    .unwrap();
    let device = candle_core::Device::Cpu;
    let job = CausalLmJob::load(spec, &gguf, &device).unwrap();
    let set = job.held_out(&held_out).unwrap();
    let verdict = job.score(Some(&adapter), &set, &device).unwrap();
    let base = job.score(None, &set, &device).unwrap();

    assert_eq!(evaluated["loss"].as_f64(), Some(verdict), "{evaluated}");
    assert_eq!(
        trained["held_out_after"]["loss"].as_f64(),
        Some(verdict),
        "{trained}"
    );
    assert_eq!(
        trained["held_out_before"]["loss"].as_f64(),
        Some(base),
        "{trained}"
    );
    assert!(
        verdict < base,
        "one step at 1e-2 learned nothing: {verdict} against {base}"
    );
}

/// `bench train --device cuda` from a build without the CUDA feature (every CI build) stops at
/// once with an error that says how to get a GPU build, instead of loading a model or panicking.
#[test]
fn a_gpu_bench_from_a_cpu_build_says_how_to_build_for_the_gpu() {
    let out = shardwork(&[
        "bench",
        "train",
        "--device",
        "cuda",
        "--candle-only",
        "--configs",
        "llama1b",
        "--rounds",
        "1",
        "--steps",
        "1",
        "--warmup",
        "0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a CPU build trained on cuda: {stderr}"
    );
    assert!(
        stderr.contains("--features cuda") && stderr.contains("scripts/cuda-build"),
        "the error does not say how to build for the GPU: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
