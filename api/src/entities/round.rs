//! `rounds`: one per federated round of a job; `status` is owned by `crate::domain::flow::rounds`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::RoundStatus;

/// A row of `rounds`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "rounds")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The job the round belongs to.
    pub job_id: Uuid,
    /// The round's number, from 1.
    pub number: i32,
    /// Where the round stands: training, awaiting the merge, or completed.
    pub status: RoundStatus,
    /// The adapter the round trains from: the previous round's merge (none in round 1).
    pub base_adapter_cid: Option<String>,
    /// The merged adapter, once the round is completed.
    pub aggregate_adapter_cid: Option<String>,
    /// The validator's merge report (held-out metric, the starting point's, details), once merged.
    pub aggregate: Option<Json>,
    /// When the round was opened.
    pub created_at: DateTimeUtc,
    /// When the merge was recorded.
    pub completed_at: Option<DateTimeUtc>,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
