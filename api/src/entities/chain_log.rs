//! `chain_logs`: each escrow log a chain follower acted on, with what undoing it takes.

use sea_orm::entity::prelude::*;

/// A row of `chain_logs`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "chain_logs")]
pub struct Model {
    /// Auto-increment id: the order the logs were applied in, so they are undone in reverse.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Which follower (as `chain_cursors.name`).
    pub cursor: String,
    /// The block the log was in.
    pub block_number: i64,
    /// The log's position in its block.
    pub log_index: i64,
    /// The transaction that emitted it (`0x…`).
    pub tx_hash: String,
    /// The escrow event's name (`JobCreated`, `ContributorsPaid`, …).
    pub kind: String,
    /// The job it acted on.
    pub job_id: Uuid,
    /// What undoing it takes (`crate::background::rewind::Undo`).
    pub undo: Json,
    /// When the follower applied it.
    pub applied_at: DateTimeUtc,
}

/// None declared.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
