//! A job that cannot finish: a shard out of attempts, or a model the validator cannot load.
//! Either way the API records `abort_due` once, and the outbox ends the job on chain, paying the
//! completed rounds' accepted work and refunding the rest (decision 0036), so one bad job never
//! waits for its deadline while holding its requester's stake and its workers' time.

use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    TransactionTrait,
};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{EventKind, JobEvent, events};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::domain::jobs::find_job;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::entities::job_event;

/// The longest reason a validator may give; it is logged on chain in `JobAborted`.
pub const MAX_REASON_CHARS: usize = 1_000;

/// Why the validator cannot load a job's model (or held-out set): the error it got.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelFailure {
    /// What failed, as the loader said it (1 to 1,000 characters).
    pub reason: String,
}

/// What reporting the failure did.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelFailureOutcome {
    /// The job.
    pub job_id: Uuid,
    /// True when this report recorded the abort; false when the job was already being ended.
    pub abort_recorded: bool,
}

/// Records that job `job_id` cannot be run because its model does not load, which ends it:
/// validated, then written in one transaction.
pub async fn report_model_failure(
    db: &DatabaseConnection,
    job_id: Uuid,
    failure: &ModelFailure,
    now: DateTime<Utc>,
) -> Result<ModelFailureOutcome, DomainError> {
    let txn = db.begin().await?;
    let outcome = end_for_model_failure(&txn, job_id, failure, now).await?;
    txn.commit().await?;
    Ok(outcome)
}

async fn end_for_model_failure<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    failure: &ModelFailure,
    now: DateTime<Utc>,
) -> Result<ModelFailureOutcome, DomainError> {
    let reason = failure.reason.trim();
    if reason.is_empty() {
        return Err(DomainError::invalid("reason", "is empty"));
    }
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(DomainError::invalid(
            "reason",
            format!("{chars} characters, above {MAX_REASON_CHARS}"),
        ));
    }
    let job = find_job(txn, job_id).await?;
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "job {job_id} is {}; only an open job can fail",
            job.status
        )));
    }
    let recorded = abort_job(
        txn,
        job_id,
        u32::try_from(job.current_round).unwrap_or(0),
        format!("the job's model cannot be loaded: {reason}"),
        now,
    )
    .await?;
    Ok(ModelFailureOutcome {
        job_id,
        abort_recorded: recorded,
    })
}

/// Asks the escrow (through the outbox) to end the job now rather than at the deadline. Once
/// per job, whatever fails in it and however often; returns whether this call recorded it.
pub(crate) async fn abort_job<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    round: u32,
    reason: String,
    now: DateTime<Utc>,
) -> Result<bool, DomainError> {
    let already = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(job_id))
        .filter(job_event::Column::Kind.eq(EventKind::AbortDue.as_str()))
        .count(txn)
        .await?;
    if already > 0 {
        return Ok(false);
    }
    record_event(
        txn,
        job_id,
        &JobEvent::AbortDue(events::AbortDue { reason, round }),
        true,
        now,
    )
    .await?;
    Ok(true)
}
