//! Issue 47, item 2: three validators share one deployment. One `shardwork serve` on PostgreSQL,
//! RabbitMQ and anvil; three `shardwork-node validator` processes (dev accounts 4, 8, 9) and
//! three workers (5, 6, 7); a 12-shard, 2-round job of the sample model. While a proof of
//! training is being replayed by validator 0 (its lease is in the database, the proof still
//! pending), validator 0 is SIGKILLed; it comes back once another validator has decided that
//! proof.
//!
//! Checked: the job completes; every submission has exactly one verdict and every proof due
//! exactly one outcome (one event each, none lost, none doubled); the killed replay was decided
//! by another validator after its lease lapsed; the replays are spread over all three
//! validators (counted); the operator sent each chain call once and none reverted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shardwork_client::ApiClient;
use shardwork_contracts::dev_keys::{dev_addresses, dev_signers};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::{JobEvent, JobStatus};
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use shardwork_tests::{Process, eventually, free_port, fresh_database, wait_healthy};

/// The validators' development accounts: 4 (the one every other test runs), 8 and 9.
const VALIDATORS: [usize; 3] = [4, 8, 9];
const WORKERS: [usize; 3] = [5, 6, 7];
/// Short validator leases, so the killed validator's replay is re-leased within seconds.
const VALIDATOR_LEASE_SECS: u64 = 3;

async fn strings(db: &DatabaseConnection, sql: &str) -> Vec<Vec<Option<String>>> {
    db.query_all_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (0..)
                .map_while(|i| row.try_get_by_index::<Option<String>>(i).ok())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_validators_share_a_job_and_lose_nothing_when_one_is_killed_mid_replay() {
    let suite = "three validators on real servers";
    let Some(pg) = service_url(Service::Postgres, suite) else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, suite) else {
        return;
    };
    let Some(anvil) = Anvil::start(suite) else {
        return;
    };
    let began = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&pg).await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let addresses = dev_addresses();
    let validator_address = |key: usize| format!("{:#x}", addresses[key]);
    let mut env = shardwork_tests::replica_env(
        &database_url,
        &dir.path().join("api"),
        &amqp,
        anvil.url(),
        port,
    );
    env.retain(|(k, _)| k != "SHARDWORK_API__VALIDATOR_ADDRESSES");
    env.push((
        "SHARDWORK_API__VALIDATOR_ADDRESSES".into(),
        format!(
            "[{}]",
            VALIDATORS
                .iter()
                .map(|&k| format!("\"{}\"", validator_address(k)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    ));
    env.push((
        "SHARDWORK_API__VALIDATOR_LEASE_SECS".into(),
        VALIDATOR_LEASE_SECS.to_string(),
    ));
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api.log"));
    wait_healthy(&url, &mut api, Duration::from_secs(90)).await;
    let start_validator = |key: usize, n: usize| {
        shardwork_tests::start_node_logging_to(
            "validator",
            key,
            &url,
            &amqp,
            dir.path(),
            &format!("validator-{key}-{n}.log"),
        )
    };
    let mut validators: BTreeMap<usize, Process> = VALIDATORS
        .iter()
        .map(|&k| (k, start_validator(k, 1)))
        .collect();
    let _workers: Vec<Process> = WORKERS
        .iter()
        .map(|&k| shardwork_tests::start_node("worker", k, &url, &amqp, dir.path()))
        .collect();

    let requester = Arc::new(ApiClient::new(&url, dev_signers()[3].clone(), &[]).unwrap());
    let model_cid = shardwork_tests::put_sample_model(&requester, dir.path()).await;
    let mut spec = shardwork_tests::sample_spec(&model_cid, 12, 2);
    // As in the chaos harness: this tiny model is near its best after round 1, and an honest
    // round-2 update of a small shard may score a little below the merged start.
    spec["validation"] = serde_json::json!({ "min_gain": -0.05 });
    let dataset = shardwork_trainer::sample::dataset(1_200, 7);
    let job = requester
        .post_job(&spec, Bytes::from(dataset))
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();

    // Validator 0 is killed while it replays a proof: its lease is live and the proof pending.
    // Not before it has recorded one: the job may well be done with its replays by the time the
    // restarted validator is back, and every validator must have replayed some.
    let db = Database::connect(&database_url).await.unwrap();
    let victim = VALIDATORS[0];
    let mut killed_proof = None;
    let mut restarts = 1;
    while killed_proof.is_none() {
        assert!(
            began.elapsed() < Duration::from_secs(420),
            "validator {victim} was never caught replaying a proof"
        );
        let held = strings(
            &db,
            &format!(
                "SELECT work_key FROM validator_leases WHERE holder = '{}' \
                 AND work_key LIKE 'proof:%'",
                validator_address(victim)
            ),
        )
        .await;
        let Some(key) = held.first().and_then(|r| r[0].clone()) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let recorded = strings(
            &db,
            &format!(
                "SELECT id::text FROM submissions WHERE proof_checked_by = '{}'",
                validator_address(victim)
            ),
        )
        .await;
        if recorded.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        validators.remove(&victim).unwrap().kill();
        // Recording a proof drops its lease in the same transaction: a lease still there after
        // the kill is a replay the kill cut short.
        let still = strings(
            &db,
            &format!("SELECT work_key FROM validator_leases WHERE work_key = '{key}'"),
        )
        .await;
        let submission = key.trim_start_matches("proof:").to_owned();
        if still.is_empty() {
            println!(
                "[{:>6.1?}] the replay of {submission} ended just before the kill; again",
                began.elapsed()
            );
            restarts += 1;
            validators.insert(victim, start_validator(victim, restarts));
            continue;
        }
        println!(
            "[{:>6.1?}] SIGKILL validator {victim} while it replays the proof of {submission}",
            began.elapsed()
        );
        killed_proof = Some(submission);
    }
    let killed_proof = killed_proof.unwrap();
    let decided_by = eventually(
        "another validator decides the killed replay",
        Duration::from_secs(120),
        || async {
            let row = strings(
                &db,
                &format!(
                    "SELECT proof_status, proof_checked_by FROM submissions WHERE id = '{killed_proof}'"
                ),
            )
            .await;
            let row = row.first()?;
            (row[0].as_deref() != Some("pending")).then(|| row[1].clone())?
        },
    )
    .await;
    println!(
        "[{:>6.1?}] {decided_by} decided it after the lease lapsed",
        began.elapsed()
    );
    assert_ne!(decided_by, validator_address(victim));
    restarts += 1;
    validators.insert(victim, start_validator(victim, restarts));

    let status = shardwork_tests::job_end(&requester, job_id, Duration::from_secs(600)).await;
    assert_eq!(status, JobStatus::Completed, "job {job_id}");

    // Exactly one verdict per submission and one outcome per proof due, as events and as rows.
    let events = requester.events(job_id, 0).await.unwrap();
    let mut verdicts: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
    let mut proofs: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
    for e in &events {
        match &e.event {
            JobEvent::Verdict(v) => *verdicts.entry(v.submission_id).or_default() += 1,
            JobEvent::ProofChecked(p) => *proofs.entry(p.submission_id).or_default() += 1,
            _ => {}
        }
    }
    let rows = strings(
        &db,
        &format!(
            "SELECT s.id::text, s.verdict, s.validated_by, s.proof_status, s.proof_checked_by \
             FROM submissions s JOIN tasks t ON t.id = s.task_id WHERE t.job_id = '{job_id}'"
        ),
    )
    .await;
    assert!(
        rows.len() >= 24,
        "12 shards x 2 rounds: {} submissions",
        rows.len()
    );
    let mut scored_by: BTreeMap<String, usize> = BTreeMap::new();
    let mut replayed_by: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        let id: uuid::Uuid = row[0].as_deref().unwrap().parse().unwrap();
        assert_ne!(
            row[1].as_deref(),
            Some("pending"),
            "submission {id} was judged"
        );
        assert_eq!(verdicts.get(&id), Some(&1), "one verdict event for {id}");
        *scored_by.entry(row[2].clone().unwrap()).or_default() += 1;
        match row[3].as_deref() {
            Some("passed") | Some("failed") => {
                assert_eq!(proofs.get(&id), Some(&1), "one proof event for {id}");
                *replayed_by.entry(row[4].clone().unwrap()).or_default() += 1;
            }
            other => {
                assert_eq!(other, Some("not_due"), "no proof of {id} left pending");
                assert!(!proofs.contains_key(&id), "no proof event for {id}");
            }
        }
    }
    println!("verdicts per validator: {scored_by:?}; proof replays per validator: {replayed_by:?}");
    for &k in &VALIDATORS {
        assert!(
            replayed_by
                .get(&validator_address(k))
                .is_some_and(|&n| n > 0),
            "validator {k} replayed proofs: {replayed_by:?}"
        );
    }
    // Every chain call once, none reverted.
    let http = shardwork_tests::http_client();
    let calls = shardwork_tests::distinct_successful_calls(&http, anvil.url(), addresses[1]).await;
    // Leases settle in the database: nothing is left held once the job is done.
    let left = strings(
        &db,
        "SELECT work_key FROM validator_leases WHERE expires_at > now()",
    )
    .await;
    assert!(left.is_empty(), "leases left: {left:?}");
    println!(
        "3 validators, 12 shards x 2 rounds: {} submissions, {calls} operator calls each once, in {:.0?}",
        rows.len(),
        began.elapsed()
    );
}
