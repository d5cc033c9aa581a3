//! A job as the API shows it, and the escrow call that funds it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{ContentId, EthAddress, JobKind, JobSpec, WeiAmount};
use uuid::Uuid;

use crate::domain::lifecycle::JobStatus;
use crate::entities::job;

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: Uuid,
    #[schema(value_type = EthAddress)]
    pub requester: String,
    pub kind: JobKind,
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
    #[schema(value_type = WeiAmount)]
    pub stake_wei: String,
    pub shards: i32,
    pub rounds: i32,
    /// 0 until funding starts round 1.
    pub current_round: i32,
    pub deadline: DateTime<Utc>,
    /// Funded by the server's development key, not by the requester's wallet.
    pub dev_funded: bool,
    /// The job's id in the escrow contract, once funded.
    pub escrow_job_id: Option<String>,
    pub escrow_address: Option<String>,
    /// While awaiting funding: the exact `createJob` arguments the escrow must be called with
    /// (on the contract `GET /v1/chain` names) for the API to open this job.
    pub funding: Option<FundingTerms>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `createJob(token, stake, specCid, deadline, kind)` for a job, payable with `stake` in ETH.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FundingTerms {
    /// `0x000…0` for ETH.
    pub token: String,
    pub stake_wei: String,
    /// The job's manifest CID: it names the job, so the API can match the escrow to it.
    pub spec_cid: String,
    /// Unix seconds.
    pub deadline_unix: i64,
    /// 0 = lora, 1 = federated.
    pub kind: u8,
}

impl FundingTerms {
    pub fn of(m: &job::Model) -> Option<FundingTerms> {
        if m.status != JobStatus::AwaitingFunding {
            return None;
        }
        Some(FundingTerms {
            token: m.spec["stake"]["token"]
                .as_str()
                .map(str::to_ascii_lowercase)
                .unwrap_or_else(|| format!("{:#x}", alloy::primitives::Address::ZERO)),
            stake_wei: m.stake_wei.clone(),
            spec_cid: m.manifest_cid.clone()?,
            deadline_unix: m.deadline.timestamp(),
            kind: m.kind.escrow_code(),
        })
    }
}

impl From<job::Model> for JobView {
    fn from(m: job::Model) -> Self {
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
