//! The signals that wake the background loops when there is work for them, shared by the HTTP
//! layer (a committed write may have left work for the outbox) and the loops themselves.

use std::sync::Arc;

use tokio::sync::Notify;

/// Signals that wake the background loops when there is work for them.
#[derive(Clone, Default)]
pub struct Wakeups {
    /// A write committed (it may have recorded an event the outbox must dispatch).
    pub outbox: Arc<Notify>,
    /// The dispatcher sent something to the chain (its events may be there now).
    pub follower: Arc<Notify>,
}
