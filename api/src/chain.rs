//! The API's view of the escrow contract: which chain, which deployment, and which account the
//! API signs with. Built by the CLI (embedded EVM for `shardwork up`, JSON-RPC otherwise).

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use shardwork_contracts::Ledger;
use shardwork_contracts::ledger::PayoutLimits;

/// The escrow as the API uses it.
#[derive(Clone)]
pub struct Chain {
    /// The ledger the escrow is read and written through (JSON-RPC or the embedded EVM).
    pub ledger: Arc<dyn Ledger>,
    /// The chain's EIP-155 id.
    pub chain_id: u64,
    /// The escrow contract's address.
    pub escrow: Address,
    /// The account holding the escrow's VALIDATOR_ROLE, which the API signs `markStarted` and
    /// the completions with. The validator service decides; the API is its only signer, so a
    /// verdict and its payout can never disagree.
    pub operator: Address,
    /// Development mode only: an account the API may fund jobs from on a requester's behalf
    /// (`POST /v1/jobs/{id}/dev-fund`). `None` in production.
    pub dev_funder: Option<Address>,
    /// How often the chain follower polls, and how deep a block must be before it is read.
    pub poll_interval: Duration,
    /// How many blocks must sit on top of a block before the follower reads it.
    pub confirmations: u64,
    /// The block the escrow was deployed in: where the follower starts on a new database.
    pub start_block: u64,
    /// How many contributors one payout transaction may pay on this chain.
    pub payout_limits: PayoutLimits,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("chain_id", &self.chain_id)
            .field("escrow", &self.escrow)
            .field("operator", &self.operator)
            .field("dev_funder", &self.dev_funder)
            .finish_non_exhaustive()
    }
}

/// Blocks read per `eth_getLogs` request (providers cap the range).
pub const MAX_LOG_RANGE: u64 = 2_000;

/// On-chain job ids are stored as decimal text (they are `uint256`).
pub fn parse_job_id(text: &str) -> Option<U256> {
    U256::from_str_radix(text, 10).ok()
}

/// Lower-case 0x-hex, the form addresses take in the database.
pub fn address_text(address: Address) -> String {
    format!("{address:#x}")
}
