//! Rewinding the chain follower over a reorg deeper than its confirmation depth (decision 0041).
//!
//! The follower keeps, for the recent past, the hash of the last block of each batch it read
//! (`chain_blocks`) and each escrow log it acted on with what undoing it takes (`chain_logs`).
//! When the block below its cursor is not the chain's any more, the newest kept block the chain
//! still has is where both histories agree (a block's hash commits to every block before it).
//! Every log applied above it is undone, newest first, in one transaction that also moves the
//! cursor back to it; the follower then reads the new history from there. A transaction the
//! new history holds again is applied again, under whatever escrow id it has there.

use std::collections::{BTreeMap, BTreeSet};

use alloy::primitives::U256;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, ExprTrait,
    QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use shardwork_contracts::bindings::JobEscrow::JobEscrowEvents;
use shardwork_core::protocol::{EventKind, JobEvent, events};
use uuid::Uuid;

use crate::background::error::BackgroundError;
use crate::chain::Chain;
use crate::domain::lifecycle::{JobStatus, dispatch_again, record_event};
use crate::entities::{
    chain_block, chain_cursor, chain_log, job, job_event, reputation_event, worker,
};

/// How many batch ends a follower keeps hashes of: a reorg older than the oldest of them cannot
/// be rewound (the follower stops instead). At one batch per pass, this is hours of history on
/// any chain, far past the finality of every chain the escrow runs on.
pub const KEPT_CHECKPOINTS: u64 = 4096;

/// What undoing one applied log takes, stored beside it as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "snake_case")]
pub enum Undo {
    /// `JobCreated` funded the job and opened it. Undone, the job waits for its funding again
    /// with no escrow id, so no event of the new history for that id reaches it; its rounds
    /// and work stand until it is funded again.
    Funding {
        /// Its `funded` event.
        event: i64,
    },
    /// The log only wrote to the job's feed (`started`, `funding_ignored`).
    Noted {
        /// The event it wrote.
        event: i64,
    },
    /// `PayoutStarted` set the job's result adapter.
    ResultAdapter {
        /// What it replaced.
        before: Option<String>,
    },
    /// `ContributorsPaid`.
    Paid {
        /// Its `paid` event.
        event: i64,
        /// What it credited each worker the API knows.
        credits: Vec<Credit>,
    },
    /// An ending (`JobCompleted`, `JobAborted`, `JobRefunded`, `JobCancelled`).
    Ended {
        /// The status the job had before.
        from: JobStatus,
        /// The ending's event.
        event: i64,
    },
}

/// What one contributor's entry of a `ContributorsPaid` changed of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credit {
    /// The worker.
    pub worker_id: Uuid,
    /// Added to its `earnings_wei` (0 for a payout in an ERC-20).
    pub earned_wei: String,
    /// Added to its reputation.
    pub reputation_delta: i64,
}

/// Block `number`'s hash as the chain has it now, as stored (`0x…`); `None` without the block.
pub async fn block_hash_text(
    chain: &Chain,
    number: u64,
) -> Result<Option<String>, BackgroundError> {
    Ok(chain
        .ledger
        .block_hash(number)
        .await?
        .map(|hash| format!("{hash:#x}")))
}

/// Keeps `number`'s hash as the end of a batch `cursor` read, and forgets the checkpoints (and
/// the logs under them) older than the [`KEPT_CHECKPOINTS`] newest. Runs in the batch's
/// transaction.
pub async fn checkpoint<C: ConnectionTrait>(
    txn: &C,
    cursor: &str,
    number: u64,
    hash: &str,
) -> Result<(), BackgroundError> {
    chain_block::Entity::insert(chain_block::ActiveModel {
        cursor: Set(cursor.to_owned()),
        number: Set(number as i64),
        hash: Set(hash.to_owned()),
    })
    .exec(txn)
    .await?;
    let oldest_kept = chain_block::Entity::find()
        .select_only()
        .column(chain_block::Column::Number)
        .filter(chain_block::Column::Cursor.eq(cursor))
        .order_by_desc(chain_block::Column::Number)
        .offset(KEPT_CHECKPOINTS - 1)
        .limit(1)
        .into_tuple::<i64>()
        .one(txn)
        .await?;
    if let Some(oldest) = oldest_kept {
        chain_block::Entity::delete_many()
            .filter(chain_block::Column::Cursor.eq(cursor))
            .filter(chain_block::Column::Number.lt(oldest))
            .exec(txn)
            .await?;
        chain_log::Entity::delete_many()
            .filter(chain_log::Column::Cursor.eq(cursor))
            .filter(chain_log::Column::BlockNumber.lte(oldest))
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// Records that the log at (`block`, `log_index`) of transaction `tx_hash` acted on `job_id`,
/// and how to undo it. Runs in the batch's transaction.
#[allow(clippy::too_many_arguments)]
pub async fn record_applied<C: ConnectionTrait>(
    txn: &C,
    cursor: &str,
    block: u64,
    log_index: u64,
    tx_hash: &str,
    kind: &str,
    job_id: Uuid,
    undo: &Undo,
    now: DateTime<Utc>,
) -> Result<(), BackgroundError> {
    let undo = serde_json::to_value(undo)
        .map_err(|e| BackgroundError::Corrupt(format!("encoding the undo of a log: {e}")))?;
    chain_log::Entity::insert(chain_log::ActiveModel {
        cursor: Set(cursor.to_owned()),
        block_number: Set(block as i64),
        log_index: Set(log_index as i64),
        tx_hash: Set(tx_hash.to_owned()),
        kind: Set(kind.to_owned()),
        job_id: Set(job_id),
        undo: Set(undo),
        applied_at: Set(now),
        ..Default::default()
    })
    .exec(txn)
    .await?;
    Ok(())
}

/// The newest kept checkpoint of `cursor` whose block the chain still has, as (number, hash).
/// Checkpoints match up to some height and not above it, so the search halves the range with
/// each question to the node.
async fn common_ancestor(
    db: &DatabaseConnection,
    chain: &Chain,
    cursor: &str,
) -> Result<Option<(u64, String)>, BackgroundError> {
    let kept = chain_block::Entity::find()
        .filter(chain_block::Column::Cursor.eq(cursor))
        .order_by_asc(chain_block::Column::Number)
        .all(db)
        .await?;
    // Invariant: kept[..low] are known to match, kept[high..] known not to.
    let (mut low, mut high) = (0, kept.len());
    while low < high {
        let mid = low + (high - low) / 2;
        let block = &kept[mid];
        let now = block_hash_text(chain, block.number as u64).await?;
        if now.as_deref() == Some(block.hash.as_str()) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    Ok(low
        .checked_sub(1)
        .map(|i| (kept[i].number as u64, kept[i].hash.clone())))
}

/// Rewinds `cursor` past a reorg: block `last` (the one below the cursor) was `seen` and is
/// `now` (or gone). Undoes what the follower did above the newest block both histories share
/// and moves the cursor back to it; returns the block to read next and the hash of the one
/// below it (the shared block). A reorg older than every
/// kept checkpoint is [`BackgroundError::Reorganised`]: nothing is changed, and the follower
/// stops there.
pub async fn rewind(
    db: &DatabaseConnection,
    chain: &Chain,
    cursor: &str,
    last: u64,
    seen: String,
    now_hash: Option<String>,
    now: DateTime<Utc>,
) -> Result<(u64, String), BackgroundError> {
    let Some((ancestor, ancestor_hash)) = common_ancestor(db, chain, cursor).await? else {
        return Err(BackgroundError::Reorganised {
            block: last,
            seen,
            now: now_hash.unwrap_or_else(|| "not on the chain".into()),
        });
    };
    let txn = db.begin().await?;
    let orphaned = chain_log::Entity::find()
        .filter(chain_log::Column::Cursor.eq(cursor))
        .filter(chain_log::Column::BlockNumber.gt(ancestor as i64))
        .order_by_desc(chain_log::Column::Id)
        .all(&txn)
        .await?;
    // The jobs whose chain calls were mined in the orphaned blocks, with the calls to send
    // again: see `send_again`.
    let mut resend: BTreeMap<Uuid, BTreeSet<Resend>> = BTreeMap::new();
    for log in &orphaned {
        let undo: Undo = serde_json::from_value(log.undo.clone()).map_err(|e| {
            BackgroundError::Corrupt(format!("chain log {} has an unreadable undo: {e}", log.id))
        })?;
        let undone = undo_log(&txn, log, &undo, now).await?;
        record_event(
            &txn,
            log.job_id,
            &JobEvent::Reorganised(events::Reorganised {
                event: log.kind.clone(),
                block: log.block_number as u64,
                tx_hash: log.tx_hash.clone(),
                undone,
            }),
            false,
            now,
        )
        .await?;
        if let Some(what) = Resend::after(&log.kind) {
            resend.entry(log.job_id).or_default().insert(what);
        }
    }
    for (job_id, calls) in resend {
        for what in calls {
            send_again(&txn, job_id, what).await?;
        }
    }
    chain_log::Entity::delete_many()
        .filter(chain_log::Column::Cursor.eq(cursor))
        .filter(chain_log::Column::BlockNumber.gt(ancestor as i64))
        .exec(&txn)
        .await?;
    chain_block::Entity::delete_many()
        .filter(chain_block::Column::Cursor.eq(cursor))
        .filter(chain_block::Column::Number.gt(ancestor as i64))
        .exec(&txn)
        .await?;
    chain_cursor::Entity::update_many()
        .col_expr(
            chain_cursor::Column::NextBlock,
            Expr::value((ancestor + 1) as i64),
        )
        .col_expr(
            chain_cursor::Column::LastBlockHash,
            Expr::value(ancestor_hash.clone()),
        )
        .col_expr(chain_cursor::Column::UpdatedAt, Expr::value(now))
        .filter(chain_cursor::Column::Name.eq(cursor))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    tracing::warn!(
        block = last,
        %seen,
        now = now_hash.as_deref().unwrap_or("gone"),
        ancestor,
        undone = orphaned.len(),
        "the chain was reorganised below the follower; rewound to the last block both histories share"
    );
    Ok((ancestor + 1, ancestor_hash))
}

/// Undoes one applied log; returns what was undone, as a sentence for the job's feed.
async fn undo_log<C: ConnectionTrait>(
    txn: &C,
    log: &chain_log::Model,
    undo: &Undo,
    now: DateTime<Utc>,
) -> Result<String, BackgroundError> {
    let forget = |event: i64| async move {
        job_event::Entity::delete_by_id(event).exec(txn).await?;
        Ok::<_, BackgroundError>(())
    };
    let bump = || {
        job::Entity::update_many()
            .col_expr(job::Column::Version, Expr::col(job::Column::Version).add(1))
            .col_expr(job::Column::UpdatedAt, Expr::value(now))
            .filter(job::Column::Id.eq(log.job_id))
    };
    Ok(match undo {
        Undo::Funding { event } => {
            bump()
                .col_expr(
                    job::Column::Status,
                    Expr::value(JobStatus::AwaitingFunding.as_str()),
                )
                .col_expr(
                    job::Column::EscrowJobId,
                    Expr::value(Option::<String>::None),
                )
                .col_expr(
                    job::Column::EscrowAddress,
                    Expr::value(Option::<String>::None),
                )
                .col_expr(job::Column::DevFunded, Expr::value(false))
                .exec(txn)
                .await?;
            forget(*event).await?;
            "the funding is gone: the job waits for it again, and its work so far stands".into()
        }
        Undo::Noted { event } => {
            forget(*event).await?;
            "its entry in this feed was removed".into()
        }
        Undo::ResultAdapter { before } => {
            job::Entity::update_many()
                .col_expr(job::Column::ResultAdapterCid, Expr::value(before.clone()))
                .filter(job::Column::Id.eq(log.job_id))
                .exec(txn)
                .await?;
            "the result adapter it announced was taken back".into()
        }
        Undo::Paid { event, credits } => {
            for credit in credits {
                uncredit(txn, log, credit, now).await?;
            }
            forget(*event).await?;
            format!(
                "the payout batch's credits were taken back from {} worker(s)",
                credits.len()
            )
        }
        Undo::Ended { from, event } => {
            bump()
                .col_expr(job::Column::Status, Expr::value(from.as_str()))
                .exec(txn)
                .await?;
            forget(*event).await?;
            format!("the ending was taken back: the job is {from} again")
        }
    })
}

/// Takes back what one payout entry credited a worker, with a reputation event that says so
/// (the worker's history keeps both).
async fn uncredit<C: ConnectionTrait>(
    txn: &C,
    log: &chain_log::Model,
    credit: &Credit,
    now: DateTime<Utc>,
) -> Result<(), BackgroundError> {
    let Some(w) = worker::Entity::find_by_id(credit.worker_id)
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    let parse = |text: &str| U256::from_str_radix(text, 10).unwrap_or_default();
    let earnings = parse(&w.earnings_wei).saturating_sub(parse(&credit.earned_wei));
    worker::Entity::update_many()
        .col_expr(
            worker::Column::EarningsWei,
            Expr::value(earnings.to_string()),
        )
        .col_expr(
            worker::Column::Reputation,
            Expr::value(Ord::max(w.reputation - credit.reputation_delta, 0)),
        )
        .col_expr(worker::Column::UpdatedAt, Expr::value(now))
        .filter(worker::Column::Id.eq(w.id))
        .exec(txn)
        .await?;
    reputation_event::Entity::insert(reputation_event::ActiveModel {
        worker_id: Set(w.id),
        job_id: Set(Some(log.job_id)),
        delta: Set(-credit.reputation_delta),
        reason: Set(format!(
            "payout of {} wei reorganised away (block {})",
            credit.earned_wei, log.block_number
        )),
        tx_hash: Set(Some(log.tx_hash.clone())),
        created_at: Set(now),
        ..Default::default()
    })
    .exec(txn)
    .await?;
    Ok(())
}

/// The escrow event's name, as `chain_logs.kind` keeps it (and [`Resend::after`] reads it).
pub fn event_name(event: &JobEscrowEvents) -> &'static str {
    match event {
        JobEscrowEvents::JobCreated(_) => "JobCreated",
        JobEscrowEvents::JobStarted(_) => "JobStarted",
        JobEscrowEvents::PayoutStarted(_) => "PayoutStarted",
        JobEscrowEvents::ContributorsPaid(_) => "ContributorsPaid",
        JobEscrowEvents::JobCompleted(_) => "JobCompleted",
        JobEscrowEvents::JobAborted(_) => "JobAborted",
        JobEscrowEvents::JobRefunded(_) => "JobRefunded",
        JobEscrowEvents::JobCancelled(_) => "JobCancelled",
        JobEscrowEvents::BondSlashed(_) => "BondSlashed",
        _ => "other",
    }
}

/// Which of the job's chain calls to send again after a rewind took its mined effect away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Resend {
    /// `markStarted`: round 1's opening, whose dispatch marks the escrow job started.
    Start,
    /// The job's newest payout, abort or refund call.
    Ending,
}

impl Resend {
    fn after(kind: &str) -> Option<Resend> {
        match kind {
            "JobStarted" => Some(Resend::Start),
            "PayoutStarted" | "ContributorsPaid" | "JobCompleted" | "JobAborted"
            | "JobRefunded" => Some(Resend::Ending),
            // A funding and an on-chain cancel are the requester's calls, not ours; a funding
            // taken back is resumed by the next one (`resume_funded`).
            _ => None,
        }
    }
}

/// Marks the job's call `what` for the outbox again, unless the job lost its funding too (it
/// waits for a new one, which sends what is needed then). The outbox reads the escrow before
/// each call, so a call the new history already holds is not sent twice.
async fn send_again<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    what: Resend,
) -> Result<(), BackgroundError> {
    let job = crate::domain::jobs::find_job(txn, job_id).await?;
    if job.status == JobStatus::AwaitingFunding {
        return Ok(());
    }
    let kinds: &[EventKind] = match what {
        Resend::Start => &[EventKind::RoundOpened],
        Resend::Ending => &[
            EventKind::Finalize,
            EventKind::AbortDue,
            EventKind::RefundDue,
        ],
    };
    let rows = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(job_id))
        .filter(job_event::Column::Kind.is_in(kinds.iter().map(|k| k.as_str())))
        .order_by_asc(job_event::Column::Id)
        .all(txn)
        .await?;
    let row = match what {
        Resend::Start => rows.into_iter().find(|row| {
            matches!(
                JobEvent::from_parts(&row.kind, row.payload.clone()),
                Ok(JobEvent::RoundOpened(opened)) if opened.round == 1
            )
        }),
        Resend::Ending => rows.into_iter().next_back(),
    };
    if let Some(row) = row {
        dispatch_again(txn, row.id).await?;
    }
    Ok(())
}
