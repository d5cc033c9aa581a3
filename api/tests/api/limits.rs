//! Limits that hold against many identities: the per-address request and sign-in budgets
//! (a client minting fresh identities gets no more than its address's), the trusted-proxy rule
//! for whose address a request is, and the cap on open event streams.

use std::net::SocketAddr;

use actix_web::test::{self, TestRequest};
use alloy::signers::local::PrivateKeySigner;
use chrono::{Timelike, Utc};

use crate::helpers::*;
use crate::jobs::{dataset, post_job};
use crate::on_both_databases;
use crate::quote::spec;

const ATTACKER: &str = "203.0.113.7:40000";
const NEIGHBOUR: &str = "198.51.100.9:40000";
/// The one proxy the tests' configurations trust.
const PROXY: &str = "10.0.0.2:40000";

fn peer(addr: &str) -> SocketAddr {
    addr.parse().unwrap()
}

/// The budgets are calendar minutes: a test that must see one minute's budget spent starts
/// early enough in a minute to finish inside it (it runs in about a second).
async fn early_in_a_minute() {
    let second = Utc::now().second();
    if second > 45 {
        tokio::time::sleep(std::time::Duration::from_secs(u64::from(61 - second))).await;
    }
}

/// What one fresh identity's sign-in from `from` came to: how many of its requests were
/// admitted, and its access token or the status that stopped it (and the refusal's detail).
async fn try_sign_in<S, B>(
    service: &S,
    key: &PrivateKeySigner,
    from: &str,
) -> (u32, Result<String, (u16, String)>)
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let refused = |reply: &Reply| {
        if reply.status == 429 {
            reply.problem(429, "rate-limited");
        }
        Err((
            reply.status,
            reply.body["detail"].as_str().unwrap_or("").to_owned(),
        ))
    };
    let reply = send(
        service,
        TestRequest::post()
            .uri("/v1/auth/nonce")
            .peer_addr(peer(from)),
    )
    .await;
    if reply.status != 201 {
        return (0, refused(&reply));
    }
    let message = siwe_message(key, reply.body["nonce"].as_str().unwrap()).render();
    let reply = send(
        service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .peer_addr(peer(from))
            .set_json(serde_json::json!({
                "message": message, "signature": sign(key, &message), "roles": [],
            })),
    )
    .await;
    if reply.status != 200 {
        return (1, refused(&reply));
    }
    (
        2,
        Ok(reply.body["access_token"].as_str().unwrap().to_owned()),
    )
}

fn me(token: &str, from: &str) -> TestRequest {
    TestRequest::get()
        .uri("/v1/auth/me")
        .insert_header(bearer(token))
        .peer_addr(peer(from))
}

/// The attack of issue 46: a hundred fresh identities from one address, each signing in and
/// then spending its own per-caller budget. All of them together get the address's budget,
/// not a hundred callers' worth; another address is untouched; a client's own
/// `X-Forwarded-For` does not move it to another budget, while the trusted proxy's does.
async fn fresh_identities_from_one_address_share_its_budget(backend: Backend) {
    let per_address = 40;
    let config = shardwork_api::ApiConfig {
        rate_limit_per_minute: 1_000,
        rate_limit_per_ip_per_minute: per_address,
        sign_in_per_ip_per_minute: 1_000,
        trusted_proxies: vec![peer(PROXY).ip().into()],
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    early_in_a_minute().await;
    let minute = Utc::now().timestamp() / 60;

    let (mut admitted, mut sent, mut identities) = (0u32, 0u32, 0u32);
    for _ in 0..100 {
        let key = PrivateKeySigner::random();
        let (signing_in, outcome) = try_sign_in(&service, &key, ATTACKER).await;
        admitted += signing_in;
        match outcome {
            Ok(token) => {
                sent += 2;
                identities += 1;
                for _ in 0..5 {
                    sent += 1;
                    let reply = send(&service, me(&token, ATTACKER)).await;
                    if reply.status == 200 {
                        admitted += 1;
                    } else {
                        let problem = reply.problem(429, "rate-limited");
                        let detail = problem["detail"].as_str().unwrap();
                        assert!(detail.contains("from this address"), "{detail}");
                    }
                }
            }
            Err((status, detail)) => {
                sent += signing_in + 1;
                assert_eq!(status, 429, "{detail}");
                assert!(
                    detail.contains(&format!(
                        "more than {per_address} requests this minute from this address"
                    )),
                    "{detail}"
                );
            }
        }
    }
    assert_eq!(
        Utc::now().timestamp() / 60,
        minute,
        "the test outran its minute"
    );
    assert_eq!(
        admitted, per_address,
        "{admitted} of {sent} requests of {identities} identities admitted from one address"
    );
    assert!(sent > 100, "{sent}");
    assert!(identities < 20, "{identities} identities signed in");

    // The client names another address in its own header: still its own budget, spent.
    let spoofed = send(
        &service,
        TestRequest::post()
            .uri("/v1/auth/nonce")
            .peer_addr(peer(ATTACKER))
            .insert_header(("X-Forwarded-For", "198.51.100.77")),
    )
    .await;
    spoofed.problem(429, "rate-limited");
    // Through the trusted proxy, the address the proxy forwards is the one counted.
    let through_proxy = |client: &str| {
        TestRequest::post()
            .uri("/v1/auth/nonce")
            .peer_addr(peer(PROXY))
            .insert_header(("X-Forwarded-For", client.to_owned()))
    };
    send(&service, through_proxy("203.0.113.7"))
        .await
        .problem(429, "rate-limited");
    assert_eq!(
        send(&service, through_proxy("198.51.100.78")).await.status,
        201
    );

    // Another address signs in and is served as if nothing had happened.
    let neighbour = try_sign_in(&service, &requester_key(), NEIGHBOUR)
        .await
        .1
        .expect("another address signs in");
    for _ in 0..5 {
        assert_eq!(send(&service, me(&neighbour, NEIGHBOUR)).await.status, 200);
    }
}

/// Sign-ins have their own, smaller budget per address: a client cannot mint identities
/// faster than that, whatever the general budgets allow.
async fn sign_ins_from_one_address_are_limited(backend: Backend) {
    let per_address = 10;
    let config = shardwork_api::ApiConfig {
        rate_limit_per_minute: 1_000,
        rate_limit_per_ip_per_minute: 1_000,
        sign_in_per_ip_per_minute: per_address,
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    early_in_a_minute().await;

    let mut identities = 0;
    for _ in 0..100 {
        match try_sign_in(&service, &PrivateKeySigner::random(), ATTACKER)
            .await
            .1
        {
            Ok(token) => {
                identities += 1;
                // Other routes are not sign-ins: the budget is not theirs.
                assert_eq!(send(&service, me(&token, ATTACKER)).await.status, 200);
            }
            Err((status, detail)) => {
                assert_eq!(status, 429, "{detail}");
                assert!(
                    detail.contains(&format!("more than {per_address} sign-in requests")),
                    "{detail}"
                );
            }
        }
    }
    assert_eq!(identities, per_address / 2, "two requests make an identity");
    try_sign_in(&service, &requester_key(), NEIGHBOUR)
        .await
        .1
        .expect("another address signs in");
}

/// The detail of a stream request's refusal; fails (without reading an open stream's endless
/// body) when it was not refused.
async fn refusal<S, B>(service: &S, req: TestRequest) -> String
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let response = test::call_service(service, req.to_request()).await;
    assert_eq!(response.status(), 429, "the stream was not refused");
    let headers = response.headers().clone();
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
    assert!(headers.contains_key("retry-after"));
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(response).await).unwrap();
    assert_eq!(body["type"], "urn:shardwork:problem:rate-limited");
    body["detail"].as_str().unwrap().to_owned()
}

fn stream(token: &str, job: &str, from: &str) -> TestRequest {
    TestRequest::get()
        .uri(&format!("/v1/jobs/{job}/events/stream"))
        .insert_header(bearer(token))
        .peer_addr(peer(from))
}

/// Each open stream holds a slot of its caller's and of its address's; past either cap the next
/// is refused with 429 naming the cap, and a stream that closes gives its slot back.
async fn open_event_streams_are_capped_per_caller_and_per_address(backend: Backend) {
    let config = shardwork_api::ApiConfig {
        max_event_streams_per_caller: 2,
        max_event_streams_per_ip: 3,
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let validator = access_token(&service, &validator_key(), &[]).await;
    let job = send(&service, post_job(&alice, &spec(), &dataset(10))).await;
    assert_eq!(job.status, 201, "{}", job.text);
    let job = job.body["id"].as_str().unwrap().to_owned();

    // The responses are kept, unread: each is an open stream until it is dropped.
    let mut open = Vec::new();
    for _ in 0..2 {
        let response =
            test::call_service(&service, stream(&alice, &job, ATTACKER).to_request()).await;
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    let detail = refusal(&service, stream(&alice, &job, NEIGHBOUR)).await;
    assert!(
        detail.contains("max_event_streams_per_caller = 2"),
        "{detail}"
    );

    // Another identity from the same address: one more fits the address's cap of three.
    let response =
        test::call_service(&service, stream(&validator, &job, ATTACKER).to_request()).await;
    assert_eq!(response.status(), 200);
    open.push(response);
    let detail = refusal(&service, stream(&validator, &job, ATTACKER)).await;
    assert!(detail.contains("max_event_streams_per_ip = 3"), "{detail}");
    // From elsewhere the validator has room.
    let elsewhere =
        test::call_service(&service, stream(&validator, &job, NEIGHBOUR).to_request()).await;
    assert_eq!(elsewhere.status(), 200);

    // Alice closes one of hers: she may open another, from the same address.
    drop(open.remove(0));
    let again = test::call_service(&service, stream(&alice, &job, ATTACKER).to_request()).await;
    assert_eq!(again.status(), 200);
    let detail = refusal(&service, stream(&alice, &job, ATTACKER)).await;
    assert!(
        detail.contains("max_event_streams_per_caller = 2"),
        "{detail}"
    );
}

/// The deployment's own validators are not metered per caller: their polling alone is the
/// default budget, and a 429 held a round's verdicts and merge up until the minute turned
/// (issue 47). A requester at the same limit is refused; the validator's client address still
/// is metered.
async fn configured_validators_have_no_per_caller_budget(backend: Backend) {
    let config = shardwork_api::ApiConfig {
        rate_limit_per_minute: 4,
        rate_limit_per_ip_per_minute: 40,
        sign_in_per_ip_per_minute: 1_000,
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    early_in_a_minute().await;
    let (_, validator) = try_sign_in(&service, &validator_key(), NEIGHBOUR).await;
    let validator = validator.unwrap();
    let (_, requester) = try_sign_in(&service, &requester_key(), ATTACKER).await;
    let requester = requester.unwrap();

    for i in 0..12 {
        let reply = send(&service, me(&validator, NEIGHBOUR)).await;
        assert_eq!(reply.status, 200, "the validator's request {i}");
    }
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(send(&service, me(&requester, ATTACKER)).await.status);
    }
    assert!(statuses[..4].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(statuses[4..].iter().all(|s| *s == 429), "{statuses:?}");

    // The address's budget still holds the validator: 2 sign-in requests and 12 above, then
    // until 40.
    let mut refused = None;
    for i in 14..41 {
        let reply = send(&service, me(&validator, NEIGHBOUR)).await;
        if reply.status == 429 {
            refused = Some((i, reply.problem(429, "rate-limited")["detail"].clone()));
            break;
        }
    }
    let (at, detail) = refused.expect("the validator's address is still metered");
    assert_eq!(at, 40, "{detail}");
    assert!(detail.to_string().contains("from this address"), "{detail}");
}

on_both_databases!(
    configured_validators_have_no_per_caller_budget,
    fresh_identities_from_one_address_share_its_budget,
    sign_ins_from_one_address_are_limited,
    open_event_streams_are_capped_per_caller_and_per_address,
);
