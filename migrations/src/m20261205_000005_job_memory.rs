//! `jobs.memory_mb`: the training memory a job needs, estimated from its model's dimensions
//! when it is posted, so a task is leased only to a worker whose registered memory holds it.
//! Null for jobs posted before the estimate existed: those are leased to any worker, as before.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261205_000005_job_memory"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(big_integer_null(Jobs::MemoryMb))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(Jobs::MemoryMb)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    MemoryMb,
}
