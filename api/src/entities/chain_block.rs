//! `chain_blocks`: the hash of the last block of each batch a chain follower read, kept for
//! the recent past so a reorg can be rewound to where both histories agree.

use sea_orm::entity::prelude::*;

/// A row of `chain_blocks`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "chain_blocks")]
pub struct Model {
    /// Which follower (as `chain_cursors.name`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub cursor: String,
    /// The block's height.
    #[sea_orm(primary_key, auto_increment = false)]
    pub number: i64,
    /// Its hash when the follower read it (`0x…`).
    pub hash: String,
}

/// None declared.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
