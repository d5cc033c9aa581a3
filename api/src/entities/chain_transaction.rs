//! `chain_transactions`: every transaction the API sent or observed for a job.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "chain_transactions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub job_id: Option<Uuid>,
    pub kind: String,
    pub status: String,
    pub tx_hash: Option<String>,
    pub from_address: Option<String>,
    pub nonce: Option<i64>,
    pub block_number: Option<i64>,
    pub error: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
