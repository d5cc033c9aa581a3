//! The API against its own description, by property-based testing: schemathesis reads
//! `/openapi.json` from the real server (on SQLite, and on PostgreSQL where the JSON and text
//! columns are stricter), generates valid and invalid requests for every
//! operation, sends them with the token of the role each operation declares, and reports any
//! 5xx, undocumented status, wrong content type, or body that breaks its schema. Any finding
//! fails the test.
//!
//! schemathesis is installed by `scripts/install/python-schemathesis` into `.tools/`; without it
//! the test is skipped (recorded for `scripts/test`), unless SHARDWORK_REQUIRE_SERVICES=1.

use std::path::PathBuf;
use std::time::Instant;

use shardwork_api::http::openapi::{ApiDoc, DocRole};
use shardwork_api::{Application, Ports};
use shardwork_core::testkit::services::{record_skip, services_required};
use utoipa::OpenApi;

use crate::helpers::*;
use crate::jobs::{dataset, post_job};
use crate::on_both_databases;
use crate::quote::spec;

const SUITE: &str = "api contract (schemathesis)";

/// The checks run on every response. Beyond status, content type, headers and body matching
/// the description: `negative_data_rejection` (data the schema forbids is refused with a 4xx,
/// so the schema is never looser than the server), `ignored_auth` (an operation that declares
/// the bearer scheme refuses requests without a token or with a bad one), `unsupported_method`
/// and `allow_header_conformance` (undocumented methods get 405 with a matching `Allow`).
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,response_headers_conformance,\
                      negative_data_rejection,ignored_auth,unsupported_method,\
                      allow_header_conformance";

/// Generated cases per operation and phase: enough to reach every documented status of every
/// operation, small enough to finish well inside two minutes on two cores. A deeper local run:
/// SHARDWORK_SCHEMATHESIS_EXAMPLES=500.
const MAX_EXAMPLES: &str = "25";

/// A fixed seed, so a failure reproduces.
const SEED: &str = "20251122";

fn schemathesis() -> Option<PathBuf> {
    let path = std::env::var_os("SHARDWORK_SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools/schemathesis/bin/schemathesis")
        });
    if path.is_file() {
        return Some(path);
    }
    let why = format!(
        "schemathesis not found at {} (run scripts/install/python-schemathesis)",
        path.display()
    );
    if services_required() {
        panic!("{SUITE}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
    }
    record_skip(SUITE, &why);
    None
}

/// How many operations declare `role`.
fn operations_of(role: DocRole) -> usize {
    let doc = ApiDoc::openapi();
    doc.paths
        .paths
        .values()
        .flat_map(|item| {
            [&item.get, &item.post, &item.put, &item.patch, &item.delete]
                .into_iter()
                .flatten()
        })
        .filter(|operation| DocRole::of(operation) == Some(role))
        .count()
}

on_both_databases!(generated_requests_find_no_server_error_or_contract_breach);

async fn generated_requests_find_no_server_error_or_contract_breach(backend: Backend) {
    let Some(cli) = schemathesis() else {
        return;
    };
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let callers = [
        (DocRole::Public, None),
        (DocRole::Requester, Some(requester.clone())),
        (
            DocRole::Worker,
            Some(access_token(&service, &worker_key(), &["worker"]).await),
        ),
        (
            DocRole::Validator,
            Some(access_token(&service, &validator_key(), &["validator"]).await),
        ),
        (
            DocRole::Admin,
            Some(access_token(&service, &admin_key(), &["admin"]).await),
        ),
    ];

    // One real job for every `{id}`, so generated queries get past the lookup. Cancelled, so
    // its event stream ends instead of waiting for events that never come.
    let reply = send(&service, post_job(&requester, &spec(), &dataset(40))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    let cancel = actix_web::test::TestRequest::post()
        .uri(&format!("/v1/jobs/{job_id}/cancel"))
        .insert_header(bearer(&requester));
    assert_eq!(send(&service, cancel).await.status, 200);

    // The real server, on a port of the OS's choosing, over the same database and secrets.
    let mut config = config();
    config.bind = "127.0.0.1:0".parse().unwrap();
    let ports = Ports {
        db: app.db.clone(),
        store: app.state.store.clone(),
        queue: app.state.queue.clone(),
        chain: app.state.chain.clone(),
    };
    let server = Application::build(config, ports).expect("bind");
    let url = format!("http://127.0.0.1:{}/openapi.json", server.port);
    let running = actix_web::rt::spawn(server.run_until_stopped());

    let work = tempfile::tempdir().unwrap();
    let settings = work.path().join("schemathesis.toml");
    std::fs::write(
        &settings,
        format!("max-stream-events = 50\nrequest-timeout = 10\n\n[parameters]\n\"path.id\" = \"{job_id}\"\n"),
    )
    .unwrap();

    let max_examples =
        std::env::var("SHARDWORK_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| MAX_EXAMPLES.into());
    let started = Instant::now();
    let mut findings = Vec::new();
    for (role, token) in &callers {
        let operations = operations_of(*role);
        if operations == 0 {
            continue;
        }
        let mut command = tokio::process::Command::new(&cli);
        command
            .current_dir(work.path())
            .arg("--config-file")
            .arg(&settings)
            .arg("run")
            .arg(&url)
            .args([
                "--include-by",
                &format!("/x-shardwork-role == \"{}\"", role.as_str()),
            ])
            .args(["--checks", CHECKS])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--max-examples", &max_examples])
            .args(["--seed", SEED])
            .args(["--generation-database", "none"])
            .args(["--workers", "1"])
            .arg("--no-color");
        if let Some(token) = token {
            command.args(["--header", &format!("Authorization: Bearer {token}")]);
        }
        let output = command.output().await.expect("run schemathesis");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "--- schemathesis as {} ({operations} operations):\n{text}",
            role.as_str()
        );
        if !output.status.success() {
            findings.push(format!("as {}:\n{text}", role.as_str()));
        }
    }
    running.abort();
    eprintln!("schemathesis took {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        findings.is_empty(),
        "schemathesis found problems:\n{}",
        findings.join("\n")
    );
}
