//! `GET /v1/jobs/{id}/progress`: how a job's training goes — the loss curve of every task, from
//! the progress its worker reported with each lease heartbeat — beside the held-out metric of
//! each round's merge, from the job's `aggregated` events.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::TaskStatus;
use shardwork_core::protocol::job_spec::MAX_ROUNDS;
use uuid::Uuid;

use crate::domain::flow::progress::{
    CurvePoint, MAX_POINTS_PER_TASK, MergedRound, TaskCurve, job_curves,
};
use crate::domain::jobs::find_job;
use crate::http::access::require_overseer;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// Points per task when `points` is not given: about one per pixel of the portal's chart.
pub const DEFAULT_POINTS: u32 = 200;
/// The largest `points` accepted: all a task keeps.
pub const MAX_POINTS: u32 = MAX_POINTS_PER_TASK as u32;

/// What part of a job's progress to read.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProgressQuery {
    /// Only this round: its tasks and its merge.
    #[param(minimum = 1, maximum = 100)]
    pub round: Option<u32>,
    /// At most this many points per task, spread evenly over its curve; its first and last
    /// point are always among them.
    #[param(minimum = 2, maximum = 1000, default = 200)]
    pub points: Option<u32>,
}

/// One heartbeat's progress.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProgressPoint {
    /// The task's attempt it came under (1 for its first lease): a task trained again after
    /// a lost lease or a rejected adapter starts a new curve at step 0.
    pub attempt: u32,
    /// Optimizer steps done.
    pub step: u64,
    /// Optimizer steps in the whole run.
    pub total_steps: u64,
    /// The step's training loss, when the worker reported one.
    pub loss: Option<f64>,
    /// Training throughput so far, in tokens per second, when the worker reported it.
    pub tokens_per_second: Option<f64>,
    /// When the API received the heartbeat.
    pub recorded_at: DateTime<Utc>,
}

/// One task's training curve.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskProgress {
    /// The task.
    pub task_id: Uuid,
    /// Its round, from 1.
    pub round: u32,
    /// The shard it trains on, from 0.
    pub shard: u32,
    /// Where the task stands.
    pub status: TaskStatus,
    /// Leases taken so far.
    pub attempts: u32,
    /// Its progress, oldest attempt first and by step within an attempt.
    pub points: Vec<ProgressPoint>,
}

/// A round's merge, scored on the held-out set.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoundMetric {
    /// The round, from 1.
    pub round: u32,
    /// The merged adapter's held-out metric.
    pub metric: f64,
    /// The base model's held-out metric.
    pub base_metric: f64,
    /// What the metric is: `loss` (lower is better), `accuracy` (higher is better), …
    pub metric_name: String,
    /// When the merge was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// A job's training progress.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobProgress {
    /// The job.
    pub job_id: Uuid,
    /// Every task (of the round asked for), by round and shard.
    pub tasks: Vec<TaskProgress>,
    /// Every merged round (or the one asked for), by round.
    pub rounds: Vec<RoundMetric>,
}

impl From<CurvePoint> for ProgressPoint {
    fn from(p: CurvePoint) -> Self {
        ProgressPoint {
            attempt: p.attempt,
            step: p.step,
            total_steps: p.total_steps,
            loss: p.loss,
            tokens_per_second: p.tokens_per_second,
            recorded_at: p.recorded_at,
        }
    }
}

impl From<TaskCurve> for TaskProgress {
    fn from(t: TaskCurve) -> Self {
        TaskProgress {
            task_id: t.task_id,
            round: t.round,
            shard: t.shard,
            status: t.status,
            attempts: t.attempts,
            points: t.points.into_iter().map(ProgressPoint::from).collect(),
        }
    }
}

impl From<MergedRound> for RoundMetric {
    fn from(r: MergedRound) -> Self {
        RoundMetric {
            round: r.round,
            metric: r.metric,
            base_metric: r.base_metric,
            metric_name: r.metric_name,
            recorded_at: r.recorded_at,
        }
    }
}

/// A job's training curves: the loss its workers reported per task, and the held-out metric of
/// each round's merge. For the job's requester, validators and admins.
///
/// Each task's points are its workers' heartbeats (a few seconds apart while training), kept
/// per attempt and step; a task keeps at most 1,000, thinned evenly as a long run grows. Read
/// it again while the job runs: points arrive with every heartbeat.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/progress",
    operation_id = "get_job_progress",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id"), ProgressQuery),
    responses(
        (status = 200, description = "The training curve of each task and the held-out metric of each merged round", body = JobProgress),
        (status = 400, description = "`id` or a query parameter is malformed or unknown", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "The caller is neither the job's requester, a validator nor an admin", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`round` or `points` is out of range", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The progress could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn progress(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
    query: web::Query<ProgressQuery>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    require_overseer(&caller.claims, &job, "the training progress")?;
    let per_task = query.points.unwrap_or(DEFAULT_POINTS);
    if !(2..=MAX_POINTS).contains(&per_task) {
        return Err(ApiError::invalid(
            "query.points",
            format!("{per_task} is outside 2..={MAX_POINTS}"),
        ));
    }
    if let Some(round) = query.round
        && !(1..=MAX_ROUNDS).contains(&round)
    {
        return Err(ApiError::invalid(
            "query.round",
            format!("{round} is outside 1..={MAX_ROUNDS}: no job has such a round"),
        ));
    }
    let curves = job_curves(&state.db, job.id, query.round, per_task as usize).await?;
    Ok(HttpResponse::Ok().json(JobProgress {
        job_id: job.id,
        tasks: curves.tasks.into_iter().map(TaskProgress::from).collect(),
        rounds: curves.rounds.into_iter().map(RoundMetric::from).collect(),
    }))
}
