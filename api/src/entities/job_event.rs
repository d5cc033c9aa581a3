//! `job_events`: the per-job event log, which doubles as the transactional outbox.

use sea_orm::entity::prelude::*;

/// A row of `job_events`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job_events")]
pub struct Model {
    /// Auto-increment id: gives the feed its order and its paging cursor.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The job the event belongs to.
    pub job_id: Uuid,
    /// The event's kind (`created`, `round_opened`, `finalize`, …).
    pub kind: String,
    /// The event's fields, as JSON.
    pub payload: Json,
    /// When the event was recorded.
    pub created_at: DateTimeUtc,
    /// Whether the outbox must turn the event into an effect (a queue publish, a chain call).
    pub needs_dispatch: bool,
    /// When the outbox dispatched it; `None` while pending.
    pub dispatched_at: Option<DateTimeUtc>,
    /// How many times the outbox tried to dispatch it.
    pub dispatch_attempts: i32,
    /// Why the last dispatch attempt failed.
    pub last_dispatch_error: Option<String>,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
