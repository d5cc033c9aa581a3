//! What workers and the validator exchange with the API's node endpoints (`/v1/tasks/…`,
//! `/v1/validator/…`): one definition for the server that answers and the client that asks.
//! The API checks each request's values with its own rules (it answers problem+json).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{AggregateDetails, ContentId, HeldOutMetric, TaskMessage, VerdictReport};

/// Progress a worker reports with each heartbeat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// Optimizer steps done.
    pub step: u64,
    /// Optimizer steps in the whole run.
    pub total_steps: u64,
    /// The latest step's training loss; absent before the first step.
    pub loss: Option<f64>,
    /// Training throughput so far, in tokens per second; absent until it is known.
    pub tokens_per_second: Option<f64>,
}

/// A granted lease: the token proves the holder in `extend` and `submit`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lease {
    /// The task leased.
    pub task_id: Uuid,
    /// Proves the holder: sent with every extension and with the submission.
    pub lease_token: Uuid,
    /// When the lease lapses unless the worker extends it.
    pub expires_at: DateTime<Utc>,
    /// 1 for the first lease of the task.
    pub attempt: i32,
    /// What to train: the same message the queue carried, rebuilt from the database so a
    /// forged queue message cannot point a worker at other inputs.
    pub task: TaskMessage,
    /// The keys this lease gives: adapters are sealed on the content store (`store::keys`).
    pub keys: LeaseKeys,
}

/// The keys a lease gives its holder, as 64 hex digits each.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseKeys {
    /// Seals what the holder hands in for this task (its adapter and metrics); only the
    /// validator can open it besides.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub submission: String,
    /// Opens the round's starting adapter (the previous round's merge, or in round 1 the
    /// adapter the job continues from); absent when the round starts from the bare model.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub start: Option<String>,
    /// Opens the task's `reference_adapter_cid` (a preference job's reference policy, the
    /// adapter the job continues from); absent when the task names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub reference: Option<String>,
}

/// A submission waiting for its verdict, with everything the validator needs to fetch.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingValidation {
    /// The submission to judge.
    pub submission_id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// Its task.
    pub task_id: Uuid,
    /// The task's round, counted from 1.
    pub round: i32,
    /// The index of the task's shard.
    pub shard_index: i32,
    /// The address of the worker who trained the adapter.
    pub worker: String,
    /// The adapter's bundle.
    pub adapter_cid: String,
    /// The worker's training metrics (metrics.json).
    pub metrics_cid: String,
    /// Training records the worker says the adapter saw.
    pub samples: i64,
    /// When the worker handed it in.
    pub submitted_at: DateTime<Utc>,
    /// The job spec document (job.json).
    pub job_spec_cid: Option<String>,
    /// The job's shard manifest.
    pub manifest_cid: Option<String>,
    /// Sealed; open it with `GET /v1/jobs/{id}/held-out-key`.
    pub held_out_cid: Option<String>,
    /// The adapter this round started from (none in a round 1 that starts from the bare
    /// base model).
    pub previous_adapter_cid: Option<String>,
    /// The submissions handed in for the same round of the job before this one and not
    /// rejected, oldest first: the validator rejects a copy of any of them (the later of two
    /// near-copies loses).
    #[serde(default)]
    pub earlier_submissions: Vec<EarlierSubmission>,
}

/// A submission of the same round handed in before the one being judged.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierSubmission {
    /// The earlier submission.
    pub submission_id: Uuid,
    /// Its task (with the worker, what its adapter is sealed to).
    pub task_id: Uuid,
    /// The address of the worker who handed it in.
    pub worker: String,
    /// Its adapter's bundle.
    pub adapter_cid: String,
}

/// A verdict as the validator sends it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// Whether the adapter is accepted.
    pub accepted: bool,
    /// 0 ..= 1; ignored (stored as 0) for a rejection.
    pub quality: f64,
    /// Why it was rejected; required for a rejection.
    #[serde(default)]
    pub reason: Option<String>,
    /// The measurements behind the verdict.
    #[serde(default)]
    pub report: VerdictReport,
    /// Whether the submission's proof of training is to be checked (it was scored, so its run
    /// has an end to replay to), whatever the verdict: a forgery that also fails a rule must
    /// still forfeit the job. The proof comes later, in a [`ProofCheck`]; the payout waits.
    #[serde(default)]
    pub proof_due: bool,
}

/// The validator's check of a submission's proof of training, sent after its verdict (the
/// round does not wait for it; the job's payout does).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofCheck {
    /// Whether every replayed stretch ended where the submission said. `false` forfeits the
    /// worker's whole job, rounds it did honestly included (docs/decisions/0033): one unchecked
    /// corner cut would otherwise cost a cheat only that task's pay, and only when drawn.
    pub passed: bool,
    /// Why the proof failed; required when it did.
    #[serde(default)]
    pub reason: Option<String>,
    /// The stretches replayed, in the order they were.
    #[serde(default)]
    pub stretches: Vec<StretchReplay>,
}

/// One replayed stretch of a run and how its end compared with the claimed one.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StretchReplay {
    /// Which stretch of the run, from 0.
    pub stretch: u32,
    /// Its first and last optimiser step.
    pub steps: [u64; 2],
    /// Cosine between the claimed and the replayed update; null when not finite.
    pub cosine: Option<f64>,
    /// Norm of the claimed update over the replayed one's; null when not finite.
    pub norm_ratio: Option<f64>,
    /// The largest relative gap between claimed and replayed losses; null when not finite.
    pub loss_gap: Option<f64>,
    /// How long the replay took, in seconds.
    pub seconds: f64,
}

/// Rounds whose adapters are all accepted and wait for the validator's merge.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadyRound {
    /// The round's job.
    pub job_id: Uuid,
    /// The round, counted from 1.
    pub round: i32,
    /// The adapter the round started from (none in round 1).
    pub base_adapter_cid: Option<String>,
    /// Sealed; open it with `GET /v1/jobs/{id}/held-out-key`.
    pub held_out_cid: Option<String>,
    /// The job spec document (job.json).
    pub job_spec_cid: Option<String>,
    /// Whether this is the job's last round, whose merge is the job's result.
    pub last_round: bool,
    /// The accepted adapters to merge, with their sample counts and quality.
    pub adapters: Vec<AcceptedAdapter>,
}

/// One accepted adapter of a ready round, with what the merge weighs it by.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptedAdapter {
    /// The submission that handed it in.
    pub submission_id: Uuid,
    /// Its task (with the worker, what its adapter is sealed to).
    pub task_id: Uuid,
    /// The index of the shard it was trained on.
    pub shard_index: i32,
    /// The address of the worker who trained it.
    pub worker: String,
    /// The adapter's bundle.
    pub adapter_cid: String,
    /// Training records it saw.
    pub samples: i64,
    /// The validator's quality score, 0 ..= 1.
    pub quality: f64,
}

/// The validator's merge of a round.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aggregate {
    /// The merged adapter (PEFT bundle) in the content store.
    pub adapter_cid: ContentId,
    /// Held-out metric of the merged adapter (same metric as the verdicts: accuracy for
    /// classification, loss for language modelling).
    pub metric: f64,
    /// The same metric for the base model (the round's starting adapter's is in `details`).
    pub base_metric: f64,
    /// The metric, the same as the verdicts'.
    pub metric_name: HeldOutMetric,
    /// What else the validator measured of the merge.
    #[serde(default)]
    pub details: AggregateDetails,
}

/// One piece of the validators' work, leased to one validator at a time
/// (`POST /v1/validator/leases`): several validator processes share a deployment without
/// doing anything twice.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ValidatorWork {
    /// Scoring a submission and giving its verdict.
    Verdict {
        /// The submission to judge.
        submission_id: Uuid,
    },
    /// Replaying a stretch of a submission's run and recording its proof check.
    Proof {
        /// The submission whose proof of training is due.
        submission_id: Uuid,
    },
    /// Merging a round whose adapters are all accepted.
    Merge {
        /// The round's job.
        job_id: Uuid,
        /// The round, counted from 1.
        round: i32,
    },
}

impl ValidatorWork {
    /// The work's one name, the key its lease is stored under.
    pub fn key(&self) -> String {
        match self {
            ValidatorWork::Verdict { submission_id } => format!("verdict:{submission_id}"),
            ValidatorWork::Proof { submission_id } => format!("proof:{submission_id}"),
            ValidatorWork::Merge { job_id, round } => format!("merge:{job_id}:{round}"),
        }
    }
}

impl std::fmt::Display for ValidatorWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValidatorWork::Verdict { submission_id } => {
                write!(f, "the verdict on submission {submission_id}")
            }
            ValidatorWork::Proof { submission_id } => {
                write!(f, "the proof of training of submission {submission_id}")
            }
            ValidatorWork::Merge { job_id, round } => {
                write!(f, "the merge of round {round} of job {job_id}")
            }
        }
    }
}

/// A validator's lease on one piece of work: taken, or renewed by asking again (the heartbeat)
/// before `expires_at`. Work whose lease lapses goes to the next validator that asks.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidatorLease {
    /// The work leased.
    pub work: ValidatorWork,
    /// The validator holding it (its address).
    pub holder: String,
    /// When it took the work.
    pub leased_at: DateTime<Utc>,
    /// When the lease lapses unless the holder asks again.
    pub expires_at: DateTime<Utc>,
}
