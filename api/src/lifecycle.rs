//! The job lifecycle: the one place job statuses change.
//!
//! Every transition is a conditional update on the job's `version` (optimistic concurrency: of
//! two racing transitions exactly one wins, the other gets a conflict) plus a `job_events` row,
//! in one transaction. Events that must cause an effect elsewhere (a queue publish, a chain
//! call) are written with `needs_dispatch`, for the outbox dispatcher (`crate::outbox`).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::entities::{job, job_event};
use crate::problem::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Posted and stored; waiting for its escrow to be funded on chain.
    AwaitingFunding,
    /// Funded; rounds are running.
    Open,
    /// Finalized on chain with a result adapter.
    Completed,
    /// Withdrawn by the requester before funding.
    Cancelled,
    /// Deadline passed unfinished; the stake went back to the requester.
    Refunded,
}

impl JobStatus {
    pub const ALL: [JobStatus; 5] = [
        JobStatus::AwaitingFunding,
        JobStatus::Open,
        JobStatus::Completed,
        JobStatus::Cancelled,
        JobStatus::Refunded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::AwaitingFunding => "awaiting_funding",
            JobStatus::Open => "open",
            JobStatus::Completed => "completed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Refunded => "refunded",
        }
    }

    pub fn parse(text: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No transition leaves a terminal status.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Cancelled | JobStatus::Refunded
        )
    }
}

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
    pub fn event_kind(self) -> &'static str {
        match self {
            Transition::Cancel => "cancelled",
            Transition::Fund => "funded",
            Transition::Complete => "completed",
            Transition::Refund => "refunded",
            Transition::CancelOnChain => "cancelled",
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

/// Appends an event row for `job_id`.
pub async fn record_event<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    kind: &str,
    payload: serde_json::Value,
    needs_dispatch: bool,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    job_event::Entity::insert(job_event::ActiveModel {
        job_id: Set(job_id),
        kind: Set(kind.to_owned()),
        payload: Set(payload),
        created_at: Set(now),
        needs_dispatch: Set(needs_dispatch),
        dispatched_at: Set(None),
        dispatch_attempts: Set(0),
        last_dispatch_error: Set(None),
        ..Default::default()
    })
    .exec(db)
    .await?;
    Ok(())
}

/// Applies `transition` to `job` inside `txn` (the caller commits), recording its event.
/// Conflicts (illegal transition, or the job changed since it was read) are 409.
pub async fn apply<C: ConnectionTrait>(
    txn: &C,
    job: &job::Model,
    transition: Transition,
    payload: serde_json::Value,
    now: DateTime<Utc>,
) -> Result<JobStatus, ApiError> {
    let from = JobStatus::parse(&job.status).ok_or_else(|| {
        ApiError::internal(
            "job lifecycle",
            format!("job {} has unknown status {:?}", job.id, job.status),
        )
    })?;
    let to = next(from, transition).map_err(ApiError::conflict)?;
    let updated = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(to.as_str()))
        .col_expr(job::Column::Version, Expr::value(job.version + 1))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(job.id))
        .filter(job::Column::Version.eq(job.version))
        .exec(txn)
        .await?;
    if updated.rows_affected != 1 {
        return Err(ApiError::conflict(format!(
            "job {} changed while this request ran; read it again",
            job.id
        )));
    }
    let mut payload = payload;
    if let Some(object) = payload.as_object_mut() {
        object.insert("from".into(), from.as_str().into());
        object.insert("to".into(), to.as_str().into());
    }
    // Transitions cause no effect elsewhere by themselves: the events that do (a round's tasks
    // to publish, a payout or refund to send) are written beside them by `crate::flow`.
    record_event(txn, job.id, transition.event_kind(), payload, false, now).await?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_text() {
        for s in JobStatus::ALL {
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobStatus::parse("running"), None);
    }

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
