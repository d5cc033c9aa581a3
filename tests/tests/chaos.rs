//! Chaos: the marketplace on real servers (PostgreSQL, RabbitMQ, anvil) in separate processes
//! — two API replicas, the validator, three workers — with several federated jobs in flight,
//! while a seeded schedule SIGKILLs a random process (and restarts it) or drops the RabbitMQ
//! connections of a random one, at random moments. Reproducible: the same seed gives the same
//! schedule (the moments the kills land in the system's work still vary with timing).
//!
//! At the end, for every job posted: it completed or was refunded; every task of a completed
//! job has exactly one accepted adapter (a refunded job's at most one); no contributor is paid
//! twice and each one's on-chain credit equals the database's record; the escrow holds exactly
//! what it owes (the sum of every account's credit); the operator sent each call once and none
//! reverted; the task queue is left empty.
//!
//! The CI profile: 2 jobs, 8 disruptions, seed 1. The long profile is `scripts/chaos` (at
//! least 50 disruptions, more jobs): `SHARDWORK_CHAOS_KILLS`, `SHARDWORK_CHAOS_JOBS` and
//! `SHARDWORK_CHAOS_SEED` set it; it prints its figures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::U256;
use bytes::Bytes;
use shardwork_client::ApiClient;
use shardwork_contracts::Ledger;
use shardwork_contracts::dev_keys::{dev_addresses, dev_signers};
use shardwork_contracts::ledger::ETH;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::{JobEvent, JobStatus, TASK_QUEUE};
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_tests::{Process, eventually, free_port, fresh_database, wait_healthy};

/// xorshift64*: a seeded schedule without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Api(usize),
    Validator,
    Worker(usize),
}

const APIS: usize = 2;
const WORKERS: usize = 3;
const ROLES: [Role; APIS + 1 + WORKERS] = [
    Role::Api(0),
    Role::Api(1),
    Role::Validator,
    Role::Worker(0),
    Role::Worker(1),
    Role::Worker(2),
];

/// The processes, restartable by role.
struct Cluster {
    dir: PathBuf,
    amqp: String,
    api_env: Vec<Vec<(String, String)>>,
    urls: Vec<String>,
    running: BTreeMap<Role, Process>,
    starts: BTreeMap<Role, usize>,
}

impl Cluster {
    fn log(&self, role: Role, n: usize) -> PathBuf {
        self.dir
            .join(format!("{role:?}-{n}.log").replace(['(', ')'], ""))
    }

    /// Each node talks to one replica (as behind a load balancer with sticky sessions); the
    /// validator and worker 0 to replica 1, the others to replica 0.
    fn api_of(&self, role: Role) -> &str {
        match role {
            Role::Validator | Role::Worker(0) => &self.urls[1],
            _ => &self.urls[0],
        }
    }

    async fn start(&mut self, role: Role) {
        let n = {
            let n = self.starts.entry(role).or_default();
            *n += 1;
            *n
        };
        let log = self.log(role, n);
        let process = match role {
            Role::Api(i) => {
                let mut p = Process::start(&["serve"], &self.api_env[i], &log);
                wait_healthy(&self.urls[i], &mut p, Duration::from_secs(90)).await;
                p
            }
            Role::Validator | Role::Worker(_) => {
                let (name, key) = match role {
                    Role::Validator => ("validator", 4),
                    Role::Worker(i) => ("worker", 5 + i),
                    Role::Api(_) => unreachable!(),
                };
                let log = log.file_name().unwrap().to_string_lossy().into_owned();
                shardwork_tests::start_node_logging_to(
                    name,
                    key,
                    self.api_of(role),
                    &self.amqp,
                    &self.dir,
                    &log,
                )
            }
        };
        self.running.insert(role, process);
    }

    fn kill(&mut self, role: Role) {
        if let Some(p) = self.running.remove(&role) {
            p.kill();
        }
    }

    /// Closes the RabbitMQ connections the role's process holds (found by their local ports);
    /// how many were closed.
    fn drop_queue_connections(&self, role: Role) -> usize {
        let Some(process) = self.running.get(&role) else {
            return 0;
        };
        let pid = process.child.id();
        let Ok(out) = Command::new("ss").args(["-tnpH", "dport = :5672"]).output() else {
            return 0;
        };
        let ports: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("pid={pid},")))
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(3)?
                    .rsplit(':')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        // `close_connection` takes the connection's Erlang pid, listed beside its name
        // ("127.0.0.1:<local port> -> 127.0.0.1:5672").
        let Ok(out) = Command::new("rabbitmqctl")
            .args([
                "list_connections",
                "-q",
                "--no-table-headers",
                "pid",
                "name",
            ])
            .output()
        else {
            return 0;
        };
        let mut closed = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((connection, name)) = line.split_once('\t') else {
                continue;
            };
            if ports
                .iter()
                .any(|port| name.trim().starts_with(&format!("127.0.0.1:{port} ")))
                && Command::new("rabbitmqctl")
                    .args(["close_connection", connection.trim(), "chaos"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            {
                closed += 1;
            }
        }
        closed
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_kills_and_disconnects_lose_nothing_and_pay_no_one_twice() {
    let suite = "chaos on real servers";
    let Some(pg) = service_url(Service::Postgres, suite) else {
        return;
    };
    let Some(amqp) = service_url(Service::RabbitMq, suite) else {
        return;
    };
    let Some(anvil) = Anvil::start(suite) else {
        return;
    };
    let disruptions = setting("SHARDWORK_CHAOS_KILLS", 8) as usize;
    let jobs_in_flight = setting("SHARDWORK_CHAOS_JOBS", 2) as usize;
    let seed = setting("SHARDWORK_CHAOS_SEED", 1);
    let mut rng = Rng::new(seed);
    let began = Instant::now();

    let dir = tempfile::tempdir().unwrap();
    let shared_data = dir.path().join("api");
    let database_url = fresh_database(&pg).await;
    let ports: Vec<u16> = (0..APIS).map(|_| free_port()).collect();
    let api_env = ports
        .iter()
        .map(|port| {
            shardwork_tests::replica_env(&database_url, &shared_data, &amqp, anvil.url(), *port)
        })
        .collect();
    let mut cluster = Cluster {
        dir: dir.path().to_owned(),
        amqp: amqp.clone(),
        api_env,
        urls: ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect(),
        running: BTreeMap::new(),
        starts: BTreeMap::new(),
    };
    // Replica 0 first: it deploys the development escrow the other reads.
    for role in ROLES {
        cluster.start(role).await;
    }

    let requester =
        Arc::new(ApiClient::new(&cluster.urls[1], dev_signers()[3].clone(), &[]).unwrap());
    let model_cid = shardwork_tests::put_sample_model(&requester, dir.path()).await;
    let post = |n: u64| {
        let requester = requester.clone();
        let model_cid = model_cid.clone();
        async move {
            let mut spec = shardwork_tests::sample_spec(&model_cid, 3, 2);
            // This tiny model is near its best after round 1 (0.95-0.97 held out), and an
            // honest round-2 update of one shard often scores a few examples below the merged
            // start, which the default rule rejects: three such rejections end the job
            // refunded. The requester of these jobs accepts updates up to 5 points below.
            spec["validation"] = serde_json::json!({ "min_gain": -0.05 });
            let dataset = shardwork_trainer::sample::dataset(600, 100 + n);
            // Posting and funding go through whichever replica is up; a refused or cut-off
            // request is tried again (a repeated post makes a second job: it is counted too).
            loop {
                match requester
                    .post_job(&spec, Bytes::from(dataset.clone()))
                    .await
                {
                    Ok(job) => {
                        let id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
                        // A funding whose answer was lost may still have been sent: wait
                        // for the follower to see it before funding again, or the escrow
                        // would hold a second stake for the job.
                        while requester.dev_fund(id).await.is_err() {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            if requester
                                .job(id)
                                .await
                                .is_ok_and(|j| j["status"].as_str() != Some("awaiting_funding"))
                            {
                                break;
                            }
                        }
                        return id;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
    };
    let mut jobs: Vec<uuid::Uuid> = Vec::new();
    for n in 0..jobs_in_flight as u64 {
        jobs.push(post(n).await);
    }

    // The schedule: every 1-5 s, one disruption; a killed process comes back after 0.2-3 s.
    let mut done = 0;
    let mut kills: BTreeMap<Role, usize> = BTreeMap::new();
    let mut disconnects = 0;
    while done < disruptions {
        tokio::time::sleep(rng.millis(1_000, 5_000)).await;
        let role = ROLES[rng.below(ROLES.len() as u64) as usize];
        if rng.below(4) == 0 && !matches!(role, Role::Validator) {
            let closed = cluster.drop_queue_connections(role);
            println!(
                "[{:>6.1?}] dropped {closed} RabbitMQ connection(s) of {role:?}",
                began.elapsed()
            );
            disconnects += 1;
        } else {
            cluster.kill(role);
            println!("[{:>6.1?}] SIGKILL {role:?}", began.elapsed());
            *kills.entry(role).or_default() += 1;
            tokio::time::sleep(rng.millis(200, 3_000)).await;
            cluster.start(role).await;
        }
        done += 1;
        // Keep jobs in flight while the schedule runs.
        let mut open = 0;
        for id in &jobs {
            match requester.job(*id).await {
                Ok(job)
                    if job["status"]
                        .as_str()
                        .and_then(JobStatus::parse)
                        .is_some_and(JobStatus::is_terminal) => {}
                _ => open += 1,
            }
        }
        for _ in open..jobs_in_flight {
            let n = jobs.len() as u64;
            jobs.push(post(n).await);
        }
    }
    let chaos_ended = began.elapsed();

    // Every job ends.
    let mut statuses = BTreeMap::new();
    for id in &jobs {
        let status = shardwork_tests::job_end(&requester, *id, Duration::from_secs(600))
            .await
            .as_str()
            .to_owned();
        assert_ne!(status, "cancelled", "job {id}");
        statuses.insert(*id, status);
    }

    // The task queue drains: nothing left, nothing held.
    eventually(
        "the task queue is empty",
        Duration::from_secs(60),
        || async {
            let out = Command::new("rabbitmqctl")
                .args([
                    "list_queues",
                    "-q",
                    "--no-table-headers",
                    "name",
                    "messages",
                ])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| {
                    let mut f = l.split_whitespace();
                    (f.next()? == TASK_QUEUE).then(|| f.next()?.parse::<u64>().ok())?
                })
                .is_some_and(|n| n == 0)
                .then_some(())
        },
    )
    .await;

    let db = Database::connect(&database_url).await.unwrap();
    let rows = |sql: String| {
        let db = db.clone();
        async move {
            db.query_all_raw(Statement::from_string(db.get_database_backend(), sql))
                .await
                .unwrap()
        }
    };
    // Accepted adapters: one per task of a completed job, at most one per task of any job.
    for (id, status) in &statuses {
        let accepted: Vec<i64> = rows(format!(
            "SELECT (SELECT COUNT(*) FROM submissions s WHERE s.task_id = t.id \
             AND s.verdict = 'accepted') FROM tasks t WHERE t.job_id = '{id}'"
        ))
        .await
        .iter()
        .map(|r| r.try_get_by_index::<i64>(0).unwrap())
        .collect();
        assert!(accepted.iter().all(|&n| n <= 1), "job {id}: {accepted:?}");
        if status == "completed" {
            assert_eq!(
                accepted,
                vec![1; 6],
                "job {id}: one accepted adapter per task"
            );
        }
    }
    // Paid once each per job; the chain's credits equal the database's; the escrow holds
    // exactly the credits it owes (no stake is left open).
    let escrow = shardwork_tests::remembered_escrow(&shared_data);
    let ledger = RpcLedger::connect(RpcConfig::new(anvil.url()), Vec::new())
        .await
        .unwrap();
    for id in statuses.keys() {
        let events = requester.events(*id, 0).await.unwrap();
        for e in &events {
            if let JobEvent::Refunded(r) = &e.event {
                println!("job {id} refunded: {:?}", r.reason);
            }
        }
        if let Some(payouts) = events.iter().find_map(|e| match &e.event {
            JobEvent::Completed(c) => Some(&c.payouts),
            _ => None,
        }) {
            let mut paid = BTreeSet::new();
            for p in payouts {
                assert!(paid.insert(p.address.clone()), "job {id} paid twice: {p:?}");
            }
        }
    }
    let mut owed = U256::ZERO;
    for (i, address) in dev_addresses().iter().enumerate() {
        let credit = ledger.withdrawable(escrow, *address, ETH).await.unwrap();
        owed += credit;
        if (5..5 + WORKERS).contains(&i) {
            let in_db = rows(format!(
                "SELECT earnings_wei FROM workers WHERE address = '{address:#x}'"
            ))
            .await
            .first()
            .map(|r| {
                r.try_get_by_index::<String>(0)
                    .unwrap()
                    .parse::<U256>()
                    .unwrap()
            })
            .unwrap_or_default();
            assert_eq!(credit, in_db, "worker {address:#x}: chain vs database");
        }
    }
    let http = shardwork_tests::http_client();
    let balance = shardwork_tests::rpc(
        &http,
        anvil.url(),
        "eth_getBalance",
        serde_json::json!([format!("{escrow:#x}"), "latest"]),
    )
    .await;
    let balance =
        U256::from_str_radix(balance.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(
        balance, owed,
        "the escrow holds exactly the credits it owes"
    );
    let operator_calls =
        shardwork_tests::distinct_successful_calls(&http, anvil.url(), dev_addresses()[1]).await;

    let completed = statuses.values().filter(|s| *s == "completed").count();
    println!(
        "chaos seed {seed}: {} kills {kills:?} and {disconnects} queue disconnects in {chaos_ended:.0?}; \
         {} jobs ({completed} completed, {} refunded) in {:.0?}; {operator_calls} operator \
         calls, each once; escrow balance {balance} wei = credits owed",
        kills.values().sum::<usize>(),
        jobs.len(),
        jobs.len() - completed,
        began.elapsed()
    );
}
