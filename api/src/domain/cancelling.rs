//! A requester withdrawing a job before it is funded: only the job's own requester may, and only
//! while the transition table allows it (`crate::domain::lifecycle::next`: a funded job is
//! refunded at its deadline instead, since its stake sits in the escrow).

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseConnection, TransactionTrait};
use shardwork_core::protocol::{EthAddress, JobEvent, events};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::domain::jobs::{JobRecord, find_job};
use crate::domain::lifecycle::{self, Transition};

/// Cancels job `id` on behalf of `requester` and returns the job as it now stands.
///
/// The ownership check, the transition and the read back happen in one transaction, so the
/// job returned is the one this cancel left, not a later writer's. Someone else's job is
/// [`DomainError::Forbidden`]; a status that does not allow cancelling, or a job changed
/// concurrently, is [`DomainError::Conflict`].
pub async fn cancel_job(
    db: &DatabaseConnection,
    id: Uuid,
    requester: EthAddress,
    now: DateTime<Utc>,
) -> Result<JobRecord, DomainError> {
    let txn = db.begin().await?;
    let job = find_job(&txn, id).await?;
    if job.requester != requester.to_string() {
        return Err(DomainError::Forbidden(format!(
            "job {id} belongs to {}; only its requester may cancel it",
            job.requester
        )));
    }
    lifecycle::apply(
        &txn,
        &job,
        Transition::Cancel,
        |change| {
            JobEvent::Cancelled(events::Cancelled {
                from: change.from,
                to: change.to,
                by: Some(requester.to_string()),
                reason: None,
                tx_hash: None,
                stake_wei: None,
            })
        },
        now,
    )
    .await?;
    let job = find_job(&txn, id).await?;
    txn.commit().await?;
    Ok(job)
}
