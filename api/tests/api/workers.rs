use actix_web::test::TestRequest;
use serde_json::json;

use crate::helpers::*;
use crate::on_both_databases;

fn register(token: &str, capabilities: serde_json::Value) -> TestRequest {
    TestRequest::post()
        .uri("/v1/workers/register")
        .insert_header(bearer(token))
        .set_json(json!({ "capabilities": capabilities }))
}

async fn worker_registers_heartbeats_and_reads_its_profile(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &worker_key(), &["worker"]).await;

    let me = TestRequest::get()
        .uri("/v1/workers/me")
        .insert_header(bearer(&token));
    send(&service, me).await.problem(404, "not-found");
    let beat = || {
        TestRequest::post()
            .uri("/v1/workers/heartbeat")
            .insert_header(bearer(&token))
    };
    send(&service, beat()).await.problem(404, "not-found");

    let reply = send(
        &service,
        register(&token, json!({ "device": "cpu", "memory_mb": 8192 })),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.body["address"], address(&worker_key()).to_string());
    assert_eq!(reply.body["reputation"], 0);
    assert_eq!(reply.body["earnings_wei"], "0");
    assert_eq!(
        reply.body["submissions"],
        serde_json::json!({"accepted": 0, "rejected": 0, "pending": 0})
    );
    assert!(reply.body["last_heartbeat_at"].is_null());

    assert_eq!(send(&service, beat()).await.status, 204);
    let reply = send(
        &service,
        register(
            &token,
            json!({ "device": "gpu", "memory_mb": 8192, "gpu_memory_mb": 24576 }),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "re-registering updates: {}", reply.text);

    let me = TestRequest::get()
        .uri("/v1/workers/me")
        .insert_header(bearer(&token));
    let reply = send(&service, me).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["capabilities"]["gpu_memory_mb"], 24576);
    assert!(
        reply.body["last_heartbeat_at"].is_string(),
        "{}",
        reply.text
    );

    // Once registered, signing in grants the worker role without asking.
    let tokens = sign_in(&service, &worker_key(), &[]).await;
    assert_eq!(tokens["roles"], json!(["requester", "worker"]));
}

async fn worker_endpoints_refuse_other_roles(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let validator = access_token(&service, &validator_key(), &[]).await;
    for token in [&requester, &validator] {
        let reply = send(
            &service,
            register(token, json!({ "device": "cpu", "memory_mb": 1 })),
        )
        .await;
        let detail = reply.problem(403, "forbidden")["detail"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(detail.contains("needs the worker role"), "{detail}");
        let reply = send(
            &service,
            TestRequest::get()
                .uri("/v1/workers/me")
                .insert_header(bearer(token)),
        )
        .await;
        reply.problem(403, "forbidden");
    }
    let reply = send(&service, TestRequest::post().uri("/v1/workers/heartbeat")).await;
    reply.problem(401, "unauthenticated");
}

async fn bad_capabilities_name_the_field(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &worker_key(), &["worker"]).await;
    for (capabilities, status, path) in [
        (
            json!({ "device": "gpu", "memory_mb": 1024 }),
            422,
            "capabilities.gpu_memory_mb",
        ),
        (
            json!({ "device": "cpu", "memory_mb": 0 }),
            422,
            "capabilities.memory_mb",
        ),
        (
            json!({ "device": "cpu", "memory_mb": 1, "gpu_memory_mb": 1 }),
            422,
            "capabilities.gpu_memory_mb",
        ),
        (
            json!({ "device": "tpu", "memory_mb": 1 }),
            400,
            "capabilities.device",
        ),
        (
            json!({ "device": "cpu", "memory_mb": -1 }),
            400,
            "capabilities.memory_mb",
        ),
    ] {
        let reply = send(&service, register(&token, capabilities.clone())).await;
        assert_eq!(reply.status, status, "{capabilities}: {}", reply.text);
        assert_eq!(reply.paths(), [path], "{capabilities}");
    }
}

on_both_databases!(
    worker_registers_heartbeats_and_reads_its_profile,
    worker_endpoints_refuse_other_roles,
    bad_capabilities_name_the_field,
);
