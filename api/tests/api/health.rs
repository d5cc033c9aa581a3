use actix_web::test::TestRequest;

use crate::helpers::{Backend, TestApp, config, send};
use crate::on_both_databases;

async fn healthz_and_readyz_answer_when_the_database_does(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let reply = send(&service, TestRequest::get().uri("/healthz")).await;
    assert_eq!(
        (reply.status, reply.body["status"].as_str()),
        (200, Some("ok"))
    );
    let reply = send(&service, TestRequest::get().uri("/readyz")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.headers.contains_key("x-request-id"));
    // The background loops were not started here: this process stands by.
    assert_eq!(reply.body["background"], "standby");
}

async fn readyz_is_503_problem_when_the_database_is_gone(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    app.db.clone().close().await.expect("close pool");
    let reply = send(&service, TestRequest::get().uri("/readyz")).await;
    reply.problem(503, "unavailable");
    // Liveness does not depend on the database.
    assert_eq!(
        send(&service, TestRequest::get().uri("/healthz"))
            .await
            .status,
        200
    );
}

async fn metrics_count_requests_by_route_pattern(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    send(&service, TestRequest::get().uri("/healthz")).await;
    send(&service, TestRequest::get().uri("/healthz")).await;
    send(&service, TestRequest::get().uri("/no/such/thing")).await;
    let reply = send(&service, TestRequest::get().uri("/metrics")).await;
    assert_eq!(reply.status, 200);
    assert!(reply.content_type.starts_with("text/plain; version=0.0.4"));
    assert!(
        reply.text.contains(
            "shardwork_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 2"
        ),
        "{}",
        reply.text
    );
    // Unrouted paths share one label value, so scanners cannot blow up cardinality.
    assert!(
        reply.text.contains("route=\"unmatched\",status=\"404\"} 1"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("/no/such/thing"));
}

async fn unknown_route_and_method_are_problem_json(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let reply = send(&service, TestRequest::get().uri("/v1/nope")).await;
    reply.problem(404, "not-found");
    let reply = send(&service, TestRequest::delete().uri("/v1/jobs")).await;
    reply.problem(405, "method-not-allowed");
    assert_eq!(
        reply.header("allow"),
        "GET, POST",
        "RFC 9110 requires Allow on 405"
    );
    let reply = send(&service, TestRequest::get().uri("/v1/auth/verify")).await;
    reply.problem(405, "method-not-allowed");
    assert_eq!(reply.header("allow"), "POST");
    let reply = send(
        &service,
        TestRequest::delete().uri("/v1/jobs/00000000-0000-0000-0000-000000000000"),
    )
    .await;
    assert_eq!(reply.header("allow"), "GET", "patterns with parameters too");
}

async fn rate_limit_answers_429_with_retry_after_but_spares_probes(backend: Backend) {
    let config = shardwork_api::ApiConfig {
        rate_limit_per_minute: 3,
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    // Three are admitted; the fourth is refused, or (if a minute boundary passed meanwhile)
    // one of the next three is.
    let mut statuses = Vec::new();
    let limited = loop {
        let reply = send(&service, TestRequest::get().uri("/v1/auth/me")).await;
        statuses.push(reply.status);
        if reply.status == 429 || statuses.len() == 7 {
            break reply;
        }
    };
    assert!(statuses[..3].iter().all(|s| *s == 401), "{statuses:?}");
    limited.problem(429, "rate-limited");
    let retry: i64 = limited.header("retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    for _ in 0..5 {
        assert_eq!(
            send(&service, TestRequest::get().uri("/healthz"))
                .await
                .status,
            200
        );
    }
}

on_both_databases!(
    healthz_and_readyz_answer_when_the_database_does,
    readyz_is_503_problem_when_the_database_is_gone,
    metrics_count_requests_by_route_pattern,
    unknown_route_and_method_are_problem_json,
    rate_limit_answers_429_with_retry_after_but_spares_probes,
);

/// The real server (not the test service) over a fresh SQLite app, bound on a random port:
/// the app (its database must outlive the server), the port and the running server. `None`
/// when the app cannot start here.
async fn serving() -> Option<(
    TestApp,
    u16,
    actix_web::rt::task::JoinHandle<Result<(), shardwork_api::StartupError>>,
)> {
    let app = TestApp::start(Backend::Sqlite).await?;
    let ports = shardwork_api::Ports {
        db: app.db.clone(),
        store: app.state.store.clone(),
        queue: app.state.queue.clone(),
        chain: None,
    };
    let config = shardwork_api::ApiConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..config()
    };
    let server = shardwork_api::Application::build(config, ports).expect("bind");
    let port = server.port;
    Some((app, port, actix_web::rt::spawn(server.run_until_stopped())))
}

/// The real server (not the test service): bound on a random port, answering raw HTTP/1.1.
#[actix_web::test]
async fn application_serves_http_on_the_port_it_bound() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((_app, port, running)) = serving().await else {
        return;
    };
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.ends_with(r#"{"status":"ok"}"#), "{response}");
    running.abort();
}

/// A worker extends its lease every 5 s over one pooled connection: that connection, idle for
/// longer than the heartbeat, is still open for the next request. With actix's default 5 s
/// keep-alive the server closed it as the worker sent, and the request failed and was retried.
#[actix_web::test]
async fn a_connection_idle_past_a_workers_heartbeat_still_serves() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let Some((_app, port, running)) = serving().await else {
        return;
    };
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut stream = BufReader::new(stream);
    // One keep-alive request and its whole response (status line, headers, body), read to
    // the end of its body and no further.
    async fn health(stream: &mut BufReader<tokio::net::TcpStream>) -> std::io::Result<String> {
        stream
            .get_mut()
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await?;
        let (mut head, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await?;
        Ok(head + &String::from_utf8_lossy(&body))
    }
    let first = health(&mut stream).await.expect("first request");
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    tokio::time::sleep(std::time::Duration::from_millis(6_000)).await;
    let again = health(&mut stream)
        .await
        .expect("the server closed a connection idle for 6 s");
    assert!(again.starts_with("HTTP/1.1 200 OK"), "{again}");
    running.abort();
}

#[actix_web::test]
async fn server_refuses_to_start_with_a_short_jwt_secret() {
    let Some(app) = TestApp::start(Backend::Sqlite).await else {
        return;
    };
    let ports = shardwork_api::Ports {
        db: app.db.clone(),
        store: app.state.store.clone(),
        queue: app.state.queue.clone(),
        chain: None,
    };
    let config = shardwork_api::ApiConfig {
        jwt_secret: shardwork_api::configuration::Secret::new("short"),
        ..config()
    };
    let err = shardwork_api::Application::build(config, ports)
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("api.jwt_secret: must be at least 32 bytes"),
        "{err}"
    );
}
