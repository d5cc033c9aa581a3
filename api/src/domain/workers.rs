//! Workers as the API keeps them: one row per address, holding what the worker said it can
//! train on (matched against tasks at claim time, `crate::domain::capacity`), when it was last
//! heard from, and the standing the chain follower mirrors (reputation, earnings); and the
//! tally of its submissions by verdict, counted when asked rather than kept, so it can never
//! drift from the submissions themselves.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, IntoActiveModel, QueryFilter, QuerySelect, SqlErr,
};
use shardwork_core::protocol::{EthAddress, VerdictStatus};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::{submission, worker};

/// A worker as stored, under the name callers outside the domain use.
pub type WorkerRecord = worker::Model;

/// What a registration did.
#[derive(Debug)]
pub enum Registration {
    /// The address registered for the first time.
    Created(WorkerRecord),
    /// The address was registered already; its capabilities were replaced.
    Updated(WorkerRecord),
}

/// Registers `address` with `capabilities` (the worker's statement, as JSON), or replaces the
/// capabilities of an address registered before. Two first registrations of one address racing
/// each other: the loser gets [`DomainError::Conflict`], and a retry updates.
pub async fn register_worker(
    db: &DatabaseConnection,
    address: &str,
    capabilities: serde_json::Value,
    now: DateTime<Utc>,
) -> Result<Registration, DomainError> {
    if let Some(existing) = find(db, address).await? {
        let mut active = existing.into_active_model();
        active.capabilities = Set(capabilities);
        active.updated_at = Set(now);
        return Ok(Registration::Updated(active.update(db).await?));
    }
    let inserted = worker::Entity::insert(worker::ActiveModel {
        id: Set(Uuid::now_v7()),
        address: Set(address.to_owned()),
        capabilities: Set(capabilities),
        reputation: Set(0),
        earnings_wei: Set("0".into()),
        last_heartbeat_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .exec(db)
    .await;
    match inserted {
        Ok(_) => {}
        // A concurrent first registration by the same address won the unique index.
        Err(err) if matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) => {
            return Err(DomainError::Conflict(format!(
                "{address} was registered concurrently; retry to update"
            )));
        }
        Err(err) => return Err(err.into()),
    }
    let created = find(db, address)
        .await?
        .ok_or_else(|| DomainError::internal("registration", "inserted worker not found"))?;
    Ok(Registration::Created(created))
}

/// The worker registered at `address`, or [`DomainError::NotFound`] saying how to register.
pub async fn registered_at<C: ConnectionTrait>(
    db: &C,
    address: &str,
) -> Result<WorkerRecord, DomainError> {
    find(db, address)
        .await?
        .ok_or_else(|| not_registered(address))
}

/// Whether `address` has registered as a worker (sign-in grants such an address the worker
/// role without its asking).
pub async fn is_registered<C: ConnectionTrait>(
    db: &C,
    address: EthAddress,
) -> Result<bool, DomainError> {
    Ok(find(db, &address.to_string()).await?.is_some())
}

/// Records that the worker at `address` is alive now; [`DomainError::NotFound`] if no worker
/// registered there.
pub async fn record_heartbeat<C: ConnectionTrait>(
    db: &C,
    address: &str,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let updated = worker::Entity::update_many()
        .col_expr(worker::Column::LastHeartbeatAt, Expr::value(now))
        .filter(worker::Column::Address.eq(address))
        .exec(db)
        .await?;
    if updated.rows_affected == 0 {
        return Err(not_registered(address));
    }
    Ok(())
}

/// A worker's submissions counted by the validator's verdict.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SubmissionCounts {
    /// Accepted (what a payout pays for).
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Not judged yet.
    pub pending: u64,
}

/// Worker `worker_id`'s submissions counted by verdict, in one grouped query.
pub async fn submission_counts<C: ConnectionTrait>(
    db: &C,
    worker_id: Uuid,
) -> Result<SubmissionCounts, DomainError> {
    let counts: Vec<(VerdictStatus, i64)> = submission::Entity::find()
        .select_only()
        .column(submission::Column::Verdict)
        .column_as(submission::Column::Id.count(), "n")
        .filter(submission::Column::WorkerId.eq(worker_id))
        .group_by(submission::Column::Verdict)
        .into_tuple()
        .all(db)
        .await?;
    let mut tally = SubmissionCounts::default();
    for (verdict, n) in counts {
        let n = u64::try_from(n).unwrap_or_default();
        match verdict {
            VerdictStatus::Accepted => tally.accepted = n,
            VerdictStatus::Rejected => tally.rejected = n,
            VerdictStatus::Pending => tally.pending = n,
        }
    }
    Ok(tally)
}

async fn find<C: ConnectionTrait>(
    db: &C,
    address: &str,
) -> Result<Option<WorkerRecord>, DomainError> {
    Ok(worker::Entity::find()
        .filter(worker::Column::Address.eq(address))
        .one(db)
        .await?)
}

fn not_registered(address: &str) -> DomainError {
    DomainError::NotFound(format!(
        "{address} is not registered; POST /v1/workers/register first"
    ))
}
