//! A job's events: the one definition of every kind of event in a job's feed and its payload.
//!
//! The API writes them (one row per event, beside the state change that caused it, in one
//! transaction), its outbox dispatches the ones that cause effects, and they are served by
//! `GET /v1/jobs/{id}/events` (and its stream) as `{"id", "kind", "payload", "created_at"}`.
//! The CLI reads them as these types; the portal reads the same shapes from the OpenAPI
//! description, which these types generate.
//!
//! On the wire an event is adjacently tagged: `{"kind": "verdict", "payload": {...}}`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::protocol::node::StretchReplay;
use crate::protocol::{AggregateDetails, HeldOutMetric, JobStatus, ProofStatus, VerdictReport};

/// Something that happened to a job.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
pub enum JobEvent {
    /// The job was posted: its dataset split and stored, waiting for funding.
    Created(Created),
    /// The job was withdrawn before it started: by its requester, on chain, or because its
    /// deadline passed unfunded.
    Cancelled(Cancelled),
    /// The escrow was funded with the job's terms; the job is open.
    Funded(Funded),
    /// A `createJob` named this job but could not fund it (wrong terms, or already funded).
    FundingIgnored(FundingIgnored),
    /// `markStarted` was mined: the requester can no longer cancel.
    Started(Started),
    /// A round's tasks were queued.
    RoundOpened(RoundOpened),
    /// A worker leased a task.
    TaskClaimed(TaskClaimed),
    /// A worker handed in an adapter.
    Submitted(Submitted),
    /// The validator judged a submission.
    Verdict(VerdictRecorded),
    /// A validator replayed a stretch of a scored submission's run: its proof of training
    /// passed, or failed and the worker forfeits the job.
    ProofChecked(ProofChecked),
    /// A worker that forfeited a bonded job by a failed proof had its bond slashed on chain
    /// to the requester (decisions/0044).
    BondSlashed(BondSlashed),
    /// A task went back to the queue (lease expired, or its adapter was rejected).
    TaskRequeued(TaskAttempt),
    /// A task used up its attempts.
    TaskFailed(TaskAttempt),
    /// Every shard of a round has an accepted adapter; the validator merges them.
    RoundReady(RoundReady),
    /// The validator merged a round.
    Aggregated(Aggregated),
    /// The last round was merged while proofs of training were still being checked: the
    /// payout is computed when the last of them is decided.
    AwaitingProofs(AwaitingProofs),
    /// The last round was merged: the payout is being sent on chain.
    Finalize(Finalize),
    /// One batch of the payout was mined (a payout too large for one transaction comes in
    /// several): who was paid what.
    Paid(Paid),
    /// The payout was mined; the job is complete.
    Completed(Completed),
    /// The deadline passed unfinished: the refund is being sent on chain.
    RefundDue(RefundDue),
    /// The job cannot finish (a task used up its attempts): the escrow is asked to end it and
    /// refund the requester now, not at the deadline.
    AbortDue(AbortDue),
    /// The refund was mined.
    Refunded(Refunded),
    /// A reorg deeper than the confirmation depth took away an escrow event the API had acted
    /// on: what the event did to the job was undone, and the new history is read in its place
    /// (the same transaction mined again is applied again).
    Reorganised(Reorganised),
}

/// The kind of a [`JobEvent`] without its payload: what the feed's `kind` column holds, for
/// queries over the feed. The one place each kind's text is written; `JobEvent`'s serde tags
/// are checked against it (`every_kind_is_its_serde_tag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// [`JobEvent::Created`].
    Created,
    /// [`JobEvent::Cancelled`].
    Cancelled,
    /// [`JobEvent::Funded`].
    Funded,
    /// [`JobEvent::FundingIgnored`].
    FundingIgnored,
    /// [`JobEvent::Started`].
    Started,
    /// [`JobEvent::RoundOpened`].
    RoundOpened,
    /// [`JobEvent::TaskClaimed`].
    TaskClaimed,
    /// [`JobEvent::Submitted`].
    Submitted,
    /// [`JobEvent::Verdict`].
    Verdict,
    /// [`JobEvent::ProofChecked`].
    ProofChecked,
    /// [`JobEvent::BondSlashed`].
    BondSlashed,
    /// [`JobEvent::TaskRequeued`].
    TaskRequeued,
    /// [`JobEvent::TaskFailed`].
    TaskFailed,
    /// [`JobEvent::RoundReady`].
    RoundReady,
    /// [`JobEvent::Aggregated`].
    Aggregated,
    /// [`JobEvent::AwaitingProofs`].
    AwaitingProofs,
    /// [`JobEvent::Finalize`].
    Finalize,
    /// [`JobEvent::Paid`].
    Paid,
    /// [`JobEvent::Completed`].
    Completed,
    /// [`JobEvent::RefundDue`].
    RefundDue,
    /// [`JobEvent::AbortDue`].
    AbortDue,
    /// [`JobEvent::Refunded`].
    Refunded,
    /// [`JobEvent::Reorganised`].
    Reorganised,
}

impl EventKind {
    /// Every kind, in the order `JobEvent` lists them.
    pub const ALL: [EventKind; 23] = [
        EventKind::Created,
        EventKind::Cancelled,
        EventKind::Funded,
        EventKind::FundingIgnored,
        EventKind::Started,
        EventKind::RoundOpened,
        EventKind::TaskClaimed,
        EventKind::Submitted,
        EventKind::Verdict,
        EventKind::ProofChecked,
        EventKind::BondSlashed,
        EventKind::TaskRequeued,
        EventKind::TaskFailed,
        EventKind::RoundReady,
        EventKind::Aggregated,
        EventKind::AwaitingProofs,
        EventKind::Finalize,
        EventKind::Paid,
        EventKind::Completed,
        EventKind::RefundDue,
        EventKind::AbortDue,
        EventKind::Refunded,
        EventKind::Reorganised,
    ];

    /// The text stored and sent (`round_opened`).
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Cancelled => "cancelled",
            EventKind::Funded => "funded",
            EventKind::FundingIgnored => "funding_ignored",
            EventKind::Started => "started",
            EventKind::RoundOpened => "round_opened",
            EventKind::TaskClaimed => "task_claimed",
            EventKind::Submitted => "submitted",
            EventKind::Verdict => "verdict",
            EventKind::ProofChecked => "proof_checked",
            EventKind::BondSlashed => "bond_slashed",
            EventKind::TaskRequeued => "task_requeued",
            EventKind::TaskFailed => "task_failed",
            EventKind::RoundReady => "round_ready",
            EventKind::Aggregated => "aggregated",
            EventKind::AwaitingProofs => "awaiting_proofs",
            EventKind::Finalize => "finalize",
            EventKind::Paid => "paid",
            EventKind::Completed => "completed",
            EventKind::RefundDue => "refund_due",
            EventKind::AbortDue => "abort_due",
            EventKind::Refunded => "refunded",
            EventKind::Reorganised => "reorganised",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JobEvent {
    /// The event's kind, as stored and sent (`round_opened`).
    pub fn kind(&self) -> &'static str {
        self.event_kind().as_str()
    }

    /// The event's kind as a value.
    pub fn event_kind(&self) -> EventKind {
        match self {
            JobEvent::Created(_) => EventKind::Created,
            JobEvent::Cancelled(_) => EventKind::Cancelled,
            JobEvent::Funded(_) => EventKind::Funded,
            JobEvent::FundingIgnored(_) => EventKind::FundingIgnored,
            JobEvent::Started(_) => EventKind::Started,
            JobEvent::RoundOpened(_) => EventKind::RoundOpened,
            JobEvent::TaskClaimed(_) => EventKind::TaskClaimed,
            JobEvent::Submitted(_) => EventKind::Submitted,
            JobEvent::Verdict(_) => EventKind::Verdict,
            JobEvent::ProofChecked(_) => EventKind::ProofChecked,
            JobEvent::BondSlashed(_) => EventKind::BondSlashed,
            JobEvent::TaskRequeued(_) => EventKind::TaskRequeued,
            JobEvent::TaskFailed(_) => EventKind::TaskFailed,
            JobEvent::RoundReady(_) => EventKind::RoundReady,
            JobEvent::Aggregated(_) => EventKind::Aggregated,
            JobEvent::AwaitingProofs(_) => EventKind::AwaitingProofs,
            JobEvent::Finalize(_) => EventKind::Finalize,
            JobEvent::Paid(_) => EventKind::Paid,
            JobEvent::Completed(_) => EventKind::Completed,
            JobEvent::RefundDue(_) => EventKind::RefundDue,
            JobEvent::AbortDue(_) => EventKind::AbortDue,
            JobEvent::Refunded(_) => EventKind::Refunded,
            JobEvent::Reorganised(_) => EventKind::Reorganised,
        }
    }

    /// The worker a task's event names (its claim, submission or verdict); `None` for the
    /// events of the job as a whole and for requeues and failures, which name no worker.
    pub fn worker(&self) -> Option<&str> {
        match self {
            JobEvent::TaskClaimed(e) => Some(&e.worker),
            JobEvent::Submitted(e) => Some(&e.worker),
            JobEvent::Verdict(e) => Some(&e.worker),
            JobEvent::ProofChecked(e) => Some(&e.worker),
            JobEvent::BondSlashed(e) => Some(&e.worker),
            _ => None,
        }
    }

    /// The task the event is about, if it is about one.
    pub fn task(&self) -> Option<Uuid> {
        match self {
            JobEvent::TaskClaimed(e) => Some(e.task_id),
            JobEvent::Submitted(e) => Some(e.task_id),
            JobEvent::Verdict(e) => Some(e.task_id),
            JobEvent::ProofChecked(e) => Some(e.task_id),
            JobEvent::TaskRequeued(e) | JobEvent::TaskFailed(e) => Some(e.task_id),
            _ => None,
        }
    }

    /// The event's payload alone, as stored beside its kind.
    pub fn payload(&self) -> serde_json::Value {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut tagged)) => {
                tagged.remove("payload").unwrap_or(serde_json::Value::Null)
            }
            // Every variant is a struct of plain fields, which always serialises to an object.
            _ => serde_json::Value::Null,
        }
    }

    /// The event stored as `kind` with `payload`.
    pub fn from_parts(kind: &str, payload: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "kind": kind, "payload": payload }))
    }
}

/// One event of a job's feed as the API serves it: `{"id", "kind", "payload", "created_at"}`.
///
/// Read back through its kind and payload ([`JobEvent::from_parts`]) rather than serde's
/// `flatten`, which buffers the input and, with serde_json's `arbitrary_precision` (on in this
/// workspace through alloy), turns every number into a map no `f64` field accepts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventView {
    /// Increasing per server; pass the last one seen as `after`.
    pub id: i64,
    /// What happened (`kind`) and its details (`payload`, whose fields depend on `kind`).
    #[serde(flatten)]
    pub event: JobEvent,
    /// When the API recorded it.
    pub created_at: DateTime<Utc>,
}

impl<'de> Deserialize<'de> for EventView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Stored {
            id: i64,
            kind: String,
            payload: serde_json::Value,
            created_at: DateTime<Utc>,
        }
        let stored = Stored::deserialize(deserializer)?;
        let event = JobEvent::from_parts(&stored.kind, stored.payload)
            .map_err(|e| serde::de::Error::custom(format!("{} event: {e}", stored.kind)))?;
        Ok(EventView {
            id: stored.id,
            event,
            created_at: stored.created_at,
        })
    }
}

/// A job status change: the payload of the event that made it carries both as `from`, `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusChange {
    /// The status the job left.
    pub from: JobStatus,
    /// The status the job entered.
    pub to: JobStatus,
}

/// Payload of `created`: where the job's documents are and how its dataset was cut.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// Always `awaiting_funding`.
    pub to: JobStatus,
    /// The shard manifest's CID.
    pub manifest_cid: String,
    /// The job spec document's CID (job.json).
    pub spec_cid: String,
    /// The dataset's CID, as uploaded.
    pub dataset_cid: String,
    /// Records held out for the validator.
    pub held_out_records: u64,
    /// Records in each shard, by shard index.
    pub shard_records: Vec<u64>,
}

/// Payload of `cancelled`: who or what withdrew the job.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// `awaiting_funding`, or `open` when the requester cancelled on chain.
    pub from: JobStatus,
    /// Always `cancelled`.
    pub to: JobStatus,
    /// The requester who cancelled through the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why the platform cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The `cancel` transaction, when the requester cancelled on chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<String>,
    /// The stake returned on chain, in its smallest unit (decimal; wei for ETH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stake_wei: Option<String>,
}

/// Payload of `funded`: the escrow holding the job's stake.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Funded {
    /// Always `awaiting_funding`.
    pub from: JobStatus,
    /// Always `open`.
    pub to: JobStatus,
    /// The escrow's id of the job (decimal `uint256`).
    pub escrow_job_id: String,
    /// The `createJob` transaction (0x-hex).
    pub tx_hash: String,
    /// The escrow contract's address.
    pub escrow: String,
    /// Funded by the development funder on the requester's behalf.
    pub dev_funded: bool,
}

/// Payload of `funding_ignored`: an escrow job created for this job that does not fund it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FundingIgnored {
    /// The escrow's id of the job it created (decimal `uint256`).
    pub escrow_job_id: String,
    /// The `createJob` transaction (0x-hex).
    pub tx_hash: String,
    /// Why, and how the funder gets the stake back.
    pub reason: String,
}

/// Payload of `started`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The `markStarted` transaction (0x-hex).
    pub tx_hash: String,
}

/// Payload of `round_opened`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundOpened {
    /// The round, counted from 1.
    pub round: u32,
    /// Tasks queued: one per shard.
    pub tasks: u32,
    /// The adapter the round trains from: the previous round's merge; null in round 1.
    pub base_adapter_cid: Option<String>,
}

/// Payload of `task_claimed`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskClaimed {
    /// The task leased.
    pub task_id: Uuid,
    /// The task's round.
    pub round: u32,
    /// The index of the task's shard.
    pub shard: u32,
    /// The worker's address.
    pub worker: String,
    /// 1 for the first lease of the task.
    pub attempt: u32,
    /// When the lease lapses unless the worker extends it.
    pub lease_expires_at: DateTime<Utc>,
}

/// Payload of `submitted`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The submission, which its verdict names.
    pub submission_id: Uuid,
    /// The task it was made for.
    pub task_id: Uuid,
    /// The task's round.
    pub round: u32,
    /// The index of the task's shard.
    pub shard: u32,
    /// The worker's address.
    pub worker: String,
    /// Records the adapter was trained on.
    pub samples: u64,
    /// The adapter's bundle.
    pub adapter_cid: String,
}

/// Payload of `verdict`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictRecorded {
    /// The submission judged.
    pub submission_id: Uuid,
    /// Its task.
    pub task_id: Uuid,
    /// The task's round.
    pub round: u32,
    /// The address of the worker who trained the adapter.
    pub worker: String,
    /// Whether the adapter was accepted.
    pub accepted: bool,
    /// 0 ..= 1; 0 for a rejection.
    pub quality: f64,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// The measurements behind the verdict.
    #[serde(default)]
    pub report: VerdictReport,
    /// The validator that judged it; absent in events recorded before validators were named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
    /// Its proof of training: `pending` when a stretch is still to be replayed (the payout
    /// waits), `not_due` when the adapter was not scored.
    #[serde(default = "proof_not_due")]
    pub proof: ProofStatus,
}

fn proof_not_due() -> ProofStatus {
    ProofStatus::NotDue
}

/// Payload of `proof_checked`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProofChecked {
    /// The submission whose run was replayed.
    pub submission_id: Uuid,
    /// Its task.
    pub task_id: Uuid,
    /// The task's round.
    pub round: u32,
    /// The address of the worker who trained the adapter.
    pub worker: String,
    /// The address of the validator that replayed it.
    pub validator: String,
    /// `passed` or `failed` (the worker forfeits the job).
    pub proof: ProofStatus,
    /// Why it failed.
    pub reason: Option<String>,
    /// The stretches replayed.
    pub stretches: Vec<StretchReplay>,
    /// The job's proofs still to be checked after this one.
    pub pending: u32,
}

/// Payload of `bond_slashed`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BondSlashed {
    /// The worker whose bond was slashed.
    pub worker: String,
    /// What the escrow took, in the job's token's smallest unit (decimal): the job's
    /// `validation.bond_multiple` × one task's pay, or less when the bond held less; 0 when it
    /// held nothing or was already slashed for this job.
    pub amount_wei: String,
    /// The `slashBond` transaction.
    pub tx_hash: String,
}

/// Payload of `awaiting_proofs`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitingProofs {
    /// Proofs of training still to be checked before the payout is computed.
    pub pending: u32,
}

/// A task that went back to the queue or failed, with its attempts so far.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAttempt {
    /// The task.
    pub task_id: Uuid,
    /// The task's round.
    pub round: u32,
    /// Leases taken so far.
    pub attempts: u32,
    /// Leases allowed before the task fails.
    pub max_attempts: u32,
    /// Why the last attempt ended (the lease expired, or the adapter was rejected).
    pub reason: String,
}

/// Payload of `round_ready`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReady {
    /// The round, counted from 1.
    pub round: u32,
    /// Accepted adapters, one per shard.
    pub accepted: u32,
}

/// Payload of `aggregated`: the round's merged adapter and how it scores.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregated {
    /// The round, counted from 1.
    pub round: u32,
    /// The merged adapter.
    pub adapter_cid: String,
    /// The merged adapter's held-out metric.
    pub metric: f64,
    /// The base model's held-out metric.
    pub base_metric: f64,
    /// The held-out metric, the same as the verdicts'.
    pub metric_name: HeldOutMetric,
    /// What else the validator measured of the merge.
    #[serde(default)]
    pub details: AggregateDetails,
}

/// One contributor of a job, as the payout weighs it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contribution {
    /// The contributor's address.
    pub address: String,
    /// The score sent on chain, 0 ..= 10,000.
    pub quality_bps: u16,
    /// Samples trained on in accepted adapters.
    pub samples: u64,
    /// Its adapters the validator accepted.
    pub accepted: u32,
    /// Its adapters the validator rejected.
    pub rejected: u32,
    /// Whether a replay showed one of its adapters was not trained as its proof of training
    /// claims: it then scores 0 for the whole job, adapters accepted in other rounds included.
    #[serde(default)]
    pub forfeited: bool,
}

/// Payload of `finalize`: what the payout sends on chain.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finalize {
    /// The final adapter: the merge of the round with the best held-out metric.
    pub adapter_cid: String,
    /// That round (absent in events recorded before the best round was chosen, which took the
    /// last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The job's shard manifest.
    pub manifest_cid: Option<String>,
    /// Every contributor with its score, sorted by address (the order the escrow wants).
    pub contributions: Vec<Contribution>,
}

/// What one contributor was paid on chain.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payout {
    /// The contributor's address.
    pub address: String,
    /// In the stake's smallest unit, decimal: wei for ETH, token units for an ERC-20 stake.
    pub amount_wei: String,
    /// The contributor's reputation after this job, in basis points.
    pub reputation: u32,
}

/// Payload of `paid`: one payout transaction's contributors.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paid {
    /// The transaction (0x-hex): `completeFederatedJob`, `completeJob` or a `payFederatedBatch`.
    pub tx_hash: String,
    /// What each contributor of this batch was paid.
    pub payouts: Vec<Payout>,
}

/// Payload of `completed`: the job's result and what each contributor was paid.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completed {
    /// Always `open`.
    pub from: JobStatus,
    /// Always `completed`.
    pub to: JobStatus,
    /// The final adapter, as recorded on chain.
    pub adapter_cid: String,
    /// The transaction that completed the payout (0x-hex): the only one, or its last batch.
    pub tx_hash: String,
    /// What each contributor was paid, over every batch.
    pub payouts: Vec<Payout>,
    /// The platform's fee, in the stake's smallest unit (decimal).
    pub fee_wei: String,
    /// Rounding dust returned to the requester, in the stake's smallest unit (decimal).
    pub dust_wei: String,
}

/// Payload of `refund_due`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundDue {
    /// The deadline that passed.
    pub deadline: DateTime<Utc>,
    /// The round the job had reached.
    pub round: u32,
}

/// Payload of `abort_due`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortDue {
    /// Why the job cannot finish; recorded on chain in `JobAborted`.
    pub reason: String,
    /// The round the job had reached.
    pub round: u32,
}

/// Payload of `refunded`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refunded {
    /// `awaiting_funding` or `open`.
    pub from: JobStatus,
    /// Always `refunded`.
    pub to: JobStatus,
    /// The `refund` transaction (0x-hex).
    pub tx_hash: String,
    /// The stake returned, in its smallest unit (decimal; wei for ETH).
    pub stake_wei: String,
    /// Why: the deadline passed, or why the validator ended the job early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Payload of `reorganised`: an escrow event the API acted on is no longer on chain.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reorganised {
    /// The escrow event taken away (`JobCreated`, `ContributorsPaid`, …).
    pub event: String,
    /// The block it was read in, before the reorg.
    pub block: u64,
    /// Its transaction (0x-hex).
    pub tx_hash: String,
    /// What was undone, as a sentence.
    pub undone: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_is_stored_as_its_kind_and_payload_and_read_back() {
        let event = JobEvent::RoundOpened(RoundOpened {
            round: 2,
            tasks: 3,
            base_adapter_cid: Some("bafy".into()),
        });
        assert_eq!(event.kind(), "round_opened");
        assert_eq!(
            event.payload(),
            json!({"round": 2, "tasks": 3, "base_adapter_cid": "bafy"})
        );
        assert_eq!(
            JobEvent::from_parts(event.kind(), event.payload()).unwrap(),
            event
        );
        assert_eq!(
            serde_json::to_value(&event).unwrap()["kind"],
            json!("round_opened")
        );
    }

    #[test]
    fn transitions_carry_from_and_to_beside_their_fields() {
        let event = JobEvent::Cancelled(Cancelled {
            from: JobStatus::AwaitingFunding,
            to: JobStatus::Cancelled,
            by: Some("0xabc".into()),
            reason: None,
            tx_hash: None,
            stake_wei: None,
        });
        assert_eq!(
            event.payload(),
            json!({"from": "awaiting_funding", "to": "cancelled", "by": "0xabc"})
        );
        assert_eq!(
            JobEvent::from_parts("cancelled", event.payload()).unwrap(),
            event
        );
    }

    #[test]
    fn a_served_event_with_numbers_everywhere_reads_back() {
        let view = EventView {
            id: 7,
            event: JobEvent::Completed(Completed {
                from: JobStatus::Open,
                to: JobStatus::Completed,
                adapter_cid: "bafy".into(),
                tx_hash: "0x1".into(),
                payouts: vec![Payout {
                    address: "0xa".into(),
                    amount_wei: "10".into(),
                    reputation: 1069,
                }],
                fee_wei: "1".into(),
                dust_wei: "0".into(),
            }),
            created_at: DateTime::<Utc>::from_timestamp(1, 0).unwrap(),
        };
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(serde_json::from_str::<EventView>(&text).unwrap(), view);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["payload"]["payouts"][0]["reputation"], json!(1069));
        assert_eq!(value["payload"]["from"], json!("open"));
        let aggregated = EventView {
            id: 8,
            event: JobEvent::Aggregated(Aggregated {
                round: 2,
                adapter_cid: "bafy".into(),
                metric: 0.75,
                base_metric: 0.5,
                metric_name: HeldOutMetric::Accuracy,
                details: AggregateDetails {
                    weights: vec![0.5, 0.5],
                    ..AggregateDetails::default()
                },
            }),
            created_at: DateTime::<Utc>::from_timestamp(2, 0).unwrap(),
        };
        let text = serde_json::to_string(&aggregated).unwrap();
        assert_eq!(
            serde_json::from_str::<EventView>(&text).unwrap(),
            aggregated
        );
    }

    /// A verdict stored before proofs were checked apart reads back with no validator and no
    /// proof due, so old feeds still parse.
    #[test]
    fn a_verdict_recorded_before_proofs_moved_reads_back() {
        let old = json!({"submission_id": Uuid::nil(), "task_id": Uuid::nil(), "round": 1,
            "worker": "0x1", "accepted": true, "quality": 0.5, "reason": null, "report": {}});
        let Ok(JobEvent::Verdict(v)) = JobEvent::from_parts("verdict", old) else {
            panic!("an old verdict reads back");
        };
        assert_eq!((v.validator, v.proof), (None, ProofStatus::NotDue));
    }

    #[test]
    fn every_kind_names_the_variant_serde_writes() {
        let verdict = JobEvent::Verdict(VerdictRecorded {
            submission_id: Uuid::nil(),
            task_id: Uuid::nil(),
            round: 1,
            worker: "0x1".into(),
            accepted: false,
            quality: 0.0,
            reason: Some("no gain".into()),
            report: VerdictReport {
                metric: Some(0.5),
                ..VerdictReport::default()
            },
            validator: None,
            proof: ProofStatus::NotDue,
        });
        let refund = JobEvent::RefundDue(RefundDue {
            deadline: DateTime::<Utc>::from_timestamp(0, 0).unwrap(),
            round: 1,
        });
        let abort = JobEvent::AbortDue(AbortDue {
            reason: "task 1 used up its attempts".into(),
            round: 1,
        });
        let paid = JobEvent::Paid(Paid {
            tx_hash: "0x1".into(),
            payouts: Vec::new(),
        });
        for event in [verdict, refund, abort, paid] {
            assert_eq!(
                serde_json::to_value(&event).unwrap()["kind"],
                json!(event.kind())
            );
        }
        assert!(JobEvent::from_parts("no_such_kind", json!({})).is_err());
    }

    /// Each kind's text is the tag serde reads: a payload stored under `EventKind::X.as_str()`
    /// reads back as `JobEvent::X` (checked through the error serde gives a wrong payload,
    /// which names the variant it tried, and that an unknown tag is refused outright).
    #[test]
    fn every_kind_is_its_serde_tag() {
        for kind in EventKind::ALL {
            let error = JobEvent::from_parts(kind.as_str(), json!({"no": "fields"}))
                .expect_err("an empty payload fits no kind")
                .to_string();
            assert!(
                !error.contains("unknown variant"),
                "{kind}: serde knows no such tag ({error})"
            );
        }
        let paid = JobEvent::Paid(Paid {
            tx_hash: "0x1".into(),
            payouts: Vec::new(),
        });
        assert_eq!(paid.event_kind(), EventKind::Paid);
        assert_eq!(
            JobEvent::from_parts(EventKind::Paid.as_str(), paid.payload()).unwrap(),
            paid
        );
    }
}
