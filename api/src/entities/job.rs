//! `jobs`: one row per posted job; `status` is owned by `crate::domain::lifecycle`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::{JobKind, JobStatus};

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub requester: String,
    pub kind: JobKind,
    pub status: JobStatus,
    pub spec: Json,
    pub spec_cid: Option<String>,
    pub dataset_cid: Option<String>,
    pub manifest_cid: Option<String>,
    pub heldout_cid: Option<String>,
    pub result_adapter_cid: Option<String>,
    pub escrow_job_id: Option<String>,
    pub escrow_address: Option<String>,
    pub stake_wei: String,
    pub shards: i32,
    pub rounds: i32,
    pub current_round: i32,
    pub deadline: DateTimeUtc,
    pub dev_funded: bool,
    pub version: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
