//! `workers`: registered workers, their capabilities and standing.

use sea_orm::entity::prelude::*;

/// A row of `workers`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "workers")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The worker's address, lower-case 0x-hex; one row per address.
    #[sea_orm(unique)]
    pub address: String,
    /// What the worker declared it can train on (`Capabilities`, as JSON).
    pub capabilities: Json,
    /// Reputation in basis points, as last mirrored from the chain.
    pub reputation: i64,
    /// Wei paid to the worker so far (decimal text), as the chain follower saw the payouts.
    pub earnings_wei: String,
    /// When the worker last sent a heartbeat.
    pub last_heartbeat_at: Option<DateTimeUtc>,
    /// When the worker first registered.
    pub created_at: DateTimeUtc,
    /// When the row last changed.
    pub updated_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
