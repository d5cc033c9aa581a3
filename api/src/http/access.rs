//! Who may read what of a job: its requester's share (result, curves), its content (dataset,
//! held-out set), and its feed, where each reader sees only some events.
//!
//! A job's requester, validators and admins see every event. A worker that has leased one of the
//! job's tasks sees the job's own events (funding, rounds, merges, payout: what the chain shows
//! anyway) and the events of its own tasks, never another worker's claims, submissions or
//! verdicts (they would name adapters to copy and shards to shadow). Anyone else is refused.

use std::collections::BTreeSet;

use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use shardwork_core::protocol::{EventKind, JobEvent};
use uuid::Uuid;

use crate::domain::content::{Readers, readers};
use crate::entities::{job, job_event};
use crate::http::auth::Claims;
use crate::http::auth::tokens::Role;
use crate::http::problem::ApiError;

/// 403 unless `caller` oversees `job` (its requester, a validator or an admin): what a job
/// keeps for its requester (its result, its training curves) goes to no one else.
pub fn require_overseer(caller: &Claims, job: &job::Model, what: &str) -> Result<(), ApiError> {
    if caller.oversees(&job.requester) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "{what} of job {} is for its requester, validators and admins",
        job.id
    )))
}

/// 403 unless `caller` may read the content `cid` names, under whichever spelling it came:
/// a job's dataset as posted (its held-out records in the clear) is its requester's,
/// validators' and admins'; a job's sealed held-out set validators' and admins' only. The
/// rule is looked up by the content's multihash, so a CIDv0 and every CIDv1 of the same
/// bytes meet the same answer.
pub async fn require_content_reader(
    db: &DatabaseConnection,
    caller: &Claims,
    cid: &cid::Cid,
) -> Result<(), ApiError> {
    if caller.has(Role::Validator) || caller.has(Role::Admin) {
        return Ok(());
    }
    let address = caller.sub.to_string();
    match readers(db, cid).await? {
        Readers::Anyone => Ok(()),
        Readers::Requesters(owners) if owners.contains(&address) => Ok(()),
        Readers::Requesters(_) => Err(ApiError::forbidden(format!(
            "{cid} is a job's dataset; only its requester, validators and admins may read it"
        ))),
        Readers::Validators => Err(ApiError::forbidden(format!(
            "{cid} is a job's sealed held-out set; only validators and admins may read it"
        ))),
    }
}

/// What one reader sees of a job's feed.
#[derive(Debug, Clone)]
pub enum Audience {
    /// The requester, a validator or an admin: everything.
    Overseer,
    /// A worker with a lease on the job, at `address`; `tasks` are the tasks it has leased.
    Worker {
        /// The worker's address, lowercase.
        address: String,
        /// The tasks of the job it has leased.
        tasks: BTreeSet<Uuid>,
    },
}

impl Audience {
    /// The audience `caller` is for `job`, or 403 if the caller has no part in it.
    pub async fn of(
        db: &DatabaseConnection,
        caller: &Claims,
        job: &job::Model,
    ) -> Result<Audience, ApiError> {
        if caller.oversees(&job.requester) {
            return Ok(Audience::Overseer);
        }
        let address = caller.sub.to_string();
        let claims = job_event::Entity::find()
            .filter(job_event::Column::JobId.eq(job.id))
            .filter(job_event::Column::Kind.eq(EventKind::TaskClaimed.as_str()))
            .all(db)
            .await?;
        let mut tasks = BTreeSet::new();
        for row in claims {
            if let Ok(event) = JobEvent::from_parts(&row.kind, row.payload)
                && event
                    .worker()
                    .is_some_and(|w| w.eq_ignore_ascii_case(&address))
                && let Some(task) = event.task()
            {
                tasks.insert(task);
            }
        }
        if tasks.is_empty() {
            return Err(ApiError::forbidden(format!(
                "{address} has no part in job {}: its events are for its requester, validators \
                 and the workers of its tasks",
                job.id
            )));
        }
        Ok(Audience::Worker { address, tasks })
    }

    /// Whether this audience sees `event`. A worker's own new claim widens what it sees next.
    pub fn admits(&mut self, event: &JobEvent) -> bool {
        let Audience::Worker { address, tasks } = self else {
            return true;
        };
        if let Some(worker) = event.worker() {
            let mine = worker.eq_ignore_ascii_case(address);
            if mine && let (JobEvent::TaskClaimed(_), Some(task)) = (event, event.task()) {
                tasks.insert(task);
            }
            return mine;
        }
        match event.task() {
            Some(task) => tasks.contains(&task),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use shardwork_core::protocol::events::{Submitted, TaskAttempt, TaskClaimed};

    fn claimed(task: u128, worker: &str) -> JobEvent {
        JobEvent::TaskClaimed(TaskClaimed {
            task_id: Uuid::from_u128(task),
            round: 1,
            shard: 0,
            worker: worker.into(),
            attempt: 1,
            lease_expires_at: Utc::now(),
        })
    }

    fn submitted(task: u128, worker: &str) -> JobEvent {
        JobEvent::Submitted(Submitted {
            submission_id: Uuid::from_u128(100 + task),
            task_id: Uuid::from_u128(task),
            round: 1,
            shard: 0,
            worker: worker.into(),
            samples: 10,
            adapter_cid: "bafy".into(),
        })
    }

    fn requeued(task: u128) -> JobEvent {
        JobEvent::TaskRequeued(TaskAttempt {
            task_id: Uuid::from_u128(task),
            round: 1,
            attempts: 1,
            max_attempts: 3,
            reason: "lease expired".into(),
        })
    }

    #[test]
    fn a_worker_sees_its_own_tasks_and_the_job_but_no_one_elses_work() {
        let mut me = Audience::Worker {
            address: "0xaa".into(),
            tasks: BTreeSet::from([Uuid::from_u128(1)]),
        };
        assert!(me.admits(&submitted(1, "0xAA")));
        assert!(me.admits(&requeued(1)));
        assert!(!me.admits(&submitted(2, "0xbb")));
        assert!(!me.admits(&claimed(2, "0xbb")));
        assert!(!me.admits(&requeued(2)));
        // Claiming task 3 itself, it then sees task 3's requeue.
        assert!(me.admits(&claimed(3, "0xaa")));
        assert!(me.admits(&requeued(3)));
        assert!(me.admits(&JobEvent::RoundReady(
            shardwork_core::protocol::events::RoundReady {
                round: 1,
                accepted: 3
            }
        )));
        let mut overseer = Audience::Overseer;
        assert!(overseer.admits(&submitted(2, "0xbb")));
    }
}
