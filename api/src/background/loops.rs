//! Starting the background loops: the outbox dispatcher, the chain follower, the reaper and
//! the expiry of uploads no job names,
//! each a loop that polls, acts, and sleeps. They run only while this process holds the
//! background lease (`crate::background::leadership`: one replica at a time), and stop when the
//! returned handle is dropped or stopped.
//!
//! A loop with work waiting is woken at once (`crate::background::wakeups`) rather than at its
//! next poll: a merge's next round was published up to 250 ms after it was committed, and a
//! payout seen up to 500 ms after it was sent, on every round's critical path. The polls stay, for work
//! another process wrote (several API replicas, a restart).

use std::sync::Arc;
use std::time::Duration;

use shardwork_core::protocol::TASK_QUEUE;
use shardwork_core::queue::{QueueError, QueueOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::background::error::BackgroundError;
use crate::background::follower::follow_once;
use crate::background::leadership;
use crate::background::outbox::Dispatcher;
use crate::background::reaper::reap_once;
use crate::domain::content::{EXPIRE_BATCH, expire_uploads};
use crate::state::AppState;

/// How often unreferenced uploads past `upload_ttl_secs` are looked for: the TTL is hours, so
/// a minute late is nothing, and the pass is one indexed read.
const UPLOAD_EXPIRY_POLL: Duration = Duration::from_secs(60);

/// Sleeps for `poll`, or until `signal` (when wakeups are on).
async fn nap(poll: Duration, signal: Option<&Notify>) {
    match signal {
        Some(signal) => tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = signal.notified() => {}
        },
        None => tokio::time::sleep(poll).await,
    }
}

/// The running loops; dropping it stops them.
pub struct Background {
    handles: Vec<JoinHandle<()>>,
}

impl Background {
    /// Stops the loops now, as dropping the handle would.
    pub fn stop(self) {}
}

impl Drop for Background {
    fn drop(&mut self) {
        for handle in &self.handles {
            handle.abort();
        }
    }
}

/// Declares the task queue, then runs the loops whenever this process holds the background
/// lease: at once on SQLite, on PostgreSQL as soon as no other replica holds it.
pub async fn start(
    state: Arc<AppState>,
    queue_options: &QueueOptions,
) -> Result<Background, QueueError> {
    state.queue.declare(TASK_QUEUE, queue_options).await?;
    let supervisor = tokio::spawn(async move {
        loop {
            let mut lease = leadership::acquire(&state.db).await;
            tracing::info!("background lease taken: running the outbox, follower and reaper");
            state.background_role.set_leader(true);
            let loops = spawn_loops(state.clone());
            lease.lost().await;
            // Stopped before anything else: the lock may be someone else's by the next
            // heartbeat.
            drop(loops);
            state.background_role.set_leader(false);
            tracing::warn!("background lease lost: loops stopped; standing by");
            leadership::release(lease).await;
        }
    });
    Ok(Background {
        handles: vec![supervisor],
    })
}

/// Spawns the three loops; dropping the result stops them.
fn spawn_loops(state: Arc<AppState>) -> Background {
    let interval = Duration::from_millis(state.config.background_interval_ms.max(10));
    let mut handles = Vec::new();

    let s = state.clone();
    handles.push(tokio::spawn(async move {
        let mut dispatcher = Dispatcher::default();
        loop {
            match dispatcher
                .dispatch_once(&s.db, s.queue.as_ref(), s.chain.as_ref())
                .await
            {
                Ok(n) if n > 0 => {
                    s.wakeups.follower.notify_one();
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "outbox pass failed"),
            }
            let wake = s.config.background_wakeups.then_some(&*s.wakeups.outbox);
            nap(interval, wake).await;
        }
    }));

    if let Some(chain) = state.chain.clone() {
        let s = state.clone();
        handles.push(tokio::spawn(async move {
            let poll = chain.poll_interval;
            loop {
                match follow_once(&s.db, &chain, s.config.task_max_attempts).await {
                    // Funding opens round 1; a payout may leave nothing to dispatch, but
                    // looking costs one indexed read.
                    Ok(n) if n > 0 => s.wakeups.outbox.notify_one(),
                    Ok(_) => {}
                    Err(e @ BackgroundError::Reorganised { .. }) => {
                        tracing::error!(error = %e, "chain follower stopped")
                    }
                    Err(e) => tracing::warn!(error = %e, "chain follower pass failed"),
                }
                let wake = s.config.background_wakeups.then_some(&*s.wakeups.follower);
                nap(poll, wake).await;
            }
        }));
    }

    let s = state.clone();
    handles.push(tokio::spawn(async move {
        let ttl = chrono::Duration::seconds(
            i64::try_from(s.config.upload_ttl_secs).unwrap_or(i64::MAX / 1000),
        );
        loop {
            match expire_uploads(&s.db, s.store.as_ref(), ttl, chrono::Utc::now()).await {
                // A full batch: more are waiting.
                Ok(n) if n as u64 >= EXPIRE_BATCH => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "upload expiry pass failed"),
            }
            tokio::time::sleep(UPLOAD_EXPIRY_POLL).await;
        }
    }));

    let s = state;
    handles.push(tokio::spawn(async move {
        loop {
            match reap_once(&s.db, chrono::Utc::now()).await {
                Ok(n) if n > 0 => s.wakeups.outbox.notify_one(),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
            }
            tokio::time::sleep(interval.max(Duration::from_millis(500))).await;
        }
    }));
    Background { handles }
}
