//! Finding jobs: by id inside a transaction, a filtered page of them, or through the coalesced
//! reads that serve the hot `GET /v1/jobs/{id}` (see `crate::coalesce`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use shardwork_core::protocol::{EthAddress, JobStatus};
use uuid::Uuid;

use crate::coalesce::Coalescer;
use crate::domain::error::DomainError;
use crate::entities::job;

/// A job as stored: what the look-ups here hand out, under the name callers outside the domain
/// use, so that they need not reach past it into the entities.
pub type JobRecord = job::Model;

/// The job `id`, or [`DomainError::NotFound`].
pub async fn find_job<C: ConnectionTrait>(db: &C, id: Uuid) -> Result<job::Model, DomainError> {
    job::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| job_not_found(id))
}

/// The job `id`, read after writing its row in the caller's transaction, so that every other
/// transaction that locks the same job waits until this one ends. The verdicts, merges and
/// proof checks of one job lock it first: each then sees what the others committed (the last
/// verdict of a round sees every other task accepted; the last proof sees the merge), which
/// PostgreSQL's read-committed snapshots alone would not give two of them running at once.
pub async fn lock_job<C: ConnectionTrait>(
    txn: &C,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<job::Model, DomainError> {
    let locked = job::Entity::update_many()
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(id))
        .exec(txn)
        .await?;
    if locked.rows_affected != 1 {
        return Err(job_not_found(id));
    }
    find_job(txn, id).await
}

/// The error for a job id that names no job.
pub fn job_not_found(id: Uuid) -> DomainError {
    DomainError::NotFound(format!("no job {id}"))
}

/// Which jobs a listing shows; every filter given must hold.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only jobs in this status.
    pub status: Option<JobStatus>,
    /// Only jobs posted by this address.
    pub requester: Option<EthAddress>,
    /// Only jobs older than this one (the last id of the previous page).
    pub before: Option<Uuid>,
}

/// One page of a job listing.
#[derive(Debug)]
pub struct JobListing {
    /// The jobs, newest first.
    pub jobs: Vec<JobRecord>,
    /// The last id of this page when more jobs follow it; `None` on the last page.
    pub next_cursor: Option<Uuid>,
}

/// At most `limit` jobs that pass `filter`, newest first.
///
/// Ids are UUIDv7, so id order is creation order and the cursor is the last id seen: stable
/// under concurrent inserts, unlike an offset. One row more than the page is read, to know
/// whether another page follows without a count.
pub async fn list_jobs<C: ConnectionTrait>(
    db: &C,
    filter: &JobFilter,
    limit: u64,
) -> Result<JobListing, DomainError> {
    let mut select = job::Entity::find();
    if let Some(status) = filter.status {
        select = select.filter(job::Column::Status.eq(status.as_str()));
    }
    if let Some(requester) = filter.requester {
        select = select.filter(job::Column::Requester.eq(requester.to_string()));
    }
    if let Some(before) = filter.before {
        select = select.filter(job::Column::Id.lt(before));
    }
    let mut jobs = select
        .order_by_desc(job::Column::Id)
        .limit(limit + 1)
        .all(db)
        .await?;
    let next_cursor = if jobs.len() as u64 > limit {
        jobs.truncate(limit as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobListing { jobs, next_cursor })
}

/// Job reads by id, coalesced (see [`crate::coalesce`]).
pub type JobReads = Coalescer<Uuid, job::Model, DbErr>;

/// At most this many batched job reads in flight: with batching, a few round trips at once
/// carry the load, and the rest of the pool stays free for writes.
const JOB_READ_LANES: usize = 4;
/// Ids per batched read (one `WHERE id IN (…)` query).
const JOB_READ_BATCH: usize = 64;

/// The coalesced job reads of [`crate::state::AppState::job_reads`], over `db`.
pub fn job_reads(db: DatabaseConnection) -> JobReads {
    Coalescer::new(JOB_READ_LANES, JOB_READ_BATCH, move |ids: Vec<Uuid>| {
        let db = db.clone();
        Box::pin(async move {
            let rows = job::Entity::find()
                .filter(job::Column::Id.is_in(ids))
                .all(&db)
                .await?;
            Ok(rows.into_iter().map(|job| (job.id, job)).collect())
        }) as BoxFuture<'static, _>
    })
}
