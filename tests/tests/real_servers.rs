//! Real mode: `shardwork serve`, `shardwork-node validator` and two `shardwork-node worker`
//! processes on PostgreSQL, RabbitMQ and anvil (the embedded content store stands in for Kubo,
//! which has no binary here; the workers reach it through the API). A federated job (3 shards x
//! 2 rounds) is posted and funded; one worker is SIGKILLed as soon as it holds a lease,
//! mid-training, and later the API itself is SIGKILLed once round 2 is being trained and started
//! again.
//!
//! Then every reader of the finished job, on every endpoint that shows something of it, and
//! every object of the content store read directly, as anyone reads a Kubo node's: only what
//! the access rules allow is readable in the clear.
//!
//! Checked: the job still completes (the lease expires, the reaper republishes, the other worker
//! trains; the nodes ride out the API's absence); no task is lost or duplicated (one task per
//! shard and round, one accepted adapter each); the final adapter beats the base model; each
//! contributor is paid once on chain, and what anvil's escrow credits equals what the database
//! recorded.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use bytes::Bytes;
use serde_json::json;
use shardwork_client::ApiClient;
use shardwork_contracts::Ledger;
use shardwork_contracts::ledger::ETH;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::{EventView, JobEvent};
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_node::content::{ApiBlobs, put_bundle};
use shardwork_tests::fresh_database;
use shardwork_tests::{Process, eventually, free_port, wait_healthy};

#[tokio::test(flavor = "multi_thread")]
async fn separate_processes_complete_a_federated_job_despite_a_killed_worker_and_api() {
    let Some(pg) = service_url(Service::Postgres, "end to end on real servers") else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, "end to end on real servers") else {
        return;
    };
    let Some(anvil) = Anvil::start("end to end on real servers") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&pg).await;
    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let validator_address = shardwork_contracts::dev_keys::dev_addresses()[4];
    let common: Vec<(String, String)> = [
        ("SHARDWORK_DATABASE_URL", database_url.clone()),
        ("SHARDWORK_QUEUE__KIND", "rabbitmq".into()),
        ("SHARDWORK_QUEUE__AMQP_URL", amqp.clone()),
        ("SHARDWORK_CHAIN__KIND", "rpc".into()),
        ("SHARDWORK_CHAIN__RPC_URL", anvil.url().to_owned()),
        ("SHARDWORK_CHAIN__POLL_INTERVAL_MS", "200".into()),
        ("SHARDWORK_API_URL", api_url.clone()),
        ("SHARDWORK_LOG", "info,sqlx=warn,lapin=warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let with = |extra: &[(&str, String)]| {
        let mut env = common.clone();
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        env
    };
    let api_env = with(&[
        (
            "SHARDWORK_DATA_DIR",
            dir.path().join("api").display().to_string(),
        ),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        (
            "SHARDWORK_API__JWT_SECRET",
            "e2e-jwt-secret-of-at-least-32-bytes!!".into(),
        ),
        (
            "SHARDWORK_API__SEALING_SECRET",
            "e2e-sealing-secret-at-least-32-bytes!".into(),
        ),
        (
            "SHARDWORK_API__VALIDATOR_ADDRESSES",
            format!("[\"{validator_address:#x}\"]"),
        ),
        (
            "SHARDWORK_API__ADMIN_ADDRESSES",
            format!(
                "[\"{:#x}\"]",
                shardwork_contracts::dev_keys::dev_addresses()[9]
            ),
        ),
        ("SHARDWORK_API__LEASE_SECS", "8".into()),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
    ]);
    let mut api = Process::start(&["serve"], &api_env, &dir.path().join("api.log"));
    wait_healthy(&api_url, &mut api, Duration::from_secs(90)).await;
    // The nodes run the standalone `shardwork-node` binary (no database driver in it) and get
    // no database URL: the API, the queue and their key are all they have.
    let node = |role: &str, key: usize| {
        shardwork_tests::start_node(role, key, &api_url, &amqp, dir.path())
    };
    let _validator = node("validator", 4);
    let doomed = node("worker", 5);
    let _survivor = node("worker", 6);

    // The requester uploads the sample model through the API, posts and funds the job.
    let requester = Arc::new(
        ApiClient::new(
            &api_url,
            shardwork_contracts::dev_keys::dev_signers()[3].clone(),
            &[],
        )
        .unwrap(),
    );
    let model_dir = dir.path().join("model");
    shardwork_trainer::sample::write_model(&model_dir, 42).unwrap();
    let blobs = ApiBlobs(requester.clone());
    let model_cid = put_bundle(
        &blobs,
        "model",
        &model_dir,
        &["config.json", "model.safetensors", "tokenizer.json"],
        None,
    )
    .await
    .unwrap();
    let spec = json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"] },
        // Enough epochs that a task trains for seconds: worker 5 must still be training when
        // it is killed (with 3 epochs it could submit before the kill landed).
        "training": { "epochs": 24, "learning_rate": 0.01, "batch_size": 16, "max_seq_len": 16, "seed": 42 },
        "shards": 3, "rounds": 2, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(), "stake": { "amount": "1000000000000000000" }
    });
    let dataset = shardwork_trainer::sample::dataset(600, 11);
    let job = requester
        .post_job(&spec, Bytes::from(dataset.clone()))
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();

    // Kill worker 5 the moment it holds a lease.
    let doomed_address = format!("{:#x}", shardwork_contracts::dev_keys::dev_addresses()[5]);
    let claimed_by_doomed = |events: &[EventView]| {
        events.iter().any(
            |e| matches!(&e.event, JobEvent::TaskClaimed(c) if c.worker == doomed_address.as_str()),
        )
    };
    let r = requester.clone();
    eventually("worker 5 claims a task", Duration::from_secs(120), || {
        let r = r.clone();
        async move {
            let events = r.events(job_id, 0).await.ok()?;
            claimed_by_doomed(&events).then_some(())
        }
    })
    .await;
    doomed.kill();

    // Kill the API while round 2 trains, then start it again on the same database and port.
    let r = requester.clone();
    let before_kill = eventually("round 2 is being trained", Duration::from_secs(300), || {
        let r = r.clone();
        async move {
            let events = r.events(job_id, 0).await.ok()?;
            events
                .iter()
                .any(|e| matches!(&e.event, JobEvent::TaskClaimed(c) if c.round == 2))
                .then_some(events)
        }
    })
    .await;
    api.kill();
    assert!(
        !before_kill
            .iter()
            .any(|e| matches!(&e.event, JobEvent::Aggregated(a) if a.round == 2)),
        "the API must die before round 2 is merged, or the restart tests nothing"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut api = Process::start(&["serve"], &api_env, &dir.path().join("api-restarted.log"));
    wait_healthy(&api_url, &mut api, Duration::from_secs(90)).await;

    let status = shardwork_tests::job_end(&requester, job_id, Duration::from_secs(600))
        .await
        .as_str();
    assert_eq!(status, "completed", "api log:\n{}", api.log_text());
    let events = requester.events(job_id, 0).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, JobEvent::TaskRequeued(_))),
        "the killed worker's lease expired and its task went back"
    );
    let last_merge = events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            JobEvent::Aggregated(a) => Some(a),
            _ => None,
        })
        .unwrap();
    let (metric, base) = (last_merge.metric, last_merge.base_metric);
    assert!(metric > base + 0.1, "final {metric} vs base {base}");

    // Paid once each, and the chain agrees with the database.
    let payouts = events
        .iter()
        .find_map(|e| match &e.event {
            JobEvent::Completed(c) => Some(&c.payouts),
            _ => None,
        })
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for p in payouts {
        assert!(seen.insert(p.address.clone()), "paid twice: {p:?}");
    }
    let ledger = RpcLedger::connect(RpcConfig::new(anvil.url()), Vec::new())
        .await
        .unwrap();
    let escrow: Address = std::fs::read_to_string(dir.path().join("api").join("escrow-31337.toml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("address = "))
        .map(|v| v.trim_matches('"').parse().unwrap())
        .unwrap();
    let db = Database::connect(&database_url).await.unwrap();

    // Nothing lost, nothing doubled: one task per (round, shard), each with exactly one
    // accepted adapter.
    let count = |sql: &str| {
        let db = db.clone();
        let sql = sql.to_owned();
        async move {
            db.query_all_raw(Statement::from_string(db.get_database_backend(), sql))
                .await
                .unwrap()
                .iter()
                .map(|row| row.try_get_by_index::<i64>(0).unwrap())
                .collect::<Vec<i64>>()
        }
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM tasks").await,
        vec![6],
        "3 shards x 2 rounds"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM submissions WHERE verdict = 'accepted' \
             GROUP BY task_id ORDER BY task_id"
        )
        .await,
        vec![1; 6],
        "one accepted adapter per task; api logs:\n{}\n{}",
        std::fs::read_to_string(dir.path().join("api.log")).unwrap_or_default(),
        api.log_text()
    );
    for p in payouts {
        let address: Address = p.address.parse().unwrap();
        let on_chain = ledger.withdrawable(escrow, address, ETH).await.unwrap();
        assert_eq!(on_chain.to_string(), p.amount_wei);
        let row = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                format!(
                    "SELECT earnings_wei FROM workers WHERE address = '{}'",
                    p.address
                ),
            ))
            .await
            .unwrap()
            .unwrap();
        let in_db: String = row.try_get_by_index(0).unwrap();
        assert_eq!(in_db.parse::<U256>().unwrap(), on_chain);
    }
    operator_sees_and_withdraws_earnings(&api_url, anvil.url(), &ledger, escrow, &db).await;
    only_who_may_reads_the_finished_job(
        &api_url,
        &requester,
        job_id,
        &dir.path().join("api"),
        &dataset,
    )
    .await;
    api.kill();
}

/// The surviving worker's operator, with the CLI as it would type it: `shardwork worker
/// earnings` shows the credit the escrow holds, the on-chain reputation and the submissions the
/// database recorded; `withdraw --to` moves the credit to another address on chain; a second
/// withdraw sends nothing.
async fn operator_sees_and_withdraws_earnings(
    api_url: &str,
    rpc_url: &str,
    ledger: &RpcLedger,
    escrow: Address,
    db: &shardwork_migrations::sea_orm::DatabaseConnection,
) {
    let worker = shardwork_contracts::dev_keys::dev_addresses()[6];
    let env = [
        ("SHARDWORK_API_URL", api_url.to_owned()),
        (
            "SHARDWORK_NODE_KEY",
            shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS[6].to_owned(),
        ),
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["worker"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--rpc", rpc_url]);
        let out = shardwork_tests::shardwork(&all, &env);
        assert!(
            out.status.success(),
            "shardwork {all:?}: {}",
            shardwork_tests::text(&out.stderr)
        );
        shardwork_tests::text(&out.stdout)
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&run(&all)).unwrap()
    };

    let credit = ledger.withdrawable(escrow, worker, ETH).await.unwrap();
    assert!(credit > U256::ZERO, "the survivor trained and was paid");
    let earnings = json(&["earnings"]);
    assert_eq!(earnings["credit"][0]["asset"], "ETH", "{earnings}");
    assert_eq!(earnings["credit"][0]["amount"], credit.to_string());
    assert_eq!(
        earnings["reputation_bps"],
        ledger.reputation(escrow, worker).await.unwrap()
    );
    let accepted = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            format!(
                "SELECT COUNT(*) FROM submissions s JOIN workers w ON w.id = s.worker_id \
                 WHERE w.address = '{worker:#x}' AND s.verdict = 'accepted'"
            ),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap();
    assert!(accepted > 0);
    assert_eq!(
        earnings["profile"]["submissions"]["accepted"], accepted,
        "{earnings}"
    );
    let text = run(&["earnings"]);
    assert!(text.contains(&format!("({credit} wei)")), "{text}");

    let to = Address::repeat_byte(0x5a);
    assert_eq!(ledger.eth_balance(to).await.unwrap(), U256::ZERO);
    let withdrawn = json(&["withdraw", "--to", &format!("{to:#x}")]);
    assert_eq!(
        withdrawn["withdrawn"][0]["amount"],
        credit.to_string(),
        "{withdrawn}"
    );
    assert_eq!(ledger.eth_balance(to).await.unwrap(), credit);
    assert_eq!(
        ledger.withdrawable(escrow, worker, ETH).await.unwrap(),
        U256::ZERO
    );

    // Nothing left: the second withdraw sends no transaction and moves nothing.
    let http = shardwork_tests::http_client();
    let sent = || {
        shardwork_tests::rpc(
            &http,
            rpc_url,
            "eth_getTransactionCount",
            json!([format!("{worker:#x}"), "latest"]),
        )
    };
    let before = sent().await;
    let again = run(&["withdraw", "--to", &format!("{to:#x}")]);
    assert!(again.contains("nothing to withdraw"), "{again}");
    assert_eq!(sent().await, before, "no transaction sent");
    assert_eq!(ledger.eth_balance(to).await.unwrap(), credit);

    // The bond bonded jobs ask for (decisions/0044): bonded, shown, asked back, refused before
    // the escrow's delay, credited after it.
    let milli = U256::from(10u64).pow(U256::from(15));
    let bonded = json(&["bond", "--amount", &milli.to_string()]);
    assert_eq!(bonded["bond"]["active"], milli.to_string(), "{bonded}");
    assert_eq!(
        ledger.bond_of(escrow, worker, ETH).await.unwrap().active,
        milli
    );
    let earnings = json(&["earnings"]);
    assert_eq!(
        earnings["bonds"][0]["active"],
        milli.to_string(),
        "{earnings}"
    );
    let part = milli / U256::from(4);
    let unbonding = json(&["unbond", "--amount", &part.to_string()]);
    assert_eq!(unbonding["bond"]["active"], (milli - part).to_string());
    assert_eq!(unbonding["bond"]["unbonding"], part.to_string());
    let early = shardwork_tests::shardwork(&["worker", "complete-unbond", "--rpc", rpc_url], &env);
    assert!(!early.status.success());
    let said = shardwork_tests::text(&early.stderr);
    assert!(
        said.contains("unbonds at") && said.contains("try again then"),
        "{said}"
    );
    let too_much = shardwork_tests::shardwork(
        &[
            "worker",
            "unbond",
            "--amount",
            &milli.to_string(),
            "--rpc",
            rpc_url,
        ],
        &env,
    );
    assert!(!too_much.status.success());
    assert!(shardwork_tests::text(&too_much.stderr).contains("not within the active bond"));
    ledger.advance_time(14 * 24 * 3600 + 1).await.unwrap();
    let done = json(&["complete-unbond"]);
    assert_eq!(done["bond"]["unbonding"], "0", "{done}");
    assert_eq!(
        ledger.withdrawable(escrow, worker, ETH).await.unwrap(),
        part
    );
}

/// Every reader of the finished job, with and without a token: the requester, another
/// requester, a worker that trained for it, a worker that did not, the validator and an admin,
/// on every endpoint that shows something of the job; then every object in the content store,
/// read directly as anyone can read a Kubo node's: only job.json, the manifest, the shards, the
/// base model and bundle documents are in the clear, and no dataset record is in anything else.
async fn only_who_may_reads_the_finished_job(
    api_url: &str,
    requester: &ApiClient,
    job_id: uuid::Uuid,
    api_dir: &std::path::Path,
    dataset: &str,
) {
    let dev = shardwork_contracts::dev_keys::dev_signers();
    let client = |key: usize, roles: &'static [&'static str]| {
        ApiClient::new(api_url, dev[key].clone(), roles).unwrap()
    };
    // (reader, its token; None: no token)
    let mut readers: Vec<(&str, Option<String>)> = vec![("anonymous", None)];
    for (name, api) in [
        ("requester", client(3, &[])),
        ("another requester", client(7, &[])),
        ("a worker of the job", client(6, &["worker"])),
        ("a worker of no task", client(8, &["worker"])),
        ("validator", client(4, &["validator"])),
        ("admin", client(9, &["admin"])),
    ] {
        readers.push((name, Some(api.access_token().await.unwrap())));
    }
    let job = requester.job(job_id).await.unwrap();
    let cid = |field: &str| job[field].as_str().unwrap().to_owned();
    let (dataset_cid, held_out_cid) = (cid("dataset_cid"), cid("held_out_cid"));
    let j = format!("/v1/jobs/{job_id}");
    // Expected status per reader, in the order of `readers`.
    let table: Vec<(String, [u16; 7])> = vec![
        (j.clone(), [401, 200, 200, 200, 200, 200, 200]),
        (format!("{j}/result"), [401, 200, 403, 403, 403, 200, 200]),
        (
            format!("{j}/result/files/adapter_model.safetensors"),
            [401, 200, 403, 403, 403, 200, 200],
        ),
        (format!("{j}/events"), [401, 200, 403, 200, 403, 200, 200]),
        (
            format!("{j}/events/stream"),
            [401, 200, 403, 200, 403, 200, 200],
        ),
        (format!("{j}/progress"), [401, 200, 403, 403, 403, 200, 200]),
        (
            format!("{j}/held-out-key"),
            [401, 403, 403, 403, 403, 200, 403],
        ),
        (
            format!("/v1/content/{dataset_cid}"),
            [401, 200, 403, 403, 403, 200, 200],
        ),
        (
            format!("/v1/content/{held_out_cid}"),
            [401, 403, 403, 403, 403, 200, 200],
        ),
    ];
    let http = reqwest::Client::new();
    let mut bodies = std::collections::BTreeMap::new();
    for (path, expected) in &table {
        for ((reader, token), want) in readers.iter().zip(expected) {
            let mut request = http.get(format!("{api_url}{path}"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body = response.bytes().await.unwrap();
            assert_eq!(
                status,
                *want,
                "GET {path} as {reader}: {}",
                String::from_utf8_lossy(&body)
            );
            bodies.insert((path.clone(), *reader), body);
        }
    }

    // The worker sees its own tasks' events and the job's, nobody else's work; the requester
    // sees everyone's.
    let named = |reader: &str| -> std::collections::BTreeSet<String> {
        let page: serde_json::Value =
            serde_json::from_slice(&bodies[&(format!("{j}/events"), reader)]).unwrap();
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["payload"]["worker"].as_str().map(str::to_ascii_lowercase))
            .collect()
    };
    let worker = format!("{:#x}", shardwork_contracts::dev_keys::dev_addresses()[6]);
    assert_eq!(
        named("a worker of the job"),
        std::collections::BTreeSet::from([worker.clone()])
    );
    assert!(named("requester").len() >= 2, "{:?}", named("requester"));

    // The requester's download opens into the adapter PEFT loads.
    let out = tempfile::tempdir().unwrap();
    shardwork_node::content::fetch_result(requester, job_id, out.path())
        .await
        .unwrap();
    shardwork_trainer::peft::Adapter::load(out.path(), &candle_core::Device::Cpu).unwrap();

    // Every object in the store, read as a stranger reads a Kubo node.
    use shardwork_core::store::ContentStore;
    let store = shardwork_core::store::embedded::EmbeddedStore::open(
        shardwork_core::store::embedded::EmbeddedConfig::new(api_dir.join("blocks")),
    )
    .await
    .unwrap();
    let manifest: shardwork_core::protocol::ShardManifest =
        serde_json::from_slice(&requester.download(&cid("manifest_cid")).await.unwrap()).unwrap();
    let model = job["spec"]["base_model"]["cid"]
        .as_str()
        .unwrap()
        .to_owned();
    let model_bundle =
        shardwork_core::protocol::Bundle::decode(&requester.download(&model).await.unwrap())
            .unwrap();
    let mut public: std::collections::BTreeSet<String> = manifest
        .shards
        .iter()
        .map(|s| s.cid.to_string())
        .chain(model_bundle.files.values().map(|c| c.to_string()))
        .collect();
    public.extend([cid("manifest_cid"), cid("spec_cid"), model]);
    let records: Vec<&str> = dataset.lines().filter(|l| !l.trim().is_empty()).collect();
    let (mut sealed, mut bundles) = (0, 0);
    let mut seen_dataset = false;
    for entry in std::fs::read_dir(api_dir.join("blocks").join("pins")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let parsed = shardwork_core::store::parse_cid(&name).unwrap();
        let text = parsed.to_string();
        if public.iter().any(|p| {
            shardwork_core::store::parse_cid(p)
                .map(|c| c.hash() == parsed.hash())
                .unwrap_or(false)
        }) {
            continue;
        }
        let bytes = store.get_bytes(&parsed, 1 << 30).await.unwrap();
        if let Ok(bundle) = shardwork_core::protocol::Bundle::decode(&bytes) {
            assert!(
                bundle.sealed && bundle.kind == "adapter",
                "{text} is a bundle in the clear that is not a sealed adapter's: {bundle:?}"
            );
            bundles += 1;
            continue;
        }
        assert!(
            serde_json::from_slice::<serde_json::Value>(&bytes).is_err(),
            "{text} is JSON in the clear"
        );
        let haystack = String::from_utf8_lossy(&bytes);
        for record in &records {
            assert!(
                !haystack.contains(record),
                "{text} holds a dataset record in the clear"
            );
        }
        seen_dataset |= parsed.hash()
            == shardwork_core::store::parse_cid(&dataset_cid)
                .unwrap()
                .hash();
        sealed += 1;
    }
    assert!(seen_dataset, "the uploaded dataset is stored, sealed");
    // At least: the dataset, the held-out set, and each of 6 accepted submissions' and 2 merges'
    // two files.
    assert!(sealed >= 2 + 2 * 8, "{sealed} sealed objects");
    assert!(bundles >= 8, "{bundles} adapter bundles");
}
