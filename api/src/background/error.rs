//! Why a pass of a background loop failed. The loops log it and try again at their next pass;
//! the outbox also stores it beside the event it could not dispatch.

use shardwork_core::queue::QueueError;

use crate::domain::DomainError;

#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    #[error("database: {0}")]
    Db(#[from] sea_orm::DbErr),
    #[error("ledger: {0}")]
    Ledger(#[from] shardwork_contracts::LedgerError),
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error("no chain is configured, so payouts and refunds cannot be sent")]
    NoChain,
    #[error("inconsistent record: {0}")]
    Corrupt(String),
}
