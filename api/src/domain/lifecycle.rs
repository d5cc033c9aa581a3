//! The job lifecycle: the one place job statuses change.
//!
//! Every transition is a conditional update on the job's `version` (optimistic concurrency: of
//! two racing transitions exactly one wins, the other gets a conflict) plus a `job_events` row,
//! in one transaction. Events that must cause an effect elsewhere (a queue publish, a chain
//! call) are written with `needs_dispatch`, for the outbox dispatcher (`crate::background::outbox`).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use shardwork_core::protocol::{EventKind, JobEvent, StatusChange};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::{job, job_event};

pub use shardwork_core::protocol::JobStatus;

/// What can happen to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The requester withdraws an unfunded job.
    Cancel,
    /// The escrow was funded on chain.
    Fund,
    /// The final round was aggregated and the payout recorded on chain.
    Complete,
    /// The deadline passed and the stake was refunded on chain.
    Refund,
    /// The requester cancelled on chain (allowed there until the validator marks the job
    /// started); the database follows the chain.
    CancelOnChain,
}

impl Transition {
    /// The event kind recorded for this transition.
    pub fn event_kind(self) -> EventKind {
        match self {
            Transition::Cancel | Transition::CancelOnChain => EventKind::Cancelled,
            Transition::Fund => EventKind::Funded,
            Transition::Complete => EventKind::Completed,
            Transition::Refund => EventKind::Refunded,
        }
    }
}

/// The transition table.
pub fn next(from: JobStatus, transition: Transition) -> Result<JobStatus, String> {
    use JobStatus::*;
    match (from, transition) {
        (AwaitingFunding, Transition::Cancel) => Ok(Cancelled),
        (AwaitingFunding, Transition::Fund) => Ok(Open),
        (Open, Transition::Complete) => Ok(Completed),
        (AwaitingFunding | Open, Transition::Refund) => Ok(Refunded),
        (AwaitingFunding | Open, Transition::CancelOnChain) => Ok(Cancelled),
        (Open, Transition::Cancel) => Err(
            "a funded job cannot be cancelled; it is refunded at its deadline if unfinished".into(),
        ),
        (from, t) => Err(format!(
            "a job that is {} cannot be {}",
            from.as_str(),
            t.event_kind()
        )),
    }
}

/// Appends `event` to `job_id`'s feed; `needs_dispatch` marks it for the outbox
/// (`crate::background::outbox`), which turns it into a queue publish or a chain call. Returns
/// the event's id.
pub async fn record_event<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    event: &JobEvent,
    needs_dispatch: bool,
    now: DateTime<Utc>,
) -> Result<i64, DomainError> {
    let inserted = job_event::Entity::insert(job_event::ActiveModel {
        job_id: Set(job_id),
        kind: Set(event.kind().to_owned()),
        payload: Set(event.payload()),
        created_at: Set(now),
        needs_dispatch: Set(needs_dispatch),
        dispatched_at: Set(None),
        dispatch_attempts: Set(0),
        last_dispatch_error: Set(None),
        ..Default::default()
    })
    .exec(db)
    .await?;
    Ok(inserted.last_insert_id)
}

/// Marks event `event_id` for the outbox again, as if just recorded: for an effect whose
/// result was taken away (a chain call mined in blocks a reorg replaced). The outbox's chain
/// effects read the escrow before they act, so sending one again is safe.
pub async fn dispatch_again<C: ConnectionTrait>(db: &C, event_id: i64) -> Result<(), DomainError> {
    job_event::Entity::update_many()
        .col_expr(job_event::Column::NeedsDispatch, Expr::value(true))
        .col_expr(
            job_event::Column::DispatchedAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(job_event::Column::DispatchAttempts, Expr::value(0))
        .filter(job_event::Column::Id.eq(event_id))
        .exec(db)
        .await?;
    Ok(())
}

/// Applies `transition` to `job` inside `txn` (the caller commits), recording the event `event`
/// builds from the status change. Conflicts (illegal transition, or the job changed since it
/// was read) are [`DomainError::Conflict`].
pub async fn apply<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    transition: Transition,
    event: impl FnOnce(StatusChange) -> JobEvent,
    now: DateTime<Utc>,
) -> Result<JobStatus, DomainError> {
    Ok(apply_recorded(txn, job, transition, event, now).await?.0)
}

/// [`apply`], also returning the id of the event it recorded (for whoever may have to take the
/// transition back: the chain follower over a reorg).
pub async fn apply_recorded<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    transition: Transition,
    event: impl FnOnce(StatusChange) -> JobEvent,
    now: DateTime<Utc>,
) -> Result<(JobStatus, i64), DomainError> {
    let from = job.status;
    let to = next(from, transition).map_err(DomainError::Conflict)?;
    let updated = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(to.as_str()))
        .col_expr(job::Column::Version, Expr::value(job.version + 1))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(job.id))
        .filter(job::Column::Version.eq(job.version))
        .exec(txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(DomainError::Conflict(format!(
            "job {} changed while this request ran; read it again",
            job.id
        )));
    }
    let event = event(StatusChange { from, to });
    debug_assert_eq!(event.event_kind(), transition.event_kind());
    // Transitions cause no effect elsewhere by themselves: the events that do (a round's tasks
    // to publish, a payout or refund to send) are written beside them by `crate::domain::flow`.
    let event_id = record_event(txn, job.id, &event, false, now).await?;
    Ok((to, event_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unfunded_jobs_can_be_cancelled() {
        assert_eq!(
            next(JobStatus::AwaitingFunding, Transition::Cancel),
            Ok(JobStatus::Cancelled)
        );
        assert!(
            next(JobStatus::Open, Transition::Cancel)
                .unwrap_err()
                .contains("refunded at its deadline")
        );
        assert!(
            next(JobStatus::Cancelled, Transition::Cancel)
                .unwrap_err()
                .contains("cancelled cannot be cancelled")
        );
    }

    #[test]
    fn terminal_statuses_have_no_way_out() {
        for from in JobStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for t in [
                Transition::Cancel,
                Transition::Fund,
                Transition::Complete,
                Transition::Refund,
                Transition::CancelOnChain,
            ] {
                assert!(next(from, t).is_err(), "{from:?} {t:?}");
            }
        }
    }

    #[test]
    fn funded_jobs_complete_or_refund() {
        assert_eq!(
            next(JobStatus::AwaitingFunding, Transition::Fund),
            Ok(JobStatus::Open)
        );
        assert_eq!(
            next(JobStatus::Open, Transition::Complete),
            Ok(JobStatus::Completed)
        );
        assert_eq!(
            next(JobStatus::Open, Transition::Refund),
            Ok(JobStatus::Refunded)
        );
        assert!(next(JobStatus::AwaitingFunding, Transition::Complete).is_err());
    }
}
