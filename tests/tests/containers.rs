//! The node image for real (issue 50): `shardwork serve` on the host (PostgreSQL, RabbitMQ,
//! anvil), and the validator and two workers running inside the `shardwork/node` image that
//! `scripts/images` builds, each container started with `buildah run` on the host's network with
//! its own data folder mounted at /var/lib/shardwork. A requester posts a chat SFT job of the
//! demo's model (the SmolLM2 GGUF) and it runs to payout.
//!
//! Checked, as an operator sees it:
//! * a node container started without its key exits at once naming `SHARDWORK_NODE_KEY`, and
//!   the API binary the API image carries exits at once naming its missing secrets;
//! * the processes run as the image's unprivileged user and write nothing outside their data
//!   folder (the container's root is compared before and after: what `--read-only` enforces);
//! * each worker's model cache and task traces live in its data folder, and the health check
//!   inside the image passes while the node runs;
//! * stopping a worker container mid-task (SIGTERM to its process, what `docker stop` sends)
//!   gives the task back, released with its attempt returned, and the container exits 0; started
//!   again on the same data folder, the worker trains from its cached model.
//!
//! Needs buildah and the images made from the binaries under test (`scripts/images --binaries
//! DIR`, which `scripts/test` runs): a loud skip without them, a failure in CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Value, json};
use shardwork_client::ApiClient;
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::{JobEvent, JobStatus};
use shardwork_core::testkit::services::{Service, record_skip, service_url, services_required};
use shardwork_migrations::sea_orm::{ConnectionTrait, Database, Statement};
use shardwork_node::content::{ApiBlobs, put_bundle};
use shardwork_tests::{Process, eventually, free_port, fresh_database, job_end, wait_healthy};

const SUITE: &str = "tests containers (the node image under buildah)";
const NODE_IMAGE: &str = "shardwork/node";
const API_IMAGE: &str = "shardwork/api";
/// The label scripts/images writes: the SHA-256 of the binary inside.
const BINARY_LABEL: &str = "org.shardwork.binary-sha256";
/// The unprivileged user the images run as.
const IMAGE_UID: u32 = 65532;

/// What buildah prints when it could not start a run's process at all: the sealed copy of its
/// own binary that it re-executes into the chroot failed (a transient `EBUSY`).
const BUILDAH_REEXEC_FAILED: &str = "sealing memfd copy";

fn buildah() -> Command {
    let mut command = Command::new("buildah");
    command.env("BUILDAH_ISOLATION", "chroot");
    command
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Why `image` cannot be tested here, if it cannot: buildah missing, the image missing, or an
/// image made from another build of `binary` than the one under test.
fn image_problem(image: &str, binary: &Path) -> Option<String> {
    let inspected = match buildah()
        .args(["inspect", "--type", "image", "--format"])
        .arg(format!(
            "{{{{index .Docker.Config.Labels \"{BINARY_LABEL}\"}}}}"
        ))
        .arg(image)
        .output()
    {
        Err(e) => return Some(format!("buildah cannot run ({e}): scripts/install/buildah")),
        Ok(out) if !out.status.success() => {
            return Some(format!("no image {image}"));
        }
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    };
    let expected = sha256(binary);
    (inspected != expected).then(|| {
        format!(
            "{image} holds another build of {} (label {inspected:?}, binary {expected})",
            binary.display()
        )
    })
}

/// The fixtures and the images, or a loud skip (a failure under SHARDWORK_REQUIRE_SERVICES=1).
fn prerequisites() -> Option<(PathBuf, PathBuf)> {
    let target = shardwork_tests::node_binary();
    let problem = image_problem(NODE_IMAGE, &target)
        .or_else(|| image_problem(API_IMAGE, &shardwork_tests::binary()))
        .map(|p| {
            format!(
                "{p}: run scripts/images --binaries {}",
                target.parent().unwrap().display()
            )
        });
    let found = (
        shardwork_trainer::fixtures::smollm2_gguf(),
        shardwork_trainer::fixtures::chatterbot_data(),
    );
    let why = match (problem, found) {
        (None, (Some(gguf), Some(corpus))) => return Some((gguf, corpus.join("english"))),
        (Some(problem), _) => problem,
        (None, _) => {
            "SmolLM2 or chatterbot-corpus not found (scripts/install/python-fixtures)".into()
        }
    };
    if services_required() {
        panic!("{SUITE}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
    }
    record_skip(SUITE, &why);
    None
}

/// A working container of `image` (removed when dropped) and, while it runs, the `buildah run`
/// process that runs one command in it.
struct Container {
    id: String,
    running: Option<Process>,
}

impl Container {
    fn of(image: &str) -> Container {
        let out = buildah().args(["from", "--quiet", image]).output().unwrap();
        assert!(
            out.status.success(),
            "buildah from {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Container {
            id: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            running: None,
        }
    }

    /// `buildah run` of `args` on the host's network, `data` mounted at /var/lib/shardwork,
    /// as the image's user; output to `log`.
    fn run(&mut self, args: &[&str], env: &[(&str, String)], data: &Path, log: &Path) {
        let mut command = vec![
            "run".to_owned(),
            "--network".into(),
            "host".into(),
            "--volume".into(),
            format!("{}:/var/lib/shardwork", data.display()),
        ];
        for (k, v) in env {
            command.push("--env".into());
            command.push(format!("{k}={v}"));
        }
        command.push(self.id.clone());
        command.push("--".into());
        command.extend(args.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        self.running = Some(Process::start_binary(
            Path::new("buildah"),
            &args,
            &[("BUILDAH_ISOLATION".to_owned(), "chroot".to_owned())],
            log,
        ));
    }

    /// The container's main process (the deepest descendant of `buildah run`), as `docker stop`
    /// would signal it.
    fn main_pid(&self) -> Option<u32> {
        let mut pid = self.running.as_ref()?.child.id();
        loop {
            // Any thread may have started the child (buildah is a Go program), so every
            // thread's list is read.
            let children: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
                .flat_map(|list| {
                    list.split_whitespace()
                        .filter_map(|c| c.parse().ok())
                        .collect::<Vec<u32>>()
                })
                .collect();
            match children.first() {
                Some(&child) => pid = child,
                None => return Some(pid),
            }
        }
    }

    /// SIGTERM to the container's process, then its `buildah run`'s exit status.
    fn stop(&mut self, within: Duration) -> std::process::ExitStatus {
        let pid = self.main_pid().expect("a running container");
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let process = self.running.as_mut().expect("a running container");
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = process.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the container did not stop within {within:?}:\n{}",
                process.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `args` in the container to the end: (exit status, output).
    ///
    /// A run that buildah itself could not start because the copy of its own binary it
    /// re-executes into the chroot could not be sealed (`sealing memfd copy: Device or resource
    /// busy`, seen once in CI while other builds loaded the machine) is run again, up to twice:
    /// the program never started, so nothing of the test's is repeated.
    fn exec(&self, args: &[&str], env: &[(&str, String)], data: &Path) -> (bool, String) {
        let mut attempts = 0;
        loop {
            let mut command = buildah();
            command.args(["run", "--network", "host", "--volume"]);
            command.arg(format!("{}:/var/lib/shardwork", data.display()));
            for (k, v) in env {
                command.arg("--env").arg(format!("{k}={v}"));
            }
            command.arg(&self.id).arg("--").args(args);
            let out = command.stdin(Stdio::null()).output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            attempts += 1;
            if !out.status.success() && text.contains(BUILDAH_REEXEC_FAILED) && attempts < 3 {
                eprintln!("buildah could not start {args:?} ({text}); running it again");
                continue;
            }
            return (out.status.success(), text);
        }
    }

    /// Files under the container's root changed since `since` (outside what buildah itself
    /// mounts or writes for a run: /dev, /proc, /sys, /run, /etc/hosts, /etc/resolv.conf,
    /// /etc/hostname) and the data folder, which is a mount.
    fn root_changes(&self, since: SystemTime) -> Vec<String> {
        let out = buildah().args(["mount", &self.id]).output().unwrap();
        assert!(out.status.success(), "buildah mount");
        let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let mut changed = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let inside = format!("/{}", path.strip_prefix(&root).unwrap().display());
                if ["/dev", "/proc", "/sys", "/run", "/var/lib/shardwork"]
                    .iter()
                    .any(|skip| inside == *skip)
                    || ["/etc/hosts", "/etc/resolv.conf", "/etc/hostname"].contains(&&*inside)
                {
                    continue;
                }
                let Ok(meta) = entry.path().symlink_metadata() else {
                    continue;
                };
                // A folder's time changes with what buildah itself puts in it (/etc/hosts), so
                // only files count: anything a process wrote is a file.
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.modified().is_ok_and(|m| m > since) {
                    changed.push(inside.clone());
                }
            }
        }
        let _ = buildah().args(["umount", &self.id]).output();
        changed
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The container's process is found through the running `buildah run`, so before that
        // is taken: looked up after, it was never found, and killing `buildah run` alone left
        // the worker running under `buildah-chroot-exec` after the test, polling the queue
        // beside every later test.
        if let Some(pid) = self.main_pid() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        drop(self.running.take());
        let _ = buildah().args(["rm", &self.id]).output();
    }
}

/// A data folder for one container, writable by the image's user.
fn data_folder(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).unwrap();
    // As root (CI) the folder is handed to the image's user; otherwise it is opened to all.
    if std::os::unix::fs::chown(&path, Some(IMAGE_UID), Some(IMAGE_UID)).is_err() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    path
}

fn key(index: usize) -> String {
    shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS[index].to_owned()
}

fn address(index: usize) -> String {
    format!(
        "{:#x}",
        shardwork_contracts::dev_keys::dev_addresses()[index]
    )
}

fn spec(model_cid: &str) -> Value {
    json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "gguf", "architecture": "llama",
                        "task": "causal_lm" },
        "lora": { "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"] },
        "training": { "epochs": 1, "learning_rate": 0.003, "batch_size": 4,
                      "max_seq_len": 64, "seed": 42 },
        "shards": 2, "rounds": 1, "held_out_fraction": 0.15,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339(),
        "stake": { "amount": "600000000000000000" }
    })
}

/// Whether `path` (under a data folder) is the model file `name` in the node's model cache,
/// complete (a download in progress sits in a `.partial-…` folder).
fn cached_model(path: &str, name: &str) -> bool {
    path.starts_with("node/models/") && !path.contains(".partial-") && path.ends_with(name)
}

/// The files under `dir`, recursively, as paths relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_in_the_node_image_train_a_chat_job_to_payout() {
    let Some((gguf, corpus)) = prerequisites() else {
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

    // Started without their secrets, both images' binaries exit at once naming them.
    let empty = data_folder(dir.path(), "empty");
    let bare = Container::of(NODE_IMAGE);
    let (ok, text) = bare.exec(&["shardwork-node", "worker"], &[], &empty);
    assert!(!ok && text.contains("SHARDWORK_NODE_KEY"), "{text}");
    let (ok, text) = bare.exec(&["shardwork-node", "health"], &[], &empty);
    assert!(!ok && text.contains("no heartbeat"), "{text}");
    let (ok, text) = bare.exec(&["id", "-u"], &[], &empty);
    assert!(!ok, "the image has no shell tools: {text}");
    drop(bare);
    let api_image = Container::of(API_IMAGE);
    let started = std::time::Instant::now();
    let (ok, text) = api_image.exec(&["shardwork", "serve"], &[], &empty);
    assert!(!ok, "serve without secrets must fail: {text}");
    for name in ["SHARDWORK_API__JWT_SECRET", "SHARDWORK_API__SEALING_SECRET"] {
        assert!(text.contains(name), "{text}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refused at once, not after connecting: {:?}",
        started.elapsed()
    );

    // The API on the host.
    let database_url = fresh_database(&pg).await;
    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    // The replicas' settings (validator: dev account 4, no rate limit), with the default lease:
    // the stop below must be seen as a release, not as a lease lapsing under load.
    let mut env = shardwork_tests::replica_env(
        &database_url,
        &dir.path().join("api"),
        &amqp,
        anvil.url(),
        port,
    );
    env.push(("SHARDWORK_API__LEASE_SECS".into(), "300".into()));
    let mut api = Process::start(&["serve"], &env, &dir.path().join("api.log"));
    wait_healthy(&api_url, &mut api, Duration::from_secs(90)).await;
    // The API image's health check, run from inside the image against the live server.
    let health = api_image.exec(
        &["shardwork", "health"],
        &[("SHARDWORK_API__BIND", format!("127.0.0.1:{port}"))],
        &empty,
    );
    assert!(health.0 && health.1.contains("200"), "{}", health.1);
    drop(api_image);

    // The nodes in containers: one thread each, as the llm_jobs workers.
    let node_env = |index: usize| {
        vec![
            ("SHARDWORK_API_URL", api_url.clone()),
            ("SHARDWORK_QUEUE__AMQP_URL", amqp.clone()),
            ("SHARDWORK_LOG", "info,lapin=warn".to_owned()),
            ("SHARDWORK_NODE_KEY", key(index)),
            ("RAYON_NUM_THREADS", "1".to_owned()),
        ]
    };
    let before = SystemTime::now() - Duration::from_secs(1);
    let start = |role: &str, index: usize, log: &str| {
        let data = data_folder(dir.path(), &format!("{role}-{index}"));
        let mut container = Container::of(NODE_IMAGE);
        container.run(
            &["shardwork-node", role],
            &node_env(index),
            &data,
            &dir.path().join(log),
        );
        (container, data)
    };
    let (validator, validator_data) = start("validator", 4, "validator.log");
    let (mut worker_a, data_a) = start("worker", 5, "worker-5.log");
    let (worker_b, data_b) = start("worker", 6, "worker-6.log");

    let requester = Arc::new(
        ApiClient::new(
            &api_url,
            shardwork_contracts::dev_keys::dev_signers()[3].clone(),
            &[],
        )
        .unwrap(),
    );
    let name = gguf.file_name().unwrap().to_string_lossy().into_owned();
    let model_cid = put_bundle(
        &ApiBlobs(requester.clone()),
        "model",
        gguf.parent().unwrap(),
        &[name.as_str()],
        None,
    )
    .await
    .unwrap();
    let conversations = shardwork_trainer::data::chatterbot::conversations(&corpus).unwrap();
    let stride = (conversations.len() / 40).max(1);
    let dataset: String = conversations
        .iter()
        .step_by(stride)
        .take(40)
        .map(|c| format!("{c}\n"))
        .collect();
    // Both workers register before the job is sized against the fleet.
    let db = Database::connect(&database_url).await.unwrap();
    eventually(
        "both container workers register",
        Duration::from_secs(120),
        || {
            let db = db.clone();
            async move {
                let row = db
                    .query_one_raw(Statement::from_string(
                        db.get_database_backend(),
                        "SELECT COUNT(*) FROM workers".to_owned(),
                    ))
                    .await
                    .ok()??;
                (row.try_get_by_index::<i64>(0).ok()? >= 2).then_some(())
            }
        },
    )
    .await;
    let job = requester
        .post_job(&spec(&model_cid), Bytes::from(dataset))
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();

    // Worker A takes a task; its container is stopped mid-task.
    let r = requester.clone();
    eventually("worker A claims a task", Duration::from_secs(300), || {
        let r = r.clone();
        async move {
            let events = r.events(job_id, 0).await.ok()?;
            events
                .iter()
                .any(|e| matches!(&e.event, JobEvent::TaskClaimed(c) if c.worker == address(5)))
                .then_some(())
        }
    })
    .await;
    // Wait for its model to be cached (renamed from its partial download) before stopping it,
    // so the restart can be seen to reuse it.
    let cached = eventually(
        "worker A caches the model",
        Duration::from_secs(120),
        || {
            let (data_a, name) = (data_a.clone(), name.clone());
            async move {
                files_under(&data_a)
                    .into_iter()
                    .find(|f| cached_model(f, &name))
            }
        },
    )
    .await;
    // Its task works in its data folder (the shard, the trace and adapter it writes). The
    // folder is empty until the shard is written, which follows the model's fetch, so its
    // first file is waited for rather than looked for once.
    eventually(
        "worker A's task writes its shard into its data folder",
        Duration::from_secs(60),
        || {
            let data_a = data_a.clone();
            async move {
                files_under(&data_a)
                    .iter()
                    .any(|f| f.starts_with("node/task-"))
                    .then_some(())
            }
        },
    )
    .await;
    let status = worker_a.stop(Duration::from_secs(20));
    assert!(
        status.success(),
        "a stopped worker exits 0: {status}\n{}",
        worker_a.running.as_ref().unwrap().log_text()
    );
    let r = requester.clone();
    let released = eventually(
        "worker A's task is released",
        Duration::from_secs(30),
        || {
            let r = r.clone();
            async move {
                r.events(job_id, 0)
                    .await
                    .ok()?
                    .iter()
                    .find_map(|e| match &e.event {
                        JobEvent::TaskRequeued(t) if t.reason.contains("released") => {
                            Some(t.clone())
                        }
                        _ => None,
                    })
            }
        },
    )
    .await;
    assert!(
        released.reason.contains("attempt was returned"),
        "{released:?}"
    );
    let cached_at = std::fs::metadata(data_a.join(&cached))
        .unwrap()
        .modified()
        .unwrap();
    // Started again on the same data folder.
    let mut worker_a2 = Container::of(NODE_IMAGE);
    worker_a2.run(
        &["shardwork-node", "worker"],
        &node_env(5),
        &data_a,
        &dir.path().join("worker-5-again.log"),
    );

    let status = job_end(&requester, job_id, Duration::from_secs(1200)).await;
    let events = requester.events(job_id, 0).await.unwrap();
    assert_eq!(
        status,
        JobStatus::Completed,
        "api log:\n{}\nvalidator log:\n{}",
        api.log_text(),
        validator.running.as_ref().unwrap().log_text()
    );
    let completed = events
        .iter()
        .find_map(|e| match &e.event {
            JobEvent::Completed(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        completed
            .payouts
            .iter()
            .any(|p| p.amount_wei != "0" && p.address.eq_ignore_ascii_case(&address(6))),
        "worker B was paid: {completed:?}"
    );

    // The health check inside the image passes while a node runs in that data folder.
    let (ok, text) = worker_b.exec(
        &["shardwork-node", "health"],
        &[],
        &data_folder(dir.path(), "worker-6"),
    );
    assert!(ok, "{text}");

    // The model cache and the traces are in the data folders; the restarted worker reused its
    // cached model (the file was not written again).
    assert_eq!(
        std::fs::metadata(data_a.join(&cached))
            .unwrap()
            .modified()
            .unwrap(),
        cached_at,
        "the restarted worker downloaded its model again"
    );
    assert!(
        files_under(&data_b).iter().any(|f| cached_model(f, &name)),
        "worker B's model cache is in its data folder"
    );
    assert!(
        files_under(&validator_data)
            .iter()
            .any(|f| f.starts_with("node/")),
        "the validator works in its data folder"
    );

    // Nothing was written outside the data folders.
    for (who, container) in [
        ("validator", &validator),
        ("worker B", &worker_b),
        ("worker A, again", &worker_a2),
    ] {
        let changed = container.root_changes(before);
        assert!(changed.is_empty(), "{who} wrote {changed:?} in its root");
    }
    drop(worker_a2);
}
