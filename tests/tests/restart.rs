//! Killing the API between a transition and its publish, then restarting it, ends with the
//! publish done exactly once (the transactional outbox).
//!
//! The API runs as its own process (`shardwork serve`, embedded SQLite, table queue and EVM in
//! a temporary data folder) with the outbox slowed to one pass a minute, so the window between
//! "job funded, round 1 recorded" and "round 1 published" is wide open when SIGKILL lands.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use shardwork_client::ApiClient;
use shardwork_core::protocol::TASK_QUEUE;
use shardwork_core::queue::TaskQueue;
use shardwork_core::queue::table::TableQueue;
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_node::content::{ApiBlobs, put_bundle};
use shardwork_tests::{Process, eventually, free_port, wait_healthy};

fn env(data_dir: &std::path::Path, port: u16) -> Vec<(String, String)> {
    let validator = shardwork_contracts::dev_keys::dev_addresses()[4];
    [
        ("SHARDWORK_DATA_DIR", data_dir.display().to_string()),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        (
            "SHARDWORK_API__JWT_SECRET",
            "restart-test-jwt-secret-of-32-bytes!!".into(),
        ),
        (
            "SHARDWORK_API__SEALING_SECRET",
            "restart-test-sealing-secret-32-bytes!".into(),
        ),
        (
            "SHARDWORK_API__VALIDATOR_ADDRESSES",
            format!("[\"{validator:#x}\"]"),
        ),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
        // One outbox pass at start, then a minute's sleep that nothing cuts short: the kill
        // lands in between.
        ("SHARDWORK_API__BACKGROUND_INTERVAL_MS", "60000".into()),
        ("SHARDWORK_API__BACKGROUND_WAKEUPS", "false".into()),
        ("SHARDWORK_CHAIN__POLL_INTERVAL_MS", "100".into()),
        ("SHARDWORK_LOG", "info,sqlx=warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn spec(model_cid: &str) -> serde_json::Value {
    json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["query", "value"] },
        "training": { "epochs": 1, "learning_rate": 0.01, "batch_size": 8, "max_seq_len": 16, "seed": 3 },
        "shards": 3, "rounds": 1, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(), "stake": { "amount": "1000" }
    })
}

async fn count(db: &shardwork_migrations::sea_orm::DatabaseConnection, sql: &str) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            sql.to_owned(),
        ))
        .await
        .expect("query")
        .expect("a row");
    row.try_get_by_index::<i64>(0).expect("a count")
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_between_transition_and_publish_publishes_exactly_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let env = env(dir.path(), port);

    let mut api = Process::start(&["serve"], &env, &dir.path().join("api-1.log"));
    wait_healthy(&url, &mut api, Duration::from_secs(60)).await;
    let requester = Arc::new(
        ApiClient::new(
            &url,
            shardwork_contracts::dev_keys::dev_signers()[3].clone(),
            &[],
        )
        .unwrap(),
    );
    // Posting inspects the bundle, so the model is the real sample BERT, not a placeholder.
    let model_dir = dir.path().join("model");
    shardwork_trainer::sample::write_model(&model_dir, 3).unwrap();
    let model_cid = put_bundle(
        &ApiBlobs(requester.clone()),
        "model",
        &model_dir,
        &["config.json", "model.safetensors", "tokenizer.json"],
        None,
    )
    .await
    .unwrap();
    let dataset: String = (0..30)
        .map(|i| format!("{{\"text\":\"review {i}\",\"label\":{}}}\n", i % 2))
        .collect();
    let job = requester
        .post_job(&spec(&model_cid), Bytes::from(dataset))
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();

    // The follower opens the job and records round 1 for publishing; the outbox sleeps.
    let db = Database::connect(format!(
        "sqlite://{}?mode=rw",
        dir.path().join("shardwork.db").display()
    ))
    .await
    .unwrap();
    let pending =
        "SELECT COUNT(*) FROM job_events WHERE kind = 'round_opened' AND dispatched_at IS NULL";
    eventually(
        "round 1 recorded, not yet published",
        Duration::from_secs(30),
        || {
            let db = db.clone();
            async move { (count(&db, pending).await == 1).then_some(()) }
        },
    )
    .await;
    let queue = TableQueue::new(db.clone());
    // The API declared it; the handle in this process learns its options the same way.
    queue
        .declare(TASK_QUEUE, &shardwork_core::queue::QueueOptions::default())
        .await
        .unwrap();
    assert_eq!(queue.ready_count(TASK_QUEUE).await.unwrap(), 0);

    api.kill();

    // Restart: the outbox's first pass publishes what the crash left undone.
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api-2.log"));
    wait_healthy(&url, &mut api, Duration::from_secs(60)).await;
    eventually(
        "round 1 published after the restart",
        Duration::from_secs(30),
        || {
            let db = db.clone();
            async move { (count(&db, pending).await == 0).then_some(()) }
        },
    )
    .await;
    assert_eq!(queue.ready_count(TASK_QUEUE).await.unwrap(), 3);
    api.kill();

    // And once only: a further crash and restart publishes nothing again.
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api-3.log"));
    wait_healthy(&url, &mut api, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(queue.ready_count(TASK_QUEUE).await.unwrap(), 3);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM chain_transactions WHERE kind = 'mark_started'"
        )
        .await,
        1
    );
    let job = requester.job(job_id).await.unwrap();
    assert_eq!(job["status"], "open");
    api.kill();
    // Every restart kept the escrow it deployed first: the code on chain is this build's.
    let escrow = shardwork_tests::remembered_escrow(dir.path());
    assert_eq!(
        job["escrow_address"].as_str().map(str::to_lowercase),
        Some(format!("{escrow:#x}"))
    );

    // A data folder whose remembered escrow is another contract (here a token deployed on the
    // same chain; in practice an escrow of an older build) gets this build's escrow deployed,
    // not reused.
    let other = {
        use shardwork_contracts::Ledger;
        let ledger = shardwork_contracts::ledger::embedded::EmbeddedLedger::open(
            dir.path().join("chain.json"),
        )
        .unwrap();
        let deployer = shardwork_contracts::dev_keys::dev_addresses()[0];
        ledger
            .deploy_test_token(deployer, "Not An Escrow", "NAE")
            .await
            .unwrap()
    };
    let file = dir.path().join("escrow-31337.toml");
    let remembered: String = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|line| match line.strip_prefix("address = ") {
            Some(_) => format!("address = \"{other:#x}\"\n"),
            None => format!("{line}\n"),
        })
        .collect();
    std::fs::write(&file, remembered).unwrap();
    assert_eq!(shardwork_tests::remembered_escrow(dir.path()), other);
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api-4.log"));
    wait_healthy(&url, &mut api, Duration::from_secs(60)).await;
    let redeployed = shardwork_tests::remembered_escrow(dir.path());
    assert_ne!(redeployed, other);
    assert_ne!(redeployed, escrow);
    assert!(
        api.log_text().contains("another version of the contract"),
        "{}",
        api.log_text()
    );
    api.kill();
}
