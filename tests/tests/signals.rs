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
