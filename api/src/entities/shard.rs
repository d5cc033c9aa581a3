//! `shards`: the training shards a job's dataset was cut into.

use sea_orm::entity::prelude::*;

/// A row of `shards`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shards")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The job whose dataset the shard was cut from.
    pub job_id: Uuid,
    /// The shard's position in the job's manifest, from 0.
    pub index: i32,
    /// The shard's JSONL in the content store.
    pub cid: String,
    /// How many training records the shard holds.
    pub sample_count: i64,
    /// The shard's size in bytes.
    pub size_bytes: i64,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
