//! `chain_cursors`: the next block a chain follower reads.

use sea_orm::entity::prelude::*;

/// A row of `chain_cursors`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "chain_cursors")]
pub struct Model {
    /// Which follower: `escrow:{chain id}:{escrow address}`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    /// The first block the follower has not read yet.
    pub next_block: i64,
    /// The hash of block `next_block - 1` when the follower read it (`0x…`): if the chain now
    /// has another block at that height, what the follower acted on was reorganised away.
    pub last_block_hash: Option<String>,
    /// When the follower last moved the cursor.
    pub updated_at: DateTimeUtc,
}

/// None declared.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
