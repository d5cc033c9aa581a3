//! sea-orm entities over the tables of `shardwork-migrations`.

pub mod chain_block;
pub mod chain_cursor;
pub mod chain_log;
pub mod chain_transaction;
pub mod content_claim;
pub mod job;
pub mod job_event;
pub mod reputation_event;
pub mod round;
pub mod shard;
pub mod siwe_nonce;
pub mod spent_attempt;
pub mod submission;
pub mod task;
pub mod task_progress;
pub mod validator_lease;
pub mod worker;
