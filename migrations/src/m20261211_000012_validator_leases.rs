//! Leases on the validators' work (issue 47, decision 0043): several validator processes share
//! one deployment, and each scoring, each proof replay and each round's merge is leased to one
//! of them at a time, the way tasks are leased to workers.
//! - `work_key`: what is leased, one row per piece of work (`verdict:<submission>`,
//!   `proof:<submission>`, `merge:<job>:<round>`); the primary key, so two validators racing
//!   for the same work insert one row between them.
//! - `job_id`: the job the work belongs to.
//! - `holder`: the validator's address.
//! - `leased_at`, `expires_at`: when the holder took it and until when it holds it without a
//!   heartbeat; indexed, since every claim first forgets the expired ones.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261211_000012_validator_leases"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ValidatorLeases::Table)
                    .col(string(ValidatorLeases::WorkKey).primary_key())
                    .col(uuid(ValidatorLeases::JobId))
                    .col(string(ValidatorLeases::Holder))
                    .col(timestamp_with_time_zone(ValidatorLeases::LeasedAt))
                    .col(timestamp_with_time_zone(ValidatorLeases::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_validator_leases_expires_at")
                    .table(ValidatorLeases::Table)
                    .col(ValidatorLeases::ExpiresAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ValidatorLeases::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ValidatorLeases {
    Table,
    WorkKey,
    JobId,
    Holder,
    LeasedAt,
    ExpiresAt,
}
