//! One signal stops a process in order and it exits 0: `shardwork up` (its validator and
//! workers first, then the API) and `shardwork serve`, each sent SIGINT once as a person's
//! Ctrl-C would, must be gone within 15 s with nothing logged after their last words.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Lines a child writes to stdout and stderr, as they come, tagged by stream.
fn lines(child: &mut Child) -> mpsc::Receiver<(bool, String)> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let tx_err = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((true, line));
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx_err.send((false, line));
        }
    });
    rx
}

/// Starts `shardwork ARGS` on a fresh data folder, waits for `ready` in its output, sends one
/// SIGINT and checks it exits 0 within 15 s. Returns everything it wrote after the signal.
fn stops_on_one_sigint(args: &[&str], env: &[(&str, &str)], ready: &str) -> Vec<(bool, String)> {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(shardwork_tests::binary())
        .args(args)
        .env("SHARDWORK_DATA_DIR", dir.path())
        .env(
            "SHARDWORK_API__BIND",
            format!("127.0.0.1:{}", shardwork_tests::free_port()),
        )
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start shardwork");
    let rx = lines(&mut child);
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let (_, line) = rx
            .recv_timeout(Duration::from_secs(120).saturating_sub(started.elapsed()))
            .unwrap_or_else(|_| panic!("never said {ready:?}; said {seen:#?}"));
        let done = line.contains(ready);
        seen.push(line);
        if done {
            break;
        }
    }
    // Let it settle into its loops, as a person reading the banner would.
    std::thread::sleep(Duration::from_secs(2));
    while rx.try_recv().is_ok() {}
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signalled = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        if signalled.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("still running 15 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(exit.success(), "exited {exit:?} after SIGINT");
    // The reader threads end with the pipes; what came after the signal is all here.
    std::thread::sleep(Duration::from_millis(200));
    rx.try_iter().collect()
}

#[test]
fn up_stops_its_nodes_then_its_api_on_one_sigint_and_exits_0() {
    let after = stops_on_one_sigint(&["up"], &[("SHARDWORK_LOG", "info")], "marketplace serving");
    let stdout: Vec<&str> = after
        .iter()
        .filter(|(out, _)| *out)
        .map(|(_, l)| l.as_str())
        .collect();
    assert_eq!(stdout.last(), Some(&"stopped"), "{after:#?}");
    assert!(
        stdout.iter().any(|l| l.starts_with("stopping:")),
        "{after:#?}"
    );
    let stderr: Vec<&str> = after
        .iter()
        .filter(|(out, _)| !*out)
        .map(|(_, l)| l.as_str())
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        stderr.last().is_some_and(|l| l.contains("API stopped")),
        "the last log line is not the API's stop: {stderr:#?}"
    );
    assert!(
        !stderr.iter().any(|l| l.contains("retrying")),
        "a node retried against a stopping API: {stderr:#?}"
    );
}

#[test]
fn serve_stops_on_one_sigint_and_exits_0() {
    let after = stops_on_one_sigint(
        &["serve"],
        &[
            ("SHARDWORK_LOG", "info"),
            (
                "SHARDWORK_API__JWT_SECRET",
                "signals-test-jwt-secret-of-32-bytes-or-more",
            ),
            (
                "SHARDWORK_API__SEALING_SECRET",
                "signals-test-sealing-secret-of-32-bytes-or-more",
            ),
        ],
        "API listening",
    );
    let stderr: Vec<&str> = after
        .iter()
        .map(|(_, l)| l.as_str())
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        stderr.last().is_some_and(|l| l.contains("API stopped")),
        "the last log line is not the API's stop: {stderr:#?}"
    );
}

/// `shardwork-node worker` sent SIGINT while it trains: it gives the task back (released, its
/// attempt returned) and exits 0 at once instead of training on; another worker then trains
/// the task on the same attempt number and the job completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_mid_task_gives_its_task_back_on_one_sigint_and_exits_0() {
    use shardwork_core::protocol::JobEvent;
    use shardwork_core::testkit::services::{Service, service_url};
    use shardwork_tests::eventually;
    use std::sync::Arc;

    let Some(amqp) = service_url(Service::RabbitMq, "a worker stopped mid-task") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_up, api_url) = shardwork_tests::up_on_rabbitmq(&amqp, dir.path()).await;
    let worker =
        |key: usize| shardwork_tests::start_node("worker", key, &api_url, &amqp, dir.path());
    let mut stopping = worker(5);

    let requester = Arc::new(
        shardwork_client::ApiClient::new(
            &api_url,
            shardwork_contracts::dev_keys::dev_signers()[3].clone(),
            &[],
        )
        .unwrap(),
    );
    let model_cid = shardwork_tests::put_sample_model(&requester, dir.path()).await;
    // One task that trains for tens of seconds.
    let mut spec = shardwork_tests::sample_spec(&model_cid, 1, 1);
    spec["training"]["epochs"] = 100.into();
    let job = requester
        .post_job(
            &spec,
            bytes::Bytes::from(shardwork_trainer::sample::dataset(600, 7)),
        )
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();
    let r = requester.clone();
    eventually("worker 5 claims the task", Duration::from_secs(60), || {
        let r = r.clone();
        async move {
            let events = r.events(job_id, 0).await.ok()?;
            events
                .iter()
                .any(|e| matches!(e.event, JobEvent::TaskClaimed(_)))
                .then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let status = Command::new("kill")
        .args(["-INT", &stopping.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signalled = Instant::now();
    let exit = loop {
        if let Some(exit) = stopping.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "the worker still runs 15 s after SIGINT:\n{}",
            stopping.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopped_in = signalled.elapsed();
    assert!(exit.success(), "exited {exit:?}:\n{}", stopping.log_text());
    let log = stopping.log_text();
    assert!(log.contains("stopping: task given back"), "{log}");

    // Another worker trains it, on the attempt the first one returned.
    let _other = worker(6);
    let r = requester.clone();
    eventually("the job completes", Duration::from_secs(180), || {
        let r = r.clone();
        async move {
            let job = r.job(job_id).await.ok()?;
            (job["status"] == "completed").then_some(())
        }
    })
    .await;
    let events = requester.events(job_id, 0).await.unwrap();
    let claims: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::TaskClaimed(c) => Some(c.attempt),
            _ => None,
        })
        .collect();
    assert_eq!(
        claims,
        vec![1, 1],
        "the second claim reuses the returned attempt"
    );
    assert!(
        events.iter().any(|e| matches!(&e.event,
            JobEvent::TaskRequeued(a) if a.reason.contains("released it; the attempt was returned"))),
        "{events:#?}"
    );
    println!("worker stopped {stopped_in:?} after SIGINT, its task given back");
}
