//! Why a pass of a background loop failed. The loops log it and try again at their next pass;
//! the outbox also stores it beside the event it could not dispatch.

use shardwork_core::queue::QueueError;

use crate::domain::DomainError;

/// A background pass's failure, logged by the loop that hit it (and, by the outbox, kept on the
/// event).
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    /// The database refused a read or a write.
    #[error("database: {0}")]
    Db(#[from] sea_orm::DbErr),
    /// A call to the escrow ledger failed: a revert, an RPC error, a receipt timeout.
    #[error("ledger: {0}")]
    Ledger(#[from] shardwork_contracts::LedgerError),
    /// The task queue failed.
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    /// A domain step refused or failed.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// An event needs the chain (a payout, a refund) but the API runs without one.
    #[error("no chain is configured, so payouts and refunds cannot be sent")]
    NoChain,
    /// A stored row cannot be read as what it should be: a bad payload, a missing escrow id.
    #[error("inconsistent record: {0}")]
    Corrupt(String),
    /// The chain no longer has the block the follower last read, nor any block it kept a hash
    /// of (`chain_blocks`): a reorg older than everything the follower can rewind replaced
    /// blocks whose events the API acted on. The follower reads nothing more until an operator
    /// has reconciled.
    #[error(
        "chain reorganised below every block the follower kept: block {block} was {seen} when \
         read and is {now} now. Nothing more is read: reconcile the jobs funded or paid since \
         the fork, then clear chain_cursors.last_block_hash (and set next_block to the fork) \
         to resume"
    )]
    Reorganised {
        /// The height whose block changed.
        block: u64,
        /// Its hash when the follower read it.
        seen: String,
        /// Its hash now (or that the chain has no such block any more).
        now: String,
    },
    /// The effect cannot be taken yet, and nothing failed: try again after `wait`.
    #[error("not yet: {what}")]
    NotYet {
        /// What is waited for, and until when.
        what: String,
        /// How long until the effect can be taken.
        wait: std::time::Duration,
    },
}
