//! The conformance suite every [`TaskQueue`] adapter passes: the same cases, run from
//! `core/tests/queue_table_sqlite.rs`, `queue_table_postgres.rs` and `queue_rabbitmq.rs`.
//!
//! Each case takes a [`QueueHarness`] (an adapter on a real backend, plus the few things only the
//! test can do to it) and a queue name unique to the run. [`crate::queue_conformance_tests!`]
//! turns every case into one `#[tokio::test]` per adapter.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use crate::queue::{
    Consumer, Delivery, MAX_PAYLOAD_BYTES, OutgoingMessage, QueueError, QueueOptions, TaskQueue,
};

/// An adapter under test.
#[async_trait]
pub trait QueueHarness: Send + Sync + 'static {
    /// The adapter.
    fn queue(&self) -> Arc<dyn TaskQueue>;

    /// The visibility timeout the cases declare queues with: short where the adapter redelivers
    /// on timeout (the table), so a dead consumer's message comes back quickly.
    fn visibility_timeout(&self) -> Duration;

    /// Cuts the adapter's connection to its backend the way a network failure or server restart
    /// would. False when the adapter has no connection to cut (SQLite is a file).
    async fn sever_connection(&self) -> bool;

    /// Removes what the case created (queues, databases).
    async fn cleanup(&self, queue: &str);
}

/// Generates one `#[tokio::test]` per case. `$make` is an async expression yielding
/// `Option<impl QueueHarness>` (`None`: the backend is absent and the skip was recorded).
#[macro_export]
macro_rules! queue_conformance_tests {
    ($make:expr) => {
        $crate::queue_conformance_tests!(@cases $make;
            published_message_is_delivered_once_and_ack_removes_it,
            consumer_that_dies_without_ack_gets_message_redelivered,
            nothing_is_lost_across_a_reconnect,
            poison_message_reaches_dead_letters_after_max_deliveries,
            released_message_is_not_counted_and_never_dead_lettered,
            message_whose_consumers_keep_dying_is_dead_lettered,
            reject_sends_message_straight_to_dead_letters,
            concurrent_consumers_ack_each_message_exactly_once,
            delayed_publish_and_retry_are_not_delivered_early,
            malformed_payload_is_a_typed_error_naming_the_message,
            duplicate_idempotency_key_is_delivered_once,
            bad_input_gets_typed_errors,
            prefetch_bounds_unsettled_deliveries,
        );
    };
    (@cases $make:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(harness) = $make.await else { return };
                $crate::testkit::queue_suite::run(harness, stringify!($case), |h, q| {
                    Box::pin(async move { $crate::testkit::queue_suite::$case(&*h, &q).await })
                })
                .await;
            }
        )+
    };
}

type CaseFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs one case on a fresh, uniquely named queue and cleans up even when it fails.
pub async fn run<H: QueueHarness>(
    harness: H,
    case: &str,
    body: impl FnOnce(Arc<H>, String) -> CaseFuture,
) {
    let harness = Arc::new(harness);
    let short: String = case
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(40)
        .collect();
    let queue = format!("test.{short}.{}", uuid::Uuid::new_v4().simple());
    let outcome = tokio::spawn(body(harness.clone(), queue.clone())).await;
    harness.cleanup(&queue).await;
    if let Err(err) = outcome {
        std::panic::resume_unwind(err.into_panic());
    }
}

const WAIT: Duration = Duration::from_secs(10);
/// How long "nothing more arrives" is watched for.
const QUIET: Duration = Duration::from_millis(700);

fn message(key: &str, payload: &str) -> OutgoingMessage {
    OutgoingMessage {
        idempotency_key: key.to_owned(),
        payload: Bytes::from(payload.to_owned()),
        delay: None,
    }
}

fn options(harness: &dyn QueueHarness, max_deliveries: u32, prefetch: u16) -> QueueOptions {
    QueueOptions {
        max_deliveries,
        visibility_timeout: harness.visibility_timeout(),
        prefetch,
    }
}

async fn declared(
    harness: &dyn QueueHarness,
    queue: &str,
    opts: QueueOptions,
) -> Arc<dyn TaskQueue> {
    let q = harness.queue();
    q.declare(queue, &opts).await.expect("declare");
    q
}

async fn expect_delivery(consumer: &mut Box<dyn Consumer>, what: &str) -> Delivery {
    match consumer.next(WAIT).await {
        Ok(Some(delivery)) => delivery,
        Ok(None) => panic!("{what}: nothing delivered within {WAIT:?}"),
        Err(err) => panic!("{what}: {err}"),
    }
}

async fn expect_quiet(consumer: &mut Box<dyn Consumer>, what: &str) {
    match consumer.next(QUIET).await {
        Ok(None) => {}
        Ok(Some(delivery)) => panic!("{what}: unexpected delivery {delivery:?}"),
        Err(err) => panic!("{what}: {err}"),
    }
}

/// Simulates a consumer process dying: no code of the delivery runs (no ack, no nack on drop),
/// and the consumer's connection or channel goes away.
fn die(consumer: Box<dyn Consumer>, delivery: Delivery) {
    std::mem::forget(delivery);
    drop(consumer);
}

/// A published message arrives once, decodes, and is gone once acked.
pub async fn published_message_is_delivered_once_and_ack_removes_it(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    q.publish(queue, message("job-1/r1/s0", r#"{"shard":0}"#))
        .await
        .expect("publish");
    assert_eq!(q.ready_count(queue).await.expect("ready_count"), 1);

    let mut consumer = q.consume(queue).await.expect("consume");
    let delivery = expect_delivery(&mut consumer, "first delivery").await;
    assert_eq!(delivery.idempotency_key, "job-1/r1/s0");
    assert_eq!(delivery.delivery_count, 1);
    let body: serde_json::Value = delivery.decode().expect("decode");
    assert_eq!(body["shard"], 0);
    delivery.ack().await.expect("ack");

    expect_quiet(&mut consumer, "after ack").await;
    assert_eq!(q.ready_count(queue).await.expect("ready_count"), 0);
}

/// A consumer that dies holding a delivery loses it to the next consumer, counted as a redelivery.
pub async fn consumer_that_dies_without_ack_gets_message_redelivered(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    q.publish(queue, message("task-a", "{}"))
        .await
        .expect("publish");

    let mut first = q.consume(queue).await.expect("consume");
    let delivery = expect_delivery(&mut first, "first consumer").await;
    assert_eq!(delivery.delivery_count, 1);
    die(first, delivery);

    let mut second = q.consume(queue).await.expect("consume");
    let again = expect_delivery(&mut second, "redelivery after the consumer died").await;
    assert_eq!(again.idempotency_key, "task-a");
    assert_eq!(again.delivery_count, 2, "the redelivery is counted");
    again.ack().await.expect("ack");
    expect_quiet(&mut second, "after ack").await;
}

/// Every message published before and after a severed connection is delivered and acked once.
pub async fn nothing_is_lost_across_a_reconnect(h: &dyn QueueHarness, queue: &str) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    let mut expected = BTreeSet::new();
    for i in 0..10 {
        let key = format!("before-{i}");
        q.publish(queue, message(&key, "{}"))
            .await
            .expect("publish before");
        expected.insert(key);
    }
    let mut consumer = q.consume(queue).await.expect("consume");
    let held = expect_delivery(&mut consumer, "held across the cut").await;

    let severed = h.sever_connection().await;

    // Publishing reconnects by itself.
    for i in 0..10 {
        let key = format!("after-{i}");
        q.publish(queue, message(&key, "{}"))
            .await
            .expect("publish after the cut");
        expected.insert(key);
    }
    // The delivery taken before the cut: either still held (the table keeps leases in the
    // database) or gone with its channel, in which case the broker hands it out again.
    let held_key = held.idempotency_key.clone();
    let mut acked = BTreeSet::new();
    match held.ack().await {
        Ok(()) => {
            acked.insert(held_key);
        }
        Err(QueueError::StaleDelivery { .. }) if severed => {}
        Err(err) => panic!("ack of the held delivery: {err}"),
    }
    // The old consumer resubscribes by itself.
    while acked.len() < expected.len() {
        let delivery = expect_delivery(&mut consumer, "draining after the cut").await;
        let key = delivery.idempotency_key.clone();
        delivery.ack().await.expect("ack after the cut");
        assert!(acked.insert(key.clone()), "{key} acked twice");
    }
    assert_eq!(
        acked, expected,
        "every message published before and after the cut arrives"
    );
    expect_quiet(&mut consumer, "after draining").await;
}

/// A message nacked `max_deliveries` times goes to the dead-letter queue.
pub async fn poison_message_reaches_dead_letters_after_max_deliveries(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 3, 1)).await;
    q.publish(queue, message("poison", "{}"))
        .await
        .expect("publish");
    let mut consumer = q.consume(queue).await.expect("consume");
    for attempt in 1..=3 {
        let delivery = expect_delivery(&mut consumer, "poison delivery").await;
        assert_eq!(delivery.delivery_count, attempt);
        delivery.nack_requeue(None).await.expect("nack");
    }
    expect_quiet(&mut consumer, "a fourth delivery").await;

    let mut dead = q
        .consume_dead_letters(queue)
        .await
        .expect("consume dead letters");
    let letter = expect_delivery(&mut dead, "dead letter").await;
    assert_eq!(letter.idempotency_key, "poison");
    letter.ack().await.expect("ack dead letter");
    expect_quiet(&mut dead, "dead letters after ack").await;
}

/// A consumer that may not take a message (a worker refused a task) releases it: it comes back,
/// as often as it is released, with its delivery count unchanged, and still counts once it is
/// really attempted.
pub async fn released_message_is_not_counted_and_never_dead_lettered(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 2, 1)).await;
    q.publish(queue, message("refused", "{}"))
        .await
        .expect("publish");
    let mut consumer = q.consume(queue).await.expect("consume");
    for _ in 0..4 {
        let delivery = expect_delivery(&mut consumer, "released delivery").await;
        assert_eq!(delivery.delivery_count, 1, "a release is not a delivery");
        delivery.release(None).await.expect("release");
    }
    let delivery = expect_delivery(&mut consumer, "after the releases").await;
    assert_eq!(delivery.delivery_count, 1);
    delivery.nack_requeue(None).await.expect("nack");
    let delivery = expect_delivery(&mut consumer, "a real second attempt").await;
    assert_eq!(delivery.delivery_count, 2, "a failed attempt still counts");
    delivery.ack().await.expect("ack");
    expect_quiet(&mut consumer, "after ack").await;
    let mut dead = q
        .consume_dead_letters(queue)
        .await
        .expect("consume dead letters");
    expect_quiet(&mut dead, "dead letters").await;
}

/// A message whose every consumer dies before settling is dead-lettered after `max_deliveries`.
pub async fn message_whose_consumers_keep_dying_is_dead_lettered(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 2, 1)).await;
    q.publish(queue, message("crasher", "{}"))
        .await
        .expect("publish");
    for attempt in 1..=2 {
        let mut consumer = q.consume(queue).await.expect("consume");
        let delivery = expect_delivery(&mut consumer, "delivery to a consumer that dies").await;
        assert_eq!(delivery.delivery_count, attempt);
        die(consumer, delivery);
    }
    // The next consumer never sees it a third time: it is dead-lettered on the way (once the
    // last dead consumer's visibility timeout has passed, for adapters that have one).
    let mut consumer = q.consume(queue).await.expect("consume");
    let watch = h.visibility_timeout().min(Duration::from_secs(5)) + QUIET;
    match consumer.next(watch).await {
        Ok(None) => {}
        Ok(Some(delivery)) => panic!("a third delivery: {delivery:?}"),
        Err(err) => panic!("watching for a third delivery: {err}"),
    }

    let mut dead = q
        .consume_dead_letters(queue)
        .await
        .expect("consume dead letters");
    let letter = expect_delivery(&mut dead, "dead letter").await;
    assert_eq!(letter.idempotency_key, "crasher");
    letter.ack().await.expect("ack");
}

/// A rejected message goes straight to the dead-letter queue; a rejected dead letter is discarded.
pub async fn reject_sends_message_straight_to_dead_letters(h: &dyn QueueHarness, queue: &str) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    q.publish(queue, message("unprocessable", "{}"))
        .await
        .expect("publish");
    let mut consumer = q.consume(queue).await.expect("consume");
    expect_delivery(&mut consumer, "delivery")
        .await
        .reject()
        .await
        .expect("reject");
    expect_quiet(&mut consumer, "after reject").await;

    let mut dead = q
        .consume_dead_letters(queue)
        .await
        .expect("consume dead letters");
    let letter = expect_delivery(&mut dead, "dead letter").await;
    assert_eq!(letter.idempotency_key, "unprocessable");
    // Rejecting a dead letter discards it.
    letter.reject().await.expect("reject dead letter");
    expect_quiet(&mut dead, "after discarding").await;
}

/// Several consumers draining one queue ack every message of a batch, none twice.
pub async fn concurrent_consumers_ack_each_message_exactly_once(h: &dyn QueueHarness, queue: &str) {
    const MESSAGES: usize = 300;
    const CONSUMERS: usize = 4;
    let q = declared(h, queue, options(h, 5, 4)).await;
    let batch = (0..MESSAGES)
        .map(|i| message(&format!("m-{i:04}"), "{}"))
        .collect();
    q.publish_batch(queue, batch).await.expect("publish batch");

    let acks: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..CONSUMERS {
        let q = q.clone();
        let acks = acks.clone();
        let queue = queue.to_owned();
        workers.push(tokio::spawn(async move {
            let mut consumer = q.consume(&queue).await.expect("consume");
            while let Some(delivery) = consumer.next(Duration::from_secs(2)).await.expect("next") {
                let key = delivery.idempotency_key.clone();
                match delivery.ack().await {
                    Ok(()) => *acks.lock().expect("lock").entry(key).or_default() += 1,
                    // Held past its visibility timeout on a loaded machine: the ack is refused
                    // and the message is someone else's now, which is the point.
                    Err(QueueError::StaleDelivery { .. }) => {}
                    Err(err) => panic!("ack {key}: {err}"),
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("consumer task");
    }
    let acks = acks.lock().expect("lock");
    let twice: Vec<_> = acks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acked more than once: {twice:?}");
    assert_eq!(acks.len(), MESSAGES, "every message acked");
}

/// A delayed publish and a delayed requeue are delivered no earlier than their delay.
pub async fn delayed_publish_and_retry_are_not_delivered_early(h: &dyn QueueHarness, queue: &str) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    let delay = Duration::from_secs(2);
    let published = Instant::now();
    let mut delayed = message("later", "{}");
    delayed.delay = Some(delay);
    q.publish(queue, delayed).await.expect("publish delayed");
    assert_eq!(
        q.ready_count(queue).await.expect("ready_count"),
        0,
        "not ready before its delay"
    );

    let mut consumer = q.consume(queue).await.expect("consume");
    let delivery = expect_delivery(&mut consumer, "delayed delivery").await;
    assert!(
        published.elapsed() >= delay,
        "delivered after {:?}",
        published.elapsed()
    );

    let requeued = Instant::now();
    let retry = Duration::from_secs(1);
    delivery
        .nack_requeue(Some(retry))
        .await
        .expect("nack with delay");
    let again = expect_delivery(&mut consumer, "retried delivery").await;
    assert!(
        requeued.elapsed() >= retry,
        "retried after {:?}",
        requeued.elapsed()
    );
    assert_eq!(again.delivery_count, 2);
    again.ack().await.expect("ack");
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)] // Fields exist to be decoded into.
struct TaskShape {
    job: String,
    shard: u32,
}

/// A payload that does not decode is [`QueueError::MalformedPayload`], naming its key.
pub async fn malformed_payload_is_a_typed_error_naming_the_message(
    h: &dyn QueueHarness,
    queue: &str,
) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    q.publish(
        queue,
        message("garbled", "{\"job\": \"j\", \"shard\": \"zero\""),
    )
    .await
    .expect("publish");
    let mut consumer = q.consume(queue).await.expect("consume");
    let delivery = expect_delivery(&mut consumer, "malformed delivery").await;
    match delivery.decode::<TaskShape>() {
        Err(QueueError::MalformedPayload { key, reason }) => {
            assert_eq!(key, "garbled");
            assert!(!reason.is_empty());
        }
        other => panic!("expected MalformedPayload, got {other:?}"),
    }
    delivery.reject().await.expect("reject");
    let mut dead = q
        .consume_dead_letters(queue)
        .await
        .expect("consume dead letters");
    expect_delivery(&mut dead, "malformed dead letter")
        .await
        .ack()
        .await
        .expect("ack");
}

/// Publishing a key again, alone or in a batch, while it is queued delivers the first publish only.
pub async fn duplicate_idempotency_key_is_delivered_once(h: &dyn QueueHarness, queue: &str) {
    let q = declared(h, queue, options(h, 5, 1)).await;
    q.publish(queue, message("job-9/r1/s3", r#"{"n":1}"#))
        .await
        .expect("publish");
    q.publish(queue, message("job-9/r1/s3", r#"{"n":2}"#))
        .await
        .expect("publish duplicate");
    q.publish_batch(queue, vec![message("job-9/r1/s3", r#"{"n":3}"#)])
        .await
        .expect("batch dup");
    let mut consumer = q.consume(queue).await.expect("consume");
    let delivery = expect_delivery(&mut consumer, "the one delivery").await;
    let body: serde_json::Value = delivery.decode().expect("decode");
    assert_eq!(body["n"], 1, "the first publish wins");
    delivery.ack().await.expect("ack");
    expect_quiet(&mut consumer, "a duplicate").await;
}

/// Bad options, names, keys and payloads, and undeclared queues, get their typed errors.
pub async fn bad_input_gets_typed_errors(h: &dyn QueueHarness, queue: &str) {
    let q = h.queue();
    let bad_options = QueueOptions {
        max_deliveries: 0,
        ..options(h, 1, 1)
    };
    assert!(matches!(
        q.declare(queue, &bad_options).await,
        Err(QueueError::InvalidOptions(_))
    ));
    assert!(matches!(
        q.declare("has space", &options(h, 5, 1)).await,
        Err(QueueError::InvalidQueueName(_))
    ));
    assert!(matches!(
        q.publish(queue, message("k", "{}")).await,
        Err(QueueError::NotDeclared(name)) if name == queue
    ));
    assert!(matches!(
        q.consume(queue).await,
        Err(QueueError::NotDeclared(_))
    ));

    q.declare(queue, &options(h, 5, 1)).await.expect("declare");
    let huge = OutgoingMessage {
        idempotency_key: "huge".into(),
        payload: Bytes::from(vec![b' '; MAX_PAYLOAD_BYTES + 1]),
        delay: None,
    };
    assert!(matches!(
        q.publish(queue, huge).await,
        Err(QueueError::PayloadTooLarge { size, limit }) if size == MAX_PAYLOAD_BYTES + 1 && limit == MAX_PAYLOAD_BYTES
    ));
    assert!(matches!(
        q.publish(queue, message("", "{}")).await,
        Err(QueueError::InvalidIdempotencyKey(_))
    ));
    assert!(matches!(
        q.publish(queue, message(&"k".repeat(256), "{}")).await,
        Err(QueueError::InvalidIdempotencyKey(_))
    ));
    assert_eq!(
        q.ready_count(queue).await.expect("ready_count"),
        0,
        "nothing bad was stored"
    );
}

/// A consumer holds no more unsettled deliveries than the queue's prefetch.
pub async fn prefetch_bounds_unsettled_deliveries(h: &dyn QueueHarness, queue: &str) {
    let q = declared(h, queue, options(h, 5, 2)).await;
    for i in 0..3 {
        q.publish(queue, message(&format!("p-{i}"), "{}"))
            .await
            .expect("publish");
    }
    let mut consumer = q.consume(queue).await.expect("consume");
    let first = expect_delivery(&mut consumer, "first").await;
    let second = expect_delivery(&mut consumer, "second").await;
    expect_quiet(&mut consumer, "a third beyond prefetch 2").await;
    first.ack().await.expect("ack");
    let third = expect_delivery(&mut consumer, "third, once a slot is free").await;
    second.ack().await.expect("ack");
    third.ack().await.expect("ack");
}
