//! `job_events`: the per-job event log, which doubles as the transactional outbox.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: Uuid,
    pub kind: String,
    pub payload: Json,
    pub created_at: DateTimeUtc,
    pub needs_dispatch: bool,
    pub dispatched_at: Option<DateTimeUtc>,
    pub dispatch_attempts: i32,
    pub last_dispatch_error: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
