//! Which API replica runs the background loops: exactly one at a time, across any number of
//! `serve` processes on one PostgreSQL database ([decision 0029](../../../docs/decisions/0029-one-background-leader.md)).
//!
//! The outbox sends chain transactions from the one operator key and the follower mirrors the
//! chain into the database; two processes doing either at once would collide on nonces and
//! send the same call twice. So the loops run only in the replica holding a PostgreSQL
//! session-level advisory lock, taken on a connection of its own:
//!
//! - a holder that dies (SIGKILL, a crash, a lost machine) loses its connection and with it the
//!   lock: its socket is closed by the kernel at once, and a connection nobody speaks on is
//!   closed by the server after `idle_session_timeout`, which the holder sets on its session.
//!   A hung holder (stopped, swapping) is thus cut off too, which no keepalive would do;
//! - the holder proves it still holds the lock with a query every [`HEARTBEAT`]; when one fails
//!   or does not answer within [`HEARTBEAT`], it stops its loops at once. It stops before the
//!   server can have released the lock ([`IDLE_CUTOFF`] is longer than two heartbeats), so two
//!   replicas never run the loops together;
//! - every other replica tries to take the lock every [`HEARTBEAT`]: a killed holder is replaced
//!   within about a second, a hung or cut-off one within [`IDLE_CUTOFF`] and a second.
//!
//! Every effect of the loops is safe to repeat (`crate::background::outbox`), so the one thing
//! the lock must guarantee is that no two replicas act at once, not that an effect cut short by
//! a hand-over is never tried again.
//!
//! On SQLite there is one process by construction (the file is not shared across machines and
//! the embedded chain lives in that process): it is always the holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sea_orm::sqlx::{self, ConnectOptions, Connection, PgConnection};
use sea_orm::{DatabaseBackend, DatabaseConnection};

/// How often the holder proves its lease and the others try to take it; also how long one such
/// query may take before the holder gives the lease up.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long the server keeps a silent session (and the lock it holds) before closing it.
pub const IDLE_CUTOFF: Duration = Duration::from_secs(5);
/// The advisory lock's key: the background loops of one database (advisory locks are scoped
/// to the database, so deployments sharing a PostgreSQL server do not contend).
const LOCK_KEY: i64 = 0x5348_4152_4457_4b01; // "SHARDWK" and a version byte

/// Whether this process runs the background loops now; read by `/readyz` and `/metrics`.
#[derive(Clone, Default)]
pub struct Role(Arc<AtomicBool>);

impl Role {
    /// True while this process holds the lease and runs the loops.
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.0.store(leader, Ordering::Relaxed);
    }

    /// `leader` or `standby`, as `/readyz` reports it.
    pub fn name(&self) -> &'static str {
        if self.is_leader() {
            "leader"
        } else {
            "standby"
        }
    }
}

/// A held lease on the background loops.
pub enum Lease {
    /// SQLite: the only process.
    Sole,
    /// PostgreSQL: the connection whose session holds the advisory lock.
    Postgres(Box<PgConnection>),
}

impl Lease {
    /// Resolves when the lease is lost: never for [`Lease::Sole`]; for PostgreSQL when a
    /// heartbeat query fails or does not answer within [`HEARTBEAT`].
    pub async fn lost(&mut self) {
        let Lease::Postgres(connection) = self else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            // The session's own lock, not just a live connection: behind a pooler in
            // transaction mode a session lock would not survive, and this would say so.
            let proof = sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                 AND pid = pg_backend_pid() AND granted)",
            )
            .fetch_one(connection.as_mut());
            match tokio::time::timeout(HEARTBEAT, proof).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    tracing::warn!("background lease: the lock is no longer held");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "background lease: heartbeat failed");
                    return;
                }
                Err(_) => {
                    tracing::warn!(after = ?HEARTBEAT, "background lease: heartbeat unanswered");
                    return;
                }
            }
        }
    }
}

/// Waits until this process holds the lease, trying every [`HEARTBEAT`].
pub async fn acquire(db: &DatabaseConnection) -> Lease {
    if db.get_database_backend() != DatabaseBackend::Postgres {
        return Lease::Sole;
    }
    let mut waiting_logged = false;
    let mut candidate: Option<PgConnection> = None;
    loop {
        if candidate.is_none() {
            match connect(db).await {
                Ok(connection) => candidate = Some(connection),
                Err(e) => tracing::warn!(error = %e, "background lease: cannot connect"),
            }
        }
        if let Some(connection) = candidate.as_mut() {
            let attempt = sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
                .bind(LOCK_KEY)
                .fetch_one(&mut *connection);
            match tokio::time::timeout(HEARTBEAT, attempt).await {
                Ok(Ok(true)) => {
                    if let Some(connection) = candidate.take() {
                        return Lease::Postgres(Box::new(connection));
                    }
                }
                Ok(Ok(false)) => {
                    if !waiting_logged {
                        tracing::info!(
                            "another API replica runs the background loops; standing by"
                        );
                        waiting_logged = true;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "background lease: trying the lock failed");
                    candidate = None;
                }
                Err(_) => candidate = None,
            }
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// A connection of its own (the lock belongs to a session, so never a pooled one), whose
/// session the server closes once silent for [`IDLE_CUTOFF`].
async fn connect(db: &DatabaseConnection) -> Result<PgConnection, sqlx::Error> {
    let options = db.get_postgres_connection_pool().connect_options();
    let mut connection = tokio::time::timeout(IDLE_CUTOFF, options.connect())
        .await
        .map_err(|_| {
            sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connecting took longer than the idle cut-off",
            ))
        })??;
    sqlx::query("SELECT set_config('idle_session_timeout', $1, false)")
        .bind(IDLE_CUTOFF.as_millis().to_string())
        .execute(&mut connection)
        .await?;
    Ok(connection)
}

/// Closes a lease's connection politely (releasing the lock at once rather than when the
/// server notices); a lease dropped without this is released when its socket closes.
pub async fn release(lease: Lease) {
    if let Lease::Postgres(connection) = lease {
        let _ = connection.close().await;
    }
}
