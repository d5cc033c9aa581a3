//! `rate_windows`: how many requests each caller was granted in each minute, counted across
//! every API replica on the database so that the rate limit is the caller's, not each
//! replica's. Replicas claim the count in blocks (`api/src/http/rate_limit.rs`); `granted` is
//! the size of the block the last claim received, read back by that claim's `RETURNING`.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261207_000007_rate_windows"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RateWindows::Table)
                    .col(string(RateWindows::Caller))
                    .col(big_integer(RateWindows::Minute))
                    .col(integer(RateWindows::Admitted))
                    .col(integer(RateWindows::Granted))
                    .primary_key(
                        Index::create()
                            .col(RateWindows::Caller)
                            .col(RateWindows::Minute),
                    )
                    .to_owned(),
            )
            .await?;
        // Old windows are swept by minute.
        manager
            .create_index(
                Index::create()
                    .name("idx_rate_windows_minute")
                    .table(RateWindows::Table)
                    .col(RateWindows::Minute)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RateWindows::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum RateWindows {
    Table,
    Caller,
    Minute,
    Admitted,
    Granted,
}
