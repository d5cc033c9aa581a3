//! The table queue on SQLite (a temporary file) against the TaskQueue conformance suite, plus
//! what only the table adapter has: visibility timeouts and lease tokens.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sea_orm::Database;
use sea_orm_migration::MigratorTrait;
use shardwork_core::queue::table::TableQueue;
use shardwork_core::queue::table::schema::QueueOnly as Migrator;
use shardwork_core::queue::{OutgoingMessage, QueueError, QueueOptions, TaskQueue};
use shardwork_core::testkit::queue_suite::QueueHarness;

struct SqliteHarness {
    queue: TableQueue,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl QueueHarness for SqliteHarness {
    fn queue(&self) -> Arc<dyn TaskQueue> {
        Arc::new(self.queue.clone())
    }

    fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(3)
    }

    async fn sever_connection(&self) -> bool {
        false
    }

    async fn cleanup(&self, _queue: &str) {}
}

async fn harness() -> Option<SqliteHarness> {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("queue.db").display()
    );
    let db = Database::connect(&url).await.expect("open sqlite");
    Migrator::up(&db, None).await.expect("migrate");
    Some(SqliteHarness {
        queue: TableQueue::new(db),
        _dir: dir,
    })
}

shardwork_core::queue_conformance_tests!(harness());

fn message(key: &str) -> OutgoingMessage {
    OutgoingMessage {
        idempotency_key: key.into(),
        payload: Bytes::from_static(b"{}"),
        delay: None,
    }
}

#[tokio::test]
async fn ack_after_visibility_timeout_fails_and_keeps_the_new_claim() {
    let h = harness().await.expect("sqlite");
    let q = h.queue.clone();
    let options = QueueOptions {
        max_deliveries: 5,
        visibility_timeout: Duration::from_millis(300),
        prefetch: 1,
    };
    q.declare("leases", &options).await.expect("declare");
    q.publish("leases", message("slow")).await.expect("publish");

    let mut slow = q.consume("leases").await.expect("consume");
    let stale = slow
        .next(Duration::from_secs(5))
        .await
        .expect("next")
        .expect("delivery");
    tokio::time::sleep(Duration::from_millis(400)).await;

    let mut fast = q.consume("leases").await.expect("consume");
    let fresh = fast
        .next(Duration::from_secs(5))
        .await
        .expect("next")
        .expect("redelivery");
    assert_eq!(fresh.delivery_count, 2);

    match stale.ack().await {
        Err(QueueError::StaleDelivery { key, .. }) => assert_eq!(key, "slow"),
        other => panic!("stale ack must fail, got {other:?}"),
    }
    // The new claim survived the stale ack and settles normally.
    fresh.ack().await.expect("ack of the live claim");
    assert!(
        fast.next(Duration::from_millis(400))
            .await
            .expect("next")
            .is_none()
    );
}

#[tokio::test]
async fn acked_key_can_be_published_again() {
    let h = harness().await.expect("sqlite");
    let q = h.queue.clone();
    q.declare("again", &QueueOptions::default())
        .await
        .expect("declare");
    q.publish("again", message("k")).await.expect("publish");
    let mut consumer = q.consume("again").await.expect("consume");
    consumer
        .next(Duration::from_secs(5))
        .await
        .expect("next")
        .expect("delivery")
        .ack()
        .await
        .expect("ack");
    q.publish("again", message("k"))
        .await
        .expect("publish after ack");
    assert!(
        consumer
            .next(Duration::from_secs(5))
            .await
            .expect("next")
            .is_some()
    );
}
