//! A job's training progress (`GET /v1/jobs/{id}/progress`): each heartbeat a worker sends
//! with its lease becomes a point of its task's loss curve, kept once per step and bounded per
//! task, served beside the held-out metric of each merged round.

use chrono::Utc;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use shardwork_api::background::outbox::Dispatcher;
use shardwork_api::entities::task_progress;
use shardwork_core::protocol::{TASK_QUEUE, TaskMessage};
use shardwork_core::queue::QueueOptions;

use crate::flow::{get, post_json, put, step, take_tasks};
use crate::helpers::*;
use crate::jobs::{dataset, post_job};
use crate::on_both_databases;
use crate::quote::spec;

/// Heartbeat progress: step of total, with a loss when given.
fn beat(step: u64, total: u64, loss: Option<f64>) -> Value {
    json!({"step": step, "total_steps": total, "loss": loss, "tokens_per_second": loss.map(|_| 250.0)})
}

fn extend(
    token: &str,
    task: &TaskMessage,
    lease: &str,
    progress: Value,
) -> actix_web::test::TestRequest {
    post_json(
        token,
        &format!("/v1/tasks/{}/extend", task.task_id),
        json!({"lease_token": lease, "progress": progress}),
    )
}

/// Claims `task` for `token`'s worker; the lease token.
async fn claim<S, B>(service: &S, token: &str, task: &TaskMessage) -> String
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let claim = send(
        service,
        post_json(
            token,
            &format!("/v1/tasks/{}/claim", task.task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(claim.status, 200, "{}", claim.text);
    claim.body["lease_token"].as_str().unwrap().to_owned()
}

/// `(step, loss)` of each point of a task in a progress reply.
fn curve(task: &Value) -> Vec<(u64, Option<f64>)> {
    task["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["step"].as_u64().unwrap(), p["loss"].as_f64()))
        .collect()
}

/// A posted, funded job with its first round's tasks taken from the queue, and a registered
/// worker.
struct Running {
    job_id: String,
    tasks: Vec<TaskMessage>,
    requester: String,
    worker: String,
    dispatcher: Dispatcher,
}

async fn running_job<S, B>(app: &TestApp, service: &S, shards: u32, rounds: u32) -> Running
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
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(service, &requester_key(), &[]).await;
    let worker = access_token(service, &worker_key(), &["worker"]).await;
    let mut s = spec();
    s["shards"] = json!(shards);
    s["rounds"] = json!(rounds);
    let reply = send(service, post_job(&requester, &s, &dataset(40))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    let funded = send(
        service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    assert_eq!(funded.status, 202, "{}", funded.text);
    step(app, &mut dispatcher).await;
    let registered = send(
        service,
        post_json(
            &worker,
            "/v1/workers/register",
            json!({"capabilities": {"device": "cpu", "memory_mb": 2048}}),
        ),
    )
    .await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    let tasks = take_tasks(app, shards as usize).await;
    Running {
        job_id,
        tasks,
        requester,
        worker,
        dispatcher,
    }
}

async fn heartbeats_draw_a_loss_curve_per_task_beside_each_merge(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let Running {
        job_id,
        tasks,
        requester,
        worker,
        mut dispatcher,
    } = running_job(&app, &service, 2, 2).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let uri = format!("/v1/jobs/{job_id}/progress");

    // Before any heartbeat: every task, no points, no merge.
    let before = send(&service, get(&requester, &uri)).await;
    assert_eq!(before.status, 200, "{}", before.text);
    assert_eq!(before.body["job_id"], job_id.as_str());
    let listed = before.body["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed
            .iter()
            .map(|t| (
                t["round"].as_u64(),
                t["shard"].as_u64(),
                t["status"].as_str()
            ))
            .collect::<Vec<_>>(),
        [
            (Some(1), Some(0), Some("queued")),
            (Some(1), Some(1), Some("queued"))
        ]
    );
    assert!(listed.iter().all(|t| curve(t).is_empty()));
    assert_eq!(before.body["rounds"], json!([]));

    let lease = claim(&service, &worker, &tasks[0]).await;
    for progress in [
        // Before the first step: the lease is extended, but there is nothing to plot.
        beat(0, 10, None),
        beat(1, 10, Some(0.9)),
        // The same step again (a heartbeat during a slow step): the first report stands.
        beat(1, 10, Some(0.5)),
        beat(2, 10, Some(0.7)),
        beat(3, 10, Some(0.6)),
    ] {
        let r = send(&service, extend(&worker, &tasks[0], &lease, progress)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // Refused heartbeats leave no point: a stale lease, and a step past the end.
    send(
        &service,
        extend(
            &worker,
            &tasks[0],
            &uuid::Uuid::new_v4().to_string(),
            beat(4, 10, Some(0.1)),
        ),
    )
    .await
    .problem(409, "conflict");
    send(
        &service,
        extend(&worker, &tasks[0], &lease, beat(11, 10, Some(0.1))),
    )
    .await
    .problem(422, "validation");

    let during = send(&service, get(&requester, &uri)).await;
    assert_eq!(during.status, 200, "{}", during.text);
    let first = &during.body["tasks"][0];
    assert_eq!(first["task_id"], json!(tasks[0].task_id));
    assert_eq!(first["status"], "leased");
    assert_eq!(first["attempts"], 1);
    assert_eq!(
        curve(first),
        [(1, Some(0.9)), (2, Some(0.7)), (3, Some(0.6))]
    );
    let point = &first["points"][0];
    assert_eq!(
        (
            &point["attempt"],
            &point["total_steps"],
            &point["tokens_per_second"]
        ),
        (&json!(1), &json!(10), &json!(250.0))
    );
    assert!(curve(&during.body["tasks"][1]).is_empty());
    // Fewer points asked for: spread over the curve, both ends kept.
    let two = send(&service, get(&requester, &format!("{uri}?points=2"))).await;
    assert_eq!(
        curve(&two.body["tasks"][0]),
        [(1, Some(0.9)), (3, Some(0.6))]
    );

    // Who may read it: the requester, validators and admins, not another signed-in address
    // (the job itself stays readable: the job board); nobody without a token.
    let stranger_key =
        alloy::signers::local::PrivateKeySigner::from_bytes(&[0x66; 32].into()).unwrap();
    let stranger = access_token(&service, &stranger_key, &[]).await;
    send(&service, get(&stranger, &uri))
        .await
        .problem(403, "forbidden");
    let admin = access_token(&service, &admin_key(), &["admin"]).await;
    let theirs = send(&service, get(&admin, &uri)).await;
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    assert_eq!(theirs.body, during.body);
    let job = send(&service, get(&stranger, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(
        job.status, 200,
        "the job itself reads the same: {}",
        job.text
    );
    send(&service, actix_web::test::TestRequest::get().uri(&uri))
        .await
        .problem(401, "unauthenticated");

    // Bad requests name what is wrong.
    let nobody = uuid::Uuid::new_v4();
    send(
        &service,
        get(&requester, &format!("/v1/jobs/{nobody}/progress")),
    )
    .await
    .problem(404, "not-found");
    for (query, path) in [
        ("points=1", "query.points"),
        ("points=1001", "query.points"),
        ("round=0", "query.round"),
        ("round=101", "query.round"),
    ] {
        let r = send(&service, get(&requester, &format!("{uri}?{query}"))).await;
        r.problem(422, "validation");
        assert_eq!(r.paths(), [path], "{query}");
    }
    for query in ["points=-3", "round=first", "rounds=1"] {
        send(&service, get(&requester, &format!("{uri}?{query}")))
            .await
            .problem(400, "malformed-request");
    }

    // Round 1 is trained, judged and merged; its held-out loss joins the curves.
    let lease_b = claim(&service, &worker, &tasks[1]).await;
    let adapter = put(&app, "adapter bytes").await;
    for (task, lease) in [(&tasks[0], &lease), (&tasks[1], &lease_b)] {
        let metrics = put(&app, &format!("{{\"task\": \"{}\"}}", task.task_id)).await;
        let r = send(
            &service,
            post_json(
                &worker,
                &format!("/v1/tasks/{}/submit", task.task_id),
                json!({"version": 1, "task_id": task.task_id, "lease_token": lease,
                       "adapter_cid": adapter, "metrics_cid": metrics, "samples": 12}),
            ),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let id = r.body["id"].as_str().unwrap();
        let v = send(
            &service,
            post_json(
                &validator,
                &format!("/v1/validator/submissions/{id}/verdict"),
                json!({"accepted": true, "quality": 0.8}),
            ),
        )
        .await;
        assert_eq!(v.status, 200, "{}", v.text);
    }
    let merged = put(&app, "merged round 1").await;
    let agg = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/jobs/{job_id}/rounds/1/aggregate"),
            json!({"adapter_cid": merged, "metric": 1.25, "base_metric": 1.9, "metric_name": "loss"}),
        ),
    )
    .await;
    assert_eq!(agg.body["outcome"], "next_round_opened", "{}", agg.text);
    step(&app, &mut dispatcher).await;
    let round_2 = take_tasks(&app, 2).await;
    let lease_2 = claim(&service, &worker, &round_2[1]).await;
    let r = send(
        &service,
        extend(&worker, &round_2[1], &lease_2, beat(1, 4, Some(1.1))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);

    let all = send(&service, get(&requester, &uri)).await;
    assert_eq!(all.status, 200, "{}", all.text);
    let listed = all.body["tasks"].as_array().unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|t| (
                t["round"].as_u64().unwrap(),
                t["shard"].as_u64().unwrap(),
                curve(t).len()
            ))
            .collect::<Vec<_>>(),
        [(1, 0, 3), (1, 1, 0), (2, 0, 0), (2, 1, 1)]
    );
    assert_eq!(listed[0]["status"], "accepted");
    let rounds = all.body["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 1, "{rounds:?}");
    assert_eq!(
        (
            &rounds[0]["round"],
            &rounds[0]["metric"],
            &rounds[0]["base_metric"],
            &rounds[0]["metric_name"]
        ),
        (&json!(1), &json!(1.25), &json!(1.9), &json!("loss"))
    );
    // One round: its tasks and its merge only.
    let first_round = send(&service, get(&requester, &format!("{uri}?round=1"))).await;
    assert_eq!(first_round.body["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(first_round.body["rounds"].as_array().unwrap().len(), 1);
    let second_round = send(&service, get(&requester, &format!("{uri}?round=2"))).await;
    let second = second_round.body["tasks"].as_array().unwrap();
    assert_eq!(second.len(), 2);
    assert_eq!(curve(&second[1]), [(1, Some(1.1))]);
    assert_eq!(second_round.body["rounds"], json!([]));
}

async fn a_task_keeps_at_most_a_thousand_points(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let Running {
        job_id,
        tasks,
        requester,
        worker,
        ..
    } = running_job(&app, &service, 1, 1).await;
    let task = &tasks[0];
    let lease = claim(&service, &worker, task).await;
    // A run of 5,000 steps needs a shard of at least that many records (a heartbeat may not
    // claim a longer run than its shard allows): the shard's count is raised to match.
    shardwork_api::entities::shard::Entity::update_many()
        .col_expr(
            shardwork_api::entities::shard::Column::SampleCount,
            sea_orm::sea_query::Expr::value(5_000i64),
        )
        .filter(
            shardwork_api::entities::shard::Column::JobId.eq(job_id.parse::<uuid::Uuid>().unwrap()),
        )
        .exec(&app.db)
        .await
        .unwrap();
    // A thousand heartbeats' worth, written directly: the bound is what is under test.
    let now = Utc::now();
    let rows: Vec<task_progress::ActiveModel> = (1..=1000)
        .map(|step| task_progress::ActiveModel {
            task_id: Set(task.task_id),
            attempt: Set(1),
            step: Set(step),
            total_steps: Set(5000),
            loss: Set(Some(2.0 - step as f64 / 1000.0)),
            tokens_per_second: Set(None),
            recorded_at: Set(now),
        })
        .collect();
    task_progress::Entity::insert_many(rows)
        .exec(&app.db)
        .await
        .unwrap();
    let count = || async {
        task_progress::Entity::find()
            .filter(task_progress::Column::TaskId.eq(task.task_id))
            .count(&app.db)
            .await
            .unwrap()
    };
    assert_eq!(count().await, 1000);

    // The 1,001st point halves the curve, keeping its first point and the newest.
    let r = send(
        &service,
        extend(&worker, task, &lease, beat(1001, 5000, Some(0.5))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(count().await, 501);
    let reply = send(
        &service,
        get(
            &requester,
            &format!("/v1/jobs/{job_id}/progress?points=1000"),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let points = curve(&reply.body["tasks"][0]);
    assert_eq!(points.len(), 501);
    assert_eq!(points[0].0, 1);
    assert_eq!(points[500], (1001, Some(0.5)));
    assert!(points.windows(2).all(|w| w[0].0 < w[1].0));
    // The default asks for 200 of them, still from the first to the newest.
    let reply = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/progress")),
    )
    .await;
    let points = curve(&reply.body["tasks"][0]);
    assert_eq!(points.len(), 200);
    assert_eq!((points[0].0, points[199].0), (1, 1001));
}

on_both_databases!(
    heartbeats_draw_a_loss_curve_per_task_beside_each_merge,
    a_task_keeps_at_most_a_thousand_points,
);
