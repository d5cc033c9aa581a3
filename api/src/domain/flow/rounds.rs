//! Rounds: opening one (a task per shard, published by the outbox), noticing when all its
//! adapters are accepted, and recording the validator's merge, which either opens the next
//! round from the merged adapter or queues the job's finalization on chain.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{EventKind, HeldOutMetric, JobEvent, events};
use uuid::Uuid;

pub use shardwork_core::protocol::node::Aggregate;

use super::tasks::TaskStatus;
use super::validator_leases::{self, ValidatorWork};
use super::{failures, payout};
use crate::domain::error::DomainError;
use crate::domain::lifecycle::{JobStatus, dispatch_again, record_event};
use crate::entities::{job, job_event, round, shard, task};

pub use shardwork_core::protocol::RoundStatus;

/// Opens round `number` of `job` from `base_adapter` (the previous merge; none in round 1):
/// the round, one queued task per shard, the job's current round, and a `round_opened` event
/// the outbox turns into queue messages. Runs in the caller's transaction.
pub async fn open_round<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    number: i32,
    base_adapter: Option<String>,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    round::Entity::insert(round::ActiveModel {
        id: Set(Uuid::now_v7()),
        job_id: Set(job.id),
        number: Set(number),
        status: Set(RoundStatus::Open),
        base_adapter_cid: Set(base_adapter.clone()),
        aggregate_adapter_cid: Set(None),
        aggregate: Set(None),
        created_at: Set(now),
        completed_at: Set(None),
    })
    .exec(txn)
    .await?;
    let shards = shard::Entity::find()
        .filter(shard::Column::JobId.eq(job.id))
        .all(txn)
        .await?;
    let tasks: Vec<task::ActiveModel> = shards
        .iter()
        .map(|s| task::ActiveModel {
            id: Set(Uuid::now_v7()),
            job_id: Set(job.id),
            shard_id: Set(s.id),
            round: Set(number),
            status: Set(TaskStatus::Queued),
            lease_holder: Set(None),
            lease_token: Set(None),
            lease_expires_at: Set(None),
            leased_at: Set(None),
            attempts: Set(0),
            max_attempts: Set(max_attempts),
            releases: Set(0),
            progress: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        })
        .collect();
    task::Entity::insert_many(tasks).exec(txn).await?;
    job::Entity::update_many()
        .col_expr(job::Column::CurrentRound, Expr::value(number))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(job.id))
        .exec(txn)
        .await?;
    record_event(
        txn,
        job.id,
        &JobEvent::RoundOpened(events::RoundOpened {
            round: number as u32,
            tasks: shards.len() as u32,
            base_adapter_cid: base_adapter,
        }),
        true,
        now,
    )
    .await?;
    Ok(())
}

/// Sends on a job that is funded again after a chain reorganisation took its first funding
/// away (decision 0041): its rounds and work stand, so no round is opened. Round 1's opening
/// is dispatched again, which marks the new escrow job started (the outbox reads the escrow
/// first), and the current round's queued tasks are published again as new publications:
/// workers dropped their messages while the job waited for its funding.
pub async fn resume_funded<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let openings = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(job.id))
        .filter(job_event::Column::Kind.eq(EventKind::RoundOpened.as_str()))
        .order_by_asc(job_event::Column::Id)
        .all(txn)
        .await?;
    for row in openings {
        if let Ok(JobEvent::RoundOpened(opened)) = JobEvent::from_parts(&row.kind, row.payload)
            && opened.round == 1
        {
            dispatch_again(txn, row.id).await?;
            break;
        }
    }
    let queued = task::Entity::find()
        .filter(task::Column::JobId.eq(job.id))
        .filter(task::Column::Round.eq(job.current_round))
        .filter(task::Column::Status.eq(TaskStatus::Queued))
        .all(txn)
        .await?;
    for t in queued {
        // A new release count is a new publication key: the queue would drop a message with
        // the key it already published.
        task::Entity::update_many()
            .col_expr(task::Column::Releases, Expr::value(t.releases + 1))
            .col_expr(task::Column::UpdatedAt, Expr::value(now))
            .filter(task::Column::Id.eq(t.id))
            .exec(txn)
            .await?;
        record_event(
            txn,
            job.id,
            &JobEvent::TaskRequeued(events::TaskAttempt {
                task_id: t.id,
                round: t.round as u32,
                attempts: t.attempts as u32,
                max_attempts: t.max_attempts as u32,
                reason: "the job was funded again after a chain reorganisation".into(),
            }),
            true,
            now,
        )
        .await?;
    }
    Ok(())
}

/// Round `number` of job `job_id`, or [`DomainError::NotFound`].
pub async fn find_round<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    number: i32,
) -> Result<round::Model, DomainError> {
    round::Entity::find()
        .filter(round::Column::JobId.eq(job_id))
        .filter(round::Column::Number.eq(number))
        .one(db)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("job {job_id} has no round {number}")))
}

/// Moves the round to `aggregating` when its last task was just accepted. Runs in the
/// verdict's transaction, so exactly one verdict (the last) does it.
pub async fn close_if_complete<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    number: i32,
    now: DateTime<Utc>,
) -> Result<bool, DomainError> {
    let tasks = task::Entity::find()
        .filter(task::Column::JobId.eq(job_id))
        .filter(task::Column::Round.eq(number))
        .all(txn)
        .await?;
    if tasks.is_empty() || tasks.iter().any(|t| t.status != TaskStatus::Accepted) {
        return Ok(false);
    }
    let updated = round::Entity::update_many()
        .col_expr(
            round::Column::Status,
            Expr::value(RoundStatus::Aggregating.as_str()),
        )
        .filter(round::Column::JobId.eq(job_id))
        .filter(round::Column::Number.eq(number))
        .filter(round::Column::Status.eq(RoundStatus::Open))
        .exec(txn)
        .await?;
    if updated.rows_affected == 1 {
        record_event(
            txn,
            job_id,
            &JobEvent::RoundReady(events::RoundReady {
                round: number as u32,
                accepted: tasks.len() as u32,
            }),
            false,
            now,
        )
        .await?;
    }
    Ok(updated.rows_affected == 1)
}

/// What recording a merge led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AggregateOutcome {
    /// The job has more rounds: the next one is open, training from the merged adapter.
    NextRoundOpened,
    /// The held-out metric has not improved for `validation.patience` rounds: the job ends
    /// early (queued on chain once its proofs are decided), paying the completed rounds,
    /// refunding the rest, and handing over the best round's merge.
    EndedEarly,
    /// That was the job's last round: completing the job on chain, with its payouts, is queued.
    FinalizationQueued,
    /// That was the job's last round, and proofs of training are still being checked: the
    /// payout is computed and queued when the last of them is decided.
    PayoutAwaitsProofs,
}

/// [`record_aggregate`] in a transaction of its own, by `validator` (its address): what the
/// validator's merge route calls. Refused while another validator holds the merge's lease.
pub async fn merge_round(
    db: &DatabaseConnection,
    job_id: Uuid,
    number: i32,
    aggregate: &Aggregate,
    validator: &str,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Result<AggregateOutcome, DomainError> {
    let txn = db.begin().await?;
    let work = ValidatorWork::Merge {
        job_id,
        round: number,
    };
    validator_leases::settle(&txn, &work, validator, now).await?;
    let outcome = record_aggregate(&txn, job_id, number, aggregate, max_attempts, now).await?;
    txn.commit().await?;
    Ok(outcome)
}

/// Records the merge of round `number` of job `job_id` and moves the job on, in the caller's
/// transaction. Only an open job's round is merged: a job that ended (refunded, aborted) while
/// its validator merged is a conflict.
pub async fn record_aggregate<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    number: i32,
    aggregate: &Aggregate,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Result<AggregateOutcome, DomainError> {
    if !(aggregate.metric.is_finite() && aggregate.base_metric.is_finite()) {
        return Err(DomainError::invalid(
            "metric",
            "metric and base_metric must be finite numbers",
        ));
    }
    // Locked first: a proof decided at the same time either sees this merge or is seen by it,
    // so the payout is queued exactly once.
    let job = &crate::domain::jobs::lock_job(txn, job_id, now).await?;
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "job {job_id} is {}; nothing to merge",
            job.status
        )));
    }
    let round = find_round(txn, job.id, number).await?;
    if round.status != RoundStatus::Aggregating {
        return Err(DomainError::Conflict(format!(
            "round {number} of job {} is {}; only a round whose adapters are all accepted is merged",
            job.id, round.status
        )));
    }
    let adapter_cid = aggregate.adapter_cid.to_string();
    let summary =
        serde_json::to_value(aggregate).map_err(|e| DomainError::internal("aggregate", e))?;
    let updated = round::Entity::update_many()
        .col_expr(
            round::Column::Status,
            Expr::value(RoundStatus::Completed.as_str()),
        )
        .col_expr(
            round::Column::AggregateAdapterCid,
            Expr::value(adapter_cid.clone()),
        )
        .col_expr(round::Column::Aggregate, Expr::value(summary))
        .col_expr(round::Column::CompletedAt, Expr::value(now))
        .filter(round::Column::Id.eq(round.id))
        .filter(round::Column::Status.eq(RoundStatus::Aggregating))
        .exec(txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "round {number} of job {} was merged concurrently",
            job.id
        )));
    }
    record_event(
        txn,
        job.id,
        &JobEvent::Aggregated(events::Aggregated {
            round: number as u32,
            adapter_cid: adapter_cid.clone(),
            metric: aggregate.metric,
            base_metric: aggregate.base_metric,
            metric_name: aggregate.metric_name,
            details: aggregate.details.clone(),
        }),
        // A round before the last: the outbox records the job's progress on chain, so the
        // requester cannot take the stake back at the deadline before this work is paid.
        number < job.rounds,
        now,
    )
    .await?;
    if number < job.rounds {
        let patience = job.validation().patience();
        let stalled = rounds_without_improvement(txn, job.id).await?;
        if stalled >= patience {
            let best = best_round(txn, job.id).await?.map_or(0, |r| r.number);
            let reason = format!(
                "validation.patience: the held-out {} has not improved on round {best}'s for \
                 {stalled} rounds (patience {patience}); rounds {}..={} are not run",
                aggregate.metric_name,
                number + 1,
                job.rounds
            );
            failures::abort_job(txn, job.id, number as u32, reason, now).await?;
            return Ok(AggregateOutcome::EndedEarly);
        }
        open_round(txn, job, number + 1, Some(adapter_cid), max_attempts, now).await?;
        return Ok(AggregateOutcome::NextRoundOpened);
    }
    let pending = payout::pending_proofs(txn, job.id).await?;
    if pending > 0 {
        record_event(
            txn,
            job.id,
            &JobEvent::AwaitingProofs(events::AwaitingProofs { pending }),
            false,
            now,
        )
        .await?;
        return Ok(AggregateOutcome::PayoutAwaitsProofs);
    }
    queue_finalization(txn, job, now).await?;
    Ok(AggregateOutcome::FinalizationQueued)
}

/// Queues the job's payout with the merge of its best round ([`best_round`]) as the result:
/// the `finalize` event, which the outbox sends on chain, with every contributor's score.
/// Called once every proof of training of the job is decided, by the last merge or the last
/// proof.
pub(super) async fn queue_finalization<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let best = best_round(txn, job.id)
        .await?
        .ok_or_else(|| DomainError::internal("finalizing", "a job without a merged round"))?;
    let contributions = payout::contributions(txn, job.id).await?;
    record_event(
        txn,
        job.id,
        &JobEvent::Finalize(events::Finalize {
            adapter_cid: best.aggregate_adapter_cid.unwrap_or_default(),
            round: Some(best.number as u32),
            manifest_cid: job.manifest_cid.clone(),
            contributions,
        }),
        true,
        now,
    )
    .await?;
    Ok(())
}

/// The round of `job` whose merge is its result (`result_adapter_cid`: its best round, which
/// the result is sealed to); `None` before the job has a result.
pub async fn result_round<C: ConnectionTrait>(
    db: &C,
    job: &job::Model,
) -> Result<Option<round::Model>, DomainError> {
    let Some(result) = &job.result_adapter_cid else {
        return Ok(None);
    };
    Ok(round::Entity::find()
        .filter(round::Column::JobId.eq(job.id))
        .filter(round::Column::AggregateAdapterCid.eq(result.as_str()))
        .order_by_desc(round::Column::Number)
        .one(db)
        .await?)
}

/// The job's completed round whose merge scored the best held-out metric, the later of equals
/// (decision 0046): the job's result. A later round's merge can score below an earlier one (a
/// merge falls back to the best accepted adapter, whose minimum gain from a merged start may be
/// negative), and the requester gets the best it paid for, not the last. A round whose
/// summary names no known metric never wins over one that does. `None` before any merge.
pub async fn best_round<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
) -> Result<Option<round::Model>, DomainError> {
    let mut best: Option<(round::Model, Option<(HeldOutMetric, f64)>)> = None;
    for r in completed_rounds(db, job_id).await? {
        let score = round_score(&r);
        let held = best.as_ref().and_then(|(_, held)| *held);
        let better = match (held, score) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some((_, held)), Some((metric, value))) => metric.at_least_as_good(value, held),
        };
        if better {
            best = Some((r, score));
        }
    }
    Ok(best.map(|(r, _)| r))
}

/// How many of the job's last completed rounds in a row scored no better than the best
/// held-out metric before them (decision 0047): what `validation.patience` is compared with.
/// An equal score is no improvement here (it is one for [`best_round`], which hands over the
/// later of equals: the same quality, from more data); a round whose summary names no known
/// metric is none either.
pub async fn rounds_without_improvement<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
) -> Result<u32, DomainError> {
    let mut best: Option<(HeldOutMetric, f64)> = None;
    let mut since = 0u32;
    for r in completed_rounds(db, job_id).await? {
        let improved = match (best, round_score(&r)) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some((_, held)), Some((metric, value))) => {
                value != held && metric.at_least_as_good(value, held)
            }
        };
        if improved {
            best = round_score(&r);
            since = 0;
        } else {
            since += 1;
        }
    }
    Ok(since)
}

/// The job's completed, merged rounds, first to last.
async fn completed_rounds<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
) -> Result<Vec<round::Model>, DomainError> {
    Ok(round::Entity::find()
        .filter(round::Column::JobId.eq(job_id))
        .filter(round::Column::Status.eq(RoundStatus::Completed.as_str()))
        .filter(round::Column::AggregateAdapterCid.is_not_null())
        .order_by_asc(round::Column::Number)
        .all(db)
        .await?)
}

/// A completed round's merge as the validator recorded it; `None` before the merge, or for a
/// summary that no longer reads as one.
pub fn round_aggregate(r: &round::Model) -> Option<Aggregate> {
    serde_json::from_value(r.aggregate.clone()?).ok()
}

/// The held-out metric a completed round's summary names, and its finite value.
fn round_score(r: &round::Model) -> Option<(HeldOutMetric, f64)> {
    let summary = round_aggregate(r)?;
    summary
        .metric
        .is_finite()
        .then_some((summary.metric_name, summary.metric))
}
