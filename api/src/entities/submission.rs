//! `submissions`: what a worker handed in for a task, and the validator's verdict on it.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::VerdictStatus;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "submissions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub task_id: Uuid,
    pub worker_id: Uuid,
    pub adapter_cid: String,
    pub metrics_cid: String,
    pub sample_count: i64,
    pub verdict: VerdictStatus,
    pub quality: Option<f64>,
    pub reject_reason: Option<String>,
    pub created_at: DateTimeUtc,
    pub validated_at: Option<DateTimeUtc>,
    pub report: Option<Json>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
