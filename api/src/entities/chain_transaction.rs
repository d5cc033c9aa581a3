//! `chain_transactions`: every transaction the API sent or observed for a job.

use sea_orm::entity::prelude::*;

/// A row of `chain_transactions`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "chain_transactions")]
pub struct Model {
    /// The row's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The job the transaction was for, if any.
    pub job_id: Option<Uuid>,
    /// What the call did: `mark_started`, `complete` (one per payout transaction), `refund` or
    /// `abort`.
    pub kind: String,
    /// Where the transaction stands (`mined` once its receipt is in).
    pub status: String,
    /// The transaction hash, 0x-hex, once sent.
    pub tx_hash: Option<String>,
    /// The sending account, lower-case 0x-hex.
    pub from_address: Option<String>,
    /// The sender's nonce, when known.
    pub nonce: Option<i64>,
    /// The block the transaction was mined in.
    pub block_number: Option<i64>,
    /// Why the transaction failed, if it did.
    pub error: Option<String>,
    /// When the row was written.
    pub created_at: DateTimeUtc,
    /// When the row last changed.
    pub updated_at: DateTimeUtc,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
