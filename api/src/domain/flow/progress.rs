//! The training progress workers report with each lease heartbeat, kept as a curve per task
//! (`task_progress`), so a requester can watch the training loss of every shard fall while a
//! round runs. The task row keeps the last heartbeat as well (`tasks.progress`).
//!
//! Read back per job ([`job_curves`]): every task's curve, thinned evenly to the points asked
//! for, beside the held-out metric of each round's merge (from the job's `aggregated` events),
//! so the two can be drawn on one chart.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Query;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, TryInsertResult,
};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::node::Progress;
use shardwork_core::protocol::{EventKind, HeldOutMetric, JobEvent, TaskStatus};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::{job_event, shard, task, task_progress};

/// The most points a task keeps. A worker heartbeats every few seconds (five in the nodes this
/// repository ships), so 1,000 points are more than an hour of training at full resolution, and
/// more than a chart a few hundred pixels wide can show.
pub const MAX_POINTS_PER_TASK: u64 = 1_000;

/// Records `progress` as a point of `task`'s curve under the task's current attempt, in the
/// caller's transaction (the lease extension's, so a point exists only for a heartbeat that
/// extended the lease).
///
/// A repeated step is not a new point: the first report of a step stands. Past
/// [`MAX_POINTS_PER_TASK`], every second point is dropped (see [`thin`]).
pub async fn record<C: ConnectionTrait>(
    txn: &C,
    task: &task::Model,
    progress: &Progress,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    // A heartbeat before the first step carries no figure: it keeps the lease alive, but there
    // is nothing to plot.
    if progress.loss.is_none() && progress.tokens_per_second.is_none() {
        return Ok(());
    }
    let (step, total_steps) = match (
        i64::try_from(progress.step),
        i64::try_from(progress.total_steps),
    ) {
        (Ok(step), Ok(total)) => (step, total),
        // `validate_progress` refuses such counts before anything is written.
        _ => {
            return Err(DomainError::internal(
                "progress point",
                "a step count beyond a bigint passed validation",
            ));
        }
    };
    let inserted = task_progress::Entity::insert(task_progress::ActiveModel {
        task_id: Set(task.id),
        attempt: Set(task.attempts),
        step: Set(step),
        total_steps: Set(total_steps),
        loss: Set(progress.loss),
        tokens_per_second: Set(progress.tokens_per_second),
        recorded_at: Set(now),
    })
    .on_conflict_do_nothing_on([
        task_progress::Column::TaskId,
        task_progress::Column::Attempt,
        task_progress::Column::Step,
    ])
    .exec_without_returning(txn)
    .await?;
    if !matches!(inserted, TryInsertResult::Inserted(n) if n > 0) {
        return Ok(());
    }
    let kept = task_progress::Entity::find()
        .filter(task_progress::Column::TaskId.eq(task.id))
        .count(txn)
        .await?;
    if kept <= MAX_POINTS_PER_TASK {
        return Ok(());
    }
    let keys: Vec<(i32, i64)> = task_progress::Entity::find()
        .select_only()
        .column(task_progress::Column::Attempt)
        .column(task_progress::Column::Step)
        .filter(task_progress::Column::TaskId.eq(task.id))
        .order_by_asc(task_progress::Column::Attempt)
        .order_by_asc(task_progress::Column::Step)
        .into_tuple()
        .all(txn)
        .await?;
    let dropped = thin(&keys);
    let mut by_attempt: Vec<(i32, Vec<i64>)> = Vec::new();
    for (attempt, step) in dropped {
        match by_attempt.last_mut() {
            Some((a, steps)) if *a == attempt => steps.push(step),
            _ => by_attempt.push((attempt, vec![step])),
        }
    }
    for (attempt, steps) in by_attempt {
        task_progress::Entity::delete_many()
            .filter(task_progress::Column::TaskId.eq(task.id))
            .filter(task_progress::Column::Attempt.eq(attempt))
            .filter(task_progress::Column::Step.is_in(steps))
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// The points to drop from a task's full curve, given its `(attempt, step)` keys in order: every
/// second one, never the first or the last.
///
/// Halving rather than refusing points once the task has its fill: a long run's end, where the
/// loss settles, is what a requester most wants to see, and refusing would hide it. After a
/// halving the older part of the curve is coarser than the newer, the whole run stays covered,
/// and the table stays bounded at the cost of one delete every few hundred heartbeats.
pub fn thin(keys: &[(i32, i64)]) -> Vec<(i32, i64)> {
    let last = keys.len().saturating_sub(1);
    keys.iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 1 && *i != last)
        .map(|(_, key)| *key)
        .collect()
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
    /// What the metric is, and so which way it is better.
    pub metric_name: HeldOutMetric,
    /// When the merge was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// A job's training curves and merged rounds.
#[derive(Debug)]
pub struct JobCurves {
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

/// Job `job_id`'s curves, each task's thinned to at most `per_task` points (see [`spread`]),
/// and the held-out metric of each merged round; only round `round`'s when one is given.
pub async fn job_curves<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    round: Option<u32>,
    per_task: usize,
) -> Result<JobCurves, DomainError> {
    let wanted = round;
    let round = round.map(|r| r as i32);

    let mut tasks = task::Entity::find().filter(task::Column::JobId.eq(job_id));
    if let Some(round) = round {
        tasks = tasks.filter(task::Column::Round.eq(round));
    }
    let tasks = tasks.all(db).await?;
    let shards: HashMap<Uuid, i32> = shard::Entity::find()
        .filter(shard::Column::JobId.eq(job_id))
        .all(db)
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
        .and_where(task::Column::JobId.eq(job_id));
    if let Some(round) = round {
        of_job.and_where(task::Column::Round.eq(round));
    }
    let rows = task_progress::Entity::find()
        .filter(task_progress::Column::TaskId.in_subquery(of_job))
        .order_by_asc(task_progress::Column::TaskId)
        .order_by_asc(task_progress::Column::Attempt)
        .order_by_asc(task_progress::Column::Step)
        .all(db)
        .await?;
    let mut curves: HashMap<Uuid, Vec<task_progress::Model>> = HashMap::new();
    for row in rows {
        curves.entry(row.task_id).or_default().push(row);
    }

    let mut out: Vec<TaskProgress> = tasks
        .into_iter()
        .map(|t| {
            let curve = curves.remove(&t.id).unwrap_or_default();
            let points = spread(curve.len(), per_task)
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
        .filter(job_event::Column::JobId.eq(job_id))
        .filter(job_event::Column::Kind.eq(EventKind::Aggregated.as_str()))
        .order_by_asc(job_event::Column::Id)
        .all(db)
        .await?;
    let mut rounds: Vec<RoundMetric> = Vec::new();
    for row in aggregated {
        let event = JobEvent::from_parts(&row.kind, row.payload).map_err(|e| {
            DomainError::internal(
                "reading the job's merges",
                format!("event {} ({}): {e}", row.id, row.kind),
            )
        })?;
        let JobEvent::Aggregated(merge) = event else {
            continue;
        };
        if wanted.is_some_and(|r| r != merge.round) {
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

    Ok(JobCurves { tasks: out, rounds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_halves_the_curve_and_keeps_both_ends() {
        let keys: Vec<(i32, i64)> = (0..=1000).map(|s| (1, s)).collect();
        let dropped = thin(&keys);
        assert_eq!(dropped.len(), 500);
        assert!(!dropped.contains(&(1, 0)));
        assert!(!dropped.contains(&(1, 1000)));
        assert!(dropped.iter().all(|(_, s)| s % 2 == 1));

        // An even count: the last point is odd-indexed and stays all the same.
        let keys = [(1, 0), (1, 5), (2, 0), (2, 7)];
        assert_eq!(thin(&keys), [(1, 5)]);
        assert!(thin(&[]).is_empty());
        assert!(thin(&[(1, 3)]).is_empty());
    }

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
