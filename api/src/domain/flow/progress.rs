//! The training progress workers report with each lease heartbeat, kept as a curve per task
//! (`task_progress`), so a requester can watch the training loss of every shard fall while a
//! round runs. The task row keeps the last heartbeat as well (`tasks.progress`).

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, TryInsertResult,
};
use shardwork_core::protocol::node::Progress;

use crate::domain::error::DomainError;
use crate::entities::{task, task_progress};

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
}
