//! The validator's side of a round: what is waiting to be scored, and recording a verdict.
//!
//! Quality is the validator's judgement in `0 ..= 1`; the service documents how it computes it
//! (worker/src/validator). An accepted adapter closes its task (and, when it is the round's last,
//! moves the round to aggregation); a rejected one sends the task back to the queue for another
//! worker, until its attempts are used up.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    TransactionTrait,
};
use shardwork_core::protocol::{JobEvent, ProofStatus, VerdictStatus, events};
use uuid::Uuid;

pub use shardwork_core::protocol::node::{
    AcceptedAdapter, EarlierSubmission, PendingValidation, ReadyRound, Verdict,
};

use super::rounds;
use super::tasks::{TaskStatus, find_task, requeue};
use super::validator_leases::{self, ValidatorWork};
use crate::domain::error::DomainError;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::entities::{job, reputation_event, round, shard, submission, task, worker};

/// The oldest `limit` pending submissions of open jobs, leaving out those another validator
/// than `caller` is scoring (holds the lease on).
pub async fn pending<C: ConnectionTrait>(
    db: &C,
    caller: &str,
    limit: u64,
    now: DateTime<Utc>,
) -> Result<Vec<PendingValidation>, DomainError> {
    let waiting = submission::Entity::find()
        .filter(submission::Column::Verdict.eq(VerdictStatus::Pending))
        .order_by_asc(submission::Column::CreatedAt)
        .order_by_asc(submission::Column::Id);
    let work = |s: &submission::Model| ValidatorWork::Verdict {
        submission_id: s.id,
    };
    let rows = validator_leases::first_not_held(db, waiting, caller, limit, now, work).await?;
    describe_all(db, rows, true).await
}

/// [`describe`] of each of `rows`, in order, leaving out those of jobs no longer open.
pub(super) async fn describe_all<C: ConnectionTrait>(
    db: &C,
    rows: Vec<submission::Model>,
    with_earlier: bool,
) -> Result<Vec<PendingValidation>, DomainError> {
    let mut out = Vec::with_capacity(rows.len());
    for s in rows {
        if let Some(p) = describe(db, s, with_earlier).await? {
            out.push(p);
        }
    }
    Ok(out)
}

/// Submission `s` with everything a validator fetches to judge it or replay its run, when its
/// job is open (`None` otherwise). `with_earlier`: list the round's earlier submissions, which
/// only the verdict's copy rule reads.
async fn describe<C: ConnectionTrait>(
    db: &C,
    s: submission::Model,
    with_earlier: bool,
) -> Result<Option<PendingValidation>, DomainError> {
    let task = find_task(db, s.task_id).await?;
    let Some(job) = job::Entity::find_by_id(task.job_id).one(db).await? else {
        return Ok(None);
    };
    if job.status != JobStatus::Open {
        return Ok(None);
    }
    let shard_index = shard::Entity::find_by_id(task.shard_id)
        .one(db)
        .await?
        .map(|s| s.index)
        .unwrap_or_default();
    let round = rounds::find_round(db, job.id, task.round).await?;
    let worker = worker_address(db, s.worker_id).await?;
    let earlier_submissions = if with_earlier {
        earlier_in_round(db, &s, job.id, task.round).await?
    } else {
        Vec::new()
    };
    Ok(Some(PendingValidation {
        submission_id: s.id,
        job_id: job.id,
        task_id: task.id,
        round: task.round,
        shard_index,
        worker,
        adapter_cid: s.adapter_cid,
        metrics_cid: s.metrics_cid,
        samples: s.sample_count,
        submitted_at: s.created_at,
        job_spec_cid: job.spec_cid,
        manifest_cid: job.manifest_cid,
        held_out_cid: job.heldout_cid,
        previous_adapter_cid: round.base_adapter_cid,
        earlier_submissions,
    }))
}

pub(super) async fn worker_address<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
) -> Result<String, DomainError> {
    Ok(worker::Entity::find_by_id(id)
        .one(db)
        .await?
        .map(|w| w.address)
        .unwrap_or_default())
}

/// The submissions of round `round` of `job_id` handed in before `s` (by creation time, then
/// id, the order verdicts are given in) and not rejected, oldest first.
async fn earlier_in_round<C: ConnectionTrait>(
    db: &C,
    s: &submission::Model,
    job_id: Uuid,
    round: i32,
) -> Result<Vec<EarlierSubmission>, DomainError> {
    let task_ids: Vec<Uuid> = task::Entity::find()
        .filter(task::Column::JobId.eq(job_id))
        .filter(task::Column::Round.eq(round))
        .all(db)
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    let rows = submission::Entity::find()
        .filter(submission::Column::TaskId.is_in(task_ids))
        .filter(submission::Column::Id.ne(s.id))
        .filter(submission::Column::CreatedAt.lte(s.created_at))
        // A copy of a rejected adapter fails for the same reason the original did.
        .filter(submission::Column::Verdict.ne(VerdictStatus::Rejected))
        .order_by_asc(submission::Column::CreatedAt)
        .order_by_asc(submission::Column::Id)
        .all(db)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for e in rows {
        // Same instant: the id (UUIDv7, time-ordered) breaks the tie as the pending list does.
        if e.created_at == s.created_at && e.id > s.id {
            continue;
        }
        out.push(EarlierSubmission {
            submission_id: e.id,
            task_id: e.task_id,
            worker: worker_address(db, e.worker_id).await?,
            adapter_cid: e.adapter_cid,
        });
    }
    Ok(out)
}

/// Checks a verdict: quality in 0..=1, a reason for a rejection, and not an essay.
pub fn validate_verdict(verdict: &Verdict) -> Result<(), DomainError> {
    if !(verdict.quality.is_finite() && (0.0..=1.0).contains(&verdict.quality)) {
        return Err(DomainError::invalid(
            "quality",
            format!("{} is outside 0..=1", verdict.quality),
        ));
    }
    if !verdict.accepted
        && verdict
            .reason
            .as_deref()
            .is_none_or(|r| r.trim().is_empty())
    {
        return Err(DomainError::invalid(
            "reason",
            "a rejection says why (the worker sees it)",
        ));
    }
    if verdict.reason.as_ref().is_some_and(|r| r.len() > 2_000) {
        return Err(DomainError::invalid(
            "reason",
            "longer than 2,000 characters",
        ));
    }
    Ok(())
}

/// Reputation a rejected adapter costs its worker at once (never below 0), recorded as a
/// reputation event; the chain's own reputation moves at payout, where the worker is listed with
/// quality 0, and the worker's reputation is the chain's again from then on.
pub const REJECTION_REPUTATION_DELTA: i64 = -500;

/// Records `verdict` on submission `id`, given by `validator` (its address). A second verdict
/// on the same submission is a 409. A verdict with `proof_due` leaves the submission's proof
/// of training pending: the round moves on without it, the job's payout waits for it.
pub async fn record(
    db: &DatabaseConnection,
    id: Uuid,
    verdict: &Verdict,
    validator: &str,
    now: DateTime<Utc>,
) -> Result<submission::Model, DomainError> {
    validate_verdict(verdict)?;
    let txn = db.begin().await?;
    let s = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("no submission {id}")))?;
    let task = find_task(&txn, s.task_id).await?;
    // Locked first: the round's other verdicts and its merge wait for this one, so the last
    // verdict of a round sees every other task accepted and closes it.
    let job = crate::domain::jobs::lock_job(&txn, task.job_id, now).await?;
    let s = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("no submission {id}")))?;
    if s.verdict != VerdictStatus::Pending {
        return Err(DomainError::Conflict(format!(
            "submission {id} already has its verdict ({})",
            s.verdict
        )));
    }
    let task = find_task(&txn, s.task_id).await?;
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "job {} is {}; its submissions are no longer judged",
            job.id, job.status
        )));
    }
    let work = ValidatorWork::Verdict { submission_id: id };
    validator_leases::settle(&txn, &work, validator, now).await?;
    let (label, quality) = if verdict.accepted {
        (VerdictStatus::Accepted, verdict.quality)
    } else {
        (VerdictStatus::Rejected, 0.0)
    };
    let proof = if verdict.proof_due {
        ProofStatus::Pending
    } else {
        ProofStatus::NotDue
    };
    let updated = submission::Entity::update_many()
        .col_expr(submission::Column::Verdict, Expr::value(label.as_str()))
        .col_expr(submission::Column::Quality, Expr::value(quality))
        .col_expr(
            submission::Column::RejectReason,
            Expr::value(verdict.reason.clone()),
        )
        .col_expr(
            submission::Column::Report,
            Expr::value(
                serde_json::to_value(&verdict.report)
                    .map_err(|e| DomainError::internal("verdict report", e))?,
            ),
        )
        .col_expr(submission::Column::ValidatedAt, Expr::value(now))
        .col_expr(submission::Column::ValidatedBy, Expr::value(validator))
        .col_expr(submission::Column::ProofStatus, Expr::value(proof.as_str()))
        .filter(submission::Column::Id.eq(id))
        .filter(submission::Column::Verdict.eq(VerdictStatus::Pending))
        .exec(&txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "submission {id} was judged concurrently"
        )));
    }
    let worker = worker_address(&txn, s.worker_id).await?;
    record_event(
        &txn,
        job.id,
        &JobEvent::Verdict(events::VerdictRecorded {
            submission_id: id,
            task_id: task.id,
            round: task.round as u32,
            worker,
            accepted: verdict.accepted,
            quality,
            reason: verdict.reason.clone(),
            report: verdict.report.clone(),
            validator: Some(validator.to_owned()),
            proof,
        }),
        false,
        now,
    )
    .await?;
    if verdict.accepted {
        let moved = task::Entity::update_many()
            .col_expr(
                task::Column::Status,
                Expr::value(TaskStatus::Accepted.as_str()),
            )
            .col_expr(task::Column::UpdatedAt, Expr::value(now))
            .filter(task::Column::Id.eq(task.id))
            .filter(task::Column::Status.eq(TaskStatus::Submitted))
            .exec(&txn)
            .await?;
        if moved.rows_affected != 1 {
            return Err(DomainError::Conflict(format!(
                "task {} is {}, not awaiting a verdict",
                task.id, task.status
            )));
        }
        rounds::close_if_complete(&txn, job.id, task.round, now).await?;
    } else {
        // The rejection costs reputation now, so a cheat loses eligibility for jobs that ask
        // for some before any payout; the chain's own value (quality 0 at payout) replaces it
        // when the job pays.
        penalise(
            &txn,
            s.worker_id,
            job.id,
            format!(
                "adapter rejected: {}",
                verdict.reason.clone().unwrap_or_default()
            ),
            now,
        )
        .await?;
        requeue(&txn, &task, "adapter rejected", now).await?;
    }
    let stored = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::internal("verdict", "submission vanished"))?;
    txn.commit().await?;
    Ok(stored)
}

/// Lowers `worker_id`'s reputation by [`REJECTION_REPUTATION_DELTA`] (never below 0) for
/// `reason`, recorded as a reputation event of job `job_id`, in the caller's transaction.
pub(super) async fn penalise<C: ConnectionTrait>(
    txn: &C,
    worker_id: Uuid,
    job_id: Uuid,
    reason: String,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let before = worker::Entity::find_by_id(worker_id)
        .one(txn)
        .await?
        .map(|w| w.reputation)
        .unwrap_or(0);
    let after = (before + REJECTION_REPUTATION_DELTA).max(0);
    worker::Entity::update_many()
        .col_expr(worker::Column::Reputation, Expr::value(after))
        .col_expr(worker::Column::UpdatedAt, Expr::value(now))
        .filter(worker::Column::Id.eq(worker_id))
        .exec(txn)
        .await?;
    reputation_event::Entity::insert(reputation_event::ActiveModel {
        worker_id: sea_orm::ActiveValue::Set(worker_id),
        job_id: sea_orm::ActiveValue::Set(Some(job_id)),
        delta: sea_orm::ActiveValue::Set(after - before),
        reason: sea_orm::ActiveValue::Set(reason),
        tx_hash: sea_orm::ActiveValue::Set(None),
        created_at: sea_orm::ActiveValue::Set(now),
        ..Default::default()
    })
    .exec(txn)
    .await?;
    Ok(())
}

/// Rounds of open jobs whose adapters are all accepted and await the merge, oldest first, each
/// with its accepted adapters in shard order; those another validator than `caller` is merging
/// are left out.
pub async fn ready_rounds<C: ConnectionTrait>(
    db: &C,
    caller: &str,
    now: DateTime<Utc>,
) -> Result<Vec<ReadyRound>, DomainError> {
    let busy = validator_leases::held_by_others(db, caller, now).await?;
    let rounds = round::Entity::find()
        .filter(round::Column::Status.eq(rounds::RoundStatus::Aggregating.as_str()))
        .order_by_asc(round::Column::CreatedAt)
        .all(db)
        .await?;
    let mut out = Vec::new();
    for r in rounds {
        let merge = ValidatorWork::Merge {
            job_id: r.job_id,
            round: r.number,
        };
        if validator_leases::is_busy(&busy, &merge) {
            continue;
        }
        let Some(job) = job::Entity::find_by_id(r.job_id).one(db).await? else {
            continue;
        };
        if job.status != JobStatus::Open {
            continue;
        }
        let tasks = task::Entity::find()
            .filter(task::Column::JobId.eq(job.id))
            .filter(task::Column::Round.eq(r.number))
            .all(db)
            .await?;
        let mut adapters = Vec::with_capacity(tasks.len());
        for t in &tasks {
            let Some(s) = submission::Entity::find()
                .filter(submission::Column::TaskId.eq(t.id))
                .filter(submission::Column::Verdict.eq(VerdictStatus::Accepted))
                .one(db)
                .await?
            else {
                continue;
            };
            let shard_index = shard::Entity::find_by_id(t.shard_id)
                .one(db)
                .await?
                .map(|s| s.index)
                .unwrap_or_default();
            let worker = worker::Entity::find_by_id(s.worker_id)
                .one(db)
                .await?
                .map(|w| w.address)
                .unwrap_or_default();
            adapters.push(AcceptedAdapter {
                submission_id: s.id,
                task_id: t.id,
                shard_index,
                worker,
                adapter_cid: s.adapter_cid,
                samples: s.sample_count,
                quality: s.quality.unwrap_or(0.0),
            });
        }
        adapters.sort_by_key(|a| a.shard_index);
        out.push(ReadyRound {
            job_id: job.id,
            round: r.number,
            base_adapter_cid: r.base_adapter_cid,
            held_out_cid: job.heldout_cid,
            job_spec_cid: job.spec_cid,
            last_round: r.number >= job.rounds,
            adapters,
        });
    }
    Ok(out)
}
