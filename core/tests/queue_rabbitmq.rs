//! The RabbitMQ adapter against the TaskQueue conformance suite, on the real broker. Every test
//! uses queues named uniquely for the run and deletes them after.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::{OutgoingMessage, QueueError, QueueOptions, TaskQueue};
use shardwork_core::testkit::queue_suite::QueueHarness;
use shardwork_core::testkit::services::{Service, service_url};

struct RabbitHarness {
    queue: RabbitQueue,
}

#[async_trait]
impl QueueHarness for RabbitHarness {
    fn queue(&self) -> Arc<dyn TaskQueue> {
        Arc::new(self.queue.clone())
    }

    /// RabbitMQ has no visibility timeout: a dead consumer's channel closing returns its
    /// deliveries at once.
    fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(300)
    }

    async fn sever_connection(&self) -> bool {
        self.queue.sever_connection().await;
        true
    }

    async fn cleanup(&self, queue: &str) {
        if let Err(err) = self.queue.delete(queue).await {
            eprintln!("cleaning up {queue}: {err}");
        }
    }
}

async fn connect(url: &str) -> RabbitQueue {
    RabbitQueue::connect(url, RabbitSettings::default())
        .await
        .expect("connect to RabbitMQ")
}

async fn harness() -> Option<RabbitHarness> {
    let url = service_url(Service::RabbitMq, "TaskQueue (RabbitMQ)")?;
    Some(RabbitHarness {
        queue: connect(&url).await,
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

fn unique(name: &str) -> String {
    format!("test.{name}.{}", uuid::Uuid::new_v4().simple())
}

/// Deduplication is per handle: another process publishing the same key is not deduplicated,
/// but its copy carries the same key, so the consumer can tell.
#[tokio::test]
async fn duplicates_from_another_handle_arrive_with_the_same_key() {
    let Some(url) = service_url(Service::RabbitMq, "TaskQueue (RabbitMQ)") else {
        return;
    };
    let (a, b) = (connect(&url).await, connect(&url).await);
    let queue = unique("dedupe");
    for q in [&a, &b] {
        q.declare(&queue, &QueueOptions::default())
            .await
            .expect("declare");
        q.publish(&queue, message("same")).await.expect("publish");
    }
    let mut consumer = a.consume(&queue).await.expect("consume");
    for _ in 0..2 {
        let d = consumer
            .next(Duration::from_secs(5))
            .await
            .expect("next")
            .expect("delivery");
        assert_eq!(d.idempotency_key, "same");
        d.ack().await.expect("ack");
    }
    a.delete(&queue).await.expect("delete");
}

#[tokio::test]
async fn declaring_an_existing_queue_with_other_limits_names_the_conflict() {
    let Some(url) = service_url(Service::RabbitMq, "TaskQueue (RabbitMQ)") else {
        return;
    };
    let q = connect(&url).await;
    let queue = unique("conflict");
    q.declare(&queue, &QueueOptions::default())
        .await
        .expect("declare");
    let other = QueueOptions {
        max_deliveries: 9,
        ..QueueOptions::default()
    };
    match q.declare(&queue, &other).await {
        Err(QueueError::Backend(msg)) => assert!(msg.contains(&queue), "{msg}"),
        other => panic!("expected a Backend error naming the queue, got {other:?}"),
    }
    // The handle still works after the broker refused the declaration.
    q.publish(&queue, message("still-works"))
        .await
        .expect("publish after a refused declare");
    q.delete(&queue).await.expect("delete");
}

#[tokio::test]
async fn unreachable_broker_is_reported_not_retried_forever() {
    let settings = RabbitSettings {
        reconnect_within: Duration::from_millis(300),
        ..RabbitSettings::default()
    };
    // Port 1 on localhost: nothing listens there.
    match RabbitQueue::connect("amqp://guest:guest@127.0.0.1:1/%2f", settings).await {
        Err(QueueError::Disconnected(msg)) => assert!(msg.contains("127.0.0.1"), "{msg}"),
        Err(other) => panic!("expected Disconnected, got {other}"),
        Ok(_) => panic!("connected to a port nothing listens on"),
    }
    match RabbitQueue::connect("http://not-amqp", RabbitSettings::default()).await {
        Err(QueueError::InvalidOptions(msg)) => assert!(msg.contains("AMQP URL"), "{msg}"),
        Err(other) => panic!("expected InvalidOptions, got {other}"),
        Ok(_) => panic!("accepted an http URL"),
    }
}
