//! No public secret is an identity (issue 46, attack 3): `shardwork up` ran its validator as
//! anvil's well-known development account 4, so anyone signing in with that public key got the
//! validator role (every job's held-out key, verdicts, merges). Its validator and workers now
//! sign with keys generated into the data folder; the public key gets no role.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use shardwork_client::{ApiClient, ApiError};
use shardwork_tests::{Process, free_port, in_process_nodes, put_sample_model, wait_healthy};

fn spec(model_cid: &str) -> serde_json::Value {
    json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["query", "value"] },
        "training": { "epochs": 1, "learning_rate": 0.01, "batch_size": 8, "max_seq_len": 16, "seed": 3 },
        "shards": 2, "rounds": 1, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
        "stake": { "amount": "1000" }
    })
}

#[track_caller]
fn refused(result: Result<impl std::fmt::Debug, ApiError>, what: &str) {
    match result {
        Err(ApiError::Problem { status: 403, .. }) => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_public_development_validator_key_gets_no_role_from_up() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = [
        ("SHARDWORK_DATA_DIR", data.display().to_string()),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
        ("SHARDWORK_LOG", "info,sqlx=warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut up = Process::start(&["up", "--workers", "2"], &env, &dir.path().join("up.log"));
    wait_healthy(&url, &mut up, Duration::from_secs(120)).await;

    // The nodes' identities are the data folder's own, none a public development account.
    let (validator, workers) = in_process_nodes(&data);
    assert_eq!(workers.len(), 2);
    let public: Vec<String> = shardwork_contracts::dev_keys::dev_addresses()
        .iter()
        .map(|a| format!("{a:#x}"))
        .collect();
    for address in std::iter::once(&validator).chain(&workers) {
        assert!(!public.contains(address), "{address} is a public key");
    }

    let dev = shardwork_contracts::dev_keys::dev_signers();
    let requester = Arc::new(ApiClient::new(&url, dev[3].clone(), &[]).unwrap());
    let model = put_sample_model(&requester, dir.path()).await;
    let dataset: String = (0..30)
        .map(|i| format!("{{\"text\":\"review {i}\",\"label\":{}}}\n", i % 2))
        .collect();
    let job = requester
        .post_job(&spec(&model), Bytes::from(dataset))
        .await
        .expect("post a job");
    let job: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();

    // Anvil's key 4 (the old validator), and every other public key, asks for the role: no.
    for (index, key) in dev.iter().enumerate() {
        let as_validator = ApiClient::new(&url, key.clone(), &["validator"]).unwrap();
        refused(
            as_validator.job_keys(job).await,
            &format!("dev key {index} signing in as validator"),
        );
    }
    // Signed in plainly, key 4 is a requester like anyone: the held-out key is not its.
    let plain = ApiClient::new(&url, dev[4].clone(), &[]).unwrap();
    refused(plain.job_keys(job).await, "dev key 4's held-out key");

    // The role is the generated validator's: its key, from the data folder, opens the job.
    let text = std::fs::read_to_string(data.join("node-keys.toml")).unwrap();
    let table: toml::Table = text.parse().unwrap();
    let key: alloy::signers::local::PrivateKeySigner =
        table["validator"].as_str().unwrap().parse().unwrap();
    assert_eq!(format!("{:#x}", key.address()), validator);
    let real = ApiClient::new(&url, key, &["validator"]).unwrap();
    let keys = real.job_keys(job).await.expect("the validator's keys");
    assert_eq!(keys.held_out.len(), 64);

    // A restart keeps the same identities.
    drop(up);
    let mut again = Process::start(
        &["up", "--workers", "2"],
        &env,
        &dir.path().join("up-2.log"),
    );
    wait_healthy(&url, &mut again, Duration::from_secs(120)).await;
    assert_eq!(in_process_nodes(&data), (validator, workers));
}
