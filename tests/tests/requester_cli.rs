//! The requester's terminal: `shardwork up` in one process on embedded defaults, and the
//! `shardwork job …` commands against it, as a user types them.
//!
//! Checked: a spec with a fault is refused naming the field, and nothing is posted; a posted,
//! development-funded job is watched to completion, its adapter downloads in PEFT layout and the
//! job is listed as completed; a job nobody trains is refunded on chain once its deadline passes,
//! and `job watch` says so and exits non-zero; a job whose model no node can load is ended with
//! the reason long before its deadline while `up` goes on serving the next job.

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

/// `shardwork job --dev-requester post --dev-fund --watch` of `spec` (written to
/// `dir/spec.json`) and `data` against the API at `url`, as a requester types it.
fn post_fund_and_watch(dir: &Path, url: &str, spec: &Value, data: &Path) -> std::process::Output {
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    shardwork(
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
        &[("SHARDWORK_API_URL", url.to_owned())],
    )
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
    let good_arg = good_path.display().to_string();
    let (id, stderr) = watched(
        &["post", "--spec", &good_arg, "--data", &data_arg],
        &env,
        &up,
    );
    assert!(
        uuid::Uuid::parse_str(&id).is_ok(),
        "first line is the job id: {id}"
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

    // Continue from the result: round 1 of the new job starts from the adapter (scored on the
    // same held-out records, the same data and seed splitting the same way, it starts exactly
    // where the first job ended).
    let first = result_json(&env, &id, &dir.path().join("first"));
    let (second_id, _) = watched(&["continue", &id, "--data", &data_arg], &env, &up);
    assert_ne!(second_id, id);
    let out = shardwork(
        &["job", "--dev-requester", "--json", "show", &second_id],
        &env,
    );
    let second: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        second["spec"]["base_model"]["adapter"],
        first["adapter_cid"]
    );
    assert!(second["start_adapter_cid"].is_string(), "{second}");
    let continued = result_json(&env, &second_id, &dir.path().join("second"));
    let start_metric = &continued["aggregate"]["details"]["start_metric"];
    assert_eq!(
        start_metric, &first["aggregate"]["metric"],
        "round 1 started from the first job's result: {continued}"
    );
    assert_ne!(
        start_metric, &continued["aggregate"]["base_metric"],
        "and not from the bare model: {continued}"
    );

    // A job that has no result (posted, never funded) cannot be continued, and says why.
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "post",
            "--spec",
            &good_arg,
            "--data",
            &data_arg,
        ],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unfunded = text(&out.stdout).lines().next().unwrap().trim().to_owned();
    let out = shardwork(
        &[
            "job",
            "--dev-requester",
            "continue",
            &unfunded,
            "--data",
            &data_arg,
        ],
        &env,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no result to continue from"),
        "{}",
        text(&out.stderr)
    );
    drop(up);
}

/// `shardwork job --dev-requester <args> --dev-fund --watch`, which must succeed: the job's id
/// (its first line of output) and what it printed on stderr.
fn watched(args: &[&str], env: &[(&str, String)], up: &Process) -> (String, String) {
    let mut all = vec!["job", "--dev-requester"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--dev-fund", "--watch"]);
    let out = shardwork(&all, env);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "job {} --watch failed:\n{stdout}\n{stderr}\nup log:\n{}",
        args[0],
        up.log_text()
    );
    (
        stdout.lines().next().unwrap_or("").trim().to_owned(),
        stderr,
    )
}

/// `shardwork job --json result ID --out DIR`: the API's result (adapter CID, files, last merge).
fn result_json(env: &[(&str, String)], id: &str, out: &Path) -> Value {
    let done = shardwork(
        &[
            "job",
            "--dev-requester",
            "--json",
            "result",
            id,
            "--out",
            &out.display().to_string(),
        ],
        env,
    );
    assert!(done.status.success(), "{}", text(&done.stderr));
    serde_json::from_slice(&done.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_nobody_finishes_is_refunded_on_chain_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // No workers: the round opens and nobody trains it.
    let (up, url, model_cid) = marketplace(dir.path(), 0).await;
    let data = sample_reviews(dir.path(), 200);
    let spec = spec(&model_cid, chrono::Duration::seconds(20));
    let out = post_fund_and_watch(dir.path(), &url, &spec, &data);
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
    let env = [("SHARDWORK_API_URL", url.clone())];
    let out = shardwork(&["job", "--dev-requester", "--json", "show", &id], &env);
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["status"], "refunded", "{job}");
    drop(up);
}

/// Issue 46, attack 2, through the whole system: a model whose `tokenizer.json` passes the
/// checks at posting (a JSON file with a `model` object) but that no tokenizer library can
/// build. The validator, loading it while idle, reports it; the job is ended on chain with the
/// reason and refunded, long before its two-hour deadline; `up` stays up and the next job,
/// on a sound model, trains and completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_model_cannot_load_is_refunded_and_up_goes_on_with_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (up, url, model_cid) = marketplace(dir.path(), 2).await;
    let data = sample_reviews(dir.path(), 300);
    let env = [("SHARDWORK_API_URL", url.clone())];

    let poisoned = dir.path().join("poisoned");
    std::fs::create_dir_all(&poisoned).unwrap();
    for entry in std::fs::read_dir(dir.path().join("model")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), poisoned.join(entry.file_name())).unwrap();
    }
    let tokenizer_path = poisoned.join("tokenizer.json");
    let mut tokenizer: Value =
        serde_json::from_slice(&std::fs::read(&tokenizer_path).unwrap()).unwrap();
    tokenizer["model"]["type"] = json!("NoSuchModel");
    std::fs::write(&tokenizer_path, tokenizer.to_string()).unwrap();
    let data_dir = dir.path().join("data");
    let out = shardwork(
        &["model", "put", &poisoned.display().to_string()],
        &[("SHARDWORK_DATA_DIR", data_dir.display().to_string())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let poisoned_cid = text(&out.stdout).trim().to_owned();

    let started = std::time::Instant::now();
    let out = post_fund_and_watch(
        dir.path(),
        &url,
        &spec(&poisoned_cid, chrono::Duration::hours(2)),
        &data,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("ended refunded"),
        "{stderr}\nup log:\n{}",
        up.log_text()
    );
    assert!(
        started.elapsed() < Duration::from_secs(15 * 60),
        "refunded after {:?}; the deadline is 2 h away",
        started.elapsed()
    );
    // `job watch` printed the job's events as they came, the reason among them.
    let watched = format!("{stdout}{stderr}");
    assert!(
        watched.contains("the job's model cannot be loaded") && watched.contains("tokenizer.json"),
        "{watched}\nup log:\n{}",
        up.log_text()
    );
    let id = stdout.lines().next().unwrap().trim().to_owned();
    let out = shardwork(&["job", "--dev-requester", "--json", "show", &id], &env);
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["status"], "refunded", "{job}");

    // The marketplace goes on: the next job, on the sound model, completes.
    let out = post_fund_and_watch(
        dir.path(),
        &url,
        &spec(&model_cid, chrono::Duration::hours(2)),
        &data,
    );
    assert!(
        out.status.success(),
        "{}\n{}\nup log:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        up.log_text()
    );
    drop(up);
}

/// `shardwork up` lists its development stake token (tUSD) in `GET /v1/chain`; a job staked in
/// it is posted from the terminal, funded by the development account (approve, then
/// `createJob`), trained, and paid out in tUSD: the payouts and the fee add up to the stake.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_staked_in_the_development_token_is_paid_out_in_that_token() {
    let dir = tempfile::tempdir().unwrap();
    let (up, url, model_cid) = marketplace(dir.path(), 2).await;
    let chain: Value = shardwork_tests::http_client()
        .get(format!("{url}/v1/chain"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tokens = chain["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 1, "{chain}");
    assert_eq!(tokens[0]["symbol"], "tUSD", "{chain}");
    assert_eq!(tokens[0]["decimals"], 18, "{chain}");
    let token = tokens[0]["address"].as_str().unwrap().to_owned();

    let stake: u128 = 25 * 10u128.pow(18);
    let mut staked = spec(&model_cid, chrono::Duration::hours(2));
    staked["stake"] = json!({ "amount": stake.to_string(), "token": token });
    let data = sample_reviews(dir.path(), 400);
    let out = post_fund_and_watch(dir.path(), &url, &staked, &data);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "job post --watch failed:\n{stdout}\n{stderr}\nup log:\n{}",
        up.log_text()
    );
    let id: uuid::Uuid = stdout.lines().next().unwrap().trim().parse().unwrap();

    let requester = shardwork_client::ApiClient::new(
        &url,
        shardwork_contracts::dev_keys::dev_signers()[3].clone(),
        &[],
    )
    .unwrap();
    let completed = requester
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.event {
            shardwork_core::protocol::JobEvent::Completed(c) => Some(c),
            _ => None,
        })
        .expect("a completed event");
    let paid: u128 = completed
        .payouts
        .iter()
        .map(|p| p.amount_wei.parse::<u128>().unwrap())
        .sum();
    let fee: u128 = completed.fee_wei.parse().unwrap();
    let dust: u128 = completed.dust_wei.parse().unwrap();
    assert!(!completed.payouts.is_empty(), "{completed:?}");
    assert_eq!(paid + fee + dust, stake, "{completed:?}");
    // The escrow's 2.5 % fee, in tUSD units.
    assert_eq!(fee, stake / 40, "{completed:?}");
}

/// A TCP relay to `upstream` that holds back what the first connection sends for `hold`, as a
/// machine too busy to write a request's bytes would; later connections pass at once. Returns
/// its URL, and what the API sent back on the held connection.
async fn relay_holding_the_first_request(
    upstream: std::net::SocketAddr,
    hold: Duration,
) -> (String, tokio::sync::oneshot::Receiver<Vec<u8>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (answered, answer) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut answered = Some(answered);
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                return;
            };
            match answered.take() {
                Some(answered) => {
                    tokio::spawn(async move {
                        let (mut client_read, mut client_write) = client.into_split();
                        let (mut server_read, mut server_write) = server.into_split();
                        let forward = tokio::spawn(async move {
                            tokio::time::sleep(hold).await;
                            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                        });
                        let mut reply = Vec::new();
                        let _ = server_read.read_to_end(&mut reply).await;
                        let _ = client_write.write_all(&reply).await;
                        let _ = client_write.shutdown().await;
                        forward.abort();
                        let _ = answered.send(reply);
                    });
                }
                None => {
                    tokio::spawn(async move {
                        let (mut client, mut server) = (client, server);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
                }
            }
        }
    });
    (url, answer)
}

/// The API answers 408 to a connection whose request has not arrived whole within its read
/// deadline (the CI run of 2026-11-27 saw one while a 2-core machine trained three adapters,
/// and `shardwork demo` stopped). The server never read that request, so the client sends it
/// again on a new connection and the requester's call succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_the_api_timed_out_before_reading_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = vec![
        (
            "SHARDWORK_DATA_DIR".into(),
            dir.path().display().to_string(),
        ),
        ("SHARDWORK_API__BIND".into(), format!("127.0.0.1:{port}")),
        (
            "SHARDWORK_API__JWT_SECRET".into(),
            "requester-cli-jwt-secret-of-32-bytes-or-more".into(),
        ),
        (
            "SHARDWORK_API__SEALING_SECRET".into(),
            "requester-cli-sealing-secret-of-32-bytes-or-more".into(),
        ),
    ];
    let mut serve = Process::start(&["serve"], &env, &dir.path().join("serve.log"));
    wait_healthy(&url, &mut serve, Duration::from_secs(120)).await;

    let upstream = format!("127.0.0.1:{port}").parse().unwrap();
    let (relay, held_answer) =
        relay_holding_the_first_request(upstream, Duration::from_secs(7)).await;
    let signer = shardwork_contracts::dev_keys::dev_signers()[3].clone();
    let requester = shardwork_client::ApiClient::new(&relay, signer, &[]).unwrap();
    let jobs = tokio::time::timeout(Duration::from_secs(60), requester.my_jobs(None))
        .await
        .expect("the call returned")
        .expect("the call succeeded after the 408");
    assert!(jobs.is_empty(), "{jobs:?}");
    let held_answer = String::from_utf8_lossy(&held_answer.await.unwrap()).into_owned();
    assert!(
        held_answer.starts_with("HTTP/1.1 408"),
        "the held request was not timed out by the API: {held_answer:?}"
    );
}
