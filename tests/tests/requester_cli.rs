//! The requester's terminal: `shardwork up` in one process on embedded defaults, and the
//! `shardwork job …` commands against it, as a user types them.
//!
//! Checked: a spec with a fault is refused naming the field, and nothing is posted; a posted,
//! development-funded job is watched to completion, its adapter downloads in PEFT layout and the
//! job is listed as completed; a job nobody trains is refunded on chain once its deadline passes,
//! and `job watch` says so and exits non-zero.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use shardwork_tests::{Process, free_port, shardwork, text, wait_healthy};

/// Writes the sample model and stores it in `data_dir`'s embedded store; returns its CID.
fn sample_model(dir: &Path, data_dir: &Path) -> String {
    let model = dir.join("model");
    let out = shardwork(&["model", "sample", &model.display().to_string()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = shardwork(
        &["model", "put", &model.display().to_string()],
        &[("SHARDWORK_DATA_DIR", data_dir.display().to_string())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

fn spec(model_cid: &str, deadline_in: chrono::Duration) -> Value {
    json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"] },
        "training": { "epochs": 3, "learning_rate": 0.01, "batch_size": 16, "max_seq_len": 16, "seed": 7 },
        "shards": 2, "rounds": 1, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + deadline_in).to_rfc3339(),
        "stake": { "amount": "500000000000000000" }
    })
}

/// `shardwork model sample-data` into `dir/reviews.jsonl`.
fn sample_reviews(dir: &Path, records: usize) -> std::path::PathBuf {
    let data = dir.join("reviews.jsonl");
    let out = shardwork(
        &[
            "model",
            "sample-data",
            &data.display().to_string(),
            "--records",
            &records.to_string(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    data
}

/// `shardwork up --workers N` on a fresh data folder holding the sample model, healthy; with
/// its URL and the model's CID.
async fn marketplace(dir: &Path, workers: usize) -> (Process, String, String) {
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let model_cid = sample_model(dir, &data_dir);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = vec![
        ("SHARDWORK_DATA_DIR".into(), data_dir.display().to_string()),
        ("SHARDWORK_API__BIND".into(), format!("127.0.0.1:{port}")),
        ("SHARDWORK_LOG".into(), "info,sqlx=warn".into()),
    ];
    let mut up = Process::start(
        &["up", "--workers", &workers.to_string()],
        &env,
        &dir.join("up.log"),
    );
    wait_healthy(&url, &mut up, Duration::from_secs(120)).await;
    (up, url, model_cid)
}

#[tokio::test(flavor = "multi_thread")]
async fn requester_posts_watches_and_downloads_the_adapter_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let (up, url, model_cid) = marketplace(dir.path(), 2).await;
    let data = sample_reviews(dir.path(), 600);
    let env = [("SHARDWORK_API_URL", url.clone())];

    // A fault in the spec is named, and nothing is posted.
    let mut bad = spec(&model_cid, chrono::Duration::hours(2));
    bad["lora"]["r"] = json!(0);
    let bad_path = dir.path().join("bad.json");
    std::fs::write(&bad_path, bad.to_string()).unwrap();
    let data_arg = data.display().to_string();
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "post",
            "--spec",
            &bad_path.display().to_string(),
            "--data",
            &data_arg,
        ],
        &env,
    );
    assert!(!out.status.success(), "a rank of 0 was accepted");
    assert!(
        text(&out.stderr).contains("lora.r"),
        "{}",
        text(&out.stderr)
    );
    let out = shardwork(&["job", "--dev-requester", "--json", "list"], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");

    // Post, fund (development mode) and watch to completion.
    let good_path = dir.path().join("spec.json");
    std::fs::write(
        &good_path,
        spec(&model_cid, chrono::Duration::hours(2)).to_string(),
    )
    .unwrap();
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "post",
            "--spec",
            &good_path.display().to_string(),
            "--data",
            &data_arg,
            "--dev-fund",
            "--watch",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "job post --watch failed:\n{stdout}\n{stderr}\nup log:\n{}",
        up.log_text()
    );
    let id = stdout.lines().next().unwrap().trim().to_owned();
    assert!(
        uuid::Uuid::parse_str(&id).is_ok(),
        "first line is the job id: {stdout}"
    );
    assert!(stderr.contains("completed"), "{stderr}");
    assert!(
        stderr.contains("2/2"),
        "the bar reached both shards: {stderr}"
    );

    let adapter_dir = dir.path().join("adapter");
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "result",
            &id,
            "--out",
            &adapter_dir.display().to_string(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config: Value =
        serde_json::from_slice(&std::fs::read(adapter_dir.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["peft_type"], "LORA", "{config}");
    assert!(adapter_dir.join("adapter_model.safetensors").is_file());

    let out = shardwork(&["job", "--dev-requester", "--json", "list"], &env);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["status"], "completed");
    drop(up);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_nobody_finishes_is_refunded_on_chain_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // No workers: the round opens and nobody trains it.
    let (up, url, model_cid) = marketplace(dir.path(), 0).await;
    let data = sample_reviews(dir.path(), 200);
    let spec_path = dir.path().join("spec.json");
    std::fs::write(
        &spec_path,
        spec(&model_cid, chrono::Duration::seconds(20)).to_string(),
    )
    .unwrap();
    let env = [("SHARDWORK_API_URL", url.clone())];
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "post",
            "--spec",
            &spec_path.display().to_string(),
            "--data",
            &data.display().to_string(),
            "--dev-fund",
            "--watch",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "an unfinished job reported success:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("ended refunded"),
        "{stderr}\nup log:\n{}",
        up.log_text()
    );
    let id = stdout.lines().next().unwrap().trim().to_owned();
    let out = shardwork(&["job", "--dev-requester", "--json", "show", &id], &env);
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["status"], "refunded", "{job}");
    drop(up);
}
