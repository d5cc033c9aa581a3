//! The outbox dispatcher: turns committed events that need an effect elsewhere into that
//! effect, then stamps them dispatched.
//!
//! | event            | effect                                                              |
//! |------------------|---------------------------------------------------------------------|
//! | `round_opened`   | round 1: `markStarted` on chain; then publish the round's tasks     |
//! | `task_requeued`  | publish the task again (a new attempt)                              |
//! | `finalize`       | the payout: `completeJob`, or `completeFederatedJob` when the          |
//! |                  | contributors fit one transaction, else `beginFederatedPayout` and   |
//! |                  | `payFederatedBatch`es (resumed from the escrow's `payoutOf`)        |
//! | `aggregated`     | a round before the last merged: `recordProgress` (completed rounds /|
//! |                  | rounds), so the deadline refund waits for that work to be paid      |
//! | `refund_due`     | with recorded progress: the completed rounds' work paid and the rest|
//! |                  | refunded (`abortFederatedJob`, or begin + batches); otherwise      |
//! |                  | `refund` (a stalled payout: once `PAYOUT_GRACE` has passed)         |
//! | `proof_checked`  | a failed proof in a bonded job (dispatched only then): `slashBond`  |
//! |                  | of `bond_multiple` × one task's pay, to the requester               |
//! | `abort_due`      | a federated job with completed rounds: `abortFederatedJob` (or      |
//! |                  | `beginFederatedAbort` + batches) pays those rounds' accepted work   |
//! |                  | and refunds the rest; with none, `abortJob` refunds the whole stake |
//!
//! Work done is paid, whatever ends the job: a job that cannot finish (or ran out of time)
//! pays the contributors of its completed rounds `completed / rounds` of the stake, scored as
//! a completion scores them (`payout::contributions_through_round`), and only the rest goes
//! back to the requester.
//!
//! Every effect is safe to repeat, because a crash after the effect and before the stamp repeats
//! it: publications carry an idempotency key per attempt (the queue drops a duplicate still in
//! it; a late duplicate finds its task claimed and is dropped by the worker), and chain calls
//! first read the escrow's state and skip what is already done. The state the effects cause
//! (job opened, paid, refunded) is written by the chain follower from the chain's events, never
//! here, so it too happens once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use alloy::primitives::Address;
use bytes::Bytes;
use chrono::Utc;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use shardwork_contracts::ledger::{
    Contribution as ChainContribution, FederatedAbort, FederatedCompletion, JobInfo,
    JobStatus as EscrowStatus, TxOutcome,
};
use shardwork_core::protocol::events::Finalize;
use shardwork_core::protocol::{JobEvent, JobKind, TASK_QUEUE};
use shardwork_core::queue::{OutgoingMessage, TaskQueue};
use tracing::Instrument;
use uuid::Uuid;

use crate::background::error::BackgroundError;
use crate::chain::{Chain, address_text, parse_job_id};
use crate::domain::flow::payout;
use crate::domain::flow::rounds::RoundStatus;
use crate::domain::flow::tasks::{TaskStatus, task_message};
use crate::entities::{chain_transaction, job, job_event, round, task};

/// Rows handled per pass.
const BATCH: u64 = 50;
/// Longest wait before retrying a failed effect.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest wait before looking again at an effect that was not due yet: the chain's clock can
/// run ahead of this one (or be moved, on a test chain), so a long wait is taken in parts.
const MAX_NOT_YET_WAIT: Duration = Duration::from_secs(3600);

/// The dispatcher's memory of failures, for backoff between retries (lost on restart, which
/// only means a prompt retry).
#[derive(Default)]
pub struct Dispatcher {
    retry_after: HashMap<i64, Instant>,
}

impl Dispatcher {
    /// One pass over undispatched events, oldest first. Returns how many were dispatched.
    pub async fn dispatch_once(
        &mut self,
        db: &DatabaseConnection,
        queue: &dyn TaskQueue,
        chain: Option<&Chain>,
    ) -> Result<usize, BackgroundError> {
        let rows = job_event::Entity::find()
            .filter(job_event::Column::NeedsDispatch.eq(true))
            .filter(job_event::Column::DispatchedAt.is_null())
            .order_by_asc(job_event::Column::Id)
            .limit(BATCH)
            .all(db)
            .await?;
        let mut done = 0;
        for row in rows {
            if self
                .retry_after
                .get(&row.id)
                .is_some_and(|at| *at > Instant::now())
            {
                continue;
            }
            let span = tracing::info_span!("dispatch", event = row.id, kind = %row.kind, job = %row.job_id);
            // Instrumented, not entered: a guard held across an await would leak the span
            // into other tasks on this thread.
            match self
                .effect(db, queue, chain, &row)
                .instrument(span.clone())
                .await
            {
                Ok(()) => {
                    job_event::Entity::update_many()
                        .col_expr(job_event::Column::DispatchedAt, Expr::value(Utc::now()))
                        .col_expr(
                            job_event::Column::DispatchAttempts,
                            Expr::value(row.dispatch_attempts + 1),
                        )
                        .filter(job_event::Column::Id.eq(row.id))
                        .filter(job_event::Column::DispatchedAt.is_null())
                        .exec(db)
                        .await?;
                    self.retry_after.remove(&row.id);
                    done += 1;
                }
                Err(BackgroundError::NotYet { what, wait }) => {
                    // Not a failure: no attempt is counted, and the wait is the effect's own.
                    span.in_scope(|| tracing::info!(%what, ?wait, "dispatch waits"));
                    job_event::Entity::update_many()
                        .col_expr(
                            job_event::Column::LastDispatchError,
                            Expr::value(format!("waiting: {what}")),
                        )
                        .filter(job_event::Column::Id.eq(row.id))
                        .exec(db)
                        .await?;
                    self.retry_after
                        .insert(row.id, Instant::now() + wait.min(MAX_NOT_YET_WAIT));
                }
                Err(err) => {
                    let attempts = row.dispatch_attempts + 1;
                    span.in_scope(
                        || tracing::warn!(error = %err, attempts, "dispatch failed; will retry"),
                    );
                    job_event::Entity::update_many()
                        .col_expr(job_event::Column::DispatchAttempts, Expr::value(attempts))
                        .col_expr(
                            job_event::Column::LastDispatchError,
                            Expr::value(err.to_string()),
                        )
                        .filter(job_event::Column::Id.eq(row.id))
                        .exec(db)
                        .await?;
                    let backoff = Duration::from_millis(250)
                        .saturating_mul(1 << attempts.clamp(0, 8))
                        .min(MAX_BACKOFF);
                    self.retry_after.insert(row.id, Instant::now() + backoff);
                }
            }
        }
        Ok(done)
    }

    async fn effect(
        &self,
        db: &DatabaseConnection,
        queue: &dyn TaskQueue,
        chain: Option<&Chain>,
        row: &job_event::Model,
    ) -> Result<(), BackgroundError> {
        let event = JobEvent::from_parts(&row.kind, row.payload.clone()).map_err(|e| {
            BackgroundError::Corrupt(format!("{} event {} payload: {e}", row.kind, row.id))
        })?;
        match event {
            JobEvent::RoundOpened(opened) => {
                if opened.round == 1
                    && let Some(chain) = chain
                {
                    ensure_started(db, chain, row.job_id).await?;
                }
                let tasks = task::Entity::find()
                    .filter(task::Column::JobId.eq(row.job_id))
                    .filter(task::Column::Round.eq(opened.round as i32))
                    .filter(task::Column::Status.eq(TaskStatus::Queued))
                    .all(db)
                    .await?;
                publish(db, queue, &tasks).await
            }
            JobEvent::TaskRequeued(requeued) => {
                let tasks = task::Entity::find()
                    .filter(task::Column::Id.eq(requeued.task_id))
                    .filter(task::Column::Status.eq(TaskStatus::Queued))
                    .all(db)
                    .await?;
                publish(db, queue, &tasks).await
            }
            JobEvent::Aggregated(aggregated) => match chain {
                Some(chain) => record_progress(db, chain, row.job_id, aggregated.round).await,
                // No chain, no escrow to hold the work's share.
                None => Ok(()),
            },
            JobEvent::Finalize(finalize) => {
                let chain = chain.ok_or(BackgroundError::NoChain)?;
                complete(db, chain, row.job_id, &finalize).await
            }
            JobEvent::RefundDue(_) => {
                let chain = chain.ok_or(BackgroundError::NoChain)?;
                refund(db, chain, row.job_id).await
            }
            JobEvent::AbortDue(due) => {
                let chain = chain.ok_or(BackgroundError::NoChain)?;
                abort(db, chain, row.job_id, &due.reason).await
            }
            JobEvent::ProofChecked(checked) => {
                let chain = chain.ok_or(BackgroundError::NoChain)?;
                slash(db, chain, row.job_id, &checked.worker).await
            }
            other => Err(BackgroundError::Corrupt(format!(
                "event {} of kind {:?} is marked for dispatch, but nothing dispatches it",
                row.id,
                other.kind()
            ))),
        }
    }
}

async fn publish(
    db: &DatabaseConnection,
    queue: &dyn TaskQueue,
    tasks: &[task::Model],
) -> Result<(), BackgroundError> {
    let mut messages = Vec::with_capacity(tasks.len());
    for t in tasks {
        let message = task_message(db, t).await?;
        let payload = serde_json::to_vec(&message)
            .map_err(|e| BackgroundError::Corrupt(format!("encoding task {}: {e}", t.id)))?;
        messages.push(OutgoingMessage {
            idempotency_key: message.publication_key(t.attempts, t.releases),
            payload: Bytes::from(payload),
            delay: None,
        });
    }
    if !messages.is_empty() {
        queue.publish_batch(TASK_QUEUE, messages).await?;
        tracing::info!(tasks = tasks.len(), "tasks published");
    }
    Ok(())
}

/// The job's escrow id, or an error saying the job is not funded.
async fn escrow_id(
    db: &DatabaseConnection,
    job_id: Uuid,
) -> Result<(job::Model, alloy::primitives::U256), BackgroundError> {
    let job = crate::domain::jobs::find_job(db, job_id).await?;
    let id = job
        .escrow_job_id
        .as_deref()
        .and_then(parse_job_id)
        .ok_or_else(|| BackgroundError::Corrupt(format!("job {job_id} has no escrow job id")))?;
    Ok((job, id))
}

async fn record_tx(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    kind: &str,
    outcome: &TxOutcome,
) -> Result<(), BackgroundError> {
    let now = Utc::now();
    chain_transaction::Entity::insert(chain_transaction::ActiveModel {
        id: Set(Uuid::now_v7()),
        job_id: Set(Some(job_id)),
        kind: Set(kind.into()),
        status: Set("mined".into()),
        tx_hash: Set(Some(format!("{:#x}", outcome.tx_hash))),
        from_address: Set(Some(address_text(chain.operator))),
        nonce: Set(None),
        block_number: Set(Some(outcome.block_number as i64)),
        error: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .exec(db)
    .await?;
    Ok(())
}

/// `markStarted`, unless the escrow already shows the job started.
async fn ensure_started(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
) -> Result<(), BackgroundError> {
    let (_, id) = escrow_id(db, job_id).await?;
    let info = chain.ledger.job(chain.escrow, id).await?;
    if info.status != EscrowStatus::Open {
        return Ok(());
    }
    let outcome = chain
        .ledger
        .mark_started(chain.escrow, chain.operator, id)
        .await?;
    record_tx(db, chain, job_id, "mark_started", &outcome).await
}

async fn complete(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    finalize: &Finalize,
) -> Result<(), BackgroundError> {
    let (job, id) = escrow_id(db, job_id).await?;
    let info = chain.ledger.job(chain.escrow, id).await?;
    if !matches!(info.status, EscrowStatus::Started | EscrowStatus::Paying) {
        // Done already (Completed), ended another way (Refunded, Cancelled, Aborted), or never
        // started, which `round_opened` makes impossible: nothing to pay.
        return Ok(());
    }
    let contributions = chain_contributions(&finalize.contributions, &info)?;
    let outcomes = if job.kind == JobKind::Lora {
        // One shard, so one accepted contributor; rejected earlier attempts are not listed.
        let best = contributions
            .iter()
            .max_by_key(|c| c.quality)
            .copied()
            .ok_or_else(|| BackgroundError::Corrupt(format!("job {job_id} has no contributor")))?;
        chain
            .ledger
            .complete_job(
                chain.escrow,
                chain.operator,
                id,
                &finalize.adapter_cid,
                best,
            )
            .await
            .map(|outcome| vec![outcome])?
    } else {
        let completion = FederatedCompletion {
            job_id: id,
            adapter_cid: finalize.adapter_cid.clone(),
            manifest_cid: finalize.manifest_cid.clone().unwrap_or_default(),
            contributions,
        };
        chain
            .ledger
            .pay_federated_job(
                chain.escrow,
                chain.operator,
                &completion,
                chain.payout_limits,
            )
            .await?
    };
    for outcome in &outcomes {
        record_tx(db, chain, job_id, "complete", outcome).await?;
    }
    Ok(())
}

/// `slashBond` of `worker`'s bond in a bonded job it forfeited (decisions/0044):
/// `bond_multiple` × one task's pay, or what the bond holds, goes to the requester. Skipped when
/// the escrow already slashed it for this job (a resend, or a second failed proof of the same
/// worker); the follower writes `bond_slashed` from the escrow's event.
async fn slash(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    worker: &str,
) -> Result<(), BackgroundError> {
    let (job, id) = escrow_id(db, job_id).await?;
    let amount = job.task_bond();
    if amount.is_zero() {
        return Ok(());
    }
    let worker: Address = worker
        .parse()
        .map_err(|e| BackgroundError::Corrupt(format!("worker address {worker}: {e}")))?;
    if chain.ledger.bond_slashed(chain.escrow, id, worker).await? {
        return Ok(());
    }
    let outcome = chain
        .ledger
        .slash_bond(chain.escrow, chain.operator, id, worker, amount)
        .await?;
    record_tx(db, chain, job_id, "slash_bond", &outcome).await
}

/// The escrow refuses a payout that names the job's requester (the account that funded it on
/// chain, which dev funding makes another than the poster); such work is not paid.
fn chain_contributions(
    contributions: &[payout::Contribution],
    info: &JobInfo,
) -> Result<Vec<ChainContribution>, BackgroundError> {
    let requester = address_text(info.requester);
    contributions
        .iter()
        .filter(|c| !c.address.eq_ignore_ascii_case(&requester))
        .map(|c| {
            c.address
                .parse::<Address>()
                .map(|contributor| ChainContribution {
                    contributor,
                    quality: c.quality_bps,
                })
                .map_err(|e| BackgroundError::Corrupt(format!("contributor {}: {e}", c.address)))
        })
        .collect()
}

/// The share of a job's stake `completed` of its `rounds` rounds earned, in basis points
/// (floored: the requester keeps the rounding); `None` when nothing was completed.
pub fn earned_bps(completed: u32, rounds: i32) -> Option<u16> {
    let rounds = u64::try_from(rounds).ok().filter(|r| *r > 0)?;
    let completed = u64::from(completed).min(rounds);
    if completed == 0 {
        return None;
    }
    u16::try_from(completed * 10_000 / rounds).ok()
}

/// `recordProgress` after round `round`'s merge, unless the escrow already holds as much (a
/// repeat) or the job is no longer running there. Only rounds before the last: the last one's
/// merge is followed by the payout of the whole stake.
async fn record_progress(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    round: u32,
) -> Result<(), BackgroundError> {
    let (job, id) = escrow_id(db, job_id).await?;
    if job.kind != JobKind::Federated || i64::from(round) >= i64::from(job.rounds) {
        return Ok(());
    }
    let Some(earned) = earned_bps(round, job.rounds) else {
        return Ok(());
    };
    let info = chain.ledger.job(chain.escrow, id).await?;
    if info.status != EscrowStatus::Started || info.earned_bps >= earned {
        return Ok(());
    }
    let now = chain.ledger.block_timestamp().await?;
    if now > info.deadline {
        // The escrow records progress only up to the deadline (so it never races a refund);
        // past it, the deadline's refund_due pays what it can.
        tracing::warn!(%job_id, round, "round merged after the escrow's deadline; progress not recorded");
        return Ok(());
    }
    let outcome = chain
        .ledger
        .record_progress(chain.escrow, chain.operator, id, earned)
        .await?;
    record_tx(db, chain, job_id, "record_progress", &outcome).await
}

/// What the completed rounds of a federated job earned, to pay on chain as it ends early:
/// `completed / rounds` of the stake, to the contributors of those rounds scored as a
/// completion scores them. `None` for a LoRA job, a job with no completed round, or one whose
/// completed rounds list no payable contributor (all of them the requester).
async fn completed_work(
    db: &DatabaseConnection,
    job: &job::Model,
    id: alloy::primitives::U256,
    info: &JobInfo,
    reason: &str,
) -> Result<Option<FederatedAbort>, BackgroundError> {
    if job.kind != JobKind::Federated {
        return Ok(None);
    }
    let Some(last) = last_completed_round(db, job).await? else {
        return Ok(None);
    };
    let Some(earned) = earned_bps(last.number.max(0) as u32, job.rounds) else {
        return Ok(None);
    };
    let scored = payout::contributions_through_round(db, job.id, last.number).await?;
    let contributions = chain_contributions(&scored, info)?;
    if contributions.is_empty() {
        return Ok(None);
    }
    // The result handed over is the best completed round's merge, as a completion's is.
    let best = crate::domain::flow::rounds::best_round(db, job.id).await?;
    Ok(Some(FederatedAbort {
        job_id: id,
        earned_bps: earned,
        adapter_cid: best
            .and_then(|r| r.aggregate_adapter_cid)
            .unwrap_or_default(),
        reason: reason.to_owned(),
        contributions,
    }))
}

/// Waits ([`BackgroundError::NotYet`]) while proofs of training of `job`'s completed rounds
/// are still to be checked: the work of an early end is scored as a completion's is, and a
/// forgery found later must still forfeit (decision 0042). Chain time `until` ends the wait:
/// past it the escrow no longer pays the completed rounds.
async fn proofs_decided(
    db: &DatabaseConnection,
    job: &job::Model,
    now: u64,
    until: u64,
) -> Result<(), BackgroundError> {
    let Some(last) = last_completed_round(db, job).await? else {
        return Ok(());
    };
    let pending = payout::pending_proofs_through_round(db, job.id, last.number).await?;
    if pending == 0 {
        return Ok(());
    }
    Err(BackgroundError::NotYet {
        what: format!(
            "job {} ends early; {pending} proofs of training of its completed rounds are still \
             to be checked before their work is paid",
            job.id
        ),
        wait: Duration::from_secs((until.saturating_sub(now) + 1).min(PROOF_POLL_SECS)),
    })
}

/// `job`'s highest completed round. Rounds open one after another, each from the last one's
/// merge, so the completed ones are 1 ..= that one.
async fn last_completed_round(
    db: &DatabaseConnection,
    job: &job::Model,
) -> Result<Option<round::Model>, BackgroundError> {
    Ok(round::Entity::find()
        .filter(round::Column::JobId.eq(job.id))
        .filter(round::Column::Status.eq(RoundStatus::Completed.as_str()))
        .order_by_desc(round::Column::Number)
        .one(db)
        .await?)
}

/// How often an early end looks again for the proofs it waits for.
const PROOF_POLL_SECS: u64 = 5;

/// Pays `work` on chain (one transaction, or begin + batches, resumed after a crash).
async fn pay_work(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    work: &FederatedAbort,
) -> Result<(), BackgroundError> {
    let outcomes = chain
        .ledger
        .pay_federated_abort(chain.escrow, chain.operator, work, chain.payout_limits)
        .await?;
    for outcome in &outcomes {
        record_tx(db, chain, job_id, "abort", outcome).await?;
    }
    Ok(())
}

/// The last chain second at which the escrow still lets the validator pay a started job's
/// completed rounds: its deadline, or `PAYOUT_GRACE` past it once progress was recorded.
async fn pay_until(chain: &Chain, info: &JobInfo) -> Result<u64, BackgroundError> {
    if info.earned_bps == 0 {
        return Ok(info.deadline);
    }
    let grace = chain.ledger.payout_grace(chain.escrow).await?;
    Ok(info.deadline.saturating_add(grace))
}

/// Ends a job that cannot finish, unless the escrow already shows it ended: a federated job
/// with completed rounds pays their work and refunds the rest (`abortFederatedJob`, batched
/// when large); any other, or one whose time to pay has passed, is refunded whole
/// (`abortJob`).
async fn abort(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
    reason: &str,
) -> Result<(), BackgroundError> {
    let (job, id) = escrow_id(db, job_id).await?;
    let info = chain.ledger.job(chain.escrow, id).await?;
    if !matches!(
        info.status,
        EscrowStatus::Open | EscrowStatus::Started | EscrowStatus::Paying
    ) {
        return Ok(());
    }
    if info.status != EscrowStatus::Open {
        let now = chain.ledger.block_timestamp().await?;
        let until = pay_until(chain, &info).await?;
        let payable = info.status == EscrowStatus::Paying || now <= until;
        // Paying means the payout began, after its proofs were decided; otherwise the
        // completed rounds' proofs of training are waited for while the escrow lets them pay.
        if payable && info.status != EscrowStatus::Paying {
            proofs_decided(db, &job, now, until).await?;
        }
        if payable && let Some(work) = completed_work(db, &job, id, &info, reason).await? {
            return pay_work(db, chain, job_id, &work).await;
        }
        if !payable {
            tracing::warn!(%job_id, "the escrow's window to pay the completed rounds has passed");
        }
    }
    if info.status == EscrowStatus::Paying {
        // A payout under way that is not this job's completed work: refund_due handles it.
        return Ok(());
    }
    let outcome = chain
        .ledger
        .abort_job(chain.escrow, chain.operator, id, reason)
        .await?;
    record_tx(db, chain, job_id, "abort", &outcome).await
}

/// `refund`, unless the escrow shows the job ended. A federated payout that stalled (status
/// Paying: begun, not every batch paid) is refunded what it had not paid once the escrow's
/// `PAYOUT_GRACE` past the deadline has passed; until then the event waits, since the payout
/// may still complete (which makes the refund moot).
async fn refund(
    db: &DatabaseConnection,
    chain: &Chain,
    job_id: Uuid,
) -> Result<(), BackgroundError> {
    let (job, id) = escrow_id(db, job_id).await?;
    let info = chain.ledger.job(chain.escrow, id).await?;
    match info.status {
        EscrowStatus::Open => {}
        EscrowStatus::Started if info.earned_bps == 0 => {}
        EscrowStatus::Started => {
            // Progress was recorded: the escrow holds the refund back for PAYOUT_GRACE, in
            // which the completed rounds' work is paid and only the rest refunded.
            let reason = "the deadline passed before the job finished";
            let now = chain.ledger.block_timestamp().await?;
            let until = pay_until(chain, &info).await?;
            if now <= until {
                proofs_decided(db, &job, now, until).await?;
                if let Some(work) = completed_work(db, &job, id, &info, reason).await? {
                    return pay_work(db, chain, job_id, &work).await;
                }
                return Err(BackgroundError::NotYet {
                    what: format!(
                        "job {job_id} recorded progress but lists no payable work; the escrow \
                         refunds it after chain time {until}, now {now}"
                    ),
                    wait: Duration::from_secs(until - now + 1),
                });
            }
        }
        EscrowStatus::Paying => {
            let grace = chain.ledger.payout_grace(chain.escrow).await?;
            let until = info.deadline.saturating_add(grace);
            let now = chain.ledger.block_timestamp().await?;
            if now <= until {
                return Err(BackgroundError::NotYet {
                    what: format!(
                        "the payout of job {job_id} stalled; the escrow refunds what it had not \
                         paid after chain time {until} ({grace} s past the deadline), now {now}"
                    ),
                    wait: Duration::from_secs(until - now + 1),
                });
            }
        }
        _ => return Ok(()),
    }
    let outcome = chain
        .ledger
        .refund(chain.escrow, chain.operator, id)
        .await?;
    record_tx(db, chain, job_id, "refund", &outcome).await
}
