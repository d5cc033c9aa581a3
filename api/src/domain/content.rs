//! Claims on content, by multihash: who uploaded what (and how much of their quota it holds),
//! which content is a job's private dataset or sealed held-out set, and the expiry of uploads
//! no job names.
//!
//! Every rule here compares `shardwork_core::store::content_key` (the multihash), never a
//! CID's text: one content has a CIDv0 and many CIDv1 spellings (decision 0038), and a rule
//! over the text guards only the spelling it was written with.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use cid::Cid;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect,
};
use shardwork_core::store::{ContentStore, content_key};
use uuid::Uuid;

use crate::domain::DomainError;
use crate::entities::content_claim::{self, Column};

/// What a claim says of its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// Stored by its owner through `POST /v1/content`.
    Upload,
    /// A job's dataset as posted: its requester's, held-out records included.
    Dataset,
    /// A job's sealed held-out set: validators' and admins' only.
    HeldOut,
}

impl ClaimKind {
    /// The value of `content_claims.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimKind::Upload => "upload",
            ClaimKind::Dataset => "dataset",
            ClaimKind::HeldOut => "held_out",
        }
    }
}

/// Who may read a content, from the claims on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readers {
    /// No job keeps it private: anyone signed in.
    Anyone,
    /// A job's dataset: its requesters (these addresses, lowercase), validators and admins.
    Requesters(BTreeSet<String>),
    /// A job's sealed held-out set: validators and admins only.
    Validators,
}

/// Who may read the content `cid` names, under any spelling of it.
pub async fn readers<C: ConnectionTrait>(db: &C, cid: &Cid) -> Result<Readers, DomainError> {
    let claims = content_claim::Entity::find()
        .filter(Column::Multihash.eq(content_key(cid)))
        .filter(Column::Kind.is_in([ClaimKind::Dataset.as_str(), ClaimKind::HeldOut.as_str()]))
        .all(db)
        .await?;
    if claims.iter().any(|c| c.kind == ClaimKind::HeldOut.as_str()) {
        return Ok(Readers::Validators);
    }
    if claims.is_empty() {
        return Ok(Readers::Anyone);
    }
    Ok(Readers::Requesters(
        claims.into_iter().map(|c| c.owner).collect(),
    ))
}

/// Refuses a job of `requester` that names `cid` as its dataset (`what`: "dataset"), or as the
/// adapter it continues from ("adapter"), when the content is someone else's: another job's
/// held-out set, another requester's job dataset, or an upload of another identity that
/// `requester` has not uploaded too. Posting it would make `requester` the overseer of a job
/// over those bytes (and cut a dataset into public shards), a way around the read guard.
/// Content no one has claimed (put in the store directly) may be named.
pub async fn check_claim<C: ConnectionTrait>(
    db: &C,
    requester: &str,
    cid: &Cid,
    what: &str,
) -> Result<(), DomainError> {
    let requester = requester.to_ascii_lowercase();
    let claims = content_claim::Entity::find()
        .filter(Column::Multihash.eq(content_key(cid)))
        .all(db)
        .await?;
    let is = |c: &content_claim::Model, kind: ClaimKind| c.kind == kind.as_str();
    if claims.iter().any(|c| is(c, ClaimKind::HeldOut)) {
        return Err(DomainError::Forbidden(format!(
            "{cid} is a job's sealed held-out set, not a {what} a job may name"
        )));
    }
    // Whoever uploaded the bytes holds them already: naming them reveals nothing.
    if claims
        .iter()
        .any(|c| is(c, ClaimKind::Upload) && c.owner == requester)
    {
        return Ok(());
    }
    if claims
        .iter()
        .any(|c| is(c, ClaimKind::Dataset) && c.owner != requester)
    {
        return Err(DomainError::Forbidden(format!(
            "{cid} is the private dataset of another requester's job; a job may name only a \
             {what} its requester uploaded"
        )));
    }
    if claims
        .iter()
        .any(|c| is(c, ClaimKind::Upload) && c.owner != requester)
    {
        return Err(DomainError::Forbidden(format!(
            "{cid} was uploaded by another account; upload the {what} from {requester} to \
             name it"
        )));
    }
    Ok(())
}

/// Records a posted job's claims, in the job's transaction: its dataset (its requester's) and
/// its sealed held-out set; every upload whose content the job names (`named`: the dataset,
/// the model bundle and its files) becomes referenced, so it neither expires nor counts
/// against its owner's quota any more.
pub async fn claim_job_content<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    requester: &str,
    dataset: &Cid,
    held_out: &Cid,
    named: &[Cid],
    now: DateTime<Utc>,
) -> Result<(), DomainError> {
    let claim = |kind: ClaimKind, cid: &Cid| content_claim::ActiveModel {
        multihash: Set(content_key(cid)),
        kind: Set(kind.as_str().to_owned()),
        owner: Set(requester.to_ascii_lowercase()),
        job_id: Set(Some(job_id)),
        cid: Set(cid.to_string()),
        size_bytes: Set(0),
        created_at: Set(now),
        referenced_at: Set(None),
        ..Default::default()
    };
    content_claim::Entity::insert_many([
        claim(ClaimKind::Dataset, dataset),
        claim(ClaimKind::HeldOut, held_out),
    ])
    .exec(db)
    .await?;
    let keys: BTreeSet<String> = std::iter::once(dataset)
        .chain(named)
        .map(content_key)
        .collect();
    content_claim::Entity::update_many()
        .col_expr(
            Column::ReferencedAt,
            sea_orm::sea_query::Expr::value(Some(now)),
        )
        .filter(Column::Kind.eq(ClaimKind::Upload.as_str()))
        .filter(Column::ReferencedAt.is_null())
        .filter(Column::Multihash.is_in(keys))
        .exec(db)
        .await?;
    Ok(())
}

/// Bytes of `owner`'s uploads that no job names yet: what counts against its quota.
pub async fn unreferenced_bytes<C: ConnectionTrait>(
    db: &C,
    owner: &str,
) -> Result<u64, DomainError> {
    // Summed here rather than in SQL: PostgreSQL's SUM over BIGINT is NUMERIC, SQLite's an
    // integer, and the rows are few (each is one upload of the owner's, all within its quota).
    let sizes: Vec<i64> = content_claim::Entity::find()
        .select_only()
        .column(Column::SizeBytes)
        .filter(Column::Owner.eq(owner.to_ascii_lowercase()))
        .filter(Column::Kind.eq(ClaimKind::Upload.as_str()))
        .filter(Column::ReferencedAt.is_null())
        .into_tuple()
        .all(db)
        .await?;
    Ok(sizes.into_iter().map(|s| s.max(0) as u64).sum())
}

/// Records that `owner` uploaded `cid` (`size` bytes). An upload of content the owner already
/// holds unreferenced restarts its expiry rather than counting twice; returns whether a new
/// claim was written (so a refused upload can withdraw exactly that).
pub async fn record_upload<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    cid: &Cid,
    size: u64,
    now: DateTime<Utc>,
) -> Result<bool, DomainError> {
    let owner = owner.to_ascii_lowercase();
    let key = content_key(cid);
    let existing = content_claim::Entity::find()
        .filter(Column::Multihash.eq(key.clone()))
        .filter(Column::Owner.eq(owner.clone()))
        .filter(Column::Kind.eq(ClaimKind::Upload.as_str()))
        .one(db)
        .await?;
    if let Some(existing) = existing {
        if existing.referenced_at.is_none() {
            content_claim::Entity::update(content_claim::ActiveModel {
                id: Set(existing.id),
                created_at: Set(now),
                ..Default::default()
            })
            .exec(db)
            .await?;
        }
        return Ok(false);
    }
    content_claim::Entity::insert(content_claim::ActiveModel {
        multihash: Set(key),
        kind: Set(ClaimKind::Upload.as_str().to_owned()),
        owner: Set(owner),
        job_id: Set(None),
        cid: Set(cid.to_string()),
        size_bytes: Set(i64::try_from(size).unwrap_or(i64::MAX)),
        created_at: Set(now),
        referenced_at: Set(None),
        ..Default::default()
    })
    .exec(db)
    .await?;
    Ok(true)
}

/// Withdraws `owner`'s unreferenced upload claim on `cid` (an upload refused after it was
/// stored) and unpins the content if no claim on it is left.
pub async fn withdraw_upload<C: ConnectionTrait>(
    db: &C,
    store: &dyn ContentStore,
    owner: &str,
    cid: &Cid,
) -> Result<(), DomainError> {
    let key = content_key(cid);
    content_claim::Entity::delete_many()
        .filter(Column::Multihash.eq(key.clone()))
        .filter(Column::Owner.eq(owner.to_ascii_lowercase()))
        .filter(Column::Kind.eq(ClaimKind::Upload.as_str()))
        .filter(Column::ReferencedAt.is_null())
        .exec(db)
        .await?;
    unpin_if_unclaimed(db, store, &key, cid).await
}

async fn unpin_if_unclaimed<C: ConnectionTrait>(
    db: &C,
    store: &dyn ContentStore,
    key: &str,
    cid: &Cid,
) -> Result<(), DomainError> {
    let left = content_claim::Entity::find()
        .filter(Column::Multihash.eq(key))
        .one(db)
        .await?;
    if left.is_none() {
        store
            .unpin(cid)
            .await
            .map_err(|e| DomainError::internal("unpinning an expired upload", e))?;
    }
    Ok(())
}

/// Most uploads one pass expires, so a backlog is worked off over passes without one long
/// transaction or a pass that never ends.
pub const EXPIRE_BATCH: u64 = 500;

/// Forgets the uploads no job named within `ttl` of their upload, and unpins each whose
/// content no other claim holds (another owner's upload, a job's dataset). Returns how many
/// claims expired. The content store keeps blocks that other content shares; the embedded
/// store has no garbage collection, so there an expired upload stays on disk, unpinned and no
/// longer counted against anyone.
pub async fn expire_uploads<C: ConnectionTrait>(
    db: &C,
    store: &dyn ContentStore,
    ttl: chrono::Duration,
    now: DateTime<Utc>,
) -> Result<usize, DomainError> {
    let expired = content_claim::Entity::find()
        .filter(Column::Kind.eq(ClaimKind::Upload.as_str()))
        .filter(Column::ReferencedAt.is_null())
        .filter(Column::CreatedAt.lt(now - ttl))
        .limit(EXPIRE_BATCH)
        .all(db)
        .await?;
    let mut count = 0;
    for claim in expired {
        // Deleted only if still unreferenced and not renewed: a job posted (or a re-upload)
        // since the read above keeps it.
        let gone = content_claim::Entity::delete_many()
            .filter(Column::Id.eq(claim.id))
            .filter(Column::ReferencedAt.is_null())
            .filter(Column::CreatedAt.lt(now - ttl))
            .exec(db)
            .await?
            .rows_affected;
        if gone == 0 {
            continue;
        }
        count += 1;
        match shardwork_core::store::parse_cid(&claim.cid) {
            Ok(cid) => unpin_if_unclaimed(db, store, &claim.multihash, &cid).await?,
            Err(e) => tracing::warn!(cid = %claim.cid, error = %e, "expired upload's CID"),
        }
        tracing::info!(cid = %claim.cid, owner = %claim.owner, size = claim.size_bytes,
            "upload expired unreferenced");
    }
    Ok(count)
}
