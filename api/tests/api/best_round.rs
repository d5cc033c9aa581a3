//! The requester gets the best round, not the last (issue 48, decisions 0046 and 0047): a job
//! whose second merge scored below its first is paid out with the first round's merge as its
//! result, and the result route opens that round's adapter; a job out of patience ends early.

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use serde_json::json;
use shardwork_api::background::outbox::Dispatcher;

use crate::flow::{
    get, post_json, put, register_cpu_worker, sealed_merge, started_job_with, step, submit,
    take_tasks,
};
use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

async fn a_job_whose_last_merge_is_worse_hands_over_its_best_round(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let registered = send(&service, register_cpu_worker(&worker)).await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    let mut s = spec();
    s["shards"] = json!(1);
    s["rounds"] = json!(2);
    let (requester, job_id) = started_job_with(&app, &service, &mut dispatcher, &s).await;

    // Round 1 merges at accuracy 0.95; round 2's merge (the best accepted adapter, its merge
    // having lost) scores 0.90.
    let mut merges = Vec::new();
    for (round, metric) in [(1u32, 0.95), (2, 0.90)] {
        let (merged, outcome) =
            accept_and_merge(&app, &service, &worker, &validator, &job_id, round, metric).await;
        assert_eq!(
            outcome,
            if round == 1 {
                "next_round_opened"
            } else {
                "finalization_queued"
            }
        );
        merges.push(merged);
        step(&app, &mut dispatcher).await;
    }
    for _ in 0..5 {
        let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
        if job.body["status"] == "completed" {
            break;
        }
        step(&app, &mut dispatcher).await;
    }

    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "completed", "{}", job.text);
    assert_eq!(job.body["result_adapter_cid"], merges[0].as_str());
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events?limit=500")),
    )
    .await;
    let finalize = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "finalize")
        .expect("a finalize event");
    assert_eq!(finalize["payload"]["round"], 1, "{finalize}");
    assert_eq!(finalize["payload"]["adapter_cid"], merges[0].as_str());
    let result = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/result")),
    )
    .await;
    assert_eq!(result.status, 200, "{}", result.text);
    assert_eq!(result.body["adapter_cid"], merges[0].as_str());
    assert_eq!(result.body["aggregate"]["metric"], 0.95);
    let file = send(
        &service,
        get(
            &requester,
            &format!("/v1/jobs/{job_id}/result/files/adapter_model.safetensors"),
        ),
    )
    .await;
    assert_eq!(file.text, "merged weights of round 1");
}

/// Round `round`'s one task claimed, submitted, accepted at `metric` and merged at `metric`:
/// the merge's CID and what the merge route said it led to.
async fn accept_and_merge<S, B>(
    app: &TestApp,
    service: &S,
    worker: &str,
    validator: &str,
    job_id: &str,
    round: u32,
    metric: f64,
) -> (String, String)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let task = take_tasks(app, 1).await.remove(0);
    assert_eq!(task.round, round);
    let claim = send(
        service,
        post_json(
            worker,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(claim.status, 200, "{}", claim.text);
    let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
    let adapter = put(app, &format!("round {round} adapter")).await;
    let metrics = put(app, &format!("{{\"round\": {round}}}")).await;
    let submitted = send(
        service,
        submit(worker, task.task_id, &lease, &adapter, &metrics),
    )
    .await;
    assert_eq!(submitted.status, 201, "{}", submitted.text);
    let id = submitted.body["id"].as_str().unwrap();
    let verdict = send(
        service,
        post_json(
            validator,
            &format!("/v1/validator/submissions/{id}/verdict"),
            json!({"accepted": true, "quality": metric, "report": {"metric": metric}, "proof_due": false}),
        ),
    )
    .await;
    assert_eq!(verdict.status, 200, "{}", verdict.text);
    let merged = sealed_merge(
        app,
        job_id,
        round,
        format!("merged weights of round {round}").as_bytes(),
    )
    .await;
    let aggregated = send(
        service,
        post_json(
            validator,
            &format!("/v1/jobs/{job_id}/rounds/{round}/aggregate"),
            json!({"adapter_cid": merged, "metric": metric, "base_metric": 0.5, "metric_name": "accuracy"}),
        ),
    )
    .await;
    assert_eq!(aggregated.status, 200, "{}", aggregated.text);
    let outcome = aggregated.body["outcome"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (merged, outcome)
}

/// `validation.patience` (decision 0047): a three-round job with patience 1 whose second merge
/// scores below its first ends after round 2, on chain through `abortFederatedJob`: two thirds
/// of the stake paid to the work, the third round's share back to the requester, and round 1's
/// merge the result the requester downloads.
async fn a_job_out_of_patience_ends_early_with_its_best_round(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let registered = send(&service, register_cpu_worker(&worker)).await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    let mut s = spec();
    s["shards"] = json!(1);
    s["rounds"] = json!(3);
    s["validation"] = json!({"patience": 1});
    let (requester, job_id) = started_job_with(&app, &service, &mut dispatcher, &s).await;

    let (best, outcome) =
        accept_and_merge(&app, &service, &worker, &validator, &job_id, 1, 0.95).await;
    assert_eq!(outcome, "next_round_opened");
    step(&app, &mut dispatcher).await;
    let (_, outcome) =
        accept_and_merge(&app, &service, &worker, &validator, &job_id, 2, 0.90).await;
    assert_eq!(outcome, "ended_early");
    for _ in 0..5 {
        let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
        if job.body["status"] == "refunded" {
            break;
        }
        step(&app, &mut dispatcher).await;
    }

    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "refunded", "{}", job.text);
    assert_eq!(job.body["current_round"], 2, "round 3 never opened");
    assert_eq!(job.body["result_adapter_cid"], best.as_str());
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events?limit=500")),
    )
    .await;
    let events = events.body["events"].as_array().unwrap().clone();
    let of = |kind: &str| events.iter().find(|e| e["kind"] == kind).cloned();
    let due = of("abort_due").expect("an abort_due event");
    let reason = due["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("validation.patience"), "{reason}");
    assert!(reason.contains("round 1"), "{reason}");
    assert!(of("round_opened").is_some());
    assert_eq!(
        events
            .iter()
            .filter(|e| e["kind"] == "round_opened")
            .count(),
        2
    );
    // The escrow paid 6,666 of 10,000 basis points (two rounds of three) and sent the rest back.
    let refunded = of("refunded").expect("a refunded event");
    let back: u128 = refunded["payload"]["stake_wei"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let stake: u128 = 1_000_000_000_000_000_000;
    assert!(
        back >= stake - stake * 6_666 / 10_000 && back < stake / 3 + stake / 1_000,
        "refunded {back} of {stake}"
    );
    assert!(
        of("paid").is_some(),
        "the two completed rounds' work is paid"
    );
    let result = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/result")),
    )
    .await;
    assert_eq!(result.status, 200, "{}", result.text);
    assert_eq!(result.body["adapter_cid"], best.as_str());
    assert_eq!(result.body["aggregate"]["metric"], 0.95);
}

on_both_databases!(
    a_job_whose_last_merge_is_worse_hands_over_its_best_round,
    a_job_out_of_patience_ends_early_with_its_best_round
);
