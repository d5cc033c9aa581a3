//! Proofs of training, checked after the verdict (docs/decisions/0042): a scored submission's
//! proof is `pending` from its verdict on, the validators replay a stretch of its run while the
//! next round trains, and the job's payout waits until every proof is decided.
//!
//! A failed proof forfeits the worker's whole job (docs/decisions/0033): its payout score is 0,
//! it is leased no more of the job's tasks, and it loses reputation now. Its verdict and any
//! merge its adapter is in stand: the adapter passed the held-out rules, so the merge still
//! beat its round's start (decision 0042 measures what re-merging would buy).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    TransactionTrait,
};
use shardwork_core::protocol::submission::TRACE_SEGMENTS;
use shardwork_core::protocol::{JobEvent, ProofStatus, RoundStatus, events};
use uuid::Uuid;

pub use shardwork_core::protocol::node::{PendingValidation, ProofCheck};

use super::payout::pending_proofs;
use super::tasks::find_task;
use super::validator_leases::{self, ValidatorWork};
use super::verdicts::{describe_all, penalise, worker_address};
use super::{rounds, rounds::queue_finalization};
use crate::domain::error::DomainError;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::entities::submission;

/// The oldest `limit` submissions of open jobs whose proofs of training are still to be
/// checked, in the order their verdicts were given, leaving out those another validator than
/// `caller` is replaying (holds the lease on).
pub async fn pending<C: ConnectionTrait>(
    db: &C,
    caller: &str,
    limit: u64,
    now: DateTime<Utc>,
) -> Result<Vec<PendingValidation>, DomainError> {
    let due = submission::Entity::find()
        .filter(submission::Column::ProofStatus.eq(ProofStatus::Pending))
        .order_by_asc(submission::Column::ValidatedAt)
        .order_by_asc(submission::Column::Id);
    let work = |s: &submission::Model| ValidatorWork::Proof {
        submission_id: s.id,
    };
    let rows = validator_leases::first_not_held(db, due, caller, limit, now, work).await?;
    describe_all(db, rows, false).await
}

/// The most stretches a check may report: a run keeps [`TRACE_SEGMENTS`] of them.
const MAX_STRETCHES: usize = TRACE_SEGMENTS;

/// Checks a proof check: a reason for a failure (the worker sees it), not an essay, and no
/// more stretches than a run has, with finite numbers.
pub fn validate_check(check: &ProofCheck) -> Result<(), DomainError> {
    if !check.passed && check.reason.as_deref().is_none_or(|r| r.trim().is_empty()) {
        return Err(DomainError::invalid(
            "reason",
            "a failed proof says why (the worker sees it)",
        ));
    }
    if check.reason.as_ref().is_some_and(|r| r.len() > 2_000) {
        return Err(DomainError::invalid(
            "reason",
            "longer than 2,000 characters",
        ));
    }
    if check.stretches.len() > MAX_STRETCHES {
        return Err(DomainError::invalid(
            "stretches",
            format!(
                "{} stretches; a run has {MAX_STRETCHES}",
                check.stretches.len()
            ),
        ));
    }
    for (i, s) in check.stretches.iter().enumerate() {
        if !(s.seconds.is_finite() && s.seconds >= 0.0) {
            return Err(DomainError::invalid(
                format!("stretches[{i}].seconds"),
                "not a finite number of seconds",
            ));
        }
        if s.stretch as usize >= MAX_STRETCHES || s.steps[0] > s.steps[1] {
            return Err(DomainError::invalid(
                format!("stretches[{i}]"),
                format!(
                    "stretch {} over steps {}..={} is not one of a run's {MAX_STRETCHES}",
                    s.stretch, s.steps[0], s.steps[1]
                ),
            ));
        }
    }
    Ok(())
}

/// What recording a proof check led to.
#[derive(Debug, Clone)]
pub struct ProofRecorded {
    /// The submission, with its proof decided.
    pub submission: submission::Model,
    /// The job's proofs still to be checked.
    pub pending: u32,
    /// Whether this was the last proof the job's merged last round waited for, so the payout
    /// is now queued.
    pub finalization_queued: bool,
}

/// Records `check` of submission `id`'s proof of training, made by `validator` (its address).
/// A proof that is not due, or already decided, is a 409; so is one of a job no longer open.
pub async fn record(
    db: &DatabaseConnection,
    id: Uuid,
    check: &ProofCheck,
    validator: &str,
    now: DateTime<Utc>,
) -> Result<ProofRecorded, DomainError> {
    validate_check(check)?;
    let txn = db.begin().await?;
    let not_found = || DomainError::NotFound(format!("no submission {id}"));
    let s = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(not_found)?;
    let task = find_task(&txn, s.task_id).await?;
    // Locked first: the job's last merge either sees this proof decided or is seen by it.
    let job = crate::domain::jobs::lock_job(&txn, task.job_id, now).await?;
    let s = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(not_found)?;
    match s.proof_status {
        ProofStatus::Pending => {}
        ProofStatus::NotDue => {
            return Err(DomainError::Conflict(format!(
                "submission {id} has no proof of training due (not scored, or not judged yet)"
            )));
        }
        decided => {
            return Err(DomainError::Conflict(format!(
                "submission {id}'s proof of training is already decided ({decided})"
            )));
        }
    }
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "job {} is {}; its proofs are no longer checked",
            job.id, job.status
        )));
    }
    let work = ValidatorWork::Proof { submission_id: id };
    validator_leases::settle(&txn, &work, validator, now).await?;
    let status = if check.passed {
        ProofStatus::Passed
    } else {
        ProofStatus::Failed
    };
    let report = serde_json::json!({ "reason": check.reason, "stretches": check.stretches });
    let updated = submission::Entity::update_many()
        .col_expr(
            submission::Column::ProofStatus,
            Expr::value(status.as_str()),
        )
        .col_expr(submission::Column::ProofReport, Expr::value(report))
        .col_expr(submission::Column::ProofCheckedAt, Expr::value(now))
        .col_expr(submission::Column::ProofCheckedBy, Expr::value(validator))
        .filter(submission::Column::Id.eq(id))
        .filter(submission::Column::ProofStatus.eq(ProofStatus::Pending))
        .exec(&txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "submission {id}'s proof was decided concurrently"
        )));
    }
    if !check.passed {
        penalise(
            &txn,
            s.worker_id,
            job.id,
            format!(
                "proof of training failed: {}",
                check.reason.clone().unwrap_or_default()
            ),
            now,
        )
        .await?;
    }
    let pending = pending_proofs(&txn, job.id).await?;
    record_event(
        &txn,
        job.id,
        &JobEvent::ProofChecked(events::ProofChecked {
            submission_id: id,
            task_id: task.id,
            round: task.round as u32,
            worker: worker_address(&txn, s.worker_id).await?,
            validator: validator.to_owned(),
            proof: status,
            reason: check.reason.clone(),
            stretches: check.stretches.clone(),
            pending,
        }),
        // A forgery in a bonded job slashes the worker's bond: the outbox sends `slashBond`.
        !check.passed && !job.task_bond().is_zero(),
        now,
    )
    .await?;
    // The last proof of a job whose last round is merged: the merge found proofs pending and
    // left the payout to this one. No proof falls due after the last merge (every task of the
    // last round was accepted before it), so this happens once.
    let mut finalization_queued = false;
    if pending == 0 {
        // The last round may not be open yet (a proof of an earlier round): nothing to queue.
        let last = match rounds::find_round(&txn, job.id, job.rounds).await {
            Ok(round) => Some(round),
            Err(DomainError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        if last.is_some_and(|r| r.status == RoundStatus::Completed) {
            queue_finalization(&txn, &job, now).await?;
            finalization_queued = true;
        }
    }
    let submission = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::internal("proof", "submission vanished"))?;
    txn.commit().await?;
    Ok(ProofRecorded {
        submission,
        pending,
        finalization_queued,
    })
}
