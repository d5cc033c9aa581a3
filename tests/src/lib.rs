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
