//! Plain Rust forms of what goes into and comes out of the escrow.

use alloy::primitives::{Address, B256, Bytes, Log, U256};

use crate::bindings::JobEscrow;

/// `token` value meaning native ETH, as in the contract.
pub const ETH: Address = Address::ZERO;

/// Constructor arguments of JobEscrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployParams {
    pub admin: Address,
    pub validator: Address,
    pub fee_manager: Address,
    pub treasury: Address,
    /// Platform fee in basis points, at most `MAX_FEE_BPS` (1,000).
    pub fee_bps: u16,
}

/// The protocol's job kind; its byte on chain is [`JobKind::escrow_code`].
pub use shardwork_core::protocol::JobKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// No job with this id.
    None,
    Open,
    Started,
    Completed,
    Cancelled,
    Refunded,
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
            _ => return None,
        })
    }
}

/// A job to escrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// [`ETH`] or an allow-listed ERC-20.
    pub token: Address,
    pub stake: U256,
    pub spec_cid: String,
    /// Unix seconds; after it, anyone may refund the requester.
    pub deadline: u64,
    pub kind: JobKind,
}

/// A job as the contract stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub requester: Address,
    pub deadline: u64,
    pub kind: JobKind,
    pub status: JobStatus,
    pub fee_bps: u16,
    pub token: Address,
    pub stake: U256,
    /// keccak256 of the spec CID.
    pub spec_hash: B256,
}

/// One contributor's quality score, in basis points (0 ..= 10,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contribution {
    pub contributor: Address,
    pub quality: u16,
}

/// Arguments of `completeFederatedJob`. The ledger sorts the contributions by address, as the
/// contract requires; duplicates still revert (`ContributorsNotSorted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederatedCompletion {
    pub job_id: U256,
    pub adapter_cid: String,
    pub manifest_cid: String,
    pub contributions: Vec<Contribution>,
}

/// A transaction for the adapters to sign and send (or to run as a call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxRequest {
    pub from: Address,
    /// `None` deploys `input` as init code.
    pub to: Option<Address>,
    pub input: Bytes,
    pub value: U256,
}

/// A log with where it was emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLog {
    pub block_number: u64,
    pub tx_hash: B256,
    pub log_index: u64,
    pub log: Log,
}

/// A mined, successful transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub tx_hash: B256,
    pub block_number: u64,
    pub gas_used: u64,
    pub contract_address: Option<Address>,
    pub logs: Vec<RawLog>,
}

/// An escrow event, typed, with where it was emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowEvent {
    pub block_number: u64,
    pub tx_hash: B256,
    pub log_index: u64,
    pub event: JobEscrow::JobEscrowEvents,
}

/// What a state-changing escrow call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    pub tx_hash: B256,
    pub block_number: u64,
    pub gas_used: u64,
    /// The escrow's events from this transaction, in order.
    pub events: Vec<EscrowEvent>,
}
