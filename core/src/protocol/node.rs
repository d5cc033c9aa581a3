//! What workers and the validator exchange with the API's node endpoints (`/v1/tasks/…`,
//! `/v1/validator/…`): one definition for the server that answers and the client that asks.
//! The API checks each request's values with its own rules (it answers problem+json).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{ContentId, TaskMessage};

/// Progress a worker reports with each heartbeat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    pub step: u64,
    pub total_steps: u64,
    pub loss: Option<f64>,
    pub tokens_per_second: Option<f64>,
}

/// A granted lease: the token proves the holder in `extend` and `submit`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lease {
    pub task_id: Uuid,
    pub lease_token: Uuid,
    pub expires_at: DateTime<Utc>,
    pub attempt: i32,
    /// What to train: the same message the queue carried, rebuilt from the database so a
    /// forged queue message cannot point a worker at other inputs.
    pub task: TaskMessage,
}

/// A submission waiting for its verdict, with everything the validator needs to fetch.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingValidation {
    pub submission_id: Uuid,
    pub job_id: Uuid,
    pub task_id: Uuid,
    pub round: i32,
    pub shard_index: i32,
    pub worker: String,
    pub adapter_cid: String,
    pub metrics_cid: String,
    pub samples: i64,
    pub submitted_at: DateTime<Utc>,
    pub job_spec_cid: Option<String>,
    pub manifest_cid: Option<String>,
    /// Sealed; open it with `GET /v1/jobs/{id}/held-out-key`.
    pub held_out_cid: Option<String>,
    /// The adapter this round started from (none in round 1).
    pub previous_adapter_cid: Option<String>,
}

/// A verdict as the validator sends it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub accepted: bool,
    /// 0 ..= 1; ignored (stored as 0) for a rejection.
    pub quality: f64,
    /// Why it was rejected; required for a rejection.
    #[serde(default)]
    pub reason: Option<String>,
    /// The measurements behind the verdict (metric, base metric, norms…).
    #[serde(default)]
    pub report: serde_json::Value,
}

/// Rounds whose adapters are all accepted and wait for the validator's merge.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadyRound {
    pub job_id: Uuid,
    pub round: i32,
    pub base_adapter_cid: Option<String>,
    pub held_out_cid: Option<String>,
    pub job_spec_cid: Option<String>,
    pub last_round: bool,
    /// The accepted adapters to merge, with their sample counts and quality.
    pub adapters: Vec<AcceptedAdapter>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptedAdapter {
    pub submission_id: Uuid,
    pub shard_index: i32,
    pub worker: String,
    pub adapter_cid: String,
    pub samples: i64,
    pub quality: f64,
}

/// The validator's merge of a round.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aggregate {
    /// The merged adapter (PEFT bundle) in the content store.
    pub adapter_cid: ContentId,
    /// Held-out metric of the merged adapter and of the round's starting point (same metric
    /// as the verdicts: accuracy for classification, loss for language modelling).
    pub metric: f64,
    pub base_metric: f64,
    /// Name of the metric, e.g. `accuracy` or `loss`.
    pub metric_name: String,
    /// Anything else the validator measured (truncation error of the merge, weights…).
    #[serde(default)]
    pub details: serde_json::Value,
}
