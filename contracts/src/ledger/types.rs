//! Plain Rust forms of what goes into and comes out of the escrow.

use alloy::primitives::{Address, B256, Bytes, Log, U256};

use crate::bindings::JobEscrow;

/// `token` value meaning native ETH, as in the contract.
pub const ETH: Address = Address::ZERO;

/// Constructor arguments of JobEscrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployParams {
    /// Gets `DEFAULT_ADMIN_ROLE`: allow-lists tokens, sets the treasury, pauses.
    pub admin: Address,
    /// Gets `VALIDATOR_ROLE`: marks jobs started and completes them.
    pub validator: Address,
    /// Gets `FEE_MANAGER_ROLE`: may change the fee.
    pub fee_manager: Address,
    /// Credited the platform fee of every completed job.
    pub treasury: Address,
    /// Platform fee in basis points, at most `MAX_FEE_BPS` (1,000).
    pub fee_bps: u16,
}

/// The protocol's job kind; its byte on chain is [`JobKind::escrow_code`].
pub use shardwork_core::protocol::JobKind;

/// Where a job is in its life, as the contract's `JobStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// No job with this id.
    None,
    /// Funded; the requester may still cancel.
    Open,
    /// A validator marked work begun: no cancelling, only completion or the deadline refund.
    Started,
    /// Paid out to its contributors and the treasury. Final.
    Completed,
    /// Cancelled by the requester before it started; stake credited back. Final.
    Cancelled,
    /// Refunded to the requester after its deadline passed unfinished (or, for a batched payout
    /// that stalled, what it had not paid). Final.
    Refunded,
    /// A batched payout is under way: some batches are paid, the rest follow.
    Paying,
    /// Ended early by the validator because it could not finish; the whole stake went back to
    /// the requester. Final.
    Aborted,
}

impl JobStatus {
    pub(crate) fn from_raw(raw: u8) -> Option<Self> {
        Some(match raw {
            0 => JobStatus::None,
            1 => JobStatus::Open,
            2 => JobStatus::Started,
            3 => JobStatus::Completed,
            4 => JobStatus::Cancelled,
            5 => JobStatus::Refunded,
            6 => JobStatus::Paying,
            7 => JobStatus::Aborted,
            _ => return None,
        })
    }
}

/// A job to escrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// [`ETH`] or an allow-listed ERC-20.
    pub token: Address,
    /// Amount to escrow, in the token's smallest unit (wei for ETH).
    pub stake: U256,
    /// CID of the job's spec; not empty. The contract keeps its keccak256.
    pub spec_cid: String,
    /// Unix seconds; after it, anyone may refund the requester.
    pub deadline: u64,
    /// Single-contributor LoRA or federated.
    pub kind: JobKind,
    /// The highest platform fee (basis points) the requester accepts; `createJob` reverts
    /// (`FeeAboveMaximum`) when the fee was raised above it before the job landed.
    pub max_fee_bps: u16,
}

/// A job as the contract stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// Who created the job; credited the stake back (cancel, refund) and any rounding dust.
    pub requester: Address,
    /// Unix seconds; after it, the unfinished job can be refunded.
    pub deadline: u64,
    /// Single-contributor LoRA or federated.
    pub kind: JobKind,
    /// Where the job is in its life.
    pub status: JobStatus,
    /// Fee in basis points, fixed when the job was created: later fee changes do not apply.
    pub fee_bps: u16,
    /// [`ETH`] or the ERC-20 the stake is in.
    pub token: Address,
    /// Who the fee goes to, fixed when the job was created.
    pub treasury: Address,
    /// Progress the validator recorded (`recordProgress`): the share of the stake the job's
    /// completed rounds earned, in basis points; 0 = none. While it is not 0, the deadline
    /// refund of a started job waits the escrow's `PAYOUT_GRACE`.
    pub earned_bps: u16,
    /// Amount escrowed, in the token's smallest unit.
    pub stake: U256,
    /// keccak256 of the spec CID.
    pub spec_hash: B256,
}

/// One contributor's quality score, in basis points (0 ..= 10,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contribution {
    /// The account paid.
    pub contributor: Address,
    /// Quality in basis points; 0 pays nothing but still moves reputation.
    pub quality: u16,
}

/// Arguments of `completeFederatedJob`. The ledger sorts the contributions by address, as the
/// contract requires; duplicates still revert (`ContributorsNotSorted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederatedCompletion {
    /// The federated job to complete.
    pub job_id: U256,
    /// CID of the merged adapter the job produced.
    pub adapter_cid: String,
    /// CID of the job's manifest; recorded in the `PayoutStarted` event.
    pub manifest_cid: String,
    /// Who is paid, with their quality scores; in any order.
    pub contributions: Vec<Contribution>,
}

/// Arguments of `abortFederatedJob` (or `beginFederatedAbort` and its batches): end a federated
/// job that cannot finish, paying `earned_bps` of its stake (its completed rounds' share) to
/// the contributors of those rounds as a completion pays the whole stake, and the rest back to
/// the requester. The ledger sorts the contributions by address, as the contract requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederatedAbort {
    /// The federated job to end.
    pub job_id: U256,
    /// The share of the stake earned, in basis points: 1 ..= 10,000 (10,000 is a completion).
    pub earned_bps: u16,
    /// CID of the last completed round's merge: what the requester keeps.
    pub adapter_cid: String,
    /// Why the job ends; logged in `JobAborted`.
    pub reason: String,
    /// The completed rounds' contributors with their quality scores; in any order.
    pub contributions: Vec<Contribution>,
}

/// Where a federated payout stands on chain (`payoutOf`); all zero before one began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PayoutProgress {
    /// Contributors the payout announced.
    pub expected: u32,
    /// Contributors paid so far.
    pub paid_count: u32,
    /// The last contributor paid; the next batch starts above it.
    pub last_contributor: Address,
    /// What was credited to contributors so far.
    pub paid: U256,
    /// The divisor of every share.
    pub total_weight: u64,
    /// The share of the stake the payout pays out, in basis points: 10,000 for a completion,
    /// less for an abort paying completed rounds; 0 before a payout began.
    pub earned_bps: u16,
    /// The sum of the contributors' qualities the payout announced.
    pub total_quality: u64,
    /// The weight the batches so far carried; the last must bring it to `total_weight`.
    pub weighed: u64,
    /// The block the payout began in.
    pub began_at: u64,
}

/// How large one payout transaction may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayoutLimits {
    /// The target chain's gas cap per transaction: 2^24 under EIP-7825 (Osaka), else the
    /// block gas limit.
    pub tx_gas_cap: u64,
}

impl PayoutLimits {
    /// Gas one contributor can cost a payout at worst: a fresh account slot (22.1k) plus
    /// parking unwithdrawn credit in another token (a second fresh slot, ~8.4k more than a
    /// new contributor all told), calldata and the event; measured at ~30.9k, rounded up.
    pub const WORST_GAS_PER_CONTRIBUTOR: u64 = 32_000;
    /// Gas of a payout batch besides its contributors: 21k intrinsic, the job and payout
    /// slots, the fee and dust credits, the completion events; measured under 100k.
    pub const BATCH_OVERHEAD_GAS: u64 = 200_000;

    /// Contributors one transaction pays: as many as fit the cap at worst-case cost.
    pub fn contributors_per_batch(&self) -> usize {
        let room = self.tx_gas_cap.saturating_sub(Self::BATCH_OVERHEAD_GAS);
        (room / Self::WORST_GAS_PER_CONTRIBUTOR).max(1) as usize
    }

    /// The gas limit of a transaction paying `contributors`: their worst case, computed from
    /// the batch rather than estimated, since an estimate holds only for the state it ran on
    /// and another job paying the same contributors in another token before this one is mined
    /// makes each of them park credit (a fresh slot more). Within the cap for any batch of
    /// [`Self::contributors_per_batch`].
    pub fn batch_gas_limit(&self, contributors: usize) -> u64 {
        let worst = Self::BATCH_OVERHEAD_GAS
            .saturating_add(Self::WORST_GAS_PER_CONTRIBUTOR.saturating_mul(contributors as u64));
        worst.min(self.tx_gas_cap)
    }
}

impl Default for PayoutLimits {
    /// EIP-7825's cap, the smallest of any chain the escrow targets.
    fn default() -> Self {
        PayoutLimits {
            tx_gas_cap: 1 << 24,
        }
    }
}

/// A transaction for the adapters to sign and send (or to run as a call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxRequest {
    /// The sender; a send needs it to be one of the ledger's accounts.
    pub from: Address,
    /// `None` deploys `input` as init code.
    pub to: Option<Address>,
    /// Calldata, or the init code of a deployment.
    pub input: Bytes,
    /// Wei sent along.
    pub value: U256,
    /// The most gas the transaction may use, when the caller computed it from what the
    /// transaction does ([`PayoutLimits::batch_gas_limit`]); `None`: the node's estimate plus
    /// the adapter's margin.
    pub gas_limit: Option<u64>,
}

/// A log with where it was emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLog {
    /// Block the log was emitted in.
    pub block_number: u64,
    /// Transaction that emitted it.
    pub tx_hash: B256,
    /// Position of the log in its block.
    pub log_index: u64,
    /// Emitting address, topics and data.
    pub log: Log,
}

/// A mined, successful transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Hash of the transaction.
    pub tx_hash: B256,
    /// Block it was mined in.
    pub block_number: u64,
    /// Gas it used.
    pub gas_used: u64,
    /// The contract it created, for a deployment.
    pub contract_address: Option<Address>,
    /// Every log it emitted, of any contract, in order.
    pub logs: Vec<RawLog>,
}

/// An escrow event, typed, with where it was emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowEvent {
    /// Block the event was emitted in.
    pub block_number: u64,
    /// Transaction that emitted it.
    pub tx_hash: B256,
    /// Position of its log in the block.
    pub log_index: u64,
    /// The decoded event.
    pub event: JobEscrow::JobEscrowEvents,
}

/// What a state-changing escrow call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    /// Hash of the transaction.
    pub tx_hash: B256,
    /// Block it was mined in.
    pub block_number: u64,
    /// Gas it used.
    pub gas_used: u64,
    /// The escrow's events from this transaction, in order.
    pub events: Vec<EscrowEvent>,
}

/// What a wallet shows of an ERC-20: EIP-20's optional name, symbol and decimals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMetadata {
    /// The token's name ("Shardwork Test Dollar").
    pub name: String,
    /// Its ticker ("tUSD").
    pub symbol: String,
    /// How many decimals one whole token has in its smallest unit.
    pub decimals: u8,
}

/// A worker's bond in one token (`bondOf`): `active` backs the tasks it may be leased;
/// `unbonding` is credited back at `unlock_at` (unix seconds) and can be slashed until then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BondInfo {
    /// What backs the tasks the worker may be leased now.
    pub active: U256,
    /// What the worker asked back: still slashable until `unlock_at`.
    pub unbonding: U256,
    /// When `unbonding` may be credited back (unix seconds; 0: nothing is unbonding).
    pub unlock_at: u64,
}
