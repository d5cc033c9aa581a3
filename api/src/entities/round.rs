//! `rounds`: one per federated round of a job; `status` is owned by `crate::domain::flow::rounds`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::RoundStatus;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "rounds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub job_id: Uuid,
    pub number: i32,
    pub status: RoundStatus,
    pub base_adapter_cid: Option<String>,
    pub aggregate_adapter_cid: Option<String>,
    pub aggregate: Option<Json>,
    pub created_at: DateTimeUtc,
    pub completed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
