//! `jobs`: one row per posted job; `status` is owned by `crate::domain::lifecycle`.

use sea_orm::entity::prelude::*;
use shardwork_core::protocol::{JobKind, JobStatus};

/// A row of `jobs`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    /// The job's id, chosen by the API when the job is posted.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The requester's address: the signed-in account that posted the job.
    pub requester: String,
    /// One adapter on the whole set (`lora`) or shards merged over rounds (`federated`).
    pub kind: JobKind,
    /// Where the job is in its lifecycle.
    pub status: JobStatus,
    /// The validated spec as posted (defaults filled in).
    pub spec: Json,
    /// The spec's bytes (`job.json`) in the content store.
    pub spec_cid: Option<String>,
    /// The dataset as uploaded, held-out records included.
    pub dataset_cid: Option<String>,
    /// The shard manifest: which records each shard holds. The escrow names the job by it.
    pub manifest_cid: Option<String>,
    /// The sealed held-out set; its key is derived when needed, never stored.
    pub heldout_cid: Option<String>,
    /// The final merged adapter, once the job is completed.
    pub result_adapter_cid: Option<String>,
    /// The job's id in the escrow contract (decimal `uint256`), once funded.
    pub escrow_job_id: Option<String>,
    /// The escrow contract the job was funded on, lower-case hex, once funded.
    pub escrow_address: Option<String>,
    /// The stake in wei, as decimal text.
    pub stake_wei: String,
    /// How many shards the dataset was cut into.
    pub shards: i32,
    /// How many rounds the job trains for.
    pub rounds: i32,
    /// The round in progress; 0 until funding opens round 1.
    pub current_round: i32,
    /// When the job must be finished; a funded job unfinished by then is refunded.
    pub deadline: DateTimeUtc,
    /// Funded from the server's development account rather than the requester's wallet.
    pub dev_funded: bool,
    /// Training memory a node needs for this job, MiB, estimated from the model at posting;
    /// tasks are leased only to workers that have it. Null for jobs posted before the estimate.
    pub memory_mb: Option<i64>,
    /// The longest a lease on one of its tasks may live, heartbeats included, seconds:
    /// estimated at posting from the job's work (`crate::domain::sizing::task_time_limit_secs`).
    /// Null for jobs posted before the bound, which get `sizing::DEFAULT_TASK_TIME_LIMIT_SECS`.
    pub task_time_limit_secs: Option<i64>,
    /// The adapter round 1 starts from, sealed to this job (`base_model.adapter`, opened and
    /// sealed again at posting); null for a job that starts from the bare base model.
    pub start_adapter_cid: Option<String>,
    /// Bumped by every state transition (optimistic concurrency).
    pub version: i32,
    /// When the job was posted.
    pub created_at: DateTimeUtc,
    /// When the row last changed.
    pub updated_at: DateTimeUtc,
}

impl Model {
    /// The stake's token as the spec names it, lower-case 0x-hex; the zero address for ETH.
    pub fn stake_token(&self) -> String {
        self.spec["stake"]["token"]
            .as_str()
            .map(str::to_ascii_lowercase)
            .unwrap_or_else(|| crate::chain::address_text(alloy::primitives::Address::ZERO))
    }

    /// Whether the stake is ETH (not an ERC-20).
    pub fn staked_in_ether(&self) -> bool {
        self.spec["stake"]["token"].is_null()
    }

    /// The spec's validation settings (its defaults for a spec that names none: every stored
    /// spec was validated at posting).
    pub fn validation(&self) -> shardwork_core::protocol::ValidationSpec {
        serde_json::from_value(self.spec["validation"].clone()).unwrap_or_default()
    }

    /// Whether the job is preference fine-tuning (`training.dpo`), whose reference policy is
    /// its starting point.
    pub fn trains_preferences(&self) -> bool {
        self.spec["training"]["dpo"].is_object()
    }

    /// One task's pay: the stake over shards × rounds, in the stake's smallest unit.
    pub fn task_pay(&self) -> alloy::primitives::U256 {
        let stake: alloy::primitives::U256 = self.stake_wei.parse().unwrap_or_default();
        let tasks = u64::try_from(i64::from(self.shards.max(1)) * i64::from(self.rounds.max(1)))
            .unwrap_or(1);
        stake / alloy::primitives::U256::from(tasks)
    }

    /// The bond one of this job's tasks needs while its proof is undecided
    /// (`validation.bond_multiple` × [`Self::task_pay`]); zero for a job without a bond.
    pub fn task_bond(&self) -> alloy::primitives::U256 {
        self.task_pay() * alloy::primitives::U256::from(self.validation().bond_multiple)
    }
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
