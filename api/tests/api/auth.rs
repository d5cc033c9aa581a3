use actix_web::test::TestRequest;
use chrono::{Duration, Utc};
use sea_orm::{ActiveValue::Set, EntityTrait};
use serde_json::json;
use shardwork_api::entities::siwe_nonce;
use shardwork_api::http::auth::{Role, TokenKind};

use crate::helpers::*;
use crate::on_both_databases;

fn verify(message: &str, signature: &str) -> TestRequest {
    TestRequest::post()
        .uri("/v1/auth/verify")
        .set_json(json!({ "message": message, "signature": signature }))
}

async fn sign_in_grants_requester_tokens_that_open_me(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    let tokens = sign_in(&service, &key, &[]).await;
    assert_eq!(tokens["roles"], json!(["requester"]));
    assert_eq!(tokens["address"], address(&key).to_string());
    assert_eq!(tokens["token_type"], "Bearer");
    let token = tokens["access_token"].as_str().unwrap();
    let me = send(
        &service,
        TestRequest::get()
            .uri("/v1/auth/me")
            .insert_header(bearer(token)),
    )
    .await;
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!(me.body["address"], address(&key).to_string());
}

async fn nonce_is_spent_by_the_first_sign_in(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    let nonce = fresh_nonce(&service).await;
    let message = siwe_message(&key, &nonce).render();
    let signature = sign(&key, &message);
    assert_eq!(
        send(&service, verify(&message, &signature)).await.status,
        200
    );
    let replay = send(&service, verify(&message, &signature)).await;
    let body = replay.problem(401, "unauthenticated");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("already been used"),
        "{}",
        replay.text
    );
    assert!(replay.headers.contains_key("www-authenticate"));
}

async fn racing_sign_ins_with_one_nonce_admit_exactly_one(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    let nonce = fresh_nonce(&service).await;
    let message = siwe_message(&key, &nonce).render();
    let signature = sign(&key, &message);
    let replies =
        futures::future::join_all((0..4).map(|_| send(&service, verify(&message, &signature))))
            .await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 401, 401, 401]);
}

async fn unknown_and_expired_nonces_are_refused(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    let message = siwe_message(&key, "neverissued123").render();
    let reply = send(&service, verify(&message, &sign(&key, &message))).await;
    assert!(
        reply.problem(401, "unauthenticated")["detail"]
            .as_str()
            .unwrap()
            .contains("not issued")
    );

    let past = Utc::now() - Duration::minutes(1);
    siwe_nonce::Entity::insert(siwe_nonce::ActiveModel {
        nonce: Set("expirednonce123".into()),
        created_at: Set(past - Duration::minutes(5)),
        expires_at: Set(past),
        used_at: Set(None),
    })
    .exec(&app.db)
    .await
    .unwrap();
    let message = siwe_message(&key, "expirednonce123").render();
    let reply = send(&service, verify(&message, &sign(&key, &message))).await;
    assert!(
        reply.problem(401, "unauthenticated")["detail"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
}

async fn message_for_another_domain_chain_or_signer_is_refused(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    for (tamper, expected) in [
        ("domain", "this server is"),
        ("chain", "chain 1"),
        ("expired", "has expired"),
    ] {
        let mut message = siwe_message(&key, &fresh_nonce(&service).await);
        match tamper {
            "domain" => message.domain = "evil.example".into(),
            "chain" => message.chain_id = 1,
            _ => message.expiration_time = Some(Utc::now() - Duration::seconds(1)),
        }
        let text = message.render();
        let reply = send(&service, verify(&text, &sign(&key, &text))).await;
        let detail = reply.problem(401, "unauthenticated")["detail"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(detail.contains(expected), "{tamper}: {detail}");
    }
    // Signed by someone else than the address in the message.
    let text = siwe_message(&key, &fresh_nonce(&service).await).render();
    let reply = send(&service, verify(&text, &sign(&worker_key(), &text))).await;
    let detail = reply.problem(401, "unauthenticated")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.contains(&format!("not by {}", address(&key))),
        "{detail}"
    );
}

async fn malformed_sign_in_requests_name_the_field(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let key = requester_key();
    let text = siwe_message(&key, &fresh_nonce(&service).await).render();
    let lower = text.replace(&key.address().to_checksum(None), &address(&key).to_string());
    let reply = send(&service, verify(&lower, &sign(&key, &lower))).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["message.address"]);

    let reply = send(&service, verify(&text, "0x1234")).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["signature"]);

    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .set_json(json!({ "message": text, "signature": "0x", "rolez": [] })),
    )
    .await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["rolez"]);

    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .set_json(json!({ "message": text, "signature": "0x", "roles": ["king"] })),
    )
    .await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["roles[0]"]);

    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .insert_header(("content-type", "application/json"))
            .set_payload("{\"message\": "),
    )
    .await;
    reply.problem(400, "malformed-request");

    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .set_payload("message=x"),
    )
    .await;
    assert!(
        reply.problem(400, "malformed-request")["detail"]
            .as_str()
            .unwrap()
            .contains("Content-Type")
    );
}

async fn oversized_body_is_413(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let huge = "x".repeat(app.state.config.json_limit_bytes + 1);
    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .set_json(json!({ "message": huge, "signature": "0x" })),
    )
    .await;
    reply.problem(413, "payload-too-large");
}

async fn privileged_roles_come_only_from_configuration(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    // Asking for a role one is not configured for is refused outright.
    let key = requester_key();
    let text = siwe_message(&key, &fresh_nonce(&service).await).render();
    let reply = send(
        &service,
        TestRequest::post().uri("/v1/auth/verify").set_json(
            json!({ "message": text, "signature": sign(&key, &text), "roles": ["validator"] }),
        ),
    )
    .await;
    reply.problem(403, "forbidden");

    let validator = sign_in(&service, &validator_key(), &[]).await;
    assert_eq!(validator["roles"], json!(["requester", "validator"]));
    let admin = sign_in(&service, &admin_key(), &[]).await;
    assert_eq!(admin["roles"], json!(["requester", "admin"]));
    let worker = sign_in(&service, &worker_key(), &["worker"]).await;
    assert_eq!(worker["roles"], json!(["requester", "worker"]));
}

async fn refresh_trades_a_refresh_token_and_only_that(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let tokens = sign_in(&service, &worker_key(), &["worker"]).await;
    let refresh = |token: &str| {
        TestRequest::post()
            .uri("/v1/auth/refresh")
            .set_json(json!({ "refresh_token": token }))
    };
    let reply = send(&service, refresh(tokens["refresh_token"].as_str().unwrap())).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["roles"],
        json!(["requester", "worker"]),
        "the worker role survives"
    );
    assert_ne!(reply.body["access_token"], tokens["access_token"]);

    // An access token is not a refresh token, and vice versa.
    let reply = send(&service, refresh(tokens["access_token"].as_str().unwrap())).await;
    reply.problem(401, "unauthenticated");
    let reply = send(
        &service,
        TestRequest::get()
            .uri("/v1/auth/me")
            .insert_header(bearer(tokens["refresh_token"].as_str().unwrap())),
    )
    .await;
    reply.problem(401, "unauthenticated");
}

async fn missing_garbage_and_expired_tokens_are_401(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let reply = send(&service, TestRequest::get().uri("/v1/auth/me")).await;
    reply.problem(401, "unauthenticated");
    assert_eq!(reply.header("www-authenticate"), "Bearer");

    let reply = send(
        &service,
        TestRequest::get()
            .uri("/v1/auth/me")
            .insert_header(bearer("not.a.jwt")),
    )
    .await;
    reply.problem(401, "unauthenticated");

    let reply = send(
        &service,
        TestRequest::get()
            .uri("/v1/auth/me")
            .insert_header(("Authorization", "Basic abc")),
    )
    .await;
    reply.problem(401, "unauthenticated");

    let an_hour_ago = Utc::now() - Duration::hours(1);
    let (expired, _) = app.state.tokens.issue(
        address(&requester_key()),
        &[Role::Requester],
        TokenKind::Access,
        an_hour_ago,
    );
    let reply = send(
        &service,
        TestRequest::get()
            .uri("/v1/auth/me")
            .insert_header(bearer(&expired)),
    )
    .await;
    let detail = reply.problem(401, "unauthenticated")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(detail.contains("expired"), "{detail}");
}

/// A committed write wakes the outbox dispatcher at once (a merge's next round is published
/// without waiting for the dispatcher's poll); reads and refused writes do not.
async fn a_committed_write_wakes_the_outbox_and_reads_do_not(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let woken = || {
        let signal = app.state.wakeups.outbox.clone();
        async move {
            tokio::time::timeout(std::time::Duration::from_millis(100), signal.notified())
                .await
                .is_ok()
        }
    };
    let health = send(&service, TestRequest::get().uri("/healthz")).await;
    assert_eq!(health.status, 200, "{}", health.text);
    assert!(!woken().await, "a read woke the dispatcher");
    let refused = send(&service, verify("not a sign-in message", "0x00")).await;
    assert!(refused.status >= 400, "{}", refused.text);
    assert!(!woken().await, "a refused write woke the dispatcher");
    let nonce = send(&service, TestRequest::post().uri("/v1/auth/nonce")).await;
    assert!(nonce.status < 300, "{}", nonce.text);
    assert!(
        woken().await,
        "a committed write did not wake the dispatcher"
    );
}

on_both_databases!(
    a_committed_write_wakes_the_outbox_and_reads_do_not,
    sign_in_grants_requester_tokens_that_open_me,
    nonce_is_spent_by_the_first_sign_in,
    racing_sign_ins_with_one_nonce_admit_exactly_one,
    unknown_and_expired_nonces_are_refused,
    message_for_another_domain_chain_or_signer_is_refused,
    malformed_sign_in_requests_name_the_field,
    oversized_body_is_413,
    privileged_roles_come_only_from_configuration,
    refresh_trades_a_refresh_token_and_only_that,
    missing_garbage_and_expired_tokens_are_401,
);
