//! The reaper: returns tasks whose lease expired to the queue (bounded by their attempts), and
//! starts the refund of jobs that passed their deadline unfinished.

use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect,
    TransactionTrait,
};
use shardwork_core::protocol::{EventKind, JobEvent, events};

use crate::background::error::BackgroundError;
use crate::domain::DomainError;
use crate::domain::flow::tasks::{TaskStatus, requeue};
use crate::domain::lifecycle::{self, JobStatus, Transition, record_event};
use crate::entities::{job, job_event, task};

/// Tasks handled per pass.
const BATCH: u64 = 100;

/// One pass; returns how many tasks and jobs it acted on.
pub async fn reap_once(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
) -> Result<usize, BackgroundError> {
    let mut acted = 0;
    let expired = task::Entity::find()
        .filter(task::Column::Status.eq(TaskStatus::Leased))
        .filter(task::Column::LeaseExpiresAt.lt(now))
        .limit(BATCH)
        .all(db)
        .await?;
    for t in expired {
        let txn = db.begin().await?;
        match requeue(&txn, &t, "lease expired", now).await {
            Ok(status) => {
                txn.commit().await?;
                tracing::info!(task = %t.id, job = %t.job_id, ?status, "expired lease reaped");
                acted += 1;
            }
            // The holder extended or submitted in the meantime: nothing to do.
            Err(DomainError::Conflict(_)) => txn.rollback().await?,
            Err(e) => return Err(e.into()),
        }
    }
    let overdue = job::Entity::find()
        .filter(job::Column::Deadline.lt(now))
        .filter(job::Column::Status.is_in([
            JobStatus::AwaitingFunding.as_str(),
            JobStatus::Open.as_str(),
        ]))
        .limit(BATCH)
        .all(db)
        .await?;
    for j in overdue {
        let txn = db.begin().await?;
        if j.status == JobStatus::AwaitingFunding {
            // Nothing is escrowed (the escrow refuses a deadline in the past), so the posting
            // simply lapses.
            match lifecycle::apply(
                &txn,
                &j,
                Transition::Cancel,
                |change| {
                    JobEvent::Cancelled(events::Cancelled {
                        from: change.from,
                        to: change.to,
                        by: None,
                        reason: Some("the deadline passed before the job was funded".into()),
                        tx_hash: None,
                        stake_wei: None,
                    })
                },
                now,
            )
            .await
            {
                Ok(_) => {}
                Err(DomainError::Conflict(_)) => {
                    txn.rollback().await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            let already = job_event::Entity::find()
                .filter(job_event::Column::JobId.eq(j.id))
                .filter(job_event::Column::Kind.eq(EventKind::RefundDue.as_str()))
                .count(&txn)
                .await?;
            if already > 0 {
                txn.rollback().await?;
                continue;
            }
            record_event(
                &txn,
                j.id,
                &JobEvent::RefundDue(events::RefundDue {
                    deadline: j.deadline,
                    round: j.current_round as u32,
                }),
                true,
                now,
            )
            .await?;
        }
        txn.commit().await?;
        acted += 1;
    }
    Ok(acted)
}
