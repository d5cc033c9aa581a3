//! The chain follower: reads the escrow's events in block order and mirrors them into the
//! database — a funded job opens (and round 1 is queued), payouts credit workers and move their
//! reputation, completions, refunds and on-chain cancellations end jobs.
//!
//! Each batch of blocks is applied in one transaction together with the cursor that says where
//! the next batch starts, so a crash re-reads exactly the blocks whose effects were not committed:
//! every event takes effect once.
//!
//! Only blocks `chain.confirmations` deep are read. The cursor keeps the hash of the last block
//! read, and each log acted on is recorded with what undoing it takes: a chain that has another
//! block at the cursor's height now was reorganised deeper than the depth, and the follower
//! rewinds to the last block both histories share, undoing what it did above it, and reads the
//! new history from there ([`crate::background::rewind`], docs/decisions/0041-rewind-over-reorgs.md).

use alloy::primitives::U256;
use chrono::{DateTime, TimeZone, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, TransactionTrait,
};
use shardwork_contracts::bindings::JobEscrow::{self, JobEscrowEvents};
use shardwork_contracts::ledger::EscrowEvent;
use shardwork_core::protocol::{EventKind, JobEvent, events};
use uuid::Uuid;

use crate::background::error::BackgroundError;
use crate::background::rewind::{self, Credit, Undo, block_hash_text, event_name};
use crate::chain::{Chain, MAX_LOG_RANGE, address_text};
use crate::domain::flow::rounds::{open_round, resume_funded};
use crate::domain::lifecycle::{self, JobStatus, Transition, record_event};
use crate::entities::{chain_cursor, job, job_event, reputation_event, worker};

fn cursor_name(chain: &Chain) -> String {
    format!("escrow:{}:{}", chain.chain_id, address_text(chain.escrow))
}

/// Reads and applies the next batch of blocks. Returns how many events it applied.
pub async fn follow_once(
    db: &DatabaseConnection,
    chain: &Chain,
    max_attempts: i32,
) -> Result<usize, BackgroundError> {
    let name = cursor_name(chain);
    let (next, seen) = match chain_cursor::Entity::find_by_id(name.clone())
        .one(db)
        .await?
    {
        Some(cursor) => (cursor.next_block as u64, cursor.last_block_hash),
        None => (chain.start_block, None),
    };
    // The confirmation depth keeps reorgs shallower than it from ever reaching what was read;
    // one deeper took away blocks whose events the API acted on: undo those and read the new
    // history instead.
    let (next, parent) = match (seen, next.checked_sub(1)) {
        (Some(seen), Some(last)) => {
            let now = block_hash_text(chain, last).await?;
            if now.as_deref() == Some(seen.as_str()) {
                (next, Some((last, seen)))
            } else {
                let (next, ancestor_hash) =
                    rewind::rewind(db, chain, &name, last, seen, now, Utc::now()).await?;
                (next, Some((next - 1, ancestor_hash)))
            }
        }
        _ => (next, None),
    };
    let latest = chain
        .ledger
        .block_number()
        .await?
        .saturating_sub(chain.confirmations);
    if latest < next {
        return Ok(0);
    }
    let to = latest.min(next + MAX_LOG_RANGE - 1);
    // The hashes of the batch's last block and of the block below it (what was read last),
    // before and after its logs are read: if either changed in between, the logs may be of
    // another history than the one read so far, so they are read again on the next pass.
    let Some(to_hash) = block_hash_text(chain, to).await? else {
        return Ok(0);
    };
    let events = chain.ledger.events(chain.escrow, next, Some(to)).await?;
    if block_hash_text(chain, to).await?.as_deref() != Some(to_hash.as_str()) {
        return Ok(0);
    }
    if let Some((number, hash)) = &parent
        && block_hash_text(chain, *number).await?.as_deref() != Some(hash.as_str())
    {
        return Ok(0);
    }
    let now = Utc::now();
    let txn = db.begin().await?;
    for event in &events {
        if let Some((job_id, undo)) = apply(&txn, chain, event, max_attempts, now).await? {
            rewind::record_applied(
                &txn,
                &name,
                event.block_number,
                event.log_index,
                &format!("{:#x}", event.tx_hash),
                event_name(&event.event),
                job_id,
                &undo,
                now,
            )
            .await?;
        }
    }
    rewind::checkpoint(&txn, &name, to, &to_hash).await?;
    chain_cursor::Entity::insert(chain_cursor::ActiveModel {
        name: Set(name),
        next_block: Set((to + 1) as i64),
        last_block_hash: Set(Some(to_hash)),
        updated_at: Set(now),
    })
    .on_conflict(
        OnConflict::column(chain_cursor::Column::Name)
            .update_columns([
                chain_cursor::Column::NextBlock,
                chain_cursor::Column::LastBlockHash,
                chain_cursor::Column::UpdatedAt,
            ])
            .to_owned(),
    )
    .exec(&txn)
    .await?;
    txn.commit().await?;
    Ok(events.len())
}

async fn job_by_escrow_id<C: ConnectionTrait>(
    txn: &C,
    chain: &Chain,
    id: U256,
) -> Result<Option<job::Model>, BackgroundError> {
    Ok(job::Entity::find()
        .filter(job::Column::EscrowAddress.eq(address_text(chain.escrow)))
        .filter(job::Column::EscrowJobId.eq(id.to_string()))
        .one(txn)
        .await?)
}

/// Applies one escrow event; returns the job it acted on and how to undo that, if it acted.
async fn apply<C: ConnectionTrait>(
    txn: &C,
    chain: &Chain,
    event: &EscrowEvent,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Result<Option<(Uuid, Undo)>, BackgroundError> {
    let tx_hash = format!("{:#x}", event.tx_hash);
    Ok(match &event.event {
        JobEscrowEvents::JobCreated(created) => {
            on_created(txn, chain, created, &tx_hash, max_attempts, now).await?
        }
        JobEscrowEvents::JobStarted(started) => {
            let event = JobEvent::Started(events::Started {
                tx_hash: tx_hash.clone(),
            });
            match job_by_escrow_id(txn, chain, started.jobId).await? {
                Some(job) => Some(note(txn, job.id, &event, now).await?),
                None => None,
            }
        }
        JobEscrowEvents::BondSlashed(slashed) => {
            let event = JobEvent::BondSlashed(events::BondSlashed {
                worker: address_text(slashed.worker),
                amount_wei: slashed.amount.to_string(),
                tx_hash: tx_hash.clone(),
            });
            match job_by_escrow_id(txn, chain, slashed.jobId).await? {
                Some(job) => Some(note(txn, job.id, &event, now).await?),
                None => None,
            }
        }
        JobEscrowEvents::PayoutStarted(started) => {
            // The result is known from the payout's first transaction; the job completes when
            // its last batch lands.
            match job_by_escrow_id(txn, chain, started.jobId).await? {
                Some(job) => {
                    job::Entity::update_many()
                        .col_expr(
                            job::Column::ResultAdapterCid,
                            Expr::value(started.adapterCid.clone()),
                        )
                        .filter(job::Column::Id.eq(job.id))
                        .exec(txn)
                        .await?;
                    let before = job.result_adapter_cid;
                    Some((job.id, Undo::ResultAdapter { before }))
                }
                None => None,
            }
        }
        JobEscrowEvents::ContributorsPaid(batch) => {
            let Some(job) = job_by_escrow_id(txn, chain, batch.jobId).await? else {
                return Ok(None);
            };
            let mut payouts = Vec::with_capacity(batch.payouts.len() / 2);
            let mut credits = Vec::new();
            for pair in batch.payouts.chunks(2) {
                let paid = decode_payout(pair).ok_or_else(|| {
                    BackgroundError::Corrupt(format!(
                        "ContributorsPaid of escrow job {} has an odd or malformed entry",
                        batch.jobId
                    ))
                })?;
                credits.extend(on_paid(txn, &job, batch.jobId, &paid, &tx_hash, now).await?);
                payouts.push(events::Payout {
                    address: address_text(paid.contributor),
                    amount_wei: paid.amount.to_string(),
                    reputation: u32::from(paid.reputation),
                });
            }
            let event = record_event(
                txn,
                job.id,
                &JobEvent::Paid(events::Paid {
                    tx_hash: tx_hash.clone(),
                    payouts,
                }),
                false,
                now,
            )
            .await?;
            Some((job.id, Undo::Paid { event, credits }))
        }
        JobEscrowEvents::JobCompleted(done) => {
            let Some(job) = job_by_escrow_id(txn, chain, done.jobId).await? else {
                return Ok(None);
            };
            // Every batch's `paid` event is in by now (this transaction or an earlier one).
            let mut paid = Vec::new();
            for row in job_event::Entity::find()
                .filter(job_event::Column::JobId.eq(job.id))
                .filter(job_event::Column::Kind.eq(EventKind::Paid.as_str()))
                .order_by_asc(job_event::Column::Id)
                .all(txn)
                .await?
            {
                if let Ok(JobEvent::Paid(batch)) = JobEvent::from_parts(&row.kind, row.payload) {
                    paid.extend(batch.payouts);
                }
            }
            let adapter_cid = job.result_adapter_cid.clone().unwrap_or_default();
            let (_, event) = lifecycle::apply_recorded(
                txn,
                &job,
                Transition::Complete,
                |change| {
                    JobEvent::Completed(events::Completed {
                        from: change.from,
                        to: change.to,
                        adapter_cid: adapter_cid.clone(),
                        tx_hash: tx_hash.clone(),
                        payouts: paid,
                        fee_wei: done.fee.to_string(),
                        dust_wei: done.dust.to_string(),
                    })
                },
                now,
            )
            .await?;
            let from = job.status;
            Some((job.id, Undo::Ended { from, event }))
        }
        JobEscrowEvents::JobAborted(aborted) => {
            let reason = aborted.reason.clone();
            on_refunded(
                txn,
                chain,
                aborted.jobId,
                aborted.stake,
                reason,
                &tx_hash,
                now,
            )
            .await?
        }
        JobEscrowEvents::JobRefunded(refunded) => {
            let reason = "the deadline passed before the job finished".to_owned();
            on_refunded(
                txn,
                chain,
                refunded.jobId,
                refunded.stake,
                reason,
                &tx_hash,
                now,
            )
            .await?
        }
        JobEscrowEvents::JobCancelled(cancelled) => {
            match job_by_escrow_id(txn, chain, cancelled.jobId).await? {
                Some(job) => {
                    let (_, event) = lifecycle::apply_recorded(
                        txn,
                        &job,
                        Transition::CancelOnChain,
                        |change| {
                            JobEvent::Cancelled(events::Cancelled {
                                from: change.from,
                                to: change.to,
                                by: None,
                                reason: None,
                                tx_hash: Some(tx_hash.clone()),
                                stake_wei: Some(cancelled.stake.to_string()),
                            })
                        },
                        now,
                    )
                    .await?;
                    let from = job.status;
                    Some((job.id, Undo::Ended { from, event }))
                }
                None => None,
            }
        }
        _ => None,
    })
}

/// Records `event` on job `job_id` when the log only writes to the job's feed
/// ([`Undo::Noted`]).
async fn note<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    event: &JobEvent,
    now: DateTime<Utc>,
) -> Result<(Uuid, Undo), BackgroundError> {
    let event = record_event(txn, job_id, event, false, now).await?;
    Ok((job_id, Undo::Noted { event }))
}

/// Why a `JobCreated` does not fund the job it names, if it does not.
fn funding_mismatch(
    job: &job::Model,
    chain: &Chain,
    created: &JobEscrow::JobCreated,
) -> Option<String> {
    let requester = address_text(created.requester);
    let from_dev_funder = chain.dev_funder == Some(created.requester);
    if requester != job.requester.to_ascii_lowercase() && !from_dev_funder {
        return Some(format!(
            "funded by {requester}, but the job was posted by {}",
            job.requester
        ));
    }
    if created.stake.to_string() != job.stake_wei {
        return Some(format!(
            "stake {} wei, the job asks {} wei",
            created.stake, job.stake_wei
        ));
    }
    let token = job.stake_token();
    if address_text(created.token) != token {
        return Some(format!(
            "paid in token {}, the job asks {token}",
            address_text(created.token)
        ));
    }
    if created.deadline as i64 != job.deadline.timestamp() {
        return Some(format!(
            "deadline {}, the job's is {}",
            created.deadline,
            job.deadline.timestamp()
        ));
    }
    if created.kind != job.kind.escrow_code() {
        return Some(format!("kind {}, the job is {}", created.kind, job.kind));
    }
    None
}

async fn on_created<C: ConnectionTrait>(
    txn: &C,
    chain: &Chain,
    created: &JobEscrow::JobCreated,
    tx_hash: &str,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Result<Option<(Uuid, Undo)>, BackgroundError> {
    // The escrow's `specCid` is the job's manifest CID, which names the job (it holds its id).
    let Some(job) = job::Entity::find()
        .filter(job::Column::ManifestCid.eq(created.specCid.clone()))
        .one(txn)
        .await?
    else {
        tracing::info!(escrow_job = %created.jobId, spec = %created.specCid, "escrow job for no posted job; ignored");
        return Ok(None);
    };
    let ignored = if job.status != JobStatus::AwaitingFunding {
        Some(format!("the job is already {}", job.status))
    } else {
        funding_mismatch(&job, chain, created)
    };
    if let Some(reason) = ignored {
        let event = JobEvent::FundingIgnored(events::FundingIgnored {
            escrow_job_id: created.jobId.to_string(),
            tx_hash: tx_hash.to_owned(),
            reason: format!(
                "{reason}; cancel escrow job {} on chain to take the stake back",
                created.jobId
            ),
        });
        return Ok(Some(note(txn, job.id, &event, now).await?));
    }
    let dev_funded = chain.dev_funder == Some(created.requester)
        && address_text(created.requester) != job.requester.to_ascii_lowercase();
    job::Entity::update_many()
        .col_expr(
            job::Column::EscrowJobId,
            Expr::value(created.jobId.to_string()),
        )
        .col_expr(
            job::Column::EscrowAddress,
            Expr::value(address_text(chain.escrow)),
        )
        .col_expr(job::Column::DevFunded, Expr::value(dev_funded))
        .filter(job::Column::Id.eq(job.id))
        .exec(txn)
        .await?;
    let (_, event) = lifecycle::apply_recorded(
        txn,
        &job,
        Transition::Fund,
        |change| {
            JobEvent::Funded(events::Funded {
                from: change.from,
                to: change.to,
                escrow_job_id: created.jobId.to_string(),
                tx_hash: tx_hash.to_owned(),
                escrow: address_text(chain.escrow),
                dev_funded,
            })
        },
        now,
    )
    .await?;
    let job = crate::domain::jobs::find_job(txn, job.id).await?;
    if job.current_round >= 1 {
        // Funded before, until a reorg took that funding away: its rounds stand.
        resume_funded(txn, &job, now).await?;
    } else {
        // Round 1 starts from the adapter the job continues from, if it names one.
        let start = job.start_adapter_cid.clone();
        open_round(txn, &job, 1, start, max_attempts, now).await?;
    }
    Ok(Some((job.id, Undo::Funding { event })))
}

/// The escrow gave `stake` back to the requester of escrow job `escrow_job_id` (a refund after
/// the deadline, or an abort), for `reason`: the job ends `refunded`.
async fn on_refunded<C: ConnectionTrait>(
    txn: &C,
    chain: &Chain,
    escrow_job_id: U256,
    stake: U256,
    reason: String,
    tx_hash: &str,
    now: DateTime<Utc>,
) -> Result<Option<(Uuid, Undo)>, BackgroundError> {
    let Some(job) = job_by_escrow_id(txn, chain, escrow_job_id).await? else {
        return Ok(None);
    };
    let (_, event) = lifecycle::apply_recorded(
        txn,
        &job,
        Transition::Refund,
        |change| {
            JobEvent::Refunded(events::Refunded {
                from: change.from,
                to: change.to,
                tx_hash: tx_hash.to_owned(),
                stake_wei: stake.to_string(),
                reason: Some(reason),
            })
        },
        now,
    )
    .await?;
    let from = job.status;
    Ok(Some((job.id, Undo::Ended { from, event })))
}

/// One contributor's entry of a `ContributorsPaid` event.
struct PaidEntry {
    contributor: alloy::primitives::Address,
    reputation: u16,
    amount: U256,
}

/// `[contributor | reputation << 160 | previous << 176, amount]`, as the escrow packs each
/// contributor; the follower keeps the reputation after the job.
fn decode_payout(pair: &[U256]) -> Option<PaidEntry> {
    let [head, amount] = pair else {
        return None;
    };
    let bytes = head.to_be_bytes::<32>();
    if *head >> 192 != U256::ZERO {
        return None;
    }
    let reputation = u16::try_from((*head >> 160) & U256::from(0xffff)).ok()?;
    Some(PaidEntry {
        contributor: alloy::primitives::Address::from_slice(&bytes[12..]),
        reputation,
        amount: *amount,
    })
}

async fn on_paid<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    escrow_job_id: U256,
    paid: &PaidEntry,
    tx_hash: &str,
    now: DateTime<Utc>,
) -> Result<Option<Credit>, BackgroundError> {
    let address = address_text(paid.contributor);
    let Some(w) = worker::Entity::find()
        .filter(worker::Column::Address.eq(address.clone()))
        .one(txn)
        .await?
    else {
        return Ok(None);
    };
    // `earnings_wei` counts ether: a payout in an ERC-20 is in that token's units, and the
    // credit per asset is read from the escrow (`shardwork worker earnings`).
    let earned = if job.staked_in_ether() {
        paid.amount
    } else {
        U256::ZERO
    };
    let earnings = U256::from_str_radix(&w.earnings_wei, 10).unwrap_or_default() + earned;
    let reputation = i64::from(paid.reputation);
    worker::Entity::update_many()
        .col_expr(
            worker::Column::EarningsWei,
            Expr::value(earnings.to_string()),
        )
        .col_expr(worker::Column::Reputation, Expr::value(reputation))
        .col_expr(worker::Column::UpdatedAt, Expr::value(now))
        .filter(worker::Column::Id.eq(w.id))
        .exec(txn)
        .await?;
    let job_id = Some(job.id);
    reputation_event::Entity::insert(reputation_event::ActiveModel {
        worker_id: Set(w.id),
        job_id: Set(job_id),
        delta: Set(reputation - w.reputation),
        reason: Set(format!(
            "paid {} wei for escrow job {escrow_job_id}",
            paid.amount
        )),
        tx_hash: Set(Some(tx_hash.to_owned())),
        created_at: Set(now),
        ..Default::default()
    })
    .exec(txn)
    .await?;
    Ok(Some(Credit {
        worker_id: w.id,
        earned_wei: earned.to_string(),
        reputation_delta: reputation - w.reputation,
    }))
}

/// Unix seconds as a UTC time (for chain timestamps).
pub fn from_unix(seconds: u64) -> DateTime<Utc> {
    Utc.timestamp_opt(seconds as i64, 0)
        .single()
        .unwrap_or_default()
}
