//! API replicas: three `shardwork serve` processes on one PostgreSQL database, one RabbitMQ and
//! one anvil, with a validator and two workers (`shardwork-node`) spread over two of them. The
//! first replica takes the background lease (outbox, chain follower, reaper); the others stand
//! by. A federated job (3 shards x 2 rounds) is posted through one standby and funded through the
//! other; once round 1's first adapter is in, the leader is SIGKILLed.
//!
//! Checked: a standby takes the lease within seconds and reports it on `/readyz`; the job
//! completes; the chain saw each of the operator's calls for the job once and none reverted (no
//! duplicate `markStarted` or payout, no nonce collision); one accepted adapter per task; each
//! contributor's on-chain credit equals the database's record.
//!
//! The replicas share one data folder, as replicas on one host share a volume: the embedded
//! content store and the development escrow's address are read from it (across hosts, Kubo and
//! `chain.escrow_address` take their place).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use bytes::Bytes;
use serde_json::Value;
use shardwork_client::ApiClient;
use shardwork_contracts::Ledger;
use shardwork_contracts::dev_keys::{dev_addresses, dev_signers};
use shardwork_contracts::ledger::ETH;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::JobEvent;
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_tests::{Process, eventually, free_port, fresh_database, wait_healthy};

/// What `/readyz` says of the replica's background role, or `None` if it does not answer.
async fn background_role(http: &reqwest::Client, url: &str) -> Option<String> {
    let body: Value = http
        .get(format!("{url}/readyz"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    body["background"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn three_api_replicas_finish_a_job_after_the_background_leader_is_killed() {
    let suite = "API replicas on real servers";
    let Some(pg) = service_url(Service::Postgres, suite) else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, suite) else {
        return;
    };
    let Some(anvil) = Anvil::start(suite) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let shared_data = dir.path().join("api");
    let database_url = fresh_database(&pg).await;
    let ports = [free_port(), free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let replica_env = |port: u16| {
        shardwork_tests::replica_env(&database_url, &shared_data, &amqp, anvil.url(), port)
    };
    let start = |i: usize| {
        Process::start(
            &["serve"],
            &replica_env(ports[i]),
            &dir.path().join(format!("api-{i}.log")),
        )
    };
    let http = shardwork_tests::http_client();

    // Replica 0 comes up alone (it deploys the development escrow into the shared folder) and
    // takes the lease; 1 and 2 then stand by.
    let mut leader = start(0);
    wait_healthy(&urls[0], &mut leader, Duration::from_secs(90)).await;
    eventually("replica 0 leads", Duration::from_secs(15), || {
        let (http, url) = (http.clone(), urls[0].clone());
        async move { (background_role(&http, &url).await? == "leader").then_some(()) }
    })
    .await;
    let mut standbys = [start(1), start(2)];
    for (i, process) in standbys.iter_mut().enumerate() {
        wait_healthy(&urls[i + 1], process, Duration::from_secs(90)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for url in &urls[1..] {
        assert_eq!(
            background_role(&http, url).await.as_deref(),
            Some("standby")
        );
    }

    let node = |role: &str, key: usize, api_url: &str| {
        shardwork_tests::start_node(role, key, api_url, &amqp, dir.path())
    };
    let _validator = node("validator", 4, &urls[1]);
    let _worker_5 = node("worker", 5, &urls[1]);
    let _worker_6 = node("worker", 6, &urls[2]);

    // The requester posts through replica 2 and funds through replica 1: neither runs the
    // outbox or the follower, so the job moves only because the leader does its work.
    let requester_on =
        |url: &str| Arc::new(ApiClient::new(url, dev_signers()[3].clone(), &[]).unwrap());
    let requester = requester_on(&urls[2]);
    let model_cid = shardwork_tests::put_sample_model(&requester, dir.path()).await;
    let spec = shardwork_tests::sample_spec(&model_cid, 3, 2);
    let job = requester
        .post_job(
            &spec,
            Bytes::from(shardwork_trainer::sample::dataset(600, 11)),
        )
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester_on(&urls[1]).dev_fund(job_id).await.unwrap();

    // Round 1's first adapter is in: the leader has started the job on chain and published its
    // tasks, and has verdicts, a merge, round 2 and the payout still to carry out.
    let r = requester.clone();
    eventually(
        "round 1's first submission",
        Duration::from_secs(180),
        || {
            let r = r.clone();
            async move {
                let events = r.events(job_id, 0).await.ok()?;
                events
                    .iter()
                    .any(|e| matches!(&e.event, JobEvent::Submitted(s) if s.round == 1))
                    .then_some(())
            }
        },
    )
    .await;
    leader.kill();
    let killed = Instant::now();
    let successor = eventually("a standby takes the lease", Duration::from_secs(15), || {
        let http = http.clone();
        let urls = urls.clone();
        async move {
            for (i, url) in urls.iter().enumerate().skip(1) {
                if background_role(&http, url).await.as_deref() == Some("leader") {
                    return Some(i);
                }
            }
            None
        }
    })
    .await;
    let handover = killed.elapsed();
    println!("replica {successor} took the background lease {handover:?} after the kill");

    let status = shardwork_tests::job_end(&requester, job_id, Duration::from_secs(400))
        .await
        .as_str();
    let logs = || {
        (0..3)
            .map(|i| {
                std::fs::read_to_string(dir.path().join(format!("api-{i}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert_eq!(status, "completed", "replica logs:\n{}", logs());
    // Only one of the two standbys ever led.
    let led: Vec<usize> = standbys
        .iter()
        .enumerate()
        .filter(|(_, p)| p.log_text().contains("background lease taken"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(led, vec![successor]);

    // The operator's transactions: each call for the job once, none reverted: `markStarted`,
    // `recordProgress` after round 1 (what an abort would pay) and one `completeFederatedJob`.
    let sent =
        shardwork_tests::distinct_successful_calls(&http, anvil.url(), dev_addresses()[1]).await;
    assert_eq!(sent, 3, "operator transactions");

    let db = Database::connect(&database_url).await.unwrap();
    let counts = |sql: &'static str| {
        let db = db.clone();
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
        counts(
            "SELECT COUNT(*) FROM submissions WHERE verdict = 'accepted' \
             GROUP BY task_id ORDER BY task_id"
        )
        .await,
        vec![1; 6],
        "one accepted adapter per task"
    );
    let events = requester.events(job_id, 0).await.unwrap();
    let payouts = events
        .iter()
        .find_map(|e| match &e.event {
            JobEvent::Completed(c) => Some(c.payouts.clone()),
            _ => None,
        })
        .unwrap();
    let escrow = shardwork_tests::remembered_escrow(&shared_data);
    let ledger = RpcLedger::connect(RpcConfig::new(anvil.url()), Vec::new())
        .await
        .unwrap();
    let mut paid = BTreeSet::new();
    for p in &payouts {
        assert!(paid.insert(p.address.clone()), "paid twice: {p:?}");
        let address: Address = p.address.parse().unwrap();
        let credit = ledger.withdrawable(escrow, address, ETH).await.unwrap();
        assert_eq!(credit, p.amount_wei.parse::<U256>().unwrap());
    }
    assert!(!payouts.is_empty());
}

/// How many of `count` unauthenticated requests to `url` (optionally claiming to come from
/// `forwarded_for`) were refused with 429; every other answer must be the 401 of no token.
async fn refused_of(
    http: &reqwest::Client,
    url: &str,
    count: usize,
    forwarded_for: Option<&str>,
) -> usize {
    let mut refused = 0;
    for _ in 0..count {
        let mut request = http.get(format!("{url}/v1/auth/me"));
        if let Some(ip) = forwarded_for {
            request = request.header("x-forwarded-for", ip);
        }
        let reply = request.send().await.expect("the replica answers");
        match reply.status().as_u16() {
            429 => {
                let retry: i64 = reply.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=60).contains(&retry), "retry-after {retry}");
                refused += 1;
            }
            401 => {}
            other => panic!("unexpected {other} from {url}"),
        }
    }
    refused
}

/// Two `shardwork serve` replicas on one PostgreSQL database count one caller's requests
/// together: 30 to each against a limit of 40 admits at most 40 in all (at most one more
/// refused early: the block replica 0 holds unspent). The second replica trusts 127.0.0.1 as
/// its proxy, so a forwarded client address there is a caller of its own; on the first, which
/// trusts no proxy, the same header changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_share_each_callers_rate_limit() {
    let suite = "API replicas on real servers (rate limit)";
    let Some(pg) = service_url(Service::Postgres, suite) else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, suite) else {
        return;
    };
    let Some(anvil) = Anvil::start(suite) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let shared_data = dir.path().join("api");
    let database_url = fresh_database(&pg).await;
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let start = |i: usize, trusted_proxies: &str| {
        let mut env: Vec<(String, String)> =
            shardwork_tests::replica_env(&database_url, &shared_data, &amqp, anvil.url(), ports[i])
                .into_iter()
                .filter(|(k, _)| k != "SHARDWORK_API__RATE_LIMIT_PER_MINUTE")
                .collect();
        env.push(("SHARDWORK_API__RATE_LIMIT_PER_MINUTE".into(), "40".into()));
        env.push((
            "SHARDWORK_API__TRUSTED_PROXIES".into(),
            trusted_proxies.into(),
        ));
        Process::start(&["serve"], &env, &dir.path().join(format!("api-{i}.log")))
    };
    let mut first = start(0, "[]");
    wait_healthy(&urls[0], &mut first, Duration::from_secs(90)).await;
    let mut second = start(1, r#"["127.0.0.1"]"#);
    wait_healthy(&urls[1], &mut second, Duration::from_secs(90)).await;
    let http = shardwork_tests::http_client();

    // The windows are calendar minutes: start early in one so that all of it falls inside.
    let second_of_minute = chrono::Utc::now().timestamp().rem_euclid(60);
    if second_of_minute > 40 {
        tokio::time::sleep(Duration::from_secs((61 - second_of_minute) as u64)).await;
    }
    let started_minute = chrono::Utc::now().timestamp().div_euclid(60);

    let refused_first = refused_of(&http, &urls[0], 30, None).await;
    let refused_second = refused_of(&http, &urls[1], 30, None).await;
    // A client behind the trusted proxy is counted apart; one that merely sends the header to
    // the replica that trusts no proxy is still 127.0.0.1.
    let refused_forwarded = refused_of(&http, &urls[1], 5, Some("203.0.113.9")).await;
    let refused_spoofed = refused_of(&http, &urls[0], 1, Some("203.0.113.10")).await;
    assert_eq!(
        chrono::Utc::now().timestamp().div_euclid(60),
        started_minute,
        "the requests took more than the rest of the minute"
    );

    assert_eq!(refused_first, 0, "the first 30 are within the limit");
    let admitted = 60 - refused_first - refused_second;
    assert!(
        (39..=40).contains(&admitted),
        "{admitted} of 60 admitted across the replicas against a limit of 40"
    );
    assert_eq!(
        refused_forwarded, 0,
        "a forwarded client is a caller of its own"
    );
    assert_eq!(
        refused_spoofed, 1,
        "an untrusted X-Forwarded-For is not read"
    );
}
