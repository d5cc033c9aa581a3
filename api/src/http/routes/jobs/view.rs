//! A job as the API shows it, and the escrow call that funds it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{ContentId, EthAddress, JobKind, JobSpec, Stake, WeiAmount};
use uuid::Uuid;

use crate::domain::jobs::JobRecord;
use crate::domain::lifecycle::JobStatus;

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    /// The job's id.
    pub id: Uuid,
    /// The address that posted the job.
    #[schema(value_type = EthAddress)]
    pub requester: String,
    /// `lora` (one adapter on the whole set) or `federated` (shards merged over rounds).
    pub kind: JobKind,
    /// Where the job is in its lifecycle.
    pub status: JobStatus,
    /// The spec as posted, validated (defaults filled in).
    #[schema(value_type = JobSpec)]
    pub spec: serde_json::Value,
    /// job.json in the content store.
    #[schema(value_type = Option<ContentId>)]
    pub spec_cid: Option<String>,
    /// The dataset as uploaded.
    #[schema(value_type = Option<ContentId>)]
    pub dataset_cid: Option<String>,
    /// The shard manifest: which records each shard holds.
    #[schema(value_type = Option<ContentId>)]
    pub manifest_cid: Option<String>,
    /// The sealed held-out set; readable only with the key the validator can fetch.
    #[schema(value_type = Option<ContentId>)]
    pub held_out_cid: Option<String>,
    /// The final merged adapter, once the job is completed.
    #[schema(value_type = Option<ContentId>)]
    pub result_adapter_cid: Option<String>,
    /// The adapter round 1 starts from when the job continues from one (`base_model.adapter`),
    /// sealed to this job: its workers get the key with their round-1 leases.
    #[schema(value_type = Option<ContentId>)]
    pub start_adapter_cid: Option<String>,
    /// The stake the spec offers, in its asset's smallest unit: wei for ETH, or units of the
    /// ERC-20 that `spec.stake.token` names.
    #[schema(value_type = WeiAmount)]
    pub stake_wei: String,
    /// How many shards the training data was cut into.
    pub shards: i32,
    /// How many rounds the job trains for.
    pub rounds: i32,
    /// 0 until funding starts round 1.
    pub current_round: i32,
    /// When the job must be finished; a funded job unfinished by then is refunded.
    pub deadline: DateTime<Utc>,
    /// Funded by the server's development key, not by the requester's wallet.
    pub dev_funded: bool,
    /// The job's id in the escrow contract, once funded.
    pub escrow_job_id: Option<String>,
    /// The escrow contract the job was funded on, once funded.
    pub escrow_address: Option<String>,
    /// While awaiting funding: the exact `createJob` arguments the escrow must be called with
    /// (on the contract `GET /v1/chain` names) for the API to open this job.
    pub funding: Option<FundingTerms>,
    /// When the job was posted.
    pub created_at: DateTime<Utc>,
    /// When the job last changed.
    pub updated_at: DateTime<Utc>,
}

/// `createJob(token, stake, specCid, deadline, kind, maxFeeBps)` for a job: payable with
/// `stake` in ETH, or, for an ERC-20 stake, sent with no value after the requester has
/// `approve`d the escrow for `stake` of `token`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FundingTerms {
    /// `0x000…0` for ETH, else the ERC-20 the stake is in.
    pub token: String,
    /// The `stake` argument, in the asset's smallest unit (wei for ETH).
    pub stake_wei: String,
    /// The job's manifest CID: it names the job, so the API can match the escrow to it.
    pub spec_cid: String,
    /// Unix seconds.
    pub deadline_unix: i64,
    /// 0 = lora, 1 = federated.
    pub kind: u8,
    /// The highest fee (basis points) the requester accepts: the job spec's
    /// `stake.max_fee_bps`, else the escrow's ceiling of 1,000.
    pub max_fee_bps: u16,
}

impl FundingTerms {
    /// The terms for a job awaiting funding; `None` in any other status.
    pub fn of(m: &JobRecord) -> Option<FundingTerms> {
        if m.status != JobStatus::AwaitingFunding {
            return None;
        }
        Some(FundingTerms {
            token: m.stake_token(),
            stake_wei: m.stake_wei.clone(),
            spec_cid: m.manifest_cid.clone()?,
            deadline_unix: m.deadline.timestamp(),
            kind: m.kind.escrow_code(),
            max_fee_bps: serde_json::from_value::<Stake>(m.spec["stake"].clone())
                .map_or(Stake::ESCROW_MAX_FEE_BPS, |stake| stake.max_fee_bps()),
        })
    }
}

impl From<JobRecord> for JobView {
    fn from(m: JobRecord) -> Self {
        let funding = FundingTerms::of(&m);
        JobView {
            funding,
            escrow_job_id: m.escrow_job_id,
            escrow_address: m.escrow_address,
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
            start_adapter_cid: m.start_adapter_cid,
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
