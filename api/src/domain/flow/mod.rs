//! The life of a funded job, below the job lifecycle (`crate::domain::lifecycle`): rounds, tasks and
//! their leases, the validator's verdicts and merges, and who is paid. Each function runs in
//! one transaction (its own, or the caller's) and writes the events that record it; effects
//! outside the database go through the outbox (`crate::background::outbox`).

pub mod failures;
pub mod payout;
pub mod progress;
pub mod proofs;
pub mod rounds;
pub mod tasks;
pub mod validator_leases;
pub mod verdicts;
