//! Whole-system tests that drive Shardwork as its users do: the `shardwork` binary started as
//! separate processes, killed and restarted, and talked to over HTTP with the same client the
//! workers use. This library holds what they share: finding the binary, running it with a
//! configuration, and waiting for the API.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `shardwork` binary under test: `SHARDWORK_BIN` when set (a copy, when several checkouts
/// share one target folder and link over each other's binaries), else the one this build made
/// beside the tests (`cargo nextest run --bins`: target/<profile>/shardwork).
pub fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SHARDWORK_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps");
    let bin = profile_dir.join(format!("shardwork{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --workspace --bins` (scripts/test does)",
        bin.display()
    );
    bin
}

/// The standalone `shardwork-node` binary (worker and validator without the API's code),
/// beside [`binary`].
pub fn node_binary() -> PathBuf {
    let bin = binary().with_file_name(format!("shardwork-node{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --workspace --bins` (scripts/test does)",
        bin.display()
    );
    bin
}

/// Runs `shardwork <args>` to completion with `env` (and warnings-only logs), as a user types
/// a command.
pub fn shardwork(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut command = Command::new(binary());
    command.args(args).env("SHARDWORK_LOG", "warn");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run shardwork")
}

/// Bytes a process printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `shardwork` process, killed (SIGKILL) when dropped.
pub struct Process {
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    /// Starts `shardwork <args>` with `env`, logging to `log`.
    pub fn start(args: &[&str], env: &[(String, String)], log: &Path) -> Process {
        Process::start_binary(&binary(), args, env, log)
    }

    /// Starts `program <args>` with `env`, logging to `log`.
    pub fn start_binary(
        program: &Path,
        args: &[&str],
        env: &[(String, String)],
        log: &Path,
    ) -> Process {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in env {
            command.env(k, v);
        }
        Process {
            child: command
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", program.display())),
            log: log.to_path_buf(),
        }
    }

    /// SIGKILL: no shutdown code runs, as in a crash.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `url`/healthz answers, or panics with the process log.
pub async fn wait_healthy(url: &str, process: &mut Process, within: Duration) {
    let deadline = Instant::now() + within;
    let addr = url.trim_start_matches("http://").to_owned();
    loop {
        if let Ok(Some(status)) = process.child.try_wait() {
            panic!("shardwork exited with {status}:\n{}", process.log_text());
        }
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "the API did not come up within {within:?}:\n{}",
                process.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` until it returns `Some`, or panics after `within` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A new, empty PostgreSQL database beside the one `admin_url` names; returns its URL.
pub async fn fresh_database(admin_url: &str) -> String {
    use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
    let admin = Database::connect(admin_url)
        .await
        .expect("connect to PostgreSQL");
    let name = format!("shardwork_e2e_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_raw(Statement::from_string(
            admin.get_database_backend(),
            format!("CREATE DATABASE {name}"),
        ))
        .await
        .expect("create database");
    let slash = admin_url.rfind('/').expect("URL names a database");
    format!("{}/{name}", &admin_url[..slash])
}

/// A plain HTTP client for the tests' own requests (reqwest is built without a default TLS
/// provider; this installs the one the project's client uses).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// One JSON-RPC call to a chain node (anvil); its `result`.
pub async fn rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let body: serde_json::Value = http
        .post(url)
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    body["result"].clone()
}

/// Reads every block of the chain at `url` and checks the transactions `from` sent: none
/// reverted, and none repeats another's call (its selector and first argument, which for the
/// escrow's operator calls is the job id: a second `markStarted` or payout of one job). Returns
/// how many there were.
pub async fn distinct_successful_calls(
    http: &reqwest::Client,
    url: &str,
    from: alloy::primitives::Address,
) -> usize {
    let from = format!("{from:#x}");
    let last = rpc(http, url, "eth_blockNumber", serde_json::json!([])).await;
    let last = u64::from_str_radix(last.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let mut calls = std::collections::BTreeSet::new();
    for n in 0..=last {
        let block = rpc(
            http,
            url,
            "eth_getBlockByNumber",
            serde_json::json!([format!("{n:#x}"), true]),
        )
        .await;
        for tx in block["transactions"].as_array().unwrap() {
            if tx["from"].as_str().unwrap().to_ascii_lowercase() != from {
                continue;
            }
            let receipt = rpc(
                http,
                url,
                "eth_getTransactionReceipt",
                serde_json::json!([tx["hash"]]),
            )
            .await;
            assert_eq!(
                receipt["status"], "0x1",
                "a reverted call from {from}: {tx}"
            );
            let input = tx["input"].as_str().unwrap();
            let call = input[..(2 + 8 + 64).min(input.len())].to_owned();
            assert!(
                calls.insert(call.clone()),
                "{from} sent this call twice: {call}"
            );
        }
    }
    calls.len()
}

/// The development escrow an API deployed and remembered in its data folder.
pub fn remembered_escrow(data_dir: &Path) -> alloy::primitives::Address {
    std::fs::read_to_string(data_dir.join("escrow-31337.toml"))
        .expect("the API remembered its escrow")
        .lines()
        .find_map(|l| l.strip_prefix("address = "))
        .map(|v| v.trim_matches('"').parse().expect("an address"))
        .expect("an address line")
}

/// A federated job of the generated sample model (sentiment classification, fast to train)
/// on `model_cid`; trained long enough per task that honest round-2 updates stay clear of the
/// acceptance rule's margin.
pub fn sample_spec(model_cid: &str, shards: u32, rounds: u32) -> serde_json::Value {
    serde_json::json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"] },
        "training": { "epochs": 24, "learning_rate": 0.01, "batch_size": 16, "max_seq_len": 16, "seed": 42 },
        "shards": shards, "rounds": rounds, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
        "stake": { "amount": "1000000000000000000" }
    })
}

/// The settings of an API replica (`shardwork serve`) on real servers, as the replica tests and
/// the chaos harness run them: one PostgreSQL database, RabbitMQ and anvil shared by every
/// replica, one data folder shared too (the embedded store and the development escrow's
/// address), the validator dev account 4, 8-second leases, no rate limit.
pub fn replica_env(
    database_url: &str,
    data_dir: &Path,
    amqp: &str,
    anvil_url: &str,
    port: u16,
) -> Vec<(String, String)> {
    [
        ("SHARDWORK_DATABASE_URL", database_url.to_owned()),
        ("SHARDWORK_DATA_DIR", data_dir.display().to_string()),
        ("SHARDWORK_QUEUE__KIND", "rabbitmq".into()),
        ("SHARDWORK_QUEUE__AMQP_URL", amqp.to_owned()),
        ("SHARDWORK_CHAIN__KIND", "rpc".into()),
        ("SHARDWORK_CHAIN__RPC_URL", anvil_url.to_owned()),
        ("SHARDWORK_CHAIN__POLL_INTERVAL_MS", "200".into()),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        (
            "SHARDWORK_API__JWT_SECRET",
            "replicas-jwt-secret-of-at-least-32-bytes".into(),
        ),
        (
            "SHARDWORK_API__SEALING_SECRET",
            "replicas-sealing-secret-at-least-32-byte".into(),
        ),
        (
            "SHARDWORK_API__VALIDATOR_ADDRESSES",
            format!(
                "[\"{:#x}\"]",
                shardwork_contracts::dev_keys::dev_addresses()[4]
            ),
        ),
        ("SHARDWORK_API__LEASE_SECS", "8".into()),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
        ("SHARDWORK_LOG", "info,sqlx=warn,lapin=warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Writes the generated sample model (a 2-layer BERT classifier) under `dir` and uploads it
/// through the API as a requester would; returns its bundle's CID.
pub async fn put_sample_model(
    api: &std::sync::Arc<shardwork_client::ApiClient>,
    dir: &Path,
) -> String {
    let model_dir = dir.join("model");
    shardwork_trainer::sample::write_model(&model_dir, 42).expect("write the sample model");
    shardwork_node::content::put_bundle(
        &shardwork_node::content::ApiBlobs(api.clone()),
        "model",
        &model_dir,
        &["config.json", "model.safetensors", "tokenizer.json"],
        None,
    )
    .await
    .expect("upload the sample model")
}

/// Starts `shardwork-node ROLE` (`worker` or `validator`) with dev account `key`, talking to
/// the API at `api_url` and to RabbitMQ at `amqp`; its work folder and log
/// (`ROLE-KEY[.log]`) under `dir`.
pub fn start_node(role: &str, key: usize, api_url: &str, amqp: &str, dir: &Path) -> Process {
    start_node_logging_to(role, key, api_url, amqp, dir, &format!("{role}-{key}.log"))
}

/// As [`start_node`], logging to `dir/log` (a restarted node's next log, say).
pub fn start_node_logging_to(
    role: &str,
    key: usize,
    api_url: &str,
    amqp: &str,
    dir: &Path,
    log: &str,
) -> Process {
    Process::start_binary(
        &node_binary(),
        &[
            role,
            "--work-dir",
            &dir.join(format!("{role}-{key}")).display().to_string(),
        ],
        &[
            ("SHARDWORK_API_URL".to_owned(), api_url.to_owned()),
            ("SHARDWORK_QUEUE__AMQP_URL".to_owned(), amqp.to_owned()),
            ("SHARDWORK_LOG".to_owned(), "info,lapin=warn".to_owned()),
            (
                "SHARDWORK_NODE_KEY".to_owned(),
                shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS[key].to_owned(),
            ),
        ],
        &dir.join(log),
    )
}

/// The addresses (`0x…`, lowercase) of the validator and the workers that `shardwork up` or
/// `demo` ran in process with data folder `data_dir`: their keys are generated into its
/// `node-keys.toml` (never the public development keys), as an operator would read them.
pub fn in_process_nodes(data_dir: &Path) -> (String, Vec<String>) {
    let path = data_dir.join("node-keys.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let file: toml::Table = text.parse().expect("node-keys.toml is TOML");
    let address = |hex: &toml::Value| {
        let key: alloy::signers::local::PrivateKeySigner = hex
            .as_str()
            .expect("a key is a string")
            .parse()
            .expect("a hex private key");
        format!("{:#x}", key.address())
    };
    let workers = file
        .get("workers")
        .and_then(toml::Value::as_array)
        .map(|keys| keys.iter().map(address).collect())
        .unwrap_or_default();
    (address(&file["validator"]), workers)
}

/// `shardwork up --workers 0` on RabbitMQ (SQLite, the embedded chain and store; the validator
/// in-process), data and log under `dir`, once it answers; with its URL.
pub async fn up_on_rabbitmq(amqp: &str, dir: &Path) -> (Process, String) {
    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = [
        ("SHARDWORK_DATA_DIR", dir.join("data").display().to_string()),
        ("SHARDWORK_API__BIND", format!("127.0.0.1:{port}")),
        ("SHARDWORK_QUEUE__KIND", "rabbitmq".into()),
        ("SHARDWORK_QUEUE__AMQP_URL", amqp.to_owned()),
        ("SHARDWORK_API__RATE_LIMIT_PER_MINUTE", "0".into()),
        ("SHARDWORK_LOG", "info,sqlx=warn,lapin=warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut up = Process::start(&["up", "--workers", "0"], &env, &dir.join("up.log"));
    wait_healthy(&api_url, &mut up, Duration::from_secs(120)).await;
    (up, api_url)
}

/// Waits for `job` to reach a terminal status (the protocol's `JobStatus::is_terminal`) as
/// `api` reads it, and returns that status; panics after `within`.
pub async fn job_end(
    api: &shardwork_client::ApiClient,
    job: uuid::Uuid,
    within: Duration,
) -> shardwork_core::protocol::JobStatus {
    eventually(&format!("job {job} ends"), within, || async move {
        let view = api.job(job).await.ok()?;
        shardwork_core::protocol::JobStatus::parse(view["status"].as_str()?)
            .filter(|s| s.is_terminal())
    })
    .await
}
