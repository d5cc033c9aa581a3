//! `/v1/jobs`: quote, create (with the dataset pipeline), list, get, cancel, the event feed,
//! and the held-out key (validator only).

pub mod cancel;
pub mod create;
pub mod events;
pub mod heldout;
pub mod quote;
pub mod read;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, EntityTrait};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::entities::job;
use crate::problem::ApiError;

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobView {
    pub id: Uuid,
    pub requester: String,
    pub kind: String,
    pub status: String,
    pub spec: serde_json::Value,
    pub spec_cid: Option<String>,
    pub dataset_cid: Option<String>,
    pub manifest_cid: Option<String>,
    /// The sealed held-out set; readable only with the key the validator can fetch.
    pub held_out_cid: Option<String>,
    pub result_adapter_cid: Option<String>,
    pub stake_wei: String,
    pub shards: i32,
    pub rounds: i32,
    pub current_round: i32,
    pub deadline: DateTime<Utc>,
    /// Funded by the server's development key, not by the requester's wallet.
    pub dev_funded: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<job::Model> for JobView {
    fn from(m: job::Model) -> Self {
        JobView {
            id: m.id,
            requester: m.requester,
            kind: m.kind,
            status: m.status,
            spec: m.spec,
            spec_cid: m.spec_cid,
            dataset_cid: m.dataset_cid,
            manifest_cid: m.manifest_cid,
            held_out_cid: m.heldout_cid,
            result_adapter_cid: m.result_adapter_cid,
            stake_wei: m.stake_wei,
            shards: m.shards,
            rounds: m.rounds,
            current_round: m.current_round,
            deadline: m.deadline,
            dev_funded: m.dev_funded,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// The job `id`, or 404.
pub async fn find_job<C: ConnectionTrait>(db: &C, id: Uuid) -> Result<job::Model, ApiError> {
    job::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
}
