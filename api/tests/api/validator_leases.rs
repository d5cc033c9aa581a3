//! Issue 47, item 2: several validators share one deployment through leases on their work.
//! Each scoring, proof replay and merge is held by one validator at a time: the others do not
//! see it listed, cannot lease it and cannot record its outcome; a lease its holder stops
//! renewing lapses and the work goes to the next validator that asks; recording the outcome
//! ends the lease.

use std::time::Duration;

use alloy::signers::local::PrivateKeySigner;
use serde_json::{Value, json};
use shardwork_api::background::outbox::Dispatcher;

use crate::flow::{
    get, post_json, put, register_cpu_worker, sealed_merge, started_job, submit, take_tasks,
};
use crate::helpers::*;
use crate::on_both_databases;

/// How long a validator lease lasts here: short, so a lapse is waited for in the test.
const LEASE_SECS: u64 = 2;

fn second_validator() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x77; 32].into()).unwrap()
}

fn lease(token: &str, work: Value) -> actix_web::test::TestRequest {
    post_json(token, "/v1/validator/leases", work)
}

fn ids(page: &Value, list: &str) -> Vec<String> {
    page[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.get("submission_id")
                .map(|id| id.as_str().unwrap().to_owned())
                .unwrap_or_else(|| format!("{}:{}", s["job_id"].as_str().unwrap(), s["round"]))
        })
        .collect()
}

async fn validators_share_the_work_through_leases(backend: Backend) {
    let mut config = config();
    config
        .validator_addresses
        .push(address(&second_validator()));
    config.validator_lease_secs = LEASE_SECS;
    let Some(app) = TestApp::with_config_and_chain(backend, config, true).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (_, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let a = access_token(&service, &validator_key(), &["validator"]).await;
    let b = access_token(&service, &second_validator(), &["validator"]).await;
    let a_address = address(&validator_key()).to_string();
    let b_address = address(&second_validator()).to_string();
    let r = send(&service, register_cpu_worker(&worker)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let tasks = take_tasks(&app, 3).await;
    let mut submissions = Vec::new();
    for (n, task) in tasks.iter().enumerate() {
        let claim = send(
            &service,
            post_json(
                &worker,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.status, 200, "{}", claim.text);
        let token = claim.body["lease_token"].as_str().unwrap().to_owned();
        let adapter = put(&app, &format!("adapter {n}")).await;
        let metrics = put(&app, &format!("{{\"n\": {n}}}")).await;
        let r = send(
            &service,
            submit(&worker, task.task_id, &token, &adapter, &metrics),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        submissions.push(r.body["id"].as_str().unwrap().to_owned());
    }
    let first = &submissions[0];
    let verdict_work = json!({"kind": "verdict", "submission_id": first});

    // A takes the verdict: B no longer sees it listed, cannot lease it, cannot record it.
    let taken = send(&service, lease(&a, verdict_work.clone())).await;
    assert_eq!(taken.status, 200, "{}", taken.text);
    assert_eq!(taken.body["holder"], a_address.as_str());
    assert_eq!(taken.body["work"], verdict_work);
    let pending = |token: &str| get(token, "/v1/validator/submissions");
    let listed_b = send(&service, pending(&b)).await;
    assert_eq!(
        ids(&listed_b.body, "submissions"),
        submissions[1..].to_vec(),
        "B does not see what A scores"
    );
    let listed_a = send(&service, pending(&a)).await;
    assert_eq!(
        ids(&listed_a.body, "submissions"),
        submissions,
        "A sees its own"
    );
    let refused = send(&service, lease(&b, verdict_work.clone())).await;
    let problem = refused.problem(409, "conflict");
    assert!(
        problem["detail"].as_str().unwrap().contains(&a_address),
        "the refusal names the holder: {}",
        refused.text
    );
    let accept = |token: &str, id: &str, proof_due: bool| {
        post_json(
            token,
            &format!("/v1/validator/submissions/{id}/verdict"),
            json!({"accepted": true, "quality": 0.8, "report": {"metric": 0.9}, "proof_due": proof_due}),
        )
    };
    send(&service, accept(&b, first, true))
        .await
        .problem(409, "conflict");

    // A's heartbeat keeps its start and moves the expiry on.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let renewed = send(&service, lease(&a, verdict_work.clone())).await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    assert_eq!(renewed.body["leased_at"], taken.body["leased_at"]);
    assert_ne!(renewed.body["expires_at"], taken.body["expires_at"]);

    // A goes silent: its lease lapses, B takes the work, and A can neither renew nor record.
    tokio::time::sleep(Duration::from_millis(LEASE_SECS * 1_000 + 300)).await;
    let listed_b = send(&service, pending(&b)).await;
    assert_eq!(ids(&listed_b.body, "submissions"), submissions);
    let retaken = send(&service, lease(&b, verdict_work.clone())).await;
    assert_eq!(retaken.status, 200, "{}", retaken.text);
    assert_eq!(retaken.body["holder"], b_address.as_str());
    send(&service, lease(&a, verdict_work.clone()))
        .await
        .problem(409, "conflict");
    send(&service, accept(&a, first, true))
        .await
        .problem(409, "conflict");
    let judged = send(&service, accept(&b, first, true)).await;
    assert_eq!(judged.status, 200, "{}", judged.text);
    assert_eq!(judged.body["proof"], "pending");
    // Done work is not leased again; unknown work and malformed requests say what is wrong.
    let done = send(&service, lease(&a, verdict_work.clone())).await;
    assert!(
        done.problem(409, "conflict")["detail"]
            .as_str()
            .unwrap()
            .contains("not due"),
        "{}",
        done.text
    );
    send(
        &service,
        lease(
            &a,
            json!({"kind": "verdict", "submission_id": uuid::Uuid::new_v4()}),
        ),
    )
    .await
    .problem(404, "not-found");
    let malformed = send(&service, lease(&a, json!({"kind": "everything"}))).await;
    assert_eq!(malformed.status, 400, "{}", malformed.text);
    send(&service, lease(&worker, verdict_work))
        .await
        .problem(403, "forbidden");

    // The proof: A replays it, B neither sees nor records it; A's check ends the lease.
    let proof_work = json!({"kind": "proof", "submission_id": first});
    let replaying = send(&service, lease(&a, proof_work.clone())).await;
    assert_eq!(replaying.status, 200, "{}", replaying.text);
    let proofs_b = send(&service, get(&b, "/v1/validator/proofs")).await;
    assert!(
        ids(&proofs_b.body, "submissions").is_empty(),
        "{}",
        proofs_b.text
    );
    let check = json!({"passed": true, "stretches": []});
    let path = format!("/v1/validator/submissions/{first}/proof");
    send(&service, post_json(&b, &path, check.clone()))
        .await
        .problem(409, "conflict");
    let checked = send(&service, post_json(&a, &path, check)).await;
    assert_eq!(checked.status, 200, "{}", checked.text);
    send(&service, lease(&b, proof_work))
        .await
        .problem(409, "conflict");

    // The others judged without leases (allowed: one verdict each all the same), the round is
    // ready; B takes the merge, A neither sees nor records it.
    for id in &submissions[1..] {
        let r = send(&service, accept(&a, id, false)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let merge_work = json!({"kind": "merge", "job_id": job_id, "round": 1});
    let merging = send(&service, lease(&b, merge_work.clone())).await;
    assert_eq!(merging.status, 200, "{}", merging.text);
    let rounds_a = send(&service, get(&a, "/v1/validator/rounds")).await;
    assert!(
        ids(&rounds_a.body, "rounds").is_empty(),
        "{}",
        rounds_a.text
    );
    let rounds_b = send(&service, get(&b, "/v1/validator/rounds")).await;
    assert_eq!(ids(&rounds_b.body, "rounds"), vec![format!("{job_id}:1")]);
    let merged = sealed_merge(&app, &job_id, 1, b"merged").await;
    let aggregate = |token: &str| {
        post_json(
            token,
            &format!("/v1/jobs/{job_id}/rounds/1/aggregate"),
            json!({"adapter_cid": merged, "metric": 0.9, "base_metric": 0.5, "metric_name": "accuracy"}),
        )
    };
    send(&service, aggregate(&a)).await.problem(409, "conflict");
    let r = send(&service, aggregate(&b)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    send(&service, lease(&a, merge_work))
        .await
        .problem(409, "conflict");
}

on_both_databases!(validators_share_the_work_through_leases);
