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
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Select, Set};
use shardwork_core::protocol::{ProofStatus, RoundStatus, VerdictStatus};

pub use shardwork_core::protocol::node::{ValidatorLease, ValidatorWork};

use super::rounds::find_round;
use super::tasks::{find_task, time_limit};
use crate::domain::error::DomainError;
use crate::domain::jobs::find_job;
use crate::domain::lifecycle::JobStatus;
use crate::entities::{job, submission, validator_lease};

/// The job `work` belongs to, when the work is still to be done: a 404 when it names nothing,
/// a 409 when it is already done or its job is no longer open.
async fn job_of_due_work<C: ConnectionTrait>(
    db: &C,
    work: &ValidatorWork,
) -> Result<job::Model, DomainError> {
    let job_id = match *work {
        ValidatorWork::Verdict { submission_id } | ValidatorWork::Proof { submission_id } => {
            let s = submission::Entity::find_by_id(submission_id)
                .one(db)
                .await?
                .ok_or_else(|| DomainError::NotFound(format!("no submission {submission_id}")))?;
            let done = match work {
                ValidatorWork::Verdict { .. } => (s.verdict != VerdictStatus::Pending)
                    .then(|| format!("it has its verdict ({})", s.verdict)),
                _ => (s.proof_status != ProofStatus::Pending)
                    .then(|| format!("its proof is {}", s.proof_status)),
            };
            if let Some(why) = done {
                return Err(DomainError::Conflict(format!("{work} is not due: {why}")));
            }
            find_task(db, s.task_id).await?.job_id
        }
        ValidatorWork::Merge { job_id, round } => {
            let r = find_round(db, job_id, round).await?;
            if r.status != RoundStatus::Aggregating {
                return Err(DomainError::Conflict(format!(
                    "{work} is not due: the round is {}",
                    r.status
                )));
            }
            job_id
        }
    };
    let job = find_job(db, job_id).await?;
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "{work} is not due: job {} is {}",
            job.id, job.status
        )));
    }
    Ok(job)
}

/// Leases `work` to `holder` for `length`, or renews `holder`'s lease on it. A 409 when another
/// validator holds it, when the work is already done or its job closed, and when a renewal
/// would keep the lease past the job's task time limit from its taking (a validator that hangs
/// while its heartbeat runs cannot hold work forever).
pub async fn claim<C: ConnectionTrait>(
    db: &C,
    work: ValidatorWork,
    holder: &str,
    length: Duration,
    now: DateTime<Utc>,
) -> Result<ValidatorLease, DomainError> {
    // Stored to the microsecond (PostgreSQL's precision): the lease answered is the one kept.
    let now = now.trunc_subsecs(6);
    let job = job_of_due_work(db, &work).await?;
    let key = work.key();
    validator_lease::Entity::delete_many()
        .filter(validator_lease::Column::ExpiresAt.lte(now))
        .exec(db)
        .await?;
    // Each statement on its own, no transaction: the key is the primary key, so of two
    // validators inserting at once one inserts and the other finds the row.
    let renewed = match validator_lease::Entity::find_by_id(key.clone())
        .one(db)
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
            let expires_at = (now + length).min(limit);
            let updated = validator_lease::Entity::update_many()
                .col_expr(validator_lease::Column::ExpiresAt, Expr::value(expires_at))
                .filter(validator_lease::Column::WorkKey.eq(key.as_str()))
                .filter(validator_lease::Column::Holder.eq(holder))
                .exec(db)
                .await?;
            (updated.rows_affected == 1).then_some((held.leased_at, expires_at))
        }
        None => {
            let expires_at = (now + length).min(now + time_limit(&job));
            let inserted = validator_lease::Entity::insert(validator_lease::ActiveModel {
                work_key: Set(key.clone()),
                job_id: Set(job.id),
                holder: Set(holder.to_owned()),
                leased_at: Set(now),
                expires_at: Set(expires_at),
            })
            .on_conflict(
                OnConflict::column(validator_lease::Column::WorkKey)
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(db)
            .await?;
            if inserted == 1 {
                // The work was due when this claim began, but another validator's outcome may
                // have been recorded (dropping its lease) between that check and this insert:
                // a lease on done work would then stand until it lapsed, hiding nothing but
                // held all the same. Asked again now that the lease is in, a done work gives
                // its lease back; an outcome recorded after this point finds the lease and is
                // refused (`settle`), so the work stays with exactly one validator.
                if let Err(done) = job_of_due_work(db, &work).await {
                    validator_lease::Entity::delete_many()
                        .filter(validator_lease::Column::WorkKey.eq(key.as_str()))
                        .filter(validator_lease::Column::Holder.eq(holder))
                        .exec(db)
                        .await?;
                    return Err(done);
                }
            }
            (inserted == 1).then_some((now, expires_at))
        }
    };
    match renewed {
        Some((leased_at, expires_at)) => Ok(ValidatorLease {
            work,
            holder: holder.to_owned(),
            leased_at,
            expires_at,
        }),
        // Lost a race: someone inserted first, or took the row after ours lapsed.
        None => match validator_lease::Entity::find_by_id(key).one(db).await? {
            Some(held) => Err(held_by_another(&work, &held)),
            None => Err(DomainError::Conflict(format!(
                "{work} changed hands while it was leased; ask again"
            ))),
        },
    }
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
