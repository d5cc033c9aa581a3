//! The ERC-20 tokens a job may be staked in: those on the escrow's allow-list.
//!
//! `GET /v1/chain` lists them with what a wallet shows (symbol, decimals), read from the
//! escrow's `TokenAllowed` events and each token's metadata. The list is kept per process and
//! read again from where the last read stopped once it is [`FRESH_FOR`] old, so a busy portal
//! costs the chain one `eth_getLogs` every few seconds, not one per page view. Posting and
//! quoting ask the escrow's `tokenAllowed` itself: that answer is never stale.

use std::time::{Duration, Instant};

use alloy::primitives::Address;
use shardwork_contracts::bindings::JobEscrow::JobEscrowEvents;
use shardwork_contracts::ledger::LedgerError;
use shardwork_core::protocol::Stake;
use tokio::sync::Mutex;

use crate::chain::{Chain, MAX_LOG_RANGE, address_text};

/// How long a read of the allow-list is shown before the chain is asked again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// A token the escrow accepts, as `GET /v1/chain` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct StakeToken {
    /// The ERC-20 contract, lower-case 0x-hex: a spec's `stake.token`.
    pub address: String,
    /// The token's `symbol()`; absent when the token does not answer it.
    pub symbol: Option<String>,
    /// The token's `name()`; absent when the token does not answer it.
    pub name: Option<String>,
    /// The token's `decimals()`: a stake's `amount` is in units of 10^-decimals tokens. Absent
    /// when the token does not answer it; amounts are then in its smallest unit.
    pub decimals: Option<u8>,
}

/// Why a stake token was refused.
#[derive(Debug, thiserror::Error)]
pub enum StakeTokenError {
    /// The escrow does not accept new jobs staked in this token.
    #[error(
        "{token} is not a token the escrow accepts (its allow-list; GET /v1/chain lists the \
         tokens it does): the escrow would refuse the funding"
    )]
    NotAllowed {
        /// The token asked for.
        token: String,
    },
    /// The chain could not be read.
    #[error("reading the escrow's allow-list: {0}")]
    Chain(#[from] LedgerError),
}

/// The allow-list as last read, shared by the server's workers.
#[derive(Default)]
pub struct StakeTokens {
    scan: Mutex<Scan>,
}

#[derive(Default)]
struct Scan {
    /// The first block not read yet; `None` before the first read (which starts at the block
    /// the escrow was deployed in).
    next_block: Option<u64>,
    /// Every token ever listed, in the order the escrow first listed it.
    listed: Vec<Listed>,
    read_at: Option<Instant>,
}

struct Listed {
    token: StakeToken,
    allowed: bool,
}

impl StakeTokens {
    /// The tokens the escrow accepts now (at most [`FRESH_FOR`] ago), in the order it first
    /// listed them.
    pub async fn allowed(&self, chain: &Chain) -> Result<Vec<StakeToken>, LedgerError> {
        let mut scan = self.scan.lock().await;
        if scan.read_at.is_none_or(|at| at.elapsed() >= FRESH_FOR) {
            read_new_blocks(&mut scan, chain).await?;
            scan.read_at = Some(Instant::now());
        }
        Ok(scan
            .listed
            .iter()
            .filter(|l| l.allowed)
            .map(|l| l.token.clone())
            .collect())
    }
}

/// Refuses a stake in a token the escrow does not accept, asking the escrow itself. ETH, and
/// any stake on a server without a chain (nothing can be funded there), pass.
pub async fn check_stake(chain: Option<&Chain>, stake: &Stake) -> Result<(), StakeTokenError> {
    let (Some(chain), Some(token)) = (chain, stake.token) else {
        return Ok(());
    };
    let token = Address::from(token.0);
    if chain.ledger.token_allowed(chain.escrow, token).await? {
        Ok(())
    } else {
        Err(StakeTokenError::NotAllowed {
            token: address_text(token),
        })
    }
}

async fn read_new_blocks(scan: &mut Scan, chain: &Chain) -> Result<(), LedgerError> {
    let latest = chain.ledger.block_number().await?;
    let mut from = scan.next_block.unwrap_or(chain.start_block);
    while from <= latest {
        let to = latest.min(from + MAX_LOG_RANGE - 1);
        for event in chain.ledger.events(chain.escrow, from, Some(to)).await? {
            let JobEscrowEvents::TokenAllowed(listing) = event.event else {
                continue;
            };
            match scan
                .listed
                .iter_mut()
                .find(|l| l.token.address == address_text(listing.token))
            {
                Some(known) => known.allowed = listing.allowed,
                None => scan.listed.push(Listed {
                    token: describe(chain, listing.token).await,
                    allowed: listing.allowed,
                }),
            }
        }
        // Each range is kept as soon as it is read: a failure later re-reads only the rest.
        from = to + 1;
        scan.next_block = Some(from);
    }
    Ok(())
}

/// The token with its metadata; a token that does not answer `symbol()` (say) is still listed,
/// since the escrow accepts it, with that field absent.
async fn describe(chain: &Chain, token: Address) -> StakeToken {
    let metadata = chain.ledger.token_metadata(token).await;
    if let Err(e) = &metadata {
        tracing::warn!(token = %token, error = %e, "an allow-listed token has no ERC-20 metadata");
    }
    let metadata = metadata.ok();
    StakeToken {
        address: address_text(token),
        symbol: metadata.as_ref().map(|m| m.symbol.clone()),
        name: metadata.as_ref().map(|m| m.name.clone()),
        decimals: metadata.map(|m| m.decimals),
    }
}
