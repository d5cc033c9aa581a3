//! What the job flow added once tasks, verdicts and chain following were built:
//! * `chain_cursors`: the next block each chain follower reads from, so a restarted API resumes
//!   where it stopped instead of re-reading the chain from genesis;
//! * `submissions.report`: the validator's measurements behind a verdict (held-out metric of the
//!   adapter and of its starting point, norms), shown in the job's event feed and portal.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000003_chain_follow"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ChainCursors::Table)
                    .col(string_len(ChainCursors::Name, 128).primary_key())
                    .col(big_integer(ChainCursors::NextBlock))
                    .col(
                        timestamp_with_time_zone(ChainCursors::UpdatedAt)
                            .default(Expr::current_timestamp()),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Submissions::Table)
                    .add_column(json_binary_null(Submissions::Report))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Submissions::Table)
                    .drop_column(Submissions::Report)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(ChainCursors::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ChainCursors {
    Table,
    Name,
    NextBlock,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Submissions {
    Table,
    Report,
}
