//! A stream of escrow events from a block on, for the API's funding/payout watcher.
//!
//! Polling `logs` works the same over JSON-RPC (any HTTP node) and the embedded chain, where a
//! subscription would need a websocket node. Events come out once each, in chain order.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::Address;
use futures::Stream;

use super::{EscrowEvent, Ledger, Result};

/// How [`event_stream`] polls the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Pause between polls once the stream has caught up with the chain.
    pub poll_interval: Duration,
    /// Only blocks this deep are read, so a short reorg cannot take back an event already
    /// delivered. 0 on dev chains (anvil, embedded), which never reorg.
    pub confirmations: u64,
    /// At most this many blocks per `eth_getLogs` request (providers cap the range).
    pub max_block_range: u64,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(2),
            confirmations: 0,
            max_block_range: 5_000,
        }
    }
}

/// Every event of `escrow` from block `from_block` on; pending forever, polling for new blocks.
/// An error is yielded (and polling goes on from the same block), so the consumer decides
/// whether a flaky node ends its watch.
pub fn event_stream(
    ledger: Arc<dyn Ledger>,
    escrow: Address,
    from_block: u64,
    options: StreamOptions,
) -> impl Stream<Item = Result<EscrowEvent>> + Send {
    struct State {
        ledger: Arc<dyn Ledger>,
        next_block: u64,
        buffered: std::collections::VecDeque<EscrowEvent>,
        first_poll: bool,
    }
    let state = State {
        ledger,
        next_block: from_block,
        buffered: Default::default(),
        first_poll: true,
    };
    futures::stream::unfold(state, move |mut state| async move {
        loop {
            if let Some(event) = state.buffered.pop_front() {
                return Some((Ok(event), state));
            }
            if !state.first_poll {
                tokio::time::sleep(options.poll_interval).await;
            }
            state.first_poll = false;
            let latest = match state.ledger.block_number().await {
                Ok(latest) => latest.saturating_sub(options.confirmations),
                Err(e) => return Some((Err(e), state)),
            };
            if latest < state.next_block {
                continue;
            }
            let to = latest.min(
                state
                    .next_block
                    .saturating_add(options.max_block_range.max(1) - 1),
            );
            match state
                .ledger
                .events(escrow, state.next_block, Some(to))
                .await
            {
                Ok(events) => {
                    state.buffered.extend(events);
                    state.next_block = to + 1;
                    // More blocks still behind: no pause before reading them.
                    state.first_poll = to < latest;
                }
                Err(e) => return Some((Err(e), state)),
            }
        }
    })
}
