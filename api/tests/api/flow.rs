//! The job flow through HTTP, on the in-memory EVM: funding seen on chain opens the job and
//! queues round 1; workers claim, extend and submit; the validator judges and merges; the last
//! merge is paid out on chain and the job completes. The background passes (chain follower,
//! outbox, reaper) are stepped by hand so every intermediate state is checked.

use std::time::Duration;

use actix_web::test::TestRequest;
use bytes::Bytes;
use sea_orm::{ConnectionTrait, QueryFilter};
use serde_json::{Value, json};
use shardwork_api::background::follower::follow_once;
use shardwork_api::background::outbox::Dispatcher;
use shardwork_core::protocol::{TASK_QUEUE, TaskMessage};
use shardwork_core::queue::QueueOptions;

use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

pub(crate) fn dataset(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("{{\"text\":\"review number {i}\",\"label\":{}}}\n", i % 2))
        .collect::<String>()
        .into_bytes()
}

pub(crate) fn post_json(token: &str, uri: &str, body: Value) -> TestRequest {
    TestRequest::post()
        .uri(uri)
        .insert_header(bearer(token))
        .set_json(body)
}

/// The worker behind `token` registering a CPU with 2 GiB, enough for the test jobs.
/// A worker's `submit` of task `task_id` under `lease`: `adapter` and `metrics` are CIDs in the
/// store, 12 samples.
pub(crate) fn submit(
    token: &str,
    task_id: uuid::Uuid,
    lease: &str,
    adapter: &str,
    metrics: &str,
) -> TestRequest {
    post_json(
        token,
        &format!("/v1/tasks/{task_id}/submit"),
        json!({"version": 1, "task_id": task_id, "lease_token": lease, "adapter_cid": adapter,
            "metrics_cid": metrics, "samples": 12}),
    )
}

pub(crate) fn register_cpu_worker(token: &str) -> TestRequest {
    post_json(
        token,
        "/v1/workers/register",
        json!({"capabilities": {"device": "cpu", "memory_mb": 2048}}),
    )
}

pub(crate) fn get(token: &str, uri: &str) -> TestRequest {
    TestRequest::get().uri(uri).insert_header(bearer(token))
}

pub(crate) fn post_job(token: &str, spec: &Value, data: &[u8]) -> TestRequest {
    let boundary = "flow-boundary-91";
    let mut body = Vec::new();
    for (name, bytes) in [
        ("spec", spec.to_string().into_bytes()),
        ("dataset", data.to_vec()),
    ] {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(&bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    TestRequest::post()
        .uri("/v1/jobs")
        .insert_header(bearer(token))
        .insert_header((
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        ))
        .set_payload(body)
}

/// One pass of each background loop, in the order a running server interleaves them.
pub(crate) async fn step(app: &TestApp, dispatcher: &mut Dispatcher) {
    let chain = app.state.chain.as_ref().expect("chain");
    let attempts = app.state.config.task_max_attempts;
    follow_once(&app.db, chain, attempts).await.expect("follow");
    dispatcher
        .dispatch_once(&app.db, app.state.queue.as_ref(), Some(chain))
        .await
        .expect("dispatch");
    follow_once(&app.db, chain, attempts).await.expect("follow");
}

pub(crate) async fn take_tasks(app: &TestApp, n: usize) -> Vec<TaskMessage> {
    let mut consumer = app.state.queue.consume(TASK_QUEUE).await.unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let delivery = consumer
            .next(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a task message");
        out.push(TaskMessage::decode(&delivery.payload).unwrap());
        delivery.ack().await.unwrap();
    }
    assert!(
        consumer
            .next(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none(),
        "no more than {n} messages"
    );
    out.sort_by_key(|t| t.shard_index);
    out
}

/// An adapter bundle of one file, sealed as the validator seals round `round`'s merge.
pub(crate) async fn sealed_merge(
    app: &TestApp,
    job_id: &str,
    round: u32,
    weights: &[u8],
) -> String {
    let job_id: uuid::Uuid = job_id.parse().unwrap();
    let seal = shardwork_core::store::keys::Sealed::RoundResult { round }.seal_for(
        job_id,
        &shardwork_api::domain::sealing::job_key(app.state.config.sealing_secret.expose(), job_id),
    );
    let name = "adapter_model.safetensors";
    let file = app
        .state
        .store
        .put(Bytes::from(seal.seal_file(name, weights)))
        .await
        .unwrap();
    let mut bundle = shardwork_core::protocol::Bundle::new("adapter");
    bundle.sealed = true;
    bundle
        .files
        .insert(name.into(), file.to_string().parse().unwrap());
    app.state
        .store
        .put(Bytes::from(serde_json::to_vec(&bundle).unwrap()))
        .await
        .unwrap()
        .to_string()
}

pub(crate) async fn put(app: &TestApp, bytes: &str) -> String {
    app.state
        .store
        .put(Bytes::from(bytes.to_owned()))
        .await
        .unwrap()
        .to_string()
}

async fn federated_job_runs_from_funding_to_payout(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker_a = access_token(&service, &worker_key(), &["worker"]).await;
    let worker_b_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x55; 32].into()).unwrap();
    let worker_b = access_token(&service, &worker_b_key, &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;

    // Post and fund.
    let reply = send(&service, post_job(&requester, &spec(), &dataset(40))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    let terms = &reply.body["funding"];
    assert_eq!(terms["spec_cid"], reply.body["manifest_cid"]);
    assert_eq!(terms["kind"], 1);
    let chain = send(&service, TestRequest::get().uri("/v1/chain")).await;
    assert_eq!(chain.status, 200, "{}", chain.text);
    assert_eq!(chain.body["dev_funding"], true);
    // Only the job's requester may have it funded.
    send(
        &service,
        post_json(&worker_a, &format!("/v1/jobs/{job_id}/dev-fund"), json!({})),
    )
    .await
    .problem(403, "forbidden");
    let funded = send(
        &service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    assert_eq!(funded.status, 202, "{}", funded.text);
    step(&app, &mut dispatcher).await;
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "open", "{}", job.text);
    assert_eq!(job.body["current_round"], 1);
    assert!(job.body["funding"].is_null());
    assert_eq!(job.body["dev_funded"], true);

    // Round 1: three tasks on the queue.
    for token in [&worker_a, &worker_b] {
        let r = send(&service, register_cpu_worker(token)).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let tasks = take_tasks(&app, 3).await;
    assert!(
        tasks
            .iter()
            .all(|t| t.round == 1 && t.previous_adapter_cid.is_none())
    );
    let adapter = put(&app, "adapter bytes").await;
    let mut metrics_n = 0;
    for task in &tasks {
        let claim = send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.status, 200, "{}", claim.text);
        assert_eq!(claim.body["task"]["shard_cid"], json!(task.shard_cid));
        let token = claim.body["lease_token"].as_str().unwrap().to_owned();
        // A redelivered message: the holder gets its lease back, anyone else a conflict.
        let again = send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(again.body["lease_token"], token.as_str());
        send(
            &service,
            post_json(
                &worker_b,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await
        .problem(409, "conflict");
        let extend = send(&service, post_json(&worker_a, &format!("/v1/tasks/{}/extend", task.task_id),
            json!({"lease_token": token, "progress": {"step": 3, "total_steps": 10, "loss": 0.7, "tokens_per_second": 1200.0}}))).await;
        assert_eq!(extend.status, 200, "{}", extend.text);
        send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/extend", task.task_id),
                json!({"lease_token": token, "progress": {"step": 11, "total_steps": 10}}),
            ),
        )
        .await
        .problem(422, "validation");
        metrics_n += 1;
        let metrics = put(&app, &format!("{{\"steps\": {metrics_n}}}")).await;
        // A worker that claims more records than its shard has is refused, naming the field.
        let lie = json!({"version": 1, "task_id": task.task_id, "lease_token": token,
            "adapter_cid": adapter, "metrics_cid": metrics, "samples": 1_000_000});
        let refused = send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/submit", task.task_id),
                lie,
            ),
        )
        .await;
        assert_eq!(refused.status, 422, "{}", refused.text);
        assert_eq!(refused.paths(), ["samples"], "{}", refused.text);
        let submission = json!({"version": 1, "task_id": task.task_id, "lease_token": token,
            "adapter_cid": adapter, "metrics_cid": metrics, "samples": 12});
        let first = send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/submit", task.task_id),
                submission.clone(),
            ),
        )
        .await;
        assert_eq!(first.status, 201, "{}", first.text);
        let repeat = send(
            &service,
            post_json(
                &worker_a,
                &format!("/v1/tasks/{}/submit", task.task_id),
                submission,
            ),
        )
        .await;
        assert_eq!(repeat.status, 200, "{}", repeat.text);
        assert_eq!(repeat.body["id"], first.body["id"]);
    }

    // The validator, and only the validator, sees and judges them.
    send(&service, get(&worker_a, "/v1/validator/submissions"))
        .await
        .problem(403, "forbidden");
    let pending = send(&service, get(&validator, "/v1/validator/submissions")).await;
    let pending = pending.body["submissions"].as_array().unwrap().clone();
    assert_eq!(pending.len(), 3);
    assert!(
        pending
            .iter()
            .all(|p| p["held_out_cid"] == job.body["held_out_cid"])
    );
    for p in &pending {
        let id = p["submission_id"].as_str().unwrap();
        let v = send(
            &service,
            post_json(
                &validator,
                &format!("/v1/validator/submissions/{id}/verdict"),
                json!({"accepted": true, "quality": 0.8, "report": {"metric": 0.9}}),
            ),
        )
        .await;
        assert_eq!(v.status, 200, "{}", v.text);
        send(
            &service,
            post_json(
                &validator,
                &format!("/v1/validator/submissions/{id}/verdict"),
                json!({"accepted": true, "quality": 0.8}),
            ),
        )
        .await
        .problem(409, "conflict");
    }
    let ready = send(&service, get(&validator, "/v1/validator/rounds")).await;
    let rounds = ready.body["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0]["adapters"].as_array().unwrap().len(), 3);
    // Each weighs by its shard's records as the manifest counts them, not the 12 claimed.
    let manifest: shardwork_core::protocol::ShardManifest = serde_json::from_slice(
        &app.state
            .store
            .get_bytes(
                &job.body["manifest_cid"].as_str().unwrap().parse().unwrap(),
                1 << 20,
            )
            .await
            .unwrap(),
    )
    .unwrap();
    for a in rounds[0]["adapters"].as_array().unwrap() {
        let shard = &manifest.shards[a["shard_index"].as_u64().unwrap() as usize];
        assert_eq!(a["samples"], shard.records, "{a}");
    }
    let merged_1 = put(&app, "merged round 1").await;
    let agg = send(&service, post_json(&validator, &format!("/v1/jobs/{job_id}/rounds/1/aggregate"),
        json!({"adapter_cid": merged_1, "metric": 0.9, "base_metric": 0.5, "metric_name": "accuracy"}))).await;
    assert_eq!(agg.body["outcome"], "next_round_opened", "{}", agg.text);
    step(&app, &mut dispatcher).await;

    // Round 2 starts from the merge; worker B's noise is rejected and the task goes back.
    let tasks = take_tasks(&app, 3).await;
    assert!(tasks.iter().all(|t| t.round == 2
        && t.previous_adapter_cid.as_ref().map(|c| c.to_string()) == Some(merged_1.clone())));
    let mut by_task = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let token = if i == 0 { &worker_b } else { &worker_a };
        let claim = send(
            &service,
            post_json(
                token,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.status, 200, "{}", claim.text);
        let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
        let metrics = put(&app, &format!("{{\"round\": 2, \"shard\": {i}}}")).await;
        let r = send(&service, post_json(token, &format!("/v1/tasks/{}/submit", task.task_id),
            json!({"version": 1, "task_id": task.task_id, "lease_token": lease, "adapter_cid": adapter, "metrics_cid": metrics, "samples": 12}))).await;
        assert_eq!(r.status, 201, "{}", r.text);
        by_task.push((task.task_id, r.body["id"].as_str().unwrap().to_owned()));
    }
    let noise = &by_task[0].1;
    // Worker B has some reputation from earlier work; the rejection costs it at once.
    app.db
        .execute_unprepared(&format!(
            "UPDATE workers SET reputation = 1200 WHERE address = '{}'",
            address(&worker_b_key)
        ))
        .await
        .unwrap();
    send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{noise}/verdict"),
            json!({"accepted": false, "quality": 0.0}),
        ),
    )
    .await
    .problem(422, "validation");
    let rejected = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{noise}/verdict"),
            json!({"accepted": false, "quality": 0.0, "reason": "update norm 40x the base weight"}),
        ),
    )
    .await;
    assert_eq!(rejected.body["verdict"], "rejected", "{}", rejected.text);
    let me = send(&service, get(&worker_b, "/v1/workers/me")).await;
    assert_eq!(me.body["reputation"], 700, "{}", me.text);
    assert_eq!(
        me.body["submissions"],
        json!({"accepted": 0, "rejected": 1, "pending": 0}),
        "{}",
        me.text
    );
    for (_, id) in &by_task[1..] {
        let v = send(
            &service,
            post_json(
                &validator,
                &format!("/v1/validator/submissions/{id}/verdict"),
                json!({"accepted": true, "quality": 0.6}),
            ),
        )
        .await;
        assert_eq!(v.status, 200, "{}", v.text);
    }
    step(&app, &mut dispatcher).await;
    let retry = take_tasks(&app, 1).await;
    assert_eq!(retry[0].task_id, by_task[0].0);
    let claim = send(
        &service,
        post_json(
            &worker_a,
            &format!("/v1/tasks/{}/claim", retry[0].task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(claim.body["attempt"], 2, "{}", claim.text);
    let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
    let metrics = put(&app, "{\"retry\": true}").await;
    let r = send(&service, post_json(&worker_a, &format!("/v1/tasks/{}/submit", retry[0].task_id),
        json!({"version": 1, "task_id": retry[0].task_id, "lease_token": lease, "adapter_cid": adapter, "metrics_cid": metrics, "samples": 12}))).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_owned();
    // The last verdict leaves its proof of training due: the round is merged without waiting
    // for the replay, and the payout waits for it.
    let v = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{id}/verdict"),
            json!({"accepted": true, "quality": 0.7, "proof_due": true}),
        ),
    )
    .await;
    assert_eq!(v.status, 200, "{}", v.text);
    assert_eq!(v.body["proof"], "pending", "{}", v.text);

    // The last merge is paid out on chain; the follower completes the job from the chain.
    send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/result")),
    )
    .await
    .problem(409, "conflict");
    // The validator seals the merge to the round (shardwork_core::store::keys): the store
    // shows noise, the result endpoint opens it for the requester.
    let merged_2 = sealed_merge(&app, &job_id, 2, b"merged weights of round 2").await;
    let stranger = access_token(
        &service,
        &alloy::signers::local::PrivateKeySigner::from_bytes(&[0x55; 32].into()).unwrap(),
        &[],
    )
    .await;
    let agg = send(&service, post_json(&validator, &format!("/v1/jobs/{job_id}/rounds/2/aggregate"),
        json!({"adapter_cid": merged_2, "metric": 0.93, "base_metric": 0.5, "metric_name": "accuracy"}))).await;
    assert_eq!(agg.body["outcome"], "payout_awaits_proofs", "{}", agg.text);
    step(&app, &mut dispatcher).await;
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(
        job.body["status"], "open",
        "no payout before the proof: {}",
        job.text
    );
    let proofs = send(&service, get(&validator, "/v1/validator/proofs")).await;
    assert_eq!(proofs.body["submissions"][0]["submission_id"], id.as_str());
    let checked = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{id}/proof"),
            json!({"passed": true, "stretches": [{"stretch": 1, "steps": [3, 4], "cosine": 1.0,
                "norm_ratio": 1.0, "loss_gap": 0.0, "seconds": 0.5}]}),
        ),
    )
    .await;
    assert_eq!(checked.status, 200, "{}", checked.text);
    assert_eq!(
        checked.body["finalization_queued"], true,
        "{}",
        checked.text
    );
    assert_eq!(checked.body["pending"], 0, "{}", checked.text);
    step(&app, &mut dispatcher).await;
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "completed", "{}", job.text);
    assert_eq!(job.body["result_adapter_cid"], merged_2.as_str());
    let result = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/result")),
    )
    .await;
    assert_eq!(result.status, 200, "{}", result.text);
    assert_eq!(result.body["adapter_cid"], merged_2.as_str());
    let url = result.body["files"][0]["url"].as_str().unwrap().to_owned();
    assert_eq!(result.body["files"][0]["name"], "adapter_model.safetensors");
    let file = send(&service, get(&requester, &url)).await;
    assert_eq!(file.status, 200, "{}", file.text);
    assert_eq!(file.text, "merged weights of round 2");
    let stored = send(
        &service,
        get(
            &requester,
            &format!(
                "/v1/content/{}",
                result.body["files"][0]["cid"].as_str().unwrap()
            ),
        ),
    )
    .await;
    assert!(!stored.text.contains("merged weights"), "stored sealed");
    // Only the requester, validators and admins read it.
    for (who, token) in [("a worker", &worker_a), ("another requester", &stranger)] {
        for uri in [format!("/v1/jobs/{job_id}/result"), url.clone()] {
            let r = send(&service, get(token, &uri)).await;
            assert_eq!(r.status, 403, "{who} read {uri}: {}", r.text);
        }
    }
    let by_validator = send(&service, get(&validator, &url)).await;
    assert_eq!(by_validator.text, "merged weights of round 2");
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events?limit=500")),
    )
    .await;
    let events = events.body["events"].as_array().unwrap().clone();
    let position = |kind: &str| {
        events
            .iter()
            .rposition(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} event"))
    };
    // The verdict, the merge, the wait, the proof, then the payout.
    assert!(
        position("verdict") < position("aggregated")
            && position("aggregated") < position("awaiting_proofs")
            && position("awaiting_proofs") < position("proof_checked")
            && position("proof_checked") < position("finalize"),
        "{events:?}"
    );
    let proof_event = &events[position("proof_checked")]["payload"];
    assert_eq!(
        proof_event["validator"],
        address(&validator_key()).to_string()
    );
    assert_eq!(proof_event["proof"], "passed");
    let completed = events
        .iter()
        .find(|e| e["kind"] == "completed")
        .expect("completed event");
    let payouts = completed["payload"]["payouts"].as_array().unwrap();
    assert_eq!(payouts.len(), 2, "{completed}");
    // Worker A did 5 of the 6 accepted adapters, B none: A is paid, B gets nothing.
    let a = address(&worker_key()).to_string();
    let b = address(&worker_b_key).to_string();
    let paid = |who: &str| {
        payouts
            .iter()
            .find(|p| p["address"] == who)
            .map(|p| p["amount_wei"].as_str().unwrap().parse::<u128>().unwrap())
            .unwrap()
    };
    assert!(paid(&a) > 0);
    assert_eq!(paid(&b), 0);
    let me = send(&service, get(&worker_a, "/v1/workers/me")).await;
    assert_eq!(me.body["earnings_wei"], paid(&a).to_string(), "{}", me.text);
    assert_eq!(me.body["submissions"]["rejected"], 0, "{}", me.text);
    assert_eq!(me.body["submissions"]["pending"], 0, "{}", me.text);
    assert!(
        me.body["submissions"]["accepted"].as_u64().unwrap() > 0,
        "{}",
        me.text
    );
    // Every chain effect ran once, however often the passes ran.
    step(&app, &mut dispatcher).await;
    use sea_orm::{EntityTrait, PaginatorTrait};
    let sent = shardwork_api::entities::chain_transaction::Entity::find()
        .all(&app.db)
        .await
        .unwrap();
    let kinds: Vec<&str> = sent.iter().map(|t| t.kind.as_str()).collect();
    // Round 1 of 2 merged: its progress recorded once (it holds the deadline refund back).
    assert_eq!(kinds, ["mark_started", "record_progress", "complete"]);
    let undispatched = shardwork_api::entities::job_event::Entity::find()
        .filter(sea_orm::ColumnTrait::eq(
            &shardwork_api::entities::job_event::Column::NeedsDispatch,
            true,
        ))
        .filter(sea_orm::ColumnTrait::is_null(
            &shardwork_api::entities::job_event::Column::DispatchedAt,
        ))
        .count(&app.db)
        .await
        .unwrap();
    assert_eq!(undispatched, 0);
}

async fn expired_leases_go_back_to_the_queue_until_attempts_run_out(backend: Backend) {
    let mut cfg = config();
    cfg.task_max_attempts = 2;
    cfg.lease_secs = 5;
    let Some(app) = TestApp::with_config_and_chain(backend, cfg, true).await else {
        return;
    };
    let service = app.service().await;
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    send(&service, register_cpu_worker(&worker)).await;
    let mut s = spec();
    s["shards"] = json!(1);
    s["rounds"] = json!(1);
    let reply = send(&service, post_job(&requester, &s, &dataset(20))).await;
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    send(
        &service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    step(&app, &mut dispatcher).await;
    let second_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x57; 32].into()).unwrap();
    let second = access_token(&service, &second_key, &["worker"]).await;
    send(&service, register_cpu_worker(&second)).await;
    let task = take_tasks(&app, 1).await.remove(0);
    // Each counted attempt is another worker's: one whose lease expired may not take the task
    // again, so the second attempt is the second worker's.
    for (attempt, token) in [(1, &worker), (2, &second)] {
        let claim = send(
            &service,
            post_json(
                token,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.body["attempt"], attempt, "{}", claim.text);
        let later = chrono::Utc::now() + chrono::Duration::seconds(10);
        assert_eq!(
            shardwork_api::background::reaper::reap_once(&app.db, later)
                .await
                .unwrap(),
            1
        );
        step(&app, &mut dispatcher).await;
        if attempt == 1 {
            assert_eq!(take_tasks(&app, 1).await[0].task_id, task.task_id);
            let again = send(
                &service,
                post_json(
                    &worker,
                    &format!("/v1/tasks/{}/claim", task.task_id),
                    json!({}),
                ),
            )
            .await;
            again.problem(403, "forbidden");
            assert!(again.text.contains("lease expired"), "{}", again.text);
        }
    }
    // Attempts used up: the task failed and nothing was republished.
    send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await
    .problem(409, "conflict");
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events")),
    )
    .await;
    let kinds: Vec<&str> = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "task_requeued").count(),
        1,
        "{kinds:?}"
    );
    assert!(kinds.contains(&"task_failed"), "{kinds:?}");
}

async fn a_stopping_worker_releases_its_task_with_the_attempt_returned_twice(backend: Backend) {
    let mut cfg = config();
    cfg.task_max_attempts = 2;
    let Some(app) = TestApp::with_config_and_chain(backend, cfg, true).await else {
        return;
    };
    let service = app.service().await;
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    send(&service, register_cpu_worker(&worker)).await;
    let mut s = spec();
    s["shards"] = json!(1);
    s["rounds"] = json!(1);
    let reply = send(&service, post_job(&requester, &s, &dataset(20))).await;
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    send(
        &service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    step(&app, &mut dispatcher).await;
    let task = take_tasks(&app, 1).await.remove(0);
    let claim_path = format!("/v1/tasks/{}/claim", task.task_id);
    // Two releases give the attempt back; the task is published again each time.
    for _ in 0..2 {
        let lease = send(&service, post_json(&worker, &claim_path, json!({}))).await;
        assert_eq!(lease.body["attempt"], 1, "{}", lease.text);
        let token = lease.body["lease_token"].as_str().unwrap().to_owned();
        let path = format!("/v1/tasks/{}/release", task.task_id);
        // Only under its own lease token.
        send(
            &service,
            post_json(&worker, &path, json!({"lease_token": uuid::Uuid::new_v4()})),
        )
        .await
        .problem(409, "conflict");
        let released = send(
            &service,
            post_json(&worker, &path, json!({"lease_token": token})),
        )
        .await;
        assert_eq!(released.status, 200, "{}", released.text);
        assert_eq!(released.body["status"], "queued");
        assert_eq!(released.body["attempt_returned"], true);
        step(&app, &mut dispatcher).await;
        assert_eq!(take_tasks(&app, 1).await[0].task_id, task.task_id);
    }
    // The third counts: attempt 1 used, attempt 2 is the last.
    let lease = send(&service, post_json(&worker, &claim_path, json!({}))).await;
    let token = lease.body["lease_token"].as_str().unwrap().to_owned();
    let released = send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/release", task.task_id),
            json!({"lease_token": token}),
        ),
    )
    .await;
    assert_eq!(released.body["status"], "queued", "{}", released.text);
    assert_eq!(released.body["attempt_returned"], false);
    step(&app, &mut dispatcher).await;
    assert_eq!(take_tasks(&app, 1).await[0].task_id, task.task_id);
    // That counted release spent the worker's attempt at the task: another worker takes it.
    send(&service, post_json(&worker, &claim_path, json!({})))
        .await
        .problem(403, "forbidden");
    let other_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x58; 32].into()).unwrap();
    let other = access_token(&service, &other_key, &["worker"]).await;
    send(&service, register_cpu_worker(&other)).await;
    let last = send(&service, post_json(&other, &claim_path, json!({}))).await;
    assert_eq!(last.body["attempt"], 2, "{}", last.text);
}

/// Issue 46, attack 1: a requester's second address (or any griefer) claimed a task, took the
/// round's start with the lease, abandoned it and claimed it again until the task's attempts
/// were gone, which aborted the job. Now an attempt that ends without a result bars its worker
/// from the task, so the attempts count distinct workers and one address spends one of them.
async fn a_worker_that_gives_a_task_up_cannot_take_it_again(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (_, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let griefer = access_token(&service, &worker_key(), &["worker"]).await;
    send(&service, register_cpu_worker(&griefer)).await;
    let task = take_tasks(&app, 3).await.remove(0);
    let claim_path = format!("/v1/tasks/{}/claim", task.task_id);
    let lease = send(&service, post_json(&griefer, &claim_path, json!({}))).await;
    assert_eq!(lease.status, 200, "{}", lease.text);
    let token = lease.body["lease_token"].as_str().unwrap().to_owned();
    let abandoned = send(
        &service,
        post_json(
            &griefer,
            &format!("/v1/tasks/{}/abandon", task.task_id),
            json!({"lease_token": token, "reason": "cannot load the model"}),
        ),
    )
    .await;
    assert_eq!(abandoned.body["status"], "queued", "{}", abandoned.text);
    let again = send(&service, post_json(&griefer, &claim_path, json!({}))).await;
    again.problem(403, "forbidden");
    assert!(
        again.text.contains("already spent an attempt"),
        "{}",
        again.text
    );
    // The task is still there for an honest worker, at its second attempt; the job is open.
    let honest_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x59; 32].into()).unwrap();
    let honest = access_token(&service, &honest_key, &["worker"]).await;
    send(&service, register_cpu_worker(&honest)).await;
    let taken = send(&service, post_json(&honest, &claim_path, json!({}))).await;
    assert_eq!(taken.body["attempt"], 2, "{}", taken.text);
    let job = send(&service, get(&honest, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "open", "{}", job.text);
}

/// Issue 46, attack 6: a worker extended a 5-second lease twenty times claiming step 1 of 10⁹.
/// A heartbeat may not claim a longer run than the shard allows, and however often it is
/// extended a lease ends at the job's task time limit from its claim; the reaper then gives
/// the task to another worker, and the holder cannot take it back.
async fn a_lease_lives_no_longer_than_the_jobs_task_time_limit(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (_, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let job_uuid: uuid::Uuid = job_id.parse().unwrap();
    let job = shardwork_api::entities::job::Entity::find_by_id(job_uuid)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let limit = job.task_time_limit_secs.expect("estimated at posting");
    assert!(limit >= 30 * 60, "setup allowance included: {limit}");
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    send(&service, register_cpu_worker(&worker)).await;
    let mut tasks = take_tasks(&app, 3).await;
    let task = tasks.remove(0);
    let lease = send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await;
    let token = lease.body["lease_token"].as_str().unwrap().to_owned();
    let extend = |total_steps: u64| {
        post_json(
            &worker,
            &format!("/v1/tasks/{}/extend", task.task_id),
            json!({"lease_token": token, "progress": {"step": 1, "total_steps": total_steps}}),
        )
    };
    let endless = send(&service, extend(1_000_000_000)).await;
    assert_eq!(
        endless.problem(422, "validation")["errors"][0]["path"],
        "progress.total_steps",
        "{}",
        endless.text
    );
    let fine = send(&service, extend(2)).await;
    assert_eq!(fine.status, 200, "{}", fine.text);
    // The lease began longer ago than the limit: no heartbeat extends it now.
    use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait};
    let row = shardwork_api::entities::task::Entity::find_by_id(task.task_id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let began = chrono::Utc::now() - chrono::Duration::seconds(limit + 1);
    let mut active: shardwork_api::entities::task::ActiveModel = row.into();
    active.leased_at = Set(Some(began));
    active.update(&app.db).await.unwrap();
    let refused = send(&service, extend(2)).await;
    refused.problem(409, "conflict");
    assert!(refused.text.contains("task time limit"), "{}", refused.text);
    // It runs out at its last expiry; the reaper requeues it and the holder's attempt is spent.
    let later = chrono::Utc::now() + chrono::Duration::seconds(3_600);
    assert_eq!(
        shardwork_api::background::reaper::reap_once(&app.db, later)
            .await
            .unwrap(),
        1
    );
    send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await
    .problem(403, "forbidden");
    // An estimate that saturated is clamped, not an overflow: the next claim is a lease.
    let mut job: shardwork_api::entities::job::ActiveModel = job.into();
    job.task_time_limit_secs = Set(Some(i64::MAX));
    job.update(&app.db).await.unwrap();
    let next = send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/claim", tasks[0].task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(next.status, 200, "{}", next.text);
}

async fn workers_cannot_read_the_held_out_set_or_the_raw_dataset(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let reply = send(&service, post_job(&requester, &spec(), &dataset(40))).await;
    let job = reply.body.clone();
    for field in ["held_out_cid", "dataset_cid"] {
        let cid = job[field].as_str().unwrap();
        send(&service, get(&worker, &format!("/v1/content/{cid}")))
            .await
            .problem(403, "forbidden");
        let ok = send(&service, get(&validator, &format!("/v1/content/{cid}"))).await;
        assert_eq!(ok.status, 200, "{field}: {}", ok.text);
    }
    let dataset_cid = job["dataset_cid"].as_str().unwrap();
    let own = send(
        &service,
        get(&requester, &format!("/v1/content/{dataset_cid}")),
    )
    .await;
    assert_eq!(own.status, 200);
    let id = job["id"].as_str().unwrap();
    send(
        &service,
        get(&worker, &format!("/v1/jobs/{id}/held-out-key")),
    )
    .await
    .problem(403, "forbidden");
    // A shard is readable by workers.
    let manifest_cid = job["manifest_cid"].as_str().unwrap();
    let manifest = send(
        &service,
        get(&worker, &format!("/v1/content/{manifest_cid}")),
    )
    .await;
    assert_eq!(manifest.status, 200, "{}", manifest.text);
    let shard = manifest.body["shards"][0]["cid"].as_str().unwrap();
    assert_eq!(
        send(&service, get(&worker, &format!("/v1/content/{shard}")))
            .await
            .status,
        200
    );
    // Uploads come back under the CID Kubo would give them.
    let up = send(
        &service,
        TestRequest::post()
            .uri("/v1/content")
            .insert_header(bearer(&worker))
            .set_payload("hello"),
    )
    .await;
    assert_eq!(up.status, 201, "{}", up.text);
    assert_eq!(
        up.body["cid"],
        "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
    );
}

/// A worker whose proof of training failed a replay (checked after its verdict) is leased none
/// of the job's other tasks: it would be paid nothing for them, so they go to another worker.
/// Only a failed proof does it: a plain rejection bars the worker from that task alone. The
/// proof route refuses a proof that is not due, a failure without a reason, and a second check.
async fn a_worker_that_forfeits_a_job_is_leased_none_of_its_tasks(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (_, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let cheat = access_token(&service, &worker_key(), &["worker"]).await;
    let other_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x56; 32].into()).unwrap();
    let other = access_token(&service, &other_key, &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    for token in [&cheat, &other] {
        let r = send(&service, register_cpu_worker(token)).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let tasks = take_tasks(&app, 3).await;
    let adapter = put(&app, "adapter bytes").await;
    // The cheat hands in two tasks; the first is rejected plainly, the second as a forgery.
    let mut submissions = Vec::new();
    for (n, task) in tasks[..2].iter().enumerate() {
        let claim = send(
            &service,
            post_json(
                &cheat,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.status, 200, "{}", claim.text);
        let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
        let metrics = put(&app, &format!("{{\"n\": {n}}}")).await;
        let r = send(
            &service,
            submit(&cheat, task.task_id, &lease, &adapter, &metrics),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        submissions.push(r.body["id"].as_str().unwrap().to_owned());
    }
    let verdict = |id: &str, proof_due: bool| {
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{id}/verdict"),
            json!({"accepted": false, "quality": 0.0, "reason": "does not beat the start",
                "report": {"metric": 0.4}, "proof_due": proof_due}),
        )
    };
    let proof = |id: &str, body: Value| {
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{id}/proof"),
            body,
        )
    };
    let plain = send(&service, verdict(&submissions[0], false)).await;
    assert_eq!(plain.body["proof"], "not_due", "{}", plain.text);
    send(
        &service,
        proof(&submissions[0], json!({"passed": true, "stretches": []})),
    )
    .await
    .problem(409, "conflict");
    assert_eq!(plain.status, 200, "{}", plain.text);
    let third = format!("/v1/tasks/{}/claim", tasks[2].task_id);
    let claim = send(&service, post_json(&cheat, &third, json!({}))).await;
    assert_eq!(
        claim.status, 200,
        "a plain rejection bars one task: {}",
        claim.text
    );
    let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
    let released = send(
        &service,
        post_json(
            &cheat,
            &format!("/v1/tasks/{}/release", tasks[2].task_id),
            json!({"lease_token": lease}),
        ),
    )
    .await;
    assert_eq!(released.status, 200, "{}", released.text);
    let scored = send(&service, verdict(&submissions[1], true)).await;
    assert_eq!(scored.status, 200, "{}", scored.text);
    assert_eq!(scored.body["proof"], "pending", "{}", scored.text);
    let pending = send(&service, get(&validator, "/v1/validator/proofs")).await;
    assert_eq!(pending.status, 200, "{}", pending.text);
    assert_eq!(
        pending.body["submissions"][0]["submission_id"], submissions[1],
        "{}",
        pending.text
    );
    send(
        &service,
        proof(&submissions[1], json!({"passed": false, "stretches": []})),
    )
    .await
    .problem(422, "validation");
    let stretch = json!({"stretch": 2, "steps": [4, 6], "cosine": 0.1, "norm_ratio": 3.0,
        "loss_gap": 0.5, "seconds": 1.5});
    let forged = send(
        &service,
        proof(
            &submissions[1],
            json!({"passed": false, "reason": "steps 4..=6 do not end where it says",
                "stretches": [stretch]}),
        ),
    )
    .await;
    assert_eq!(forged.status, 200, "{}", forged.text);
    assert_eq!(
        forged.body["submission"]["proof"], "failed",
        "{}",
        forged.text
    );
    send(
        &service,
        proof(&submissions[1], json!({"passed": true, "stretches": []})),
    )
    .await
    .problem(409, "conflict");
    step(&app, &mut dispatcher).await;
    let refused = send(&service, post_json(&cheat, &third, json!({}))).await;
    refused.problem(403, "forbidden");
    assert!(
        refused.text.contains(&format!("forfeited job {job_id}")),
        "the refusal says why: {}",
        refused.text
    );
    let taken = send(&service, post_json(&other, &third, json!({}))).await;
    assert_eq!(taken.status, 200, "{}", taken.text);
}

/// A federated job posted by the requester, funded through the development chain and started
/// (round 1 opened, `markStarted` mined), nobody training yet: (the requester's token, job id).
pub(crate) async fn started_job<S, B>(
    app: &TestApp,
    service: &S,
    dispatcher: &mut Dispatcher,
) -> (String, String)
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    started_job_with(app, service, dispatcher, &spec()).await
}

/// [`started_job`] of `job_spec`.
pub(crate) async fn started_job_with<S, B>(
    app: &TestApp,
    service: &S,
    dispatcher: &mut Dispatcher,
    job_spec: &Value,
) -> (String, String)
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let requester = access_token(service, &requester_key(), &[]).await;
    let reply = send(service, post_job(&requester, job_spec, &dataset(40))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    send(
        service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    step(app, dispatcher).await;
    (requester, job_id)
}

/// What the development funder (who funded the job on chain, so a refund credits it) may
/// withdraw in ether.
async fn funder_credit(chain: &shardwork_api::chain::Chain) -> alloy::primitives::U256 {
    chain
        .ledger
        .withdrawable(
            chain.escrow,
            chain.dev_funder.unwrap(),
            shardwork_contracts::ledger::ETH,
        )
        .await
        .unwrap()
}

/// Moves the chain's clock and the reaper's eight days on, a day past `spec()`'s deadline, and
/// checks that the reaper records the unfinished job's refund as due; the reaper's clock.
async fn a_day_past_the_deadline(
    app: &TestApp,
    chain: &shardwork_api::chain::Chain,
) -> chrono::DateTime<chrono::Utc> {
    chain.ledger.advance_time(8 * 86_400).await.unwrap();
    let later = chrono::Utc::now() + chrono::Duration::days(8);
    assert_eq!(
        shardwork_api::background::reaper::reap_once(&app.db, later)
            .await
            .unwrap(),
        1
    );
    later
}

async fn a_job_past_its_deadline_is_refunded_on_chain(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (requester, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let chain = app.state.chain.clone().unwrap();
    let before = funder_credit(&chain).await;
    // Nobody trains; eight days pass on chain and on the reaper's clock.
    let later = a_day_past_the_deadline(&app, &chain).await;
    // Recorded once, however often the reaper runs.
    assert_eq!(
        shardwork_api::background::reaper::reap_once(&app.db, later)
            .await
            .unwrap(),
        0
    );
    step(&app, &mut dispatcher).await;
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "refunded", "{}", job.text);
    let after = funder_credit(&chain).await;
    assert_eq!(
        after - before,
        alloy::primitives::U256::from(1_000_000_000_000_000_000u128),
        "the whole stake goes back to whoever funded it"
    );
}

/// A federated payout that began on chain and stalled (its batches never all sent) keeps the
/// escrow in Paying, where a plain refund is refused: the refund waits, without counting as a
/// failure, until the escrow's PAYOUT_GRACE past the deadline, then returns what was not paid.
async fn a_payout_that_stalls_is_refunded_what_it_did_not_pay_after_its_grace(backend: Backend) {
    use alloy::primitives::{Address, U256};
    use alloy::sol_types::SolCall;
    use shardwork_contracts::bindings::JobEscrow;
    use shardwork_contracts::ledger::{JobStatus as EscrowStatus, TxRequest};

    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (requester, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let chain = app.state.chain.clone().unwrap();
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    let escrow_id: U256 = job.body["escrow_job_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        chain
            .ledger
            .job(chain.escrow, escrow_id)
            .await
            .unwrap()
            .status,
        EscrowStatus::Started
    );

    // The validator begins a payout to two contributors and pays the first batch only.
    let (first, second) = (Address::repeat_byte(0x11), Address::repeat_byte(0x22));
    let send_as_validator = |input: Vec<u8>| {
        chain.ledger.send_transaction(TxRequest {
            from: chain.operator,
            to: Some(chain.escrow),
            input: input.into(),
            value: U256::ZERO,
            gas_limit: None,
        })
    };
    let weigh = JobEscrow::weighCall {
        jobId: escrow_id,
        contributors: vec![first, second],
        qualityScores: vec![8_000, 6_000],
    };
    let total_weight = JobEscrow::weighCall::abi_decode_returns(
        &chain
            .ledger
            .call(TxRequest {
                from: Address::ZERO,
                to: Some(chain.escrow),
                input: weigh.abi_encode().into(),
                value: U256::ZERO,
                gas_limit: None,
            })
            .await
            .unwrap(),
    )
    .unwrap();
    send_as_validator(
        JobEscrow::beginFederatedPayoutCall {
            jobId: escrow_id,
            adapterCid: "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq".into(),
            manifestCid: String::new(),
            contributorCount: 2,
            totalWeight: u64::try_from(total_weight).unwrap(),
            totalQuality: 14_000,
        }
        .abi_encode(),
    )
    .await
    .unwrap();
    send_as_validator(
        JobEscrow::payFederatedBatchCall {
            jobId: escrow_id,
            contributors: vec![first],
            qualityScores: vec![8_000],
            // Two bytes per contributor: a newcomer's reputation, 0.
            reputations: vec![0, 0].into(),
        }
        .abi_encode(),
    )
    .await
    .unwrap();
    let paid = chain
        .ledger
        .payout_progress(chain.escrow, escrow_id)
        .await
        .unwrap()
        .paid;
    assert!(paid > U256::ZERO, "the first batch paid nothing");
    let before = funder_credit(&chain).await;

    // A day past the deadline (seven days ahead at posting) the reaper records the refund as
    // due; the escrow still refuses it, so the event waits and counts no failed attempt.
    a_day_past_the_deadline(&app, &chain).await;
    step(&app, &mut dispatcher).await;
    let refund_row = |db: &sea_orm::DatabaseConnection| {
        let db = db.clone();
        let job_id: uuid::Uuid = job_id.parse().unwrap();
        async move {
            use sea_orm::{ColumnTrait, EntityTrait};
            use shardwork_api::entities::job_event;
            job_event::Entity::find()
                .filter(job_event::Column::JobId.eq(job_id))
                .filter(job_event::Column::Kind.eq("refund_due"))
                .one(&db)
                .await
                .unwrap()
                .expect("a refund_due event")
        }
    };
    let waiting = refund_row(&app.db).await;
    assert!(waiting.dispatched_at.is_none(), "refunded inside the grace");
    assert_eq!(waiting.dispatch_attempts, 0, "a wait counted as a failure");
    let reason = waiting.last_dispatch_error.unwrap_or_default();
    assert!(
        reason.starts_with("waiting: ") && reason.contains("stalled"),
        "{reason}"
    );
    assert_eq!(
        chain
            .ledger
            .job(chain.escrow, escrow_id)
            .await
            .unwrap()
            .status,
        EscrowStatus::Paying
    );

    // Past the grace, the next look (a restarted dispatcher looks at once) refunds the stake
    // less what the first batch paid.
    chain.ledger.advance_time(7 * 86_400).await.unwrap();
    let mut restarted = Dispatcher::default();
    step(&app, &mut restarted).await;
    assert!(refund_row(&app.db).await.dispatched_at.is_some());
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "refunded", "{}", job.text);
    let after = funder_credit(&chain).await;
    assert_eq!(
        after - before,
        U256::from(1_000_000_000_000_000_000u128) - paid,
        "the requester gets back what the stalled payout had not paid"
    );
}

/// Issue 46, attack 1: a requester (or any worker) that lets a job's round-2 task use up its
/// attempts no longer ends the job with the whole stake back. Round 1 of a 1-shard x 2-round
/// job is accepted and merged (the outbox records that progress on chain: 5,000 bps); round
/// 2's task expires under two distinct workers and fails; the abort pays round 1's worker half
/// the stake less the fee on that half, and refunds the funder only the other half. The
/// follower credits the worker's earnings and ends the job `refunded`.
async fn an_abort_pays_the_completed_rounds_and_refunds_only_the_rest(backend: Backend) {
    use alloy::primitives::U256;
    use shardwork_contracts::ledger::JobStatus as EscrowStatus;

    let mut cfg = config();
    cfg.task_max_attempts = 2;
    cfg.lease_secs = 5;
    let Some(app) = TestApp::with_config_and_chain(backend, cfg, true).await else {
        return;
    };
    let service = app.service().await;
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(&service, &requester_key(), &[]).await;
    let honest = access_token(&service, &worker_key(), &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let mut grievers = Vec::new();
    for byte in [0x56u8, 0x57] {
        let key = alloy::signers::local::PrivateKeySigner::from_bytes(&[byte; 32].into()).unwrap();
        grievers.push(access_token(&service, &key, &["worker"]).await);
    }
    for token in std::iter::once(&honest).chain(&grievers) {
        let r = send(&service, register_cpu_worker(token)).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let mut s = spec();
    s["shards"] = json!(1);
    s["rounds"] = json!(2);
    let reply = send(&service, post_job(&requester, &s, &dataset(20))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    send(
        &service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    step(&app, &mut dispatcher).await;
    let chain = app.state.chain.clone().unwrap();
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    let escrow_id: U256 = job.body["escrow_job_id"].as_str().unwrap().parse().unwrap();

    // Round 1: the honest worker trains, the validator accepts and merges.
    let task = take_tasks(&app, 1).await.remove(0);
    let claim = send(
        &service,
        post_json(
            &honest,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(claim.status, 200, "{}", claim.text);
    let lease = claim.body["lease_token"].as_str().unwrap().to_owned();
    let adapter = put(&app, "round 1 adapter").await;
    let metrics = put(&app, "{\"round\": 1}").await;
    let submitted = send(&service, post_json(&honest, &format!("/v1/tasks/{}/submit", task.task_id),
        json!({"version": 1, "task_id": task.task_id, "lease_token": lease, "adapter_cid": adapter, "metrics_cid": metrics, "samples": 12}))).await;
    assert_eq!(submitted.status, 201, "{}", submitted.text);
    let id = submitted.body["id"].as_str().unwrap();
    let v = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{id}/verdict"),
            json!({"accepted": true, "quality": 0.95, "report": {"metric": 0.95}, "proof_due": true}),
        ),
    )
    .await;
    assert_eq!(v.status, 200, "{}", v.text);
    let round_1_submission = id.to_owned();
    let merged = put(&app, "merged round 1").await;
    let agg = send(&service, post_json(&validator, &format!("/v1/jobs/{job_id}/rounds/1/aggregate"),
        json!({"adapter_cid": merged, "metric": 0.95, "base_metric": 0.5, "metric_name": "accuracy"}))).await;
    assert_eq!(agg.body["outcome"], "next_round_opened", "{}", agg.text);
    step(&app, &mut dispatcher).await;
    let info = chain.ledger.job(chain.escrow, escrow_id).await.unwrap();
    assert_eq!(info.earned_bps, 5_000, "round 1 of 2 recorded on chain");
    // Dispatching again records nothing more.
    step(&app, &mut dispatcher).await;

    // Round 2: two distinct workers claim the task and let their leases expire.
    let task = take_tasks(&app, 1).await.remove(0);
    assert_eq!(task.round, 2);
    for (i, griever) in grievers.iter().enumerate() {
        let claim = send(
            &service,
            post_json(
                griever,
                &format!("/v1/tasks/{}/claim", task.task_id),
                json!({}),
            ),
        )
        .await;
        assert_eq!(claim.status, 200, "{}", claim.text);
        let later = chrono::Utc::now() + chrono::Duration::seconds(10);
        assert_eq!(
            shardwork_api::background::reaper::reap_once(&app.db, later)
                .await
                .unwrap(),
            1
        );
        step(&app, &mut dispatcher).await;
        if i == 0 {
            take_tasks(&app, 1).await;
        }
    }
    // The task failed. Round 1's proof of training is still to be checked: the abort waits
    // for it, since a forgery found later must still forfeit.
    let info = chain.ledger.job(chain.escrow, escrow_id).await.unwrap();
    assert_eq!(
        info.status,
        EscrowStatus::Started,
        "the abort waits for the proof"
    );
    let checked = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{round_1_submission}/proof"),
            json!({"passed": true, "stretches": []}),
        ),
    )
    .await;
    assert_eq!(checked.status, 200, "{}", checked.text);
    assert_eq!(
        checked.body["finalization_queued"], false,
        "{}",
        checked.text
    );
    // A new dispatcher: the old one holds the waiting event back for its poll interval.
    step(&app, &mut Dispatcher::default()).await;
    // The abort paid round 1 and refunded the rest.
    let info = chain.ledger.job(chain.escrow, escrow_id).await.unwrap();
    assert_eq!(info.status, EscrowStatus::Aborted);
    let stake = info.stake;
    let earned = stake / U256::from(2);
    let fee = earned * U256::from(info.fee_bps) / U256::from(10_000);
    let worker_credit = chain
        .ledger
        .withdrawable(
            chain.escrow,
            worker_key().address(),
            shardwork_contracts::ledger::ETH,
        )
        .await
        .unwrap();
    assert_eq!(
        worker_credit,
        earned - fee,
        "the only contributor of round 1 gets its pool"
    );
    assert_eq!(
        funder_credit(&chain).await,
        stake - earned,
        "the funder gets back only the unearned half"
    );
    assert_eq!(
        chain
            .ledger
            .withdrawable(
                chain.escrow,
                info.treasury,
                shardwork_contracts::ledger::ETH
            )
            .await
            .unwrap(),
        fee
    );
    // The follower recorded it: the job ended refunded, the worker's earnings credited.
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "refunded", "{}", job.text);
    let me = send(&service, get(&honest, "/v1/workers/me")).await;
    assert_eq!(
        me.body["earnings_wei"],
        json!((earned - fee).to_string()),
        "{}",
        me.text
    );
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events")),
    )
    .await;
    let all = events.body["events"].as_array().unwrap();
    let refunded = all
        .iter()
        .find(|e| e["kind"] == "refunded")
        .expect("refunded");
    assert_eq!(
        refunded["payload"]["stake_wei"],
        json!((stake - earned).to_string())
    );
    assert!(all.iter().any(|e| e["kind"] == "paid"), "{all:?}");
}

/// Issue 46, attack 2: a model that slips past the checks at posting fails every node that
/// loads it. The validator, which loads it first (while idle, before any submission), reports
/// it; the job is ended on chain at once with the reason, its stake refunded, instead of its
/// tasks failing worker by worker until the deadline. Only a validator may report it, once,
/// with a reason, and only for an open job.
async fn a_job_whose_model_cannot_load_is_ended_with_the_reason(backend: Backend) {
    use alloy::primitives::U256;
    use shardwork_contracts::bindings::JobEscrow::JobEscrowEvents;
    use shardwork_contracts::ledger::JobStatus as EscrowStatus;
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let (requester, job_id) = started_job(&app, &service, &mut dispatcher).await;
    let chain = app.state.chain.clone().unwrap();
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    let escrow_id: U256 = job.body["escrow_job_id"].as_str().unwrap().parse().unwrap();
    let path = format!("/v1/jobs/{job_id}/model-failure");
    let reason = "model.gguf: tensors.blk.0.attn_q.weight: shape [64, 64] needs 16384 bytes, \
                  the file has 12";

    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let refused = send(
        &service,
        post_json(&worker, &path, json!({"reason": reason})),
    )
    .await;
    refused.problem(403, "forbidden");
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let empty = send(
        &service,
        post_json(&validator, &path, json!({"reason": "  "})),
    )
    .await;
    empty.problem(422, "validation");
    assert!(empty.text.contains("reason"), "{}", empty.text);
    let long = send(
        &service,
        post_json(&validator, &path, json!({"reason": "x".repeat(1_001)})),
    )
    .await;
    long.problem(422, "validation");
    let unknown = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/jobs/{}/model-failure", uuid::Uuid::new_v4()),
            json!({"reason": reason}),
        ),
    )
    .await;
    unknown.problem(404, "not-found");

    let reported = send(
        &service,
        post_json(&validator, &path, json!({"reason": reason})),
    )
    .await;
    assert_eq!(reported.status, 202, "{}", reported.text);
    assert_eq!(reported.body["abort_recorded"], true, "{}", reported.text);
    let again = send(
        &service,
        post_json(&validator, &path, json!({"reason": reason})),
    )
    .await;
    assert_eq!(again.status, 202, "{}", again.text);
    assert_eq!(
        again.body["abort_recorded"], false,
        "reported once: {}",
        again.text
    );

    // The outbox ends the job on chain with the reason; no round completed, so all goes back.
    step(&app, &mut dispatcher).await;
    step(&app, &mut dispatcher).await;
    let info = chain.ledger.job(chain.escrow, escrow_id).await.unwrap();
    assert_eq!(info.status, EscrowStatus::Aborted);
    assert_eq!(
        funder_credit(&chain).await,
        info.stake,
        "the whole stake back"
    );
    let aborted = chain
        .ledger
        .events(chain.escrow, 0, None)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.event {
            JobEscrowEvents::JobAborted(a) if a.jobId == escrow_id => Some(a.reason),
            _ => None,
        })
        .expect("JobAborted");
    assert!(
        aborted.starts_with("the job's model cannot be loaded: model.gguf: tensors.blk.0"),
        "{aborted}"
    );
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "refunded", "{}", job.text);
    let late = send(
        &service,
        post_json(&validator, &path, json!({"reason": reason})),
    )
    .await;
    late.problem(409, "conflict");
}

on_both_databases!(
    federated_job_runs_from_funding_to_payout,
    expired_leases_go_back_to_the_queue_until_attempts_run_out,
    a_stopping_worker_releases_its_task_with_the_attempt_returned_twice,
    a_worker_that_gives_a_task_up_cannot_take_it_again,
    a_lease_lives_no_longer_than_the_jobs_task_time_limit,
    workers_cannot_read_the_held_out_set_or_the_raw_dataset,
    a_worker_that_forfeits_a_job_is_leased_none_of_its_tasks,
    a_job_past_its_deadline_is_refunded_on_chain,
    a_payout_that_stalls_is_refunded_what_it_did_not_pay_after_its_grace,
    an_abort_pays_the_completed_rounds_and_refunds_only_the_rest,
    a_job_whose_model_cannot_load_is_ended_with_the_reason,
);
