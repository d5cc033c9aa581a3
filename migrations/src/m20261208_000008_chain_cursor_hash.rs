//! `chain_cursors.last_block_hash`: the hash of the last block a chain follower read (the one
//! before `next_block`), as the node gave it then. The follower asks the chain for that block's
//! hash again before it reads on: a different hash means the blocks it acted on were replaced
//! (a reorg deeper than its confirmation depth), and it stops rather than build on them. Null
//! for cursors written before this column, and for one that has read no block yet.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261208_000008_chain_cursor_hash"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ChainCursors::Table)
                    // `0x` and 64 hex digits.
                    .add_column(string_len_null(ChainCursors::LastBlockHash, 66))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ChainCursors::Table)
                    .drop_column(ChainCursors::LastBlockHash)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum ChainCursors {
    Table,
    LastBlockHash,
}
