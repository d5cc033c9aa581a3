//! `submissions`: what a worker handed in for a task, and the validator's verdict on it.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::{ProofStatus, VerdictStatus};

/// A row of `submissions`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "submissions")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The task the adapter was trained for.
    pub task_id: Uuid,
    /// The worker that handed it in.
    pub worker_id: Uuid,
    /// The trained adapter's bundle in the content store.
    pub adapter_cid: String,
    /// The worker's training metrics document (`metrics.json`).
    pub metrics_cid: String,
    /// Training records the adapter saw; weights it in the merge.
    pub sample_count: i64,
    /// Pending until the validator rules; then accepted or rejected.
    pub verdict: VerdictStatus,
    /// The validator's score, 0..=1 (0 for a rejection); `None` while pending.
    pub quality: Option<f64>,
    /// Why the validator rejected the adapter.
    pub reject_reason: Option<String>,
    /// When the worker handed it in.
    pub created_at: DateTimeUtc,
    /// When the validator ruled.
    pub validated_at: Option<DateTimeUtc>,
    /// The validator's measurements behind the verdict (metric, base metric, norms…).
    pub report: Option<Json>,
    /// The validator that gave the verdict.
    pub validated_by: Option<String>,
    /// Its proof of training: due once a scored verdict is in, decided by a later replay.
    pub proof_status: ProofStatus,
    /// The replayed stretches and, for a failure, why.
    pub proof_report: Option<Json>,
    /// When the proof was decided.
    pub proof_checked_at: Option<DateTimeUtc>,
    /// The validator that decided it.
    pub proof_checked_by: Option<String>,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
