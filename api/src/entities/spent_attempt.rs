//! `spent_attempts`: a worker's attempt at a task that ended without a result it may retry
//! (abandoned, let expire, released past the uncounted releases, adapter rejected). Written by
//! `crate::domain::flow::tasks::requeue`; a worker with a row here cannot claim the task again.

use sea_orm::entity::prelude::*;

/// A row of `spent_attempts`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "spent_attempts")]
pub struct Model {
    /// The task the attempt was at.
    #[sea_orm(primary_key, auto_increment = false)]
    pub task_id: Uuid,
    /// The worker that spent it.
    #[sea_orm(primary_key, auto_increment = false)]
    pub worker_id: Uuid,
    /// When the attempt ended.
    pub ended_at: DateTimeUtc,
    /// How it ended, as the task's `task_requeued` / `task_failed` event says.
    pub reason: String,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
