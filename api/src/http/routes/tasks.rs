//! `/v1/tasks/{id}/…`: a worker's lease on a task — claim, extend with progress, submit. Worker
//! role; a worker acts only through the lease it holds.

use crate::http::openapi::{IdNotUuid, JsonBodyRefused};
use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::{HttpResponse, web};
use chrono::{Duration, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{ProofStatus, Submission, TaskStatus, VerdictStatus};
use uuid::Uuid;

use crate::domain::flow::tasks::{self, Lease, Progress, SubmissionRecord};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::WorkerRole;
use crate::http::extract::Json;
use crate::http::problem::ApiError;
use crate::state::AppState;

fn lease_length(state: &AppState) -> Duration {
    Duration::seconds(state.config.lease_secs as i64)
}

/// Claims the lease on a task taken from the queue. 200 with the lease and the task as the
/// database knows it; 409 when the task is done, failed or held by another worker (drop the
/// message); 403 when the worker's reputation is below the job's minimum.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/claim",
    operation_id = "claim_task",
    tag = "tasks",
    extensions(("x-shardwork-role" = json!("worker"))),
    params(("id" = Uuid, Path, description = "The task id")),
    responses(
        (status = 200, description = "The lease, and the task as the database knows it", body = Lease),
        IdNotUuid,
        (status = 403, description = "The worker may not take this task (reputation, its adapter for it was rejected, or its bond does not cover it): put the message back", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No task has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "Done, failed, or leased by another worker: drop the message; or the caller is not registered", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The task could not be read or written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn claim(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let worker = tasks::registered_worker(&state.db, &caller.claims.sub.to_string()).await?;
    let id = id.into_inner();
    let bond = bond_for(&state, id, &worker.address).await?;
    let lease = tasks::claim(
        &state.db,
        id,
        &worker,
        lease_length(&state),
        state.config.sealing_secret.expose(),
        bond,
        Utc::now(),
    )
    .await?;
    tracing::info!(task = %lease.task_id, worker = %worker.address, attempt = lease.attempt, "lease granted");
    Ok(HttpResponse::Ok().json(lease))
}

/// `worker`'s active bond in the token of task `task_id`'s job as the escrow holds it, when the
/// job asks for one (`validation.bond_multiple`); `None` otherwise. Read from the chain at
/// claim time, so a bond counts as soon as it is mined and stops counting as soon as its
/// unbonding is asked.
async fn bond_for(
    state: &AppState,
    task_id: Uuid,
    worker: &str,
) -> Result<Option<alloy::primitives::U256>, ApiError> {
    let task = tasks::find_task(&state.db, task_id).await?;
    let job = crate::domain::jobs::find_job(&state.db, task.job_id).await?;
    if job.task_bond().is_zero() {
        return Ok(None);
    }
    let chain = state.chain.as_ref().ok_or_else(|| {
        ApiError::internal(
            "bond",
            format!(
                "job {} asks workers for a bond, and this API has no chain",
                job.id
            ),
        )
    })?;
    let parse = |what: &str, text: &str| {
        text.parse::<alloy::primitives::Address>()
            .map_err(|e| ApiError::internal("bond", format!("{what} {text}: {e}")))
    };
    let bond = chain
        .ledger
        .bond_of(
            chain.escrow,
            parse("worker", worker)?,
            parse("token", &job.stake_token())?,
        )
        .await
        .map_err(|e| ApiError::internal("reading the worker's bond", e))?;
    Ok(Some(bond.active))
}

/// A heartbeat on a leased task.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    /// The lease token from the claim: proves the caller still holds the task.
    pub lease_token: Uuid,
    /// How far training has got.
    pub progress: Progress,
}

/// The extended lease.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExtendResponse {
    /// When the lease now runs out unless extended again.
    pub expires_at: chrono::DateTime<Utc>,
}

/// Heartbeat: extends the lease and records progress (step, loss, tokens/s).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/extend",
    operation_id = "extend_lease",
    tag = "tasks",
    extensions(("x-shardwork-role" = json!("worker"))),
    params(("id" = Uuid, Path, description = "The task id")),
    request_body = ExtendRequest,
    responses(
        (status = 200, description = "The lease's new expiry", body = ExtendResponse),
        JsonBodyRefused,
        (status = 404, description = "No task has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The lease passed to another worker", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The progress is not a position in the run", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The lease could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn extend(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    id: web::Path<Uuid>,
    Json(body): Json<ExtendRequest>,
) -> Result<HttpResponse, ApiError> {
    let worker = tasks::registered_worker(&state.db, &caller.claims.sub.to_string()).await?;
    let expires_at = tasks::extend(
        &state.db,
        id.into_inner(),
        &worker,
        body.lease_token,
        &body.progress,
        lease_length(&state),
        Utc::now(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(ExtendResponse { expires_at }))
}

/// A worker giving back a task it cannot train.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AbandonRequest {
    /// The lease token from the claim: proves the caller still holds the task.
    pub lease_token: Uuid,
    /// Why (the loader's or trainer's error), recorded in the task's event; 1..=2000 characters.
    pub reason: String,
}

/// Where the abandoned task went.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AbandonResponse {
    /// `queued` for another attempt, or `failed` when its attempts are used up.
    pub status: TaskStatus,
}

/// Gives a leased task back with the reason it could not be trained: requeued at once (the
/// attempt counted), or failed with that reason once its attempts are used up.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/abandon",
    operation_id = "abandon_task",
    tag = "tasks",
    extensions(("x-shardwork-role" = json!("worker"))),
    params(("id" = Uuid, Path, description = "The task id")),
    request_body = AbandonRequest,
    responses(
        (status = 200, description = "Where the task went", body = AbandonResponse),
        JsonBodyRefused,
        (status = 404, description = "No task has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The caller does not hold the lease", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The reason is empty or too long", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The task could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn abandon(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    id: web::Path<Uuid>,
    Json(body): Json<AbandonRequest>,
) -> Result<HttpResponse, ApiError> {
    let worker = tasks::registered_worker(&state.db, &caller.claims.sub.to_string()).await?;
    let status = tasks::abandon(
        &state.db,
        id.into_inner(),
        &worker,
        body.lease_token,
        &body.reason,
        Utc::now(),
    )
    .await?;
    tracing::info!(worker = %worker.address, %status, reason = %body.reason, "task abandoned");
    Ok(HttpResponse::Ok().json(AbandonResponse { status }))
}

/// A stopping worker's release of its lease.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The lease token from the claim: proves the caller still holds the task.
    pub lease_token: Uuid,
}

/// Where the released task went.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReleaseResponse {
    /// `queued` for another worker, or `failed` when a counted release used up its attempts.
    pub status: TaskStatus,
    /// True when the attempt was given back (the first two releases of a task); false when
    /// the release counted like an abandoned attempt.
    pub attempt_returned: bool,
}

/// Gives a leased task back unfinished because the worker is stopping (Ctrl-C, SIGTERM, a
/// deploy): requeued at once for another worker with the attempt returned, twice per task;
/// later releases of the task count like an abandoned attempt.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/release",
    operation_id = "release_task",
    tag = "tasks",
    extensions(("x-shardwork-role" = json!("worker"))),
    params(("id" = Uuid, Path, description = "The task id")),
    request_body = ReleaseRequest,
    responses(
        (status = 200, description = "Where the task went", body = ReleaseResponse),
        JsonBodyRefused,
        (status = 404, description = "No task has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The caller does not hold the lease", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The task could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn release(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    id: web::Path<Uuid>,
    Json(body): Json<ReleaseRequest>,
) -> Result<HttpResponse, ApiError> {
    let worker = tasks::registered_worker(&state.db, &caller.claims.sub.to_string()).await?;
    let (status, attempt_returned) = tasks::release(
        &state.db,
        id.into_inner(),
        &worker,
        body.lease_token,
        Utc::now(),
    )
    .await?;
    tracing::info!(worker = %worker.address, %status, attempt_returned, "task released");
    Ok(HttpResponse::Ok().json(ReleaseResponse {
        status,
        attempt_returned,
    }))
}

/// A submission as recorded, with the validator's verdict once there is one.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmissionView {
    /// The submission's id.
    pub id: Uuid,
    /// The task it was handed in for.
    pub task_id: Uuid,
    /// The trained adapter's bundle in the content store.
    pub adapter_cid: String,
    /// The training metrics document (`metrics.json`) in the content store.
    pub metrics_cid: String,
    /// Training records the adapter saw.
    pub samples: i64,
    /// `pending` until the validator rules, then `accepted` or `rejected`.
    pub verdict: VerdictStatus,
    /// The validator's score, 0..=1 (0 for a rejection); absent while pending.
    pub quality: Option<f64>,
    /// Why the validator rejected the adapter.
    pub reject_reason: Option<String>,
    /// Its proof of training: `not_due` until a scored verdict, then `pending` until a
    /// validator has replayed a stretch of the run, then `passed` or `failed`.
    pub proof: ProofStatus,
    /// When the submission was recorded.
    pub created_at: chrono::DateTime<Utc>,
}

impl From<SubmissionRecord> for SubmissionView {
    fn from(m: SubmissionRecord) -> Self {
        SubmissionView {
            id: m.id,
            task_id: m.task_id,
            adapter_cid: m.adapter_cid,
            metrics_cid: m.metrics_cid,
            samples: m.sample_count,
            verdict: m.verdict,
            quality: m.quality,
            reject_reason: m.reject_reason,
            proof: m.proof_status,
            created_at: m.created_at,
        }
    }
}

/// Submits the adapter for a leased task: 201 the first time, 200 with the same submission
/// when repeated (idempotent), 409 when the lease passed to another worker.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/submit",
    operation_id = "submit_task",
    tag = "tasks",
    extensions(("x-shardwork-role" = json!("worker"))),
    params(("id" = Uuid, Path, description = "The task id")),
    request_body = Submission,
    responses(
        (status = 200, description = "The same submission, already recorded", body = SubmissionView),
        (status = 201, description = "Recorded; awaiting the validator", body = SubmissionView),
        JsonBodyRefused,
        (status = 404, description = "No task has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The lease passed to another worker, or a different submission awaits its verdict", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "A field breaks a rule (e.g. the adapter is not in the content store)", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The submission could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn submit(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    id: web::Path<Uuid>,
    Json(body): Json<Submission>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    if body.task_id != id {
        return Err(ApiError::invalid(
            "task_id",
            format!(
                "{} does not match the task in the path ({id})",
                body.task_id
            ),
        ));
    }
    for (path, cid) in [
        ("adapter_cid", &body.adapter_cid),
        ("metrics_cid", &body.metrics_cid),
    ] {
        if !state
            .store
            .has(&cid.0)
            .await
            .map_err(|e| ApiError::internal("content store", e))?
        {
            return Err(ApiError::invalid(
                path,
                format!("{cid} is not in the content store; upload it first"),
            ));
        }
    }
    let worker = tasks::registered_worker(&state.db, &caller.claims.sub.to_string()).await?;
    let (stored, created) = tasks::submit(&state.db, &worker, &body, Utc::now()).await?;
    let view = SubmissionView::from(stored);
    Ok(if created {
        HttpResponse::Created().json(view)
    } else {
        HttpResponse::Ok().json(view)
    })
}
