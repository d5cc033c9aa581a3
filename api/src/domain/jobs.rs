//! Finding jobs: by id inside a transaction, or through the coalesced reads that serve the
//! hot `GET /v1/jobs/{id}` (see `crate::coalesce`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use crate::coalesce::Coalescer;
use crate::domain::error::DomainError;
use crate::entities::job;

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
