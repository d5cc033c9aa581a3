//! The RabbitMQ TaskQueue adapter (lapin).
//!
//! * Durable quorum queues, persistent messages (delivery mode 2), and publisher confirms: a
//!   publish returns only after the broker has confirmed it (see [`topology`] for the queues).
//! * Consumers take `prefetch` unacknowledged deliveries at a time (basic.qos) and settle each
//!   by hand. A consumer whose channel dies leaves its deliveries to the broker, which requeues
//!   them; a delivery dropped unsettled is nacked back to the queue.
//! * Delivery counting: the broker's `x-delivery-count` (returns of the current copy) plus our
//!   `x-shardwork-attempts` header (deliveries before the copy was republished by a requeue).
//!   Requeues republish rather than nack, so the count means the same on every RabbitMQ version
//!   (4.x no longer counts every requeue the way 3.x does). A message whose count passes
//!   `max_deliveries` is dead-lettered before any consumer sees it.
//! * Idempotency: the key travels as `message_id`. Repeats are dropped only within one handle's
//!   dedupe window (see [`dedupe`]); elsewhere consumers see both copies with the same key.
//! * Reconnection: every operation retries on a new connection (with backoff, up to
//!   `reconnect_within`) when it finds the old one dropped; consumers resubscribe by themselves.
//!   A publish interrupted before its confirm is sent again, so it may be stored twice.

mod consumer;
mod dedupe;
mod link;
mod topology;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Confirmation, PublisherConfirm};

use super::{
    Consumer, Declared, OutgoingMessage, QueueError, QueueOptions, TaskQueue, check_message,
    validate_queue_name,
};
use consumer::RabbitConsumer;
use dedupe::DedupeWindow;
use link::{Link, disconnected, is_transient};

/// Settings of the RabbitMQ adapter itself (per-queue behaviour is in [`QueueOptions`]).
#[derive(Debug, Clone)]
pub struct RabbitSettings {
    /// How long an operation keeps reconnecting before it reports the broker unreachable.
    pub reconnect_within: Duration,
    /// How long this handle remembers published keys to drop repeats (zero: never).
    pub dedupe_window: Duration,
}

impl Default for RabbitSettings {
    fn default() -> Self {
        RabbitSettings {
            reconnect_within: Duration::from_secs(30),
            dedupe_window: Duration::from_secs(600),
        }
    }
}

/// The RabbitMQ adapter. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RabbitQueue {
    inner: Arc<Inner>,
}

struct Inner {
    link: Link,
    queues: Declared,
    retry_queues: Mutex<HashSet<String>>,
    dedupe: Mutex<DedupeWindow>,
}

/// Where a message goes and what it carries besides its payload.
struct Envelope<'a> {
    routing_key: &'a str,
    key: &'a str,
    payload: &'a [u8],
    /// Deliveries in earlier lives of this message.
    attempts: u32,
}

impl RabbitQueue {
    /// Connects to the broker at `url` (`amqp://user:pass@host:port/vhost`).
    pub async fn connect(url: &str, settings: RabbitSettings) -> Result<Self, QueueError> {
        let uri: AMQPUri = url
            .parse()
            .map_err(|err| QueueError::InvalidOptions(format!("AMQP URL {url:?}: {err}")))?;
        let inner = Inner {
            link: Link::new(uri, settings.reconnect_within),
            queues: Declared::default(),
            retry_queues: Mutex::new(HashSet::new()),
            dedupe: Mutex::new(DedupeWindow::new(settings.dedupe_window)),
        };
        // Fail now, not at the first publish, when the broker is unreachable.
        inner.link.publisher().await?;
        Ok(RabbitQueue {
            inner: Arc::new(inner),
        })
    }

    /// Closes the connection under every publisher and consumer of this handle, as a network
    /// failure would; each reconnects on its next operation. For tests and drills.
    pub async fn sever_connection(&self) {
        self.inner.link.sever().await;
    }

    fn options(&self, queue: &str) -> Result<QueueOptions, QueueError> {
        self.inner.options(queue)
    }

    /// A consumer of `queue`, or of its dead letters when `dead`.
    fn consumer(&self, queue: &str, dead: bool) -> Result<Box<dyn Consumer>, QueueError> {
        let options = self.options(queue)?;
        let consumer = RabbitConsumer::new(self.inner.clone(), queue, options, dead);
        Ok(Box::new(consumer))
    }

    /// Deletes `queue`, its dead-letter queue and the retry queues this handle declared (tests
    /// and benchmarks clean up with it). Messages in them are lost.
    pub async fn delete(&self, queue: &str) -> Result<(), QueueError> {
        validate_queue_name(queue)?;
        let mut names = vec![queue.to_owned(), topology::dead_letter_queue(queue)];
        {
            let retry = self
                .inner
                .retry_queues
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let prefix = format!("{queue}.retry.");
            names.extend(retry.iter().filter(|n| n.starts_with(&prefix)).cloned());
        }
        let channel = self.inner.link.channel().await?;
        for name in names {
            channel
                .queue_delete(name.as_str().into(), Default::default())
                .await
                .map_err(|err| QueueError::Backend(format!("deleting queue {name}: {err}")))?;
        }
        Ok(())
    }
}

impl Inner {
    fn options(&self, queue: &str) -> Result<QueueOptions, QueueError> {
        self.queues.options(queue)
    }

    async fn declare_one(&self, name: &str, arguments: FieldTable) -> Result<u32, QueueError> {
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        self.declare_with(name, options, arguments).await
    }

    async fn declare_with(
        &self,
        name: &str,
        options: QueueDeclareOptions,
        arguments: FieldTable,
    ) -> Result<u32, QueueError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let channel = self.link.channel().await?;
            match channel
                .queue_declare(name.into(), options, arguments.clone())
                .await
            {
                Ok(declared) => return Ok(declared.message_count()),
                Err(err) if is_transient(&err) && attempt < 3 => {
                    tracing::debug!(%err, name, "queue.declare interrupted; retrying");
                }
                Err(err) => {
                    return Err(QueueError::Backend(format!(
                        "declaring queue {name} (a queue of that name with other arguments \
                         would also fail here): {err}"
                    )));
                }
            }
        }
    }

    /// Declares the retry queue for `delay` once per handle; returns its name.
    async fn retry_queue(&self, queue: &str, delay: Duration) -> Result<String, QueueError> {
        let seconds = topology::retry_seconds(delay);
        let name = topology::retry_queue(queue, seconds);
        let known = self
            .retry_queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&name);
        if !known {
            self.declare_one(&name, topology::retry_arguments(queue, seconds))
                .await?;
            self.retry_queues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone());
        }
        Ok(name)
    }

    /// Where a message for `queue` goes first: the queue itself, or the retry queue of its delay.
    async fn route(&self, queue: &str, delay: Option<Duration>) -> Result<String, QueueError> {
        match delay {
            Some(delay) if !delay.is_zero() => self.retry_queue(queue, delay).await,
            _ => Ok(queue.to_owned()),
        }
    }

    fn properties(envelope: &Envelope<'_>) -> BasicProperties {
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(envelope.key));
        if envelope.attempts > 0 {
            let mut headers = FieldTable::default();
            headers.insert(
                topology::ATTEMPTS_HEADER.into(),
                AMQPValue::LongLongInt(i64::from(envelope.attempts)),
            );
            properties = properties.with_headers(headers);
        }
        properties
    }

    /// Sends on `channel` without waiting for the confirm.
    async fn send(
        channel: &lapin::Channel,
        envelope: &Envelope<'_>,
    ) -> Result<PublisherConfirm, lapin::Error> {
        channel
            .basic_publish(
                "".into(),
                envelope.routing_key.into(),
                // Mandatory: a message no queue takes comes back instead of vanishing.
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                envelope.payload,
                Self::properties(envelope),
            )
            .await
    }

    fn confirmed(envelope: &Envelope<'_>, confirmation: Confirmation) -> Result<(), QueueError> {
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(QueueError::Backend(format!(
                "message {:?} was returned by the broker ({} {}): queue {:?} does not exist",
                envelope.key, returned.reply_code, returned.reply_text, envelope.routing_key
            ))),
            Confirmation::Nack(_) => Err(QueueError::Backend(format!(
                "broker refused to store message {:?} for {:?}",
                envelope.key, envelope.routing_key
            ))),
            Confirmation::NotRequested => Err(QueueError::Backend(
                "publisher confirms are off on the publishing channel".into(),
            )),
        }
    }

    /// Publishes and waits for the broker's confirm, reconnecting on a dropped connection.
    async fn publish_confirmed(&self, envelope: &Envelope<'_>) -> Result<(), QueueError> {
        let deadline = tokio::time::Instant::now() + self.link.reconnect_within();
        loop {
            let channel = self.link.publisher().await?;
            let outcome = match Self::send(&channel, envelope).await {
                Ok(pending) => pending.await,
                Err(err) => Err(err),
            };
            match outcome {
                Ok(confirmation) => return Self::confirmed(envelope, confirmation),
                Err(err) if is_transient(&err) && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(%err, key = envelope.key, "publish interrupted; resending");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => return Err(disconnected(err)),
            }
        }
    }
}

#[async_trait]
impl TaskQueue for RabbitQueue {
    async fn declare(&self, queue: &str, options: &QueueOptions) -> Result<(), QueueError> {
        validate_queue_name(queue)?;
        options.validate()?;
        let dead = topology::dead_letter_queue(queue);
        self.inner
            .declare_one(&dead, topology::dead_letter_arguments())
            .await?;
        self.inner
            .declare_one(
                queue,
                topology::main_arguments(queue, options.max_deliveries),
            )
            .await?;
        self.inner.queues.insert(queue, options);
        Ok(())
    }

    async fn publish(&self, queue: &str, message: OutgoingMessage) -> Result<(), QueueError> {
        self.options(queue)?;
        check_message(&message)?;
        let key = message.idempotency_key.as_str();
        let fresh = {
            let mut window = self.inner.dedupe.lock().unwrap_or_else(|p| p.into_inner());
            window.insert(queue, key, std::time::Instant::now())
        };
        if !fresh {
            tracing::debug!(
                queue,
                key,
                "duplicate publish within the dedupe window dropped"
            );
            return Ok(());
        }
        let routing_key = self.inner.route(queue, message.delay).await;
        let outcome = match routing_key {
            Ok(routing_key) => {
                let envelope = Envelope {
                    routing_key: &routing_key,
                    key,
                    payload: &message.payload,
                    attempts: 0,
                };
                self.inner.publish_confirmed(&envelope).await
            }
            Err(err) => Err(err),
        };
        if outcome.is_err() {
            self.inner
                .dedupe
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .forget(queue, key);
        }
        outcome
    }

    /// Pipelined: every message is sent before any confirm is awaited, so the batch costs about
    /// one round trip instead of one per message. Messages whose confirm did not arrive (a
    /// dropped connection) are resent one by one.
    async fn publish_batch(
        &self,
        queue: &str,
        messages: Vec<OutgoingMessage>,
    ) -> Result<(), QueueError> {
        self.options(queue)?;
        for message in &messages {
            check_message(message)?;
        }
        let fresh: Vec<OutgoingMessage> = {
            let mut window = self.inner.dedupe.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            messages
                .into_iter()
                .filter(|m| window.insert(queue, &m.idempotency_key, now))
                .collect()
        };
        let mut routes = Vec::with_capacity(fresh.len());
        for message in &fresh {
            routes.push(self.inner.route(queue, message.delay).await?);
        }
        let envelopes: Vec<Envelope<'_>> = fresh
            .iter()
            .zip(&routes)
            .map(|(message, route)| Envelope {
                routing_key: route,
                key: &message.idempotency_key,
                payload: &message.payload,
                attempts: 0,
            })
            .collect();
        let channel = self.inner.link.publisher().await?;
        let mut pending = Vec::with_capacity(envelopes.len());
        for envelope in &envelopes {
            pending.push(Inner::send(&channel, envelope).await);
        }
        let mut first_error = None;
        for (envelope, sent) in envelopes.iter().zip(pending) {
            let outcome = match sent {
                Ok(confirm) => match confirm.await {
                    Ok(confirmation) => Inner::confirmed(envelope, confirmation),
                    Err(_) => self.inner.publish_confirmed(envelope).await,
                },
                Err(_) => self.inner.publish_confirmed(envelope).await,
            };
            if let Err(err) = outcome {
                self.inner
                    .dedupe
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .forget(queue, envelope.key);
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn consume(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        self.consumer(queue, false)
    }

    async fn consume_dead_letters(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        self.consumer(queue, true)
    }

    async fn ready_count(&self, queue: &str) -> Result<u64, QueueError> {
        self.options(queue)?;
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let count = self
            .inner
            .declare_with(queue, options, FieldTable::default())
            .await?;
        Ok(u64::from(count))
    }
}
