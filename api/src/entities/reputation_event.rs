//! `reputation_events`: every change to a worker's standing, with the transaction behind it.

use sea_orm::entity::prelude::*;

/// A row of `reputation_events`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reputation_events")]
pub struct Model {
    /// Auto-increment id: orders a worker's history.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The worker whose standing changed.
    pub worker_id: Uuid,
    /// The job behind the change, if it is known.
    pub job_id: Option<Uuid>,
    /// The change to the worker's reputation (negative for a penalty).
    pub delta: i64,
    /// Why, as a sentence (`paid … wei for escrow job …`, a rejection and its reason).
    pub reason: String,
    /// The chain transaction behind the change (a payout), if any.
    pub tx_hash: Option<String>,
    /// When the change was recorded.
    pub created_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
