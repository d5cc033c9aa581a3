//! `siwe_nonces`: sign-in nonces, spendable once before they expire.

use sea_orm::entity::prelude::*;

/// A row of `siwe_nonces`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "siwe_nonces")]
pub struct Model {
    /// The nonce a sign-in message must quote.
    #[sea_orm(primary_key, auto_increment = false)]
    pub nonce: String,
    /// When the nonce was issued.
    pub created_at: DateTimeUtc,
    /// When it stops being spendable.
    pub expires_at: DateTimeUtc,
    /// When a signed message spent it; set once, so a replay finds it set.
    pub used_at: Option<DateTimeUtc>,
}

/// None declared.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
