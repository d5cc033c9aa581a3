//! Leases on the validators' work (docs/decisions/0043): each scoring, each proof replay and
//! each round's merge is held by one validator at a time, so any number of validator processes
//! share a deployment without doing anything twice, and work a validator dropped (killed,
//! partitioned, hung past the job's task time limit) goes to the next one that asks.
//!
//! A lease is taken, and renewed (the heartbeat), by asking for it again; it lapses at
//! `expires_at`. The listings a validator polls leave out work another validator holds, and a
//! verdict, proof check or merge is refused while another validator holds that work. Exactly one
//! verdict, proof outcome and merge per piece of work does not rest on leases: those writes are
//! conditional updates (a second is a 409). Leases only keep validators from duplicating the
//! compute.
//!
//! Expired leases are as good as absent: every claim first forgets them.

use std::collections::HashSet;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect,
    Select, Set, TransactionTrait,
};
use shardwork_core::protocol::{ProofStatus, RoundStatus, VerdictStatus};
use uuid::Uuid;

pub use shardwork_core::protocol::node::{ValidatorLease, ValidatorWork};

use super::rounds::find_round;
use super::tasks::{find_task, time_limit};
use crate::domain::error::DomainError;
use crate::domain::jobs::lock_job;
use crate::domain::lifecycle::JobStatus;
use crate::entities::{job, submission, validator_lease};

/// The job `work` belongs to: a 404 when it names nothing.
async fn job_id_of<C: ConnectionTrait>(db: &C, work: &ValidatorWork) -> Result<Uuid, DomainError> {
    match *work {
        ValidatorWork::Verdict { submission_id } | ValidatorWork::Proof { submission_id } => {
            let s = find_submission(db, submission_id).await?;
            Ok(find_task(db, s.task_id).await?.job_id)
        }
        ValidatorWork::Merge { job_id, .. } => Ok(job_id),
    }
}

async fn find_submission<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
) -> Result<submission::Model, DomainError> {
    submission::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("no submission {id}")))
}

/// A 409 when `work` of `job` is already done or `job` is no longer open.
async fn check_due<C: ConnectionTrait>(
    db: &C,
    work: &ValidatorWork,
    job: &job::Model,
) -> Result<(), DomainError> {
    let done = match *work {
        ValidatorWork::Verdict { submission_id } => {
            let s = find_submission(db, submission_id).await?;
            (s.verdict != VerdictStatus::Pending)
                .then(|| format!("it has its verdict ({})", s.verdict))
        }
        ValidatorWork::Proof { submission_id } => {
            let s = find_submission(db, submission_id).await?;
            (s.proof_status != ProofStatus::Pending)
                .then(|| format!("its proof is {}", s.proof_status))
        }
        ValidatorWork::Merge { job_id, round } => {
            let r = find_round(db, job_id, round).await?;
            (r.status != RoundStatus::Aggregating).then(|| format!("the round is {}", r.status))
        }
    };
    if let Some(why) = done {
        return Err(DomainError::Conflict(format!("{work} is not due: {why}")));
    }
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "{work} is not due: job {} is {}",
            job.id, job.status
        )));
    }
    Ok(())
}

/// Leases `work` to `holder` for `length`, or renews `holder`'s lease on it. A 409 when another
/// validator holds it, when the work is already done or its job closed, and when a renewal
/// would keep the lease past the job's task time limit from its taking (a validator that hangs
/// while its heartbeat runs cannot hold work forever).
///
/// One transaction that locks the work's job first, as every outcome's does (verdicts, proof
/// checks, merges: each [`settle`]s the lease after `lock_job`). So a claim and an outcome of
/// the same job never interleave: the claim sees the outcome committed and is refused, or the
/// outcome sees the lease and drops it (its holder's) or is refused (another's). Without the
/// lock, an outcome that found no lease to drop could commit just after a claim had checked the
/// work due and inserted its lease, leaving a live lease on done work (CI caught one left after
/// the job was done).
pub async fn claim(
    db: &DatabaseConnection,
    work: ValidatorWork,
    holder: &str,
    length: Duration,
    now: DateTime<Utc>,
) -> Result<ValidatorLease, DomainError> {
    // Stored to the microsecond (PostgreSQL's precision): the lease answered is the one kept.
    let now = now.trunc_subsecs(6);
    let job_id = job_id_of(db, &work).await?;
    let txn = db.begin().await?;
    let job = lock_job(&txn, job_id, now).await?;
    check_due(&txn, &work, &job).await?;
    let key = work.key();
    validator_lease::Entity::delete_many()
        .filter(validator_lease::Column::ExpiresAt.lte(now))
        .exec(&txn)
        .await?;
    let leased_at = match validator_lease::Entity::find_by_id(key.clone())
        .one(&txn)
        .await?
    {
        Some(held) if held.holder != holder => return Err(held_by_another(&work, &held)),
        Some(held) => {
            let limit = held.leased_at + time_limit(&job);
            if now >= limit {
                return Err(DomainError::Conflict(format!(
                    "the lease on {work} reached the job's task time limit at {}; it is not renewed",
                    limit.to_rfc3339()
                )));
            }
            held.leased_at
        }
        None => now,
    };
    let expires_at = (now + length).min(leased_at + time_limit(&job));
    // Claims of one job are serialized by its lock, so the row read above is the row written.
    validator_lease::Entity::insert(validator_lease::ActiveModel {
        work_key: Set(key),
        job_id: Set(job.id),
        holder: Set(holder.to_owned()),
        leased_at: Set(leased_at),
        expires_at: Set(expires_at),
    })
    .on_conflict(
        OnConflict::column(validator_lease::Column::WorkKey)
            .update_column(validator_lease::Column::ExpiresAt)
            .to_owned(),
    )
    .exec_without_returning(&txn)
    .await?;
    txn.commit().await?;
    Ok(ValidatorLease {
        work,
        holder: holder.to_owned(),
        leased_at,
        expires_at,
    })
}

fn held_by_another(work: &ValidatorWork, held: &validator_lease::Model) -> DomainError {
    DomainError::Conflict(format!(
        "{work} is leased to validator {} until {}",
        held.holder,
        held.expires_at.to_rfc3339()
    ))
}

/// Called in the transaction that records `work`'s outcome by `validator`: refused (409) while
/// another validator holds a live lease on it (that one's outcome is the one to record), and
/// otherwise the work's lease, if any, is dropped with the outcome. Recording without a lease
/// is allowed: the conditional update of the outcome keeps it to one.
pub async fn settle<C: ConnectionTrait>(
    txn: &C,
    work: &ValidatorWork,
    validator: &str,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let key = work.key();
    if let Some(held) = validator_lease::Entity::find_by_id(key.clone())
        .one(txn)
        .await?
        && held.holder != validator
        && held.expires_at > now
    {
        return Err(held_by_another(work, &held));
    }
    validator_lease::Entity::delete_by_id(key).exec(txn).await?;
    Ok(())
}

/// The keys of the work validators other than `caller` hold live leases on: the listings
/// leave it out. A handful of rows (about one per validator), so read whole.
pub async fn held_by_others<C: ConnectionTrait>(
    db: &C,
    caller: &str,
    now: DateTime<Utc>,
) -> Result<HashSet<String>, DomainError> {
    Ok(validator_lease::Entity::find()
        .filter(validator_lease::Column::Holder.ne(caller))
        .filter(validator_lease::Column::ExpiresAt.gt(now))
        .all(db)
        .await?
        .into_iter()
        .map(|l| l.work_key)
        .collect())
}

/// Whether `work` is among `busy` ([`held_by_others`]).
pub fn is_busy(busy: &HashSet<String>, work: &ValidatorWork) -> bool {
    busy.contains(&work.key())
}

/// The first `limit` rows of `query` whose work (`work_of`) no validator but `caller` holds a
/// live lease on: a listing fetches `limit` plus as many as are [`held_by_others`], then leaves
/// those out.
pub async fn first_not_held<C: ConnectionTrait, E: EntityTrait>(
    db: &C,
    query: Select<E>,
    caller: &str,
    limit: u64,
    now: DateTime<Utc>,
    work_of: impl Fn(&E::Model) -> ValidatorWork,
) -> Result<Vec<E::Model>, DomainError> {
    let busy = held_by_others(db, caller, now).await?;
    let rows = query.limit(limit + busy.len() as u64).all(db).await?;
    Ok(rows
        .into_iter()
        .filter(|row| !is_busy(&busy, &work_of(row)))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect())
}
