//! `validator_leases`: a validator's hold on one piece of the validators' work (a scoring, a
//! proof replay, a round's merge). Written by `crate::domain::flow::validator_leases`.

use sea_orm::entity::prelude::*;

/// A row of `validator_leases`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "validator_leases")]
pub struct Model {
    /// What is leased: `shardwork_core::protocol::node::ValidatorWork::key`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub work_key: String,
    /// The job the work belongs to.
    pub job_id: Uuid,
    /// The holding validator's address.
    pub holder: String,
    /// When the holder took the work.
    pub leased_at: DateTimeUtc,
    /// Until when it holds it without another heartbeat.
    pub expires_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
