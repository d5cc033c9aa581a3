//! Reading a job's event feed back: its events after a given id, oldest first, decoded into the
//! protocol's words ([`EventView`]). The events are written where they happen
//! (`crate::domain::lifecycle::record_event` and the flow); which of them a reader may see is
//! decided by whoever shows them, not here.
//!
//! The feed is paged by event id, not by offset: ids only grow, so a reader that passes the
//! last id it saw misses nothing and sees nothing twice while new events are written.

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use shardwork_core::protocol::{EventView, JobEvent};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::job_event;

/// One page of a job's feed.
#[derive(Debug)]
pub struct FeedPage {
    /// The events, oldest first.
    pub events: Vec<EventView>,
    /// The id of the page's last event when more follow it; `None` on the last page.
    pub next_after: Option<i64>,
}

/// At most `limit` of job `job_id`'s events with an id above `after`, oldest first.
///
/// One row more than the page is read, to know whether another page follows without a count;
/// only the rows of the page are decoded.
pub async fn feed_page<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    after: i64,
    limit: u64,
) -> Result<FeedPage, DomainError> {
    let mut rows = rows_after(db, job_id, after, limit + 1).await?;
    let next_after = if rows.len() as u64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|e| e.id)
    } else {
        None
    };
    let events = rows.into_iter().map(decode).collect::<Result<_, _>>()?;
    Ok(FeedPage { events, next_after })
}

/// At most `limit` of job `job_id`'s events with an id above `after`, oldest first: for a
/// reader that follows the feed as it grows, and needs no cursor beyond the last id it got.
pub async fn events_after<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    after: i64,
    limit: u64,
) -> Result<Vec<EventView>, DomainError> {
    rows_after(db, job_id, after, limit)
        .await?
        .into_iter()
        .map(decode)
        .collect()
}

async fn rows_after<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    after: i64,
    limit: u64,
) -> Result<Vec<job_event::Model>, DomainError> {
    Ok(job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(job_id))
        .filter(job_event::Column::Id.gt(after))
        .order_by_asc(job_event::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// A stored event as the protocol's [`EventView`]. A row that does not decode was written by a
/// version of this server that no longer reads it, or damaged: ours to fix, not the reader's.
fn decode(m: job_event::Model) -> Result<EventView, DomainError> {
    let event = JobEvent::from_parts(&m.kind, m.payload).map_err(|e| {
        DomainError::internal(
            "reading the job's events",
            format!("event {} ({}): {e}", m.id, m.kind),
        )
    })?;
    Ok(EventView {
        id: m.id,
        event,
        created_at: m.created_at,
    })
}
