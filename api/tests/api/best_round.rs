//! The requester gets the best round, not the last (issue 48, decision 0046): a job whose
//! second merge scored below its first is paid out with the first round's merge as its result,
//! and the result route opens that round's adapter.

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
        let task = take_tasks(&app, 1).await.remove(0);
        assert_eq!(task.round, round);
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
        let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
        let adapter = put(&app, &format!("round {round} adapter")).await;
        let metrics = put(&app, &format!("{{\"round\": {round}}}")).await;
        let submitted = send(
            &service,
            submit(&worker, task.task_id, &lease, &adapter, &metrics),
        )
        .await;
        assert_eq!(submitted.status, 201, "{}", submitted.text);
        let id = submitted.body["id"].as_str().unwrap();
        let verdict = send(
            &service,
            post_json(
                &validator,
                &format!("/v1/validator/submissions/{id}/verdict"),
                json!({"accepted": true, "quality": metric, "report": {"metric": metric}, "proof_due": false}),
            ),
        )
        .await;
        assert_eq!(verdict.status, 200, "{}", verdict.text);
        let merged = sealed_merge(
            &app,
            &job_id,
            round,
            format!("merged weights of round {round}").as_bytes(),
        )
        .await;
        let aggregated = send(&service, post_json(&validator, &format!("/v1/jobs/{job_id}/rounds/{round}/aggregate"),
            json!({"adapter_cid": merged, "metric": metric, "base_metric": 0.5, "metric_name": "accuracy"}))).await;
        assert_eq!(aggregated.status, 200, "{}", aggregated.text);
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

on_both_databases!(a_job_whose_last_merge_is_worse_hands_over_its_best_round);
