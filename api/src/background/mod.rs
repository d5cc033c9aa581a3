//! The API's background work, beside the HTTP server: the outbox dispatcher (events that need
//! an effect elsewhere), the chain follower (the escrow's events mirrored into the database)
//! and the reaper (expired leases, overdue jobs). Each is a loop over the domain
//! (`crate::domain`); none is reached from the HTTP layer, which only wakes them
//! ([`wakeups`]). Across API replicas, one runs them at a time ([`leadership`]).

pub mod error;
pub mod follower;
pub mod leadership;
pub mod loops;
pub mod outbox;
pub mod reaper;
pub mod rewind;
pub mod wakeups;

pub use error::BackgroundError;
pub use loops::{Background, start};
pub use wakeups::Wakeups;
