//! The TaskQueue port: at-least-once delivery of work items (one per shard and round).
//!
//! Delivery is at-least-once on both adapters; the database state machine makes every effect
//! happen once. Two adapters:
//!
//! * [`rabbitmq::RabbitQueue`]: RabbitMQ through lapin (durable quorum queues, persistent
//!   messages, publisher confirms, prefetch, dead-letter exchange, reconnect with backoff).
//! * [`table::TableQueue`]: a table in the application database (SQLite or PostgreSQL) with
//!   visibility timeouts, so `shardwork up` needs no broker.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "table-queue")]
pub mod table;

/// Largest payload either adapter accepts. Task messages carry CIDs and small specs, never data;
/// anything near this size is a bug upstream, and RabbitMQ's own limit is far larger.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// A message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Stable key for the logical message (for tasks: job, round and shard). Publishing the same
    /// key twice to a queue delivers it once (see each adapter for the window this holds in).
    pub idempotency_key: String,
    /// The message's bytes (for tasks, a JSON task message).
    pub payload: Bytes,
    /// Deliver no earlier than this long from now (delayed retry).
    pub delay: Option<Duration>,
}

/// How a queue behaves; both adapters honour every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOptions {
    /// After this many deliveries without an ack the message goes to the dead-letter queue.
    pub max_deliveries: u32,
    /// How long a delivered, unacknowledged message stays invisible before it is redelivered
    /// to another consumer (table adapter; RabbitMQ redelivers when the channel closes).
    pub visibility_timeout: Duration,
    /// How many unacknowledged deliveries one consumer may hold.
    pub prefetch: u16,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            max_deliveries: 5,
            visibility_timeout: Duration::from_secs(300),
            prefetch: 1,
        }
    }
}

/// Errors of the TaskQueue port.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A queue name outside [`validate_queue_name`]'s rule.
    #[error("queue name {0:?} is invalid: use 1-200 characters of [A-Za-z0-9._-]")]
    InvalidQueueName(String),
    /// A delivered payload did not decode as the message expected.
    #[error("payload of message {key:?} is malformed: {reason}")]
    MalformedPayload {
        /// The message's idempotency key.
        key: String,
        /// What the decoder reported.
        reason: String,
    },
    /// A payload over the queue's limit ([`MAX_PAYLOAD_BYTES`]).
    #[error("payload of {size} bytes exceeds the queue's limit of {limit} bytes")]
    PayloadTooLarge {
        /// The payload's size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// An idempotency key that is empty or longer than 255 bytes.
    #[error("idempotency key {0:?} is invalid: use 1-255 bytes")]
    InvalidIdempotencyKey(String),
    /// [`QueueOptions`] that no adapter can honour.
    #[error("queue options are invalid: {0}")]
    InvalidOptions(String),
    /// A queue used on this handle before [`TaskQueue::declare`].
    #[error("queue {0:?} was not declared on this handle: call declare first")]
    NotDeclared(String),
    /// Settling a delivery the consumer no longer holds; the queue delivers it again.
    #[error("delivery of message {key:?} is no longer held ({reason}); it will be redelivered")]
    StaleDelivery {
        /// The message's idempotency key.
        key: String,
        /// Why it is no longer held (its channel closed, its visibility timeout passed).
        reason: String,
    },
    /// The connection to the broker was lost.
    #[error("queue connection lost: {0}")]
    Disconnected(String),
    /// Any other failure of the broker or the database behind the queue.
    #[error("queue backend: {0}")]
    Backend(String),
}

/// A message handed to a consumer. Exactly one of [`Delivery::ack`], [`Delivery::nack_requeue`]
/// or [`Delivery::reject`] settles it; dropping it unsettled leaves it to be redelivered.
pub struct Delivery {
    /// The key the message was published with.
    pub idempotency_key: String,
    /// The message's bytes, as published.
    pub payload: Bytes,
    /// 1 on first delivery, incremented on each redelivery.
    pub delivery_count: u32,
    settle: Box<dyn Settle>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("idempotency_key", &self.idempotency_key)
            .field("payload_len", &self.payload.len())
            .field("delivery_count", &self.delivery_count)
            .finish()
    }
}

/// How an adapter settles one delivery.
#[async_trait]
pub trait Settle: Send + Sync {
    /// Carries out [`Delivery::ack`].
    async fn ack(self: Box<Self>) -> Result<(), QueueError>;
    /// Carries out [`Delivery::nack_requeue`].
    async fn nack_requeue(self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError>;
    /// Carries out [`Delivery::release`].
    async fn release(self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError>;
    /// Carries out [`Delivery::reject`].
    async fn reject(self: Box<Self>) -> Result<(), QueueError>;
}

impl Delivery {
    /// A delivery that `settle` settles (for adapters).
    pub fn new(
        idempotency_key: String,
        payload: Bytes,
        delivery_count: u32,
        settle: Box<dyn Settle>,
    ) -> Self {
        Delivery {
            idempotency_key,
            payload,
            delivery_count,
            settle,
        }
    }

    /// Decodes the JSON payload, naming the message when it is malformed.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, QueueError> {
        serde_json::from_slice(&self.payload).map_err(|err| QueueError::MalformedPayload {
            key: self.idempotency_key.clone(),
            reason: err.to_string(),
        })
    }

    /// Done: the message is removed.
    pub async fn ack(self) -> Result<(), QueueError> {
        self.settle.ack().await
    }

    /// Not done: deliver again (to any consumer) after `delay`, counting a delivery.
    pub async fn nack_requeue(self, delay: Option<Duration>) -> Result<(), QueueError> {
        self.settle.nack_requeue(delay).await
    }

    /// Not for this consumer (it may not take this message; another may): back on the queue
    /// after `delay` without counting a delivery, so refusals never dead-letter a message that
    /// another consumer would handle.
    pub async fn release(self, delay: Option<Duration>) -> Result<(), QueueError> {
        self.settle.release(delay).await
    }

    /// Never deliverable: straight to the dead-letter queue.
    pub async fn reject(self) -> Result<(), QueueError> {
        self.settle.reject().await
    }
}

/// A stream of deliveries from one queue.
#[async_trait]
pub trait Consumer: Send {
    /// Waits up to `timeout` for the next delivery.
    async fn next(&mut self, timeout: Duration) -> Result<Option<Delivery>, QueueError>;
}

/// At-least-once task queue.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// Declares `queue` (and its dead-letter queue) if needed. Idempotent.
    async fn declare(&self, queue: &str, options: &QueueOptions) -> Result<(), QueueError>;

    /// Publishes durably: when this returns Ok the message survives a broker or process crash.
    async fn publish(&self, queue: &str, message: OutgoingMessage) -> Result<(), QueueError>;

    /// Publishes several messages durably; when this returns Ok every one of them is stored.
    /// Adapters override it to pipeline (RabbitMQ: many confirms in flight) or to batch (one
    /// database transaction). On error some of them may have been stored: publishing again is
    /// safe because every message carries its idempotency key.
    async fn publish_batch(
        &self,
        queue: &str,
        messages: Vec<OutgoingMessage>,
    ) -> Result<(), QueueError> {
        for message in messages {
            self.publish(queue, message).await?;
        }
        Ok(())
    }

    /// Starts consuming `queue`.
    async fn consume(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError>;

    /// Starts consuming the dead-letter queue of `queue`.
    async fn consume_dead_letters(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError>;

    /// Messages ready for delivery in `queue` (not counting in-flight ones).
    async fn ready_count(&self, queue: &str) -> Result<u64, QueueError>;
}

impl QueueOptions {
    /// Rejects options no adapter can honour.
    pub fn validate(&self) -> Result<(), QueueError> {
        if self.max_deliveries == 0 {
            return Err(QueueError::InvalidOptions(
                "max_deliveries: 0 is below the minimum 1".into(),
            ));
        }
        if self.prefetch == 0 {
            return Err(QueueError::InvalidOptions(
                "prefetch: 0 is below the minimum 1".into(),
            ));
        }
        if self.visibility_timeout < Duration::from_millis(1) {
            return Err(QueueError::InvalidOptions(
                "visibility_timeout: must be at least 1 ms".into(),
            ));
        }
        Ok(())
    }
}

/// Checks a message before it is published: the key must fit an AMQP short string (RabbitMQ
/// carries it as `message_id`) and the payload must fit [`MAX_PAYLOAD_BYTES`].
pub fn check_message(message: &OutgoingMessage) -> Result<(), QueueError> {
    let key = &message.idempotency_key;
    if key.is_empty() || key.len() > 255 {
        return Err(QueueError::InvalidIdempotencyKey(key.clone()));
    }
    if message.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(QueueError::PayloadTooLarge {
            size: message.payload.len(),
            limit: MAX_PAYLOAD_BYTES,
        });
    }
    Ok(())
}

/// Checks a queue name against the characters both RabbitMQ and SQL accept without quoting.
pub fn validate_queue_name(name: &str) -> Result<(), QueueError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(QueueError::InvalidQueueName(name.to_owned()))
    }
}

/// The queues one adapter handle has declared, with their options: each adapter declares a
/// queue its own way, then records it here, and looks up the options here before it publishes
/// to or consumes from a queue (one it never declared is [`QueueError::NotDeclared`]).
#[cfg(any(feature = "rabbitmq", feature = "table-queue"))]
#[derive(Default)]
struct Declared(std::sync::RwLock<std::collections::HashMap<String, QueueOptions>>);

#[cfg(any(feature = "rabbitmq", feature = "table-queue"))]
impl Declared {
    /// Records `queue`, declared with `options` (replacing what an earlier declaration said).
    fn insert(&self, queue: &str, options: &QueueOptions) {
        let mut queues = self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues.insert(queue.to_owned(), options.clone());
    }

    /// The options `queue` was declared with.
    fn options(&self, queue: &str) -> Result<QueueOptions, QueueError> {
        validate_queue_name(queue)?;
        let queues = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues
            .get(queue)
            .cloned()
            .ok_or_else(|| QueueError::NotDeclared(queue.to_owned()))
    }
}
