//! `GET /v1/jobs/{id}/progress`: how a job's training goes — the loss curve of every task, from
//! the progress its worker reported with each lease heartbeat — beside the held-out metric of
//! each round's merge, from the job's `aggregated` events.

use std::collections::HashMap;

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::job_spec::MAX_ROUNDS;
use shardwork_core::protocol::{EventKind, JobEvent, TaskStatus};
use uuid::Uuid;

use crate::domain::flow::progress::MAX_POINTS_PER_TASK;
use crate::domain::jobs::find_job;
use crate::entities::{job_event, shard, task, task_progress};
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

/// The indices of at most `k` of `n` points, evenly spread, the first and the last included.
pub fn spread(n: usize, k: usize) -> Vec<usize> {
    if n <= k {
        return (0..n).collect();
    }
    if k < 2 {
        return vec![n - 1];
    }
    // n > k, so consecutive picks differ by at least one: no index twice.
    (0..k)
        .map(|i| (i * (n - 1) + (k - 1) / 2) / (k - 1))
        .collect()
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
    let round = query.round.map(|r| r as i32);

    let mut tasks = task::Entity::find().filter(task::Column::JobId.eq(job.id));
    if let Some(round) = round {
        tasks = tasks.filter(task::Column::Round.eq(round));
    }
    let tasks = tasks.all(&state.db).await?;
    let shards: HashMap<Uuid, i32> = shard::Entity::find()
        .filter(shard::Column::JobId.eq(job.id))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|s| (s.id, s.index))
        .collect();

    // By subquery rather than a list of task ids: a large job has more tasks than a statement
    // may bind parameters.
    let mut of_job = Query::select();
    of_job
        .column(task::Column::Id)
        .from(task::Entity)
        .and_where(task::Column::JobId.eq(job.id));
    if let Some(round) = round {
        of_job.and_where(task::Column::Round.eq(round));
    }
    let rows = task_progress::Entity::find()
        .filter(task_progress::Column::TaskId.in_subquery(of_job))
        .order_by_asc(task_progress::Column::TaskId)
        .order_by_asc(task_progress::Column::Attempt)
        .order_by_asc(task_progress::Column::Step)
        .all(&state.db)
        .await?;
    let mut curves: HashMap<Uuid, Vec<task_progress::Model>> = HashMap::new();
    for row in rows {
        curves.entry(row.task_id).or_default().push(row);
    }

    let mut out: Vec<TaskProgress> = tasks
        .into_iter()
        .map(|t| {
            let curve = curves.remove(&t.id).unwrap_or_default();
            let points = spread(curve.len(), per_task as usize)
                .into_iter()
                .map(|i| {
                    let p = &curve[i];
                    ProgressPoint {
                        attempt: p.attempt.max(0) as u32,
                        step: p.step.max(0) as u64,
                        total_steps: p.total_steps.max(0) as u64,
                        loss: p.loss,
                        tokens_per_second: p.tokens_per_second,
                        recorded_at: p.recorded_at,
                    }
                })
                .collect();
            TaskProgress {
                task_id: t.id,
                round: t.round.max(0) as u32,
                shard: shards.get(&t.shard_id).copied().unwrap_or_default().max(0) as u32,
                status: t.status,
                attempts: t.attempts.max(0) as u32,
                points,
            }
        })
        .collect();
    out.sort_by_key(|t| (t.round, t.shard));

    let aggregated = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(job.id))
        .filter(job_event::Column::Kind.eq(EventKind::Aggregated.as_str()))
        .order_by_asc(job_event::Column::Id)
        .all(&state.db)
        .await?;
    let mut rounds: Vec<RoundMetric> = Vec::new();
    for row in aggregated {
        let event = JobEvent::from_parts(&row.kind, row.payload).map_err(|e| {
            ApiError::internal(
                "reading the job's merges",
                format!("event {} ({}): {e}", row.id, row.kind),
            )
        })?;
        let JobEvent::Aggregated(merge) = event else {
            continue;
        };
        if query.round.is_some_and(|r| r != merge.round) {
            continue;
        }
        // A round is merged once; should it ever be recorded twice, the later record stands.
        rounds.retain(|r| r.round != merge.round);
        rounds.push(RoundMetric {
            round: merge.round,
            metric: merge.metric,
            base_metric: merge.base_metric,
            metric_name: merge.metric_name,
            recorded_at: row.created_at,
        });
    }
    rounds.sort_by_key(|r| r.round);

    Ok(HttpResponse::Ok().json(JobProgress {
        job_id: job.id,
        tasks: out,
        rounds,
    }))
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_keeps_the_ends_and_never_repeats() {
        assert_eq!(spread(3, 200), [0, 1, 2]);
        assert_eq!(spread(0, 200), Vec::<usize>::new());
        assert_eq!(spread(10, 2), [0, 9]);
        assert_eq!(spread(11, 3), [0, 5, 10]);
        for n in [201, 250, 999, 1000] {
            let picked = spread(n, 200);
            assert_eq!(picked.len(), 200);
            assert_eq!((picked[0], picked[199]), (0, n - 1));
            assert!(picked.windows(2).all(|w| w[0] < w[1]), "{n}: {picked:?}");
        }
    }
}
