//! `tasks`: one per shard per round, with its lease; `status` is owned by `crate::domain::flow::tasks`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::TaskStatus;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tasks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub job_id: Uuid,
    pub shard_id: Uuid,
    pub round: i32,
    pub status: TaskStatus,
    pub lease_holder: Option<Uuid>,
    pub lease_token: Option<Uuid>,
    pub lease_expires_at: Option<DateTimeUtc>,
    pub attempts: i32,
    pub max_attempts: i32,
    pub progress: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
