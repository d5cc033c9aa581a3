//! sea-orm entities over the tables of `shardwork-migrations` (m20261122_000001_core_schema).
//! Only the tables the API reads or writes so far have one.

pub mod job;
pub mod job_event;
pub mod shard;
pub mod siwe_nonce;
pub mod worker;
