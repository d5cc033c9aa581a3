//! `content_claims`: who holds a claim on which content, keyed by the content's multihash
//! (`shardwork_core::store::content_key`), so that no rule over content depends on how its CID
//! is spelled. Written by `crate::domain::content`.

use sea_orm::entity::prelude::*;

/// A row of `content_claims`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "content_claims")]
pub struct Model {
    /// Row id.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The content's multihash, lowercase hex: what every spelling of its CID shares.
    pub multihash: String,
    /// `upload`, `dataset` or `held_out` (`crate::domain::content::ClaimKind`).
    pub kind: String,
    /// The uploader, or the requester of the job whose content it is; lowercase hex.
    pub owner: String,
    /// The job, for a dataset or held-out claim.
    pub job_id: Option<Uuid>,
    /// The CID as it was stored or named (one spelling of it).
    pub cid: String,
    /// Bytes stored, for an upload (0 otherwise).
    pub size_bytes: i64,
    /// When the claim was made (an upload: its latest upload).
    pub created_at: DateTimeUtc,
    /// When a job first named an upload; until then it counts against its owner's quota and
    /// expires.
    pub referenced_at: Option<DateTimeUtc>,
}

/// None declared: related rows are queried by id.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
