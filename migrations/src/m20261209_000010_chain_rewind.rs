//! What a chain follower needs to rewind over a reorg deeper than its confirmation depth
//! (issue 46, decision 0041):
//! - `chain_blocks`: the hash of the last block of each batch the follower read, for the
//!   recent past. After a reorg the newest of them the chain still has is where both histories
//!   agree, so everything the follower did above it is undone and read again.
//! - `chain_logs`: each escrow log the follower acted on, with what it takes to undo it (the
//!   job it touched, the feed events it wrote, the values it overwrote), so the undo is exact.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261209_000010_chain_rewind"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ChainBlocks::Table)
                    .col(string(ChainBlocks::Cursor))
                    .col(big_integer(ChainBlocks::Number))
                    // `0x` and 64 hex digits.
                    .col(string_len(ChainBlocks::Hash, 66))
                    .primary_key(
                        Index::create()
                            .col(ChainBlocks::Cursor)
                            .col(ChainBlocks::Number),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ChainLogs::Table)
                    .col(big_pk_auto(ChainLogs::Id))
                    .col(string(ChainLogs::Cursor))
                    .col(big_integer(ChainLogs::BlockNumber))
                    .col(big_integer(ChainLogs::LogIndex))
                    .col(string_len(ChainLogs::TxHash, 66))
                    .col(string(ChainLogs::Kind))
                    .col(uuid(ChainLogs::JobId))
                    .col(json_binary(ChainLogs::Undo))
                    .col(timestamp_with_time_zone(ChainLogs::AppliedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_chain_logs_cursor_block")
                    .table(ChainLogs::Table)
                    .col(ChainLogs::Cursor)
                    .col(ChainLogs::BlockNumber)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ChainLogs::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(ChainBlocks::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ChainBlocks {
    Table,
    Cursor,
    Number,
    Hash,
}

#[derive(DeriveIden)]
enum ChainLogs {
    Table,
    Id,
    Cursor,
    BlockNumber,
    LogIndex,
    TxHash,
    Kind,
    JobId,
    Undo,
    AppliedAt,
}
