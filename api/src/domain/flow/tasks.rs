//! Tasks and their leases: claim, extend (heartbeat with progress), submit, and the return of
//! a task to the queue when its lease expires or its adapter is rejected.
//!
//! A task's status changes only here, each time by a conditional update (the `WHERE` names the
//! status and lease the change starts from), so two workers racing for one task, or a worker
//! racing the reaper, cannot both win. Queue delivery is at-least-once; these checks make every
//! effect happen once.

use alloy::primitives::U256;
use chrono::{DateTime, Duration, Utc};
use sea_orm::sea_query::{Expr, Query};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    PaginatorTrait, QueryFilter, TransactionTrait,
};

pub use shardwork_core::protocol::node::{Lease, Progress};
use shardwork_core::protocol::{
    JobEvent, ProofStatus, Submission, TaskMessage, VerdictStatus, events,
};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::domain::flow::failures;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::domain::sealing;
use crate::domain::sizing::DEFAULT_TASK_TIME_LIMIT_SECS;
use crate::entities::{job, round, shard, spent_attempt, submission, task, worker};

pub use shardwork_core::protocol::TaskStatus;

/// Checks a heartbeat's progress: a position in the run, finite non-negative figures.
pub fn validate_progress(progress: &Progress) -> Result<(), DomainError> {
    // The curve stores counts as SQL bigints; no run comes near, but a heartbeat could say so.
    if progress.total_steps > i64::MAX as u64 {
        return Err(DomainError::invalid(
            "progress.total_steps",
            format!("{} is above {}", progress.total_steps, i64::MAX),
        ));
    }
    if progress.total_steps == 0 || progress.step > progress.total_steps {
        return Err(DomainError::invalid(
            "progress.step",
            format!(
                "step {} of {} total steps is not a position in the run",
                progress.step, progress.total_steps
            ),
        ));
    }
    for (path, value) in [
        ("progress.loss", progress.loss),
        ("progress.tokens_per_second", progress.tokens_per_second),
    ] {
        if let Some(v) = value
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(DomainError::invalid(
                path,
                format!("{v} is not a finite non-negative number"),
            ));
        }
    }
    Ok(())
}

/// The task `id`, or [`DomainError::NotFound`].
pub async fn find_task<C: ConnectionTrait>(db: &C, id: Uuid) -> Result<task::Model, DomainError> {
    task::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| DomainError::NotFound(format!("no task {id}")))
}

/// The worker row of a signed-in address, or a 409 telling it to register first.
pub async fn registered_worker<C: ConnectionTrait>(
    db: &C,
    address: &str,
) -> Result<worker::Model, DomainError> {
    worker::Entity::find()
        .filter(worker::Column::Address.eq(address.to_ascii_lowercase()))
        .one(db)
        .await?
        .ok_or_else(|| {
            DomainError::Conflict(format!(
                "{address} is not registered as a worker; POST /v1/workers/register first"
            ))
        })
}

/// The queue message of `task`, from the database's record of its job, shard and round.
pub async fn task_message<C: ConnectionTrait>(
    db: &C,
    task: &task::Model,
) -> Result<TaskMessage, DomainError> {
    let job = job::Entity::find_by_id(task.job_id)
        .one(db)
        .await?
        .ok_or_else(|| crate::domain::jobs::job_not_found(task.job_id))?;
    let shard = shard::Entity::find_by_id(task.shard_id)
        .one(db)
        .await?
        .ok_or_else(|| DomainError::internal("task message", "task without its shard"))?;
    let round = round::Entity::find()
        .filter(round::Column::JobId.eq(task.job_id))
        .filter(round::Column::Number.eq(task.round))
        .one(db)
        .await?
        .ok_or_else(|| DomainError::internal("task message", "task without its round"))?;
    let parse = |what: &str, text: &str| {
        text.parse()
            .map_err(|e| DomainError::internal("task message", format!("{what} {text:?}: {e}")))
    };
    let base_model = job.spec["base_model"]["cid"].as_str().unwrap_or_default();
    Ok(TaskMessage {
        version: shardwork_core::protocol::PROTOCOL_VERSION,
        task_id: task.id,
        job_id: task.job_id,
        round: task.round as u32,
        shard_index: shard.index as u32,
        shard_cid: parse("shard cid", &shard.cid)?,
        job_spec_cid: parse("spec cid", job.spec_cid.as_deref().unwrap_or_default())?,
        base_model_cid: parse("base model cid", base_model)?,
        previous_adapter_cid: match &round.base_adapter_cid {
            Some(cid) => Some(parse("previous adapter cid", cid)?),
            None => None,
        },
        // A preference job's reference policy is its starting point in every round.
        reference_adapter_cid: match &job.start_adapter_cid {
            Some(cid) if job.trains_preferences() => Some(parse("start adapter cid", cid)?),
            _ => None,
        },
    })
}

/// Whether one of `worker_id`'s submissions in job `job_id` failed its proof of training,
/// which forfeits the job.
async fn forfeited_job<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    worker_id: Uuid,
) -> Result<bool, DomainError> {
    // One query, whatever the job's size: its tasks as a subquery.
    let tasks = Query::select()
        .column(task::Column::Id)
        .from(task::Entity)
        .and_where(task::Column::JobId.eq(job_id))
        .to_owned();
    let failed = submission::Entity::find()
        .filter(submission::Column::TaskId.in_subquery(tasks))
        .filter(submission::Column::WorkerId.eq(worker_id))
        .filter(submission::Column::ProofStatus.eq(ProofStatus::Failed))
        .count(db)
        .await?;
    Ok(failed > 0)
}

/// Grants `worker` the lease on `task_id`. A worker re-claiming a task it already holds (a
/// redelivered message) gets its live lease back; a task done, failed, or leased by someone
/// else is a 409 the worker answers by dropping the message.
///
/// `bond` is the worker's active bond in the job's token as the escrow holds it, read by the
/// caller for a job with `validation.bond_multiple` above 0 (decisions/0044): the task is
/// refused (403) unless it covers this task's bond on top of what the worker's tasks in flight
/// in bonded jobs of that token already need ([`bond_exposure`]).
pub async fn claim(
    db: &DatabaseConnection,
    task_id: Uuid,
    worker: &worker::Model,
    lease: Duration,
    sealing_secret: &str,
    bond: Option<U256>,
    now: DateTime<Utc>,
) -> Result<Lease, DomainError> {
    let txn = db.begin().await?;
    let task = find_task(&txn, task_id).await?;
    let job = crate::domain::jobs::find_job(&txn, task.job_id).await?;
    if job.status != JobStatus::Open {
        return Err(DomainError::Conflict(format!(
            "job {} is {}; its tasks cannot be claimed",
            job.id, job.status
        )));
    }
    if task.round != job.current_round {
        return Err(DomainError::Conflict(format!(
            "task {} belongs to round {}, the job is in round {}",
            task.id, task.round, job.current_round
        )));
    }
    // The escrow refuses to pay a requester for its own job (no self-dealt reputation), so
    // its work could never be paid: refuse it here, before anyone trains.
    if worker.address.eq_ignore_ascii_case(&job.requester) {
        return Err(DomainError::Forbidden(format!(
            "{} posted job {}; a requester cannot work on its own job",
            worker.address, job.id
        )));
    }
    let min_reputation = job.spec["min_reputation"].as_i64().unwrap_or(0);
    if worker.reputation < min_reputation {
        return Err(DomainError::Forbidden(format!(
            "job {} needs reputation {min_reputation}; {} has {}",
            job.id, worker.address, worker.reputation
        )));
    }
    crate::domain::capacity::check_worker_fits(&job, worker)?;
    // A worker whose attempt at this task ended without a result (its adapter rejected, the
    // task abandoned, its lease let expire) does not get to try it again: the task goes to
    // someone else (403, so the worker puts the message back rather than dropping it). So every
    // counted attempt is a different worker's, and one address cannot use up a task's attempts
    // (and so abort the job) by claiming and dropping it over and over.
    if let Some(spent) = spent_attempt::Entity::find_by_id((task.id, worker.id))
        .one(&txn)
        .await?
    {
        return Err(DomainError::Forbidden(format!(
            "{} already spent an attempt at task {} ({}); another worker will train it",
            worker.address, task.id, spent.reason
        )));
    }
    // A worker caught forging a proof of training forfeited the job: it would be paid nothing
    // for more of its tasks, so they go to someone whose work counts.
    if forfeited_job(&txn, job.id, worker.id).await? {
        return Err(DomainError::Forbidden(format!(
            "{} forfeited job {}: one of its adapters failed the proof of training",
            worker.address, job.id
        )));
    }
    let live_lease = task.lease_expires_at.is_some_and(|at| at > now);
    if task.status == TaskStatus::Leased && task.lease_holder == Some(worker.id) {
        // Its own lease ran out and the reaper has not come by yet: that attempt is spent, and
        // taking the task again would reset the lease's bounded life.
        if !live_lease {
            return Err(DomainError::Forbidden(format!(
                "{}'s lease on task {} expired; another worker will train it",
                worker.address, task.id
            )));
        }
        let message = task_message(&txn, &task).await?;
        txn.commit().await?;
        return Ok(Lease {
            task_id,
            lease_token: task.lease_token.unwrap_or_default(),
            expires_at: task.lease_expires_at.unwrap_or(now),
            attempt: task.attempts,
            keys: sealing::lease_keys(sealing_secret, &message, &worker.address),
            task: message,
        });
    } else if task.status != TaskStatus::Queued {
        let why = if task.status == TaskStatus::Leased && live_lease {
            format!(
                "is leased to another worker until {}",
                task.lease_expires_at.unwrap_or(now).to_rfc3339()
            )
        } else {
            format!("is {}", task.status)
        };
        return Err(DomainError::Conflict(format!("task {} {why}", task.id)));
    }
    if task.attempts >= task.max_attempts {
        return Err(DomainError::Conflict(format!(
            "task {} has used all {} attempts",
            task.id, task.max_attempts
        )));
    }
    check_bond(&txn, &job, worker, bond, now).await?;
    let token = Uuid::new_v4();
    let expires_at = (now + lease).min(now + time_limit(&job));
    let updated = task::Entity::update_many()
        .col_expr(
            task::Column::Status,
            Expr::value(TaskStatus::Leased.as_str()),
        )
        .col_expr(task::Column::LeaseHolder, Expr::value(worker.id))
        .col_expr(task::Column::LeaseToken, Expr::value(token))
        .col_expr(task::Column::LeaseExpiresAt, Expr::value(expires_at))
        .col_expr(task::Column::LeasedAt, Expr::value(now))
        .col_expr(task::Column::Attempts, Expr::value(task.attempts + 1))
        .col_expr(
            task::Column::Progress,
            Expr::value(Option::<serde_json::Value>::None),
        )
        .col_expr(task::Column::UpdatedAt, Expr::value(now))
        .filter(task::Column::Id.eq(task.id))
        .filter(task::Column::Status.eq(task.status))
        .filter(task::Column::Attempts.eq(task.attempts))
        .exec(&txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "task {} was claimed by another worker just now",
            task.id
        )));
    }
    let shard_index = shard::Entity::find_by_id(task.shard_id)
        .one(&txn)
        .await?
        .map(|s| s.index)
        .unwrap_or_default();
    record_event(
        &txn,
        job.id,
        &JobEvent::TaskClaimed(events::TaskClaimed {
            task_id: task.id,
            round: task.round as u32,
            shard: shard_index as u32,
            worker: worker.address.clone(),
            attempt: (task.attempts + 1) as u32,
            lease_expires_at: expires_at,
        }),
        false,
        now,
    )
    .await?;
    let fresh = find_task(&txn, task.id).await?;
    let message = task_message(&txn, &fresh).await?;
    txn.commit().await?;
    Ok(Lease {
        task_id,
        lease_token: token,
        expires_at,
        attempt: task.attempts + 1,
        keys: sealing::lease_keys(sealing_secret, &message, &worker.address),
        task: message,
    })
}

/// The task, checked to be leased by `worker` under `token` (an expired lease still counts
/// while nobody else has taken the task).
fn check_holder(
    task: &task::Model,
    worker: &worker::Model,
    token: Uuid,
) -> Result<(), DomainError> {
    if task.status != TaskStatus::Leased {
        return Err(DomainError::Conflict(format!(
            "task {} is {}, not leased",
            task.id, task.status
        )));
    }
    if task.lease_holder != Some(worker.id) || task.lease_token != Some(token) {
        return Err(DomainError::Conflict(format!(
            "task {} is not leased to {} under this lease token; it was reassigned",
            task.id, worker.address
        )));
    }
    Ok(())
}

/// Refuses (403) a task of a bonded `job` whose bond `bond` (the worker's active bond in the
/// job's token) does not cover on top of [`bond_exposure`]. The worker's row is written first,
/// so two claims of one worker are judged one after the other and cannot both pass on the
/// same bond.
async fn check_bond<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    worker: &worker::Model,
    bond: Option<U256>,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let needed = job.task_bond();
    if needed.is_zero() {
        return Ok(());
    }
    let token = job.stake_token();
    let Some(bond) = bond else {
        return Err(DomainError::internal(
            "claim",
            format!("job {} needs a bond, but none was read", job.id),
        ));
    };
    worker::Entity::update_many()
        .col_expr(worker::Column::UpdatedAt, Expr::value(now))
        .filter(worker::Column::Id.eq(worker.id))
        .exec(txn)
        .await?;
    let held = bond_exposure(txn, worker.id, &token).await?;
    if bond < held + needed {
        return Err(DomainError::Forbidden(format!(
            "job {} asks a bond of {needed} (validation.bond_multiple {} x the task's pay {}) in \
             token {token} for this task, on top of {held} backing {}'s tasks whose proofs are \
             not decided; its active bond is {bond}: bond more (the escrow's `bond`) or finish \
             those first",
            job.id,
            job.validation().bond_multiple,
            job.task_pay(),
            worker.address
        )));
    }
    Ok(())
}

/// What `worker`'s bond in `token` already backs: each task of a bonded open job in that
/// token it holds a lease on, has handed in for a verdict, or has a proof pending for, at its
/// job's [`job::Model::task_bond`].
pub async fn bond_exposure<C: ConnectionTrait>(
    db: &C,
    worker_id: Uuid,
    token: &str,
) -> Result<U256, DomainError> {
    let mut tasks: std::collections::BTreeMap<Uuid, Uuid> = task::Entity::find()
        .filter(task::Column::LeaseHolder.eq(worker_id))
        .filter(task::Column::Status.is_in([TaskStatus::Leased, TaskStatus::Submitted]))
        .all(db)
        .await?
        .into_iter()
        .map(|t| (t.id, t.job_id))
        .collect();
    let pending_proofs = submission::Entity::find()
        .filter(submission::Column::WorkerId.eq(worker_id))
        .filter(submission::Column::ProofStatus.eq(ProofStatus::Pending))
        .all(db)
        .await?;
    for s in pending_proofs {
        if let std::collections::btree_map::Entry::Vacant(e) = tasks.entry(s.task_id) {
            e.insert(find_task(db, s.task_id).await?.job_id);
        }
    }
    let mut per_job: std::collections::BTreeMap<Uuid, u64> = Default::default();
    for job_id in tasks.into_values() {
        *per_job.entry(job_id).or_default() += 1;
    }
    let mut held = U256::ZERO;
    for (job_id, count) in per_job {
        if let Some(job) = job::Entity::find_by_id(job_id).one(db).await?
            && job.status == JobStatus::Open
            && job.stake_token() == token
        {
            held += job.task_bond() * U256::from(count);
        }
    }
    Ok(held)
}

/// Extends the lease and records progress (the task's last heartbeat, and a point of its
/// curve); returns the new expiry.
pub async fn extend(
    db: &DatabaseConnection,
    task_id: Uuid,
    worker: &worker::Model,
    token: Uuid,
    progress: &Progress,
    lease: Duration,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, DomainError> {
    validate_progress(progress)?;
    // One transaction: a point of the curve exists only for a heartbeat that extended the
    // lease, and the attempt it is filed under is the one the lease token belongs to.
    let txn = db.begin().await?;
    let task = find_task(&txn, task_id).await?;
    check_holder(&task, worker, token)?;
    let job = crate::domain::jobs::find_job(&txn, task.job_id).await?;
    check_run_length(&txn, &job, &task, progress).await?;
    // However often it is extended, a lease lives at most the job's task time limit from its
    // claim; after that it runs out for good and the reaper gives the task to someone else.
    let limit_at = task.leased_at.unwrap_or(task.updated_at) + time_limit(&job);
    if now >= limit_at {
        return Err(DomainError::Conflict(format!(
            "the lease on task {} reached the job's task time limit of {} s at {}; it is not extended",
            task.id,
            time_limit(&job).num_seconds(),
            limit_at.to_rfc3339()
        )));
    }
    let expires_at = (now + lease).min(limit_at);
    let progress_json =
        serde_json::to_value(progress).map_err(|e| DomainError::internal("progress", e))?;
    let updated = task::Entity::update_many()
        .col_expr(task::Column::LeaseExpiresAt, Expr::value(expires_at))
        .col_expr(task::Column::Progress, Expr::value(progress_json))
        .col_expr(task::Column::UpdatedAt, Expr::value(now))
        .filter(task::Column::Id.eq(task.id))
        .filter(task::Column::Status.eq(TaskStatus::Leased))
        .filter(task::Column::LeaseToken.eq(token))
        .exec(&txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "task {} was reassigned while extending",
            task.id
        )));
    }
    super::progress::record(&txn, &task, progress, now).await?;
    txn.commit().await?;
    Ok(expires_at)
}

/// The longest a lease on one of `job`'s tasks may live from its claim, heartbeats included.
/// Clamped to a year: no job lives longer (the escrow's `MAX_JOB_DURATION`), and an estimate
/// that saturated must not overflow the date arithmetic it feeds.
pub(super) fn time_limit(job: &job::Model) -> Duration {
    const YEAR_SECS: i64 = 366 * 24 * 60 * 60;
    let secs = job
        .task_time_limit_secs
        .unwrap_or(i64::try_from(DEFAULT_TASK_TIME_LIMIT_SECS).unwrap_or(YEAR_SECS));
    Duration::seconds(secs.clamp(1, YEAR_SECS))
}

/// Refuses a heartbeat whose run is longer than the task can be: every step trains on at least
/// one record, so a run has at most the shard's records times the job's epochs. A worker saying
/// "step 1 of 10⁹" would otherwise show a run that never ends.
async fn check_run_length<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    task: &task::Model,
    progress: &Progress,
) -> Result<(), DomainError> {
    let records = shard::Entity::find_by_id(task.shard_id)
        .one(txn)
        .await?
        .ok_or_else(|| DomainError::internal("heartbeat", "task without its shard"))?
        .sample_count
        .max(1) as u64;
    let epochs = job.spec["training"]["epochs"].as_u64().unwrap_or(1).max(1);
    let most = records.saturating_mul(epochs);
    if progress.total_steps > most {
        return Err(DomainError::invalid(
            "progress.total_steps",
            format!(
                "{} steps is more than the task's run can have: {records} records x {epochs} epoch(s)",
                progress.total_steps
            ),
        ));
    }
    Ok(())
}

/// Longest reason a worker may give for abandoning a task (a loader's error names a file and
/// a tensor; more is noise in the event feed).
pub const MAX_ABANDON_REASON: usize = 2_000;

/// The lease holder gives the task back because it cannot train it (a model file its loader
/// refuses, a shard it cannot read): the task goes back to the queue at once instead of after
/// the lease runs out, the attempt stays counted, and the worker's reason is in the event. A
/// task nobody can train so fails after its attempts with that reason, not with "lease
/// expired". A worker gains nothing it could not do by letting the lease expire.
pub async fn abandon(
    db: &DatabaseConnection,
    task_id: Uuid,
    worker: &worker::Model,
    token: Uuid,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<TaskStatus, DomainError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_ABANDON_REASON {
        return Err(DomainError::invalid(
            "reason",
            format!("say why in 1..={MAX_ABANDON_REASON} characters"),
        ));
    }
    let txn = db.begin().await?;
    let task = find_task(&txn, task_id).await?;
    check_holder(&task, worker, token)?;
    let status = requeue(
        &txn,
        &task,
        &format!("{} could not train it: {reason}", worker.address),
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(status)
}

/// Uncounted releases a task allows: enough for its workers' restarts and deploys, few enough
/// that holding a task over and over costs its attempts like any other failure.
pub const MAX_FREE_RELEASES: i32 = 2;

/// A stopping worker (Ctrl-C, SIGTERM, a deploy) gives its task back unfinished: it is
/// requeued at once with the attempt returned, so stopping a worker is not a failure that
/// counts towards ending the job. After [`MAX_FREE_RELEASES`] such releases of the task a
/// release counts like [`abandon`]. Returns where the task went and whether the attempt was
/// returned.
pub async fn release(
    db: &DatabaseConnection,
    task_id: Uuid,
    worker: &worker::Model,
    token: Uuid,
    now: DateTime<Utc>,
) -> Result<(TaskStatus, bool), DomainError> {
    let txn = db.begin().await?;
    let task = find_task(&txn, task_id).await?;
    check_holder(&task, worker, token)?;
    if task.releases >= MAX_FREE_RELEASES {
        let status = requeue(
            &txn,
            &task,
            &format!(
                "{} stopped and released it (the task's {MAX_FREE_RELEASES} uncounted releases are used)",
                worker.address
            ),
            now,
        )
        .await?;
        txn.commit().await?;
        return Ok((status, false));
    }
    unlease(
        &txn,
        &task,
        TaskStatus::Queued,
        task.attempts - 1,
        task.releases + 1,
        now,
    )
    .await?;
    // Published again by the outbox; the attempt number of the next claim is this one's.
    let attempt = events::TaskAttempt {
        task_id: task.id,
        round: task.round as u32,
        attempts: (task.attempts - 1) as u32,
        max_attempts: task.max_attempts as u32,
        reason: format!(
            "{} stopped and released it; the attempt was returned",
            worker.address
        ),
    };
    record_event(
        &txn,
        task.job_id,
        &JobEvent::TaskRequeued(attempt),
        true,
        now,
    )
    .await?;
    txn.commit().await?;
    Ok((TaskStatus::Queued, true))
}

/// A submission as stored, under the name callers outside the domain use.
pub type SubmissionRecord = submission::Model;

/// Records `submission` for the task: idempotent (the same submission again answers with the
/// stored one), and refused once the lease has passed to someone else.
pub async fn submit(
    db: &DatabaseConnection,
    worker: &worker::Model,
    submission: &Submission,
    now: DateTime<Utc>,
) -> Result<(submission::Model, bool), DomainError> {
    submission.validate().map_err(DomainError::from)?;
    let txn = db.begin().await?;
    let task = find_task(&txn, submission.task_id).await?;
    if let Some(existing) = submission::Entity::find()
        .filter(submission::Column::TaskId.eq(task.id))
        .filter(submission::Column::WorkerId.eq(worker.id))
        .filter(submission::Column::Verdict.eq(VerdictStatus::Pending))
        .one(&txn)
        .await?
    {
        if existing.adapter_cid == submission.adapter_cid.to_string()
            && existing.metrics_cid == submission.metrics_cid.to_string()
        {
            txn.rollback().await?;
            return Ok((existing, false));
        }
        return Err(DomainError::Conflict(format!(
            "task {} already has a different submission from {} awaiting its verdict",
            task.id, worker.address
        )));
    }
    check_holder(&task, worker, submission.lease_token)?;
    let shard = shard::Entity::find_by_id(task.shard_id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::internal("submit", "task without its shard"))?;
    if submission.samples > shard.sample_count as u64 {
        return Err(DomainError::invalid(
            "samples",
            format!(
                "{} exceeds the {} records of shard {}",
                submission.samples, shard.sample_count, shard.index
            ),
        ));
    }
    let updated = task::Entity::update_many()
        .col_expr(
            task::Column::Status,
            Expr::value(TaskStatus::Submitted.as_str()),
        )
        .col_expr(task::Column::UpdatedAt, Expr::value(now))
        .filter(task::Column::Id.eq(task.id))
        .filter(task::Column::Status.eq(TaskStatus::Leased))
        .filter(task::Column::LeaseToken.eq(submission.lease_token))
        .exec(&txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "task {} was reassigned while submitting",
            task.id
        )));
    }
    // A worker whose earlier adapter for this task was rejected submits again as a new row.
    // A rejected row whose proof is still to be checked, or failed, stays: it is what forfeits
    // the worker's job, and resubmitting must not wipe it.
    submission::Entity::delete_many()
        .filter(submission::Column::TaskId.eq(task.id))
        .filter(submission::Column::WorkerId.eq(worker.id))
        .filter(submission::Column::Verdict.eq(VerdictStatus::Rejected))
        .filter(
            submission::Column::ProofStatus.is_not_in([ProofStatus::Pending, ProofStatus::Failed]),
        )
        .exec(&txn)
        .await?;
    let row = submission::ActiveModel {
        id: Set(Uuid::now_v7()),
        task_id: Set(task.id),
        worker_id: Set(worker.id),
        adapter_cid: Set(submission.adapter_cid.to_string()),
        metrics_cid: Set(submission.metrics_cid.to_string()),
        // The merge and the pay weigh an adapter by its shard's records, as the manifest
        // counts them: a worker's own count is only checked, never believed.
        sample_count: Set(shard.sample_count),
        verdict: Set(VerdictStatus::Pending),
        quality: Set(None),
        reject_reason: Set(None),
        created_at: Set(now),
        validated_at: Set(None),
        report: Set(None),
        validated_by: Set(None),
        proof_status: Set(ProofStatus::NotDue),
        proof_report: Set(None),
        proof_checked_at: Set(None),
        proof_checked_by: Set(None),
    };
    let id = row.id.clone().unwrap();
    submission::Entity::insert(row).exec(&txn).await?;
    record_event(
        &txn,
        task.job_id,
        &JobEvent::Submitted(events::Submitted {
            submission_id: id,
            task_id: task.id,
            round: task.round as u32,
            shard: shard.index as u32,
            worker: worker.address.clone(),
            samples: shard.sample_count as u64,
            adapter_cid: submission.adapter_cid.to_string(),
        }),
        false,
        now,
    )
    .await?;
    let stored = submission::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| DomainError::internal("submit", "submission vanished"))?;
    txn.commit().await?;
    Ok((stored, true))
}

/// Puts `task` back in the queue for another attempt (lease expired, or adapter rejected), or
/// marks it failed when its attempts are used up. Runs inside the caller's transaction; the
/// `task_requeued` event is dispatched (published) by the outbox.
pub async fn requeue<C: ConnectionTrait>(
    txn: &C,
    task: &task::Model,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<TaskStatus, DomainError> {
    let exhausted = task.attempts >= task.max_attempts;
    let to = if exhausted {
        TaskStatus::Failed
    } else {
        TaskStatus::Queued
    };
    unlease(txn, task, to, task.attempts, task.releases, now).await?;
    if let Some(holder) = task.lease_holder {
        spent_attempt::Entity::insert(spent_attempt::ActiveModel {
            task_id: Set(task.id),
            worker_id: Set(holder),
            ended_at: Set(now),
            reason: Set(reason.to_owned()),
        })
        .on_conflict_do_nothing_on([
            spent_attempt::Column::TaskId,
            spent_attempt::Column::WorkerId,
        ])
        .exec_without_returning(txn)
        .await?;
    }
    let attempt = events::TaskAttempt {
        task_id: task.id,
        round: task.round as u32,
        attempts: task.attempts as u32,
        max_attempts: task.max_attempts as u32,
        reason: reason.to_owned(),
    };
    // A failed task is the end of its attempts, nothing to publish; a requeued one is
    // published again by the outbox.
    let reason = format!(
        "task {} (round {}) used up its {} attempts; last: {reason}",
        task.id, task.round, task.max_attempts
    );
    let (event, dispatch) = if exhausted {
        (JobEvent::TaskFailed(attempt), false)
    } else {
        (JobEvent::TaskRequeued(attempt), true)
    };
    record_event(txn, task.job_id, &event, dispatch, now).await?;
    if exhausted {
        // A shard with no attempts left can never be merged, so the job cannot finish.
        failures::abort_job(txn, task.job_id, task.round as u32, reason, now).await?;
    }
    Ok(to)
}

/// Ends a task's lease: the task becomes `to` with `attempts` and `releases` as given, if it
/// is still as `task` read it (a concurrent claim, submission or expiry wins otherwise).
async fn unlease<C: ConnectionTrait>(
    txn: &C,
    task: &task::Model,
    to: TaskStatus,
    attempts: i32,
    releases: i32,
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let updated = task::Entity::update_many()
        .col_expr(task::Column::Status, Expr::value(to.as_str()))
        .col_expr(task::Column::LeaseHolder, Expr::value(Option::<Uuid>::None))
        .col_expr(task::Column::LeaseToken, Expr::value(Option::<Uuid>::None))
        .col_expr(
            task::Column::LeaseExpiresAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            task::Column::LeasedAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(task::Column::Attempts, Expr::value(attempts))
        .col_expr(task::Column::Releases, Expr::value(releases))
        .col_expr(task::Column::UpdatedAt, Expr::value(now))
        .filter(task::Column::Id.eq(task.id))
        .filter(task::Column::Status.eq(task.status))
        .filter(task::Column::Attempts.eq(task.attempts))
        .exec(txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "task {} changed while its lease was being ended",
            task.id
        )));
    }
    Ok(())
}
