//! The background lease on PostgreSQL, as two replicas see it: one holds it, the other waits;
//! a holder whose session dies, or that goes silent (hung), hands it on within seconds.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use shardwork_api::background::leadership::{self, HEARTBEAT, IDLE_CUTOFF, Lease};
use shardwork_core::testkit::services::{Service as External, service_url};

/// Two connection pools on one new database, as two replicas would have.
async fn two_replicas() -> Option<(DatabaseConnection, DatabaseConnection)> {
    let url = service_url(External::Postgres, "background lease on PostgreSQL")?;
    let admin = Database::connect(&url)
        .await
        .expect("connect to PostgreSQL");
    let name = format!("shardwork_lease_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_raw(Statement::from_string(
            admin.get_database_backend(),
            format!("CREATE DATABASE {name}"),
        ))
        .await
        .expect("create database");
    let slash = url.rfind('/').expect("PostgreSQL URL names a database");
    let url = format!("{}/{name}", &url[..slash]);
    Some((
        Database::connect(&url).await.unwrap(),
        Database::connect(&url).await.unwrap(),
    ))
}

/// Waits for `db` to take the lease, or `None` after `within`.
async fn acquire_within(db: &DatabaseConnection, within: Duration) -> Option<Lease> {
    tokio::time::timeout(within, leadership::acquire(db))
        .await
        .ok()
}

#[tokio::test]
async fn one_replica_holds_the_lease_and_a_dead_holder_hands_it_on_at_once() {
    let Some((first, second)) = two_replicas().await else {
        return;
    };
    let mut held = acquire_within(&first, Duration::from_secs(5))
        .await
        .expect("the first replica takes a free lease");
    assert!(matches!(held, Lease::Postgres(_)));
    assert!(
        acquire_within(&second, 3 * HEARTBEAT).await.is_none(),
        "a second replica must not hold it too"
    );

    // The holder's session ends (its process died, or the server cut it off).
    let waiting = tokio::spawn(async move { leadership::acquire(&second).await });
    tokio::time::sleep(HEARTBEAT).await;
    first
        .execute_raw(Statement::from_string(
            first.get_database_backend(),
            "SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ))
        .await
        .unwrap();
    let ended = Instant::now();
    tokio::time::timeout(3 * HEARTBEAT, held.lost())
        .await
        .expect("the old holder notices within a heartbeat or two");
    let next = tokio::time::timeout(3 * HEARTBEAT, waiting)
        .await
        .expect("the standby takes the lease within a heartbeat or two")
        .unwrap();
    assert!(matches!(next, Lease::Postgres(_)));
    println!(
        "handed on {:?} after the holder's session ended",
        ended.elapsed()
    );
}

#[tokio::test]
async fn a_silent_holder_loses_the_lease_after_the_idle_cut_off() {
    let Some((first, second)) = two_replicas().await else {
        return;
    };
    // Held, but never heartbeating: a hung process.
    let hung = acquire_within(&first, Duration::from_secs(5))
        .await
        .expect("the first replica takes a free lease");
    let started = Instant::now();
    let next = acquire_within(&second, IDLE_CUTOFF + 3 * HEARTBEAT)
        .await
        .expect("the server closes the silent session and the standby takes over");
    assert!(matches!(next, Lease::Postgres(_)));
    assert!(
        started.elapsed() >= IDLE_CUTOFF - HEARTBEAT,
        "taken after {:?}, before the holder could have gone silent long enough",
        started.elapsed()
    );
    drop(hung);
}

#[tokio::test]
async fn sqlite_is_always_the_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("api.db").display());
    let db = Database::connect(&url).await.unwrap();
    let mut lease = acquire_within(&db, Duration::from_secs(1)).await.unwrap();
    assert!(matches!(lease, Lease::Sole));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), lease.lost())
            .await
            .is_err(),
        "the sole process never loses it"
    );
}
