//! The Shardwork database schema: one set of sea-orm migrations for PostgreSQL and SQLite.
//!
//! Applied by the API at start (and by `shardwork up`). Tests run every migration up and down on
//! both databases.
#![warn(missing_docs)]

pub use sea_orm_migration::prelude::*;
// Re-exported so the binaries connect with the same sea-orm the migrations were built with.
pub use sea_orm_migration::sea_orm;

mod m20261122_000001_core_schema;
mod m20261122_000003_chain_follow;
mod m20261205_000004_task_progress;
mod m20261205_000005_job_memory;
mod m20261206_000006_task_releases;
mod m20261207_000007_rate_windows;
mod m20261208_000008_chain_cursor_hash;
mod m20261208_000008_content_claims;
mod m20261208_000009_lease_bounds;
mod m20261209_000010_chain_rewind;
mod m20261210_000011_proof_after_verdict;
mod m20261211_000012_validator_leases;
mod m20261212_000013_start_adapter;

/// Every migration of the API's schema and of the queue table, in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_core_schema::Migration),
            // The embedded task queue's table, kept beside its adapter.
            Box::new(shardwork_core::queue::table::schema::Migration),
            Box::new(m20261122_000003_chain_follow::Migration),
            Box::new(m20261205_000004_task_progress::Migration),
            Box::new(m20261205_000005_job_memory::Migration),
            Box::new(m20261206_000006_task_releases::Migration),
            Box::new(m20261207_000007_rate_windows::Migration),
            Box::new(m20261208_000008_content_claims::Migration),
            Box::new(m20261208_000009_lease_bounds::Migration),
            Box::new(m20261208_000008_chain_cursor_hash::Migration),
            Box::new(m20261209_000010_chain_rewind::Migration),
            Box::new(m20261210_000011_proof_after_verdict::Migration),
            Box::new(m20261211_000012_validator_leases::Migration),
            Box::new(m20261212_000013_start_adapter::Migration),
        ]
    }
}
