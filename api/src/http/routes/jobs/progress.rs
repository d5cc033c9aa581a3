//! `GET /v1/jobs/{id}/progress`: how a job's training goes — the loss curve of every task, from
//! the progress its worker reported with each lease heartbeat — beside the held-out metric of
//! each round's merge, from the job's `aggregated` events.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::job_spec::MAX_ROUNDS;
use uuid::Uuid;

// The curves' wire types are the domain's own (as the rounds' and the quote's are).
use crate::domain::flow::progress::{MAX_POINTS_PER_TASK, job_curves};
pub use crate::domain::flow::progress::{ProgressPoint, RoundMetric, TaskProgress};
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
        tasks: curves.tasks,
        rounds: curves.rounds,
    }))
}
