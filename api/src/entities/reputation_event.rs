//! `reputation_events`: every change to a worker's standing, with the transaction behind it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reputation_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub worker_id: Uuid,
    pub job_id: Option<Uuid>,
    pub delta: i64,
    pub reason: String,
    pub tx_hash: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
