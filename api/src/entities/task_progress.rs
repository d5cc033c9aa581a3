//! `task_progress`: the training progress of every heartbeat, one row per task, attempt and
//! step; written by `crate::domain::flow::progress`, read by `GET /v1/jobs/{id}/progress`.

use sea_orm::entity::prelude::*;

/// A row of `task_progress`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "task_progress")]
pub struct Model {
    /// The task trained.
    #[sea_orm(primary_key, auto_increment = false)]
    pub task_id: Uuid,
    /// The task's attempt (1 for its first lease) the heartbeat came under.
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    /// Optimizer steps done.
    #[sea_orm(primary_key, auto_increment = false)]
    pub step: i64,
    /// Optimizer steps in the whole run.
    pub total_steps: i64,
    /// The step's training loss, when the worker reported one.
    pub loss: Option<f64>,
    /// Training throughput so far, when the worker reported it.
    pub tokens_per_second: Option<f64>,
    /// When the API received the heartbeat.
    pub recorded_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
