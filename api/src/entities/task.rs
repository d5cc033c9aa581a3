//! `tasks`: one per shard per round, with its lease; `status` is owned by `crate::domain::flow::tasks`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::TaskStatus;

/// A row of `tasks`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tasks")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The job the task belongs to.
    pub job_id: Uuid,
    /// The shard it trains on.
    pub shard_id: Uuid,
    /// The round it belongs to, from 1.
    pub round: i32,
    /// Where the task stands: queued, leased, submitted, accepted or failed.
    pub status: TaskStatus,
    /// The worker holding the lease, while leased.
    pub lease_holder: Option<Uuid>,
    /// The token the lease holder proves itself with, while leased.
    pub lease_token: Option<Uuid>,
    /// When the lease runs out unless a heartbeat extends it.
    pub lease_expires_at: Option<DateTimeUtc>,
    /// When the current lease began: no heartbeat extends it past this plus the job's
    /// `task_time_limit_secs`. Null while unleased, and for leases from before the bound.
    pub leased_at: Option<DateTimeUtc>,
    /// How many times the task was claimed.
    pub attempts: i32,
    /// Claims allowed before the task fails.
    pub max_attempts: i32,
    /// Times a stopping worker gave it back with its attempt returned
    /// (at most `MAX_FREE_RELEASES`; `crate::domain::flow::tasks::release`).
    pub releases: i32,
    /// The last heartbeat's progress (step, loss, tokens/s).
    pub progress: Option<Json>,
    /// When the task was created (its round opened).
    pub created_at: DateTimeUtc,
    /// When the row last changed.
    pub updated_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
