//! Consuming a queue (or its dead-letter queue) and settling deliveries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use lapin::{Acker, Channel};
use tokio::time::Instant;

use super::link::disconnected;
use super::{Envelope, Inner, topology};
use crate::queue::{Consumer, Delivery, QueueError, QueueOptions, Settle};

pub(super) struct RabbitConsumer {
    inner: Arc<Inner>,
    /// The logical queue (requeues and retries go back to it).
    queue: String,
    /// The broker queue actually consumed: `queue` or its dead-letter queue.
    source: String,
    options: QueueOptions,
    dead: bool,
    /// The channel and subscription; replaced when the connection drops. Dropping them closes
    /// the channel, and the broker requeues whatever it had delivered unacknowledged.
    subscription: Option<(Channel, lapin::Consumer)>,
}

impl RabbitConsumer {
    pub(super) fn new(inner: Arc<Inner>, queue: &str, options: QueueOptions, dead: bool) -> Self {
        let source = if dead {
            topology::dead_letter_queue(queue)
        } else {
            queue.to_owned()
        };
        RabbitConsumer {
            inner,
            queue: queue.to_owned(),
            source,
            options,
            dead,
            subscription: None,
        }
    }

    async fn subscribe(&self) -> Result<(Channel, lapin::Consumer), QueueError> {
        let channel = self.inner.link.channel().await?;
        channel
            .basic_qos(self.options.prefetch, BasicQosOptions::default())
            .await
            .map_err(disconnected)?;
        let tag = format!("shardwork-{}", uuid::Uuid::new_v4().simple());
        let consumer = channel
            .basic_consume(
                self.source.as_str().into(),
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|err| QueueError::Backend(format!("consuming {}: {err}", self.source)))?;
        Ok((channel, consumer))
    }

    fn settle(&self, message: &lapin::message::Delivery, key: &str, count: u32) -> RabbitSettle {
        RabbitSettle {
            inner: self.inner.clone(),
            acker: message.acker.clone(),
            queue: self.queue.clone(),
            key: key.to_owned(),
            payload: Bytes::copy_from_slice(&message.data),
            delivery_count: count,
            max_deliveries: self.options.max_deliveries,
            dead: self.dead,
            settled: false,
        }
    }
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<Delivery>, QueueError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.subscription.is_none() {
                match tokio::time::timeout_at(deadline, self.subscribe()).await {
                    Ok(Ok(subscription)) => self.subscription = Some(subscription),
                    Ok(Err(err)) => return Err(err),
                    Err(_) => {
                        return Err(QueueError::Disconnected(format!(
                            "could not resubscribe to {} within {timeout:?}",
                            self.source
                        )));
                    }
                }
            }
            let Some((_, stream)) = self.subscription.as_mut() else {
                continue;
            };
            let message = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Ok(None),
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(err))) => {
                    tracing::warn!(%err, queue = self.source, "subscription lost; resubscribing");
                    self.subscription = None;
                    continue;
                }
                Ok(None) => {
                    tracing::warn!(queue = self.source, "subscription ended; resubscribing");
                    self.subscription = None;
                    continue;
                }
            };
            let headers = message.properties.headers().as_ref();
            let count = topology::header_count(headers, topology::ATTEMPTS_HEADER)
                .saturating_add(topology::header_count(
                    headers,
                    topology::BROKER_COUNT_HEADER,
                ))
                .saturating_add(1);
            let key = match message.properties.message_id() {
                Some(id) => id.as_str().to_owned(),
                None => format!("(no message_id; delivery {})", message.delivery_tag),
            };
            let mut settle = self.settle(&message, &key, count);
            if !self.dead && count > self.options.max_deliveries {
                // Its earlier consumers died holding it max_deliveries times.
                settle.settled = true;
                let rejected = message
                    .acker
                    .reject(BasicRejectOptions { requeue: false })
                    .await;
                if let Err(err) = rejected {
                    tracing::warn!(%err, key, "dead-lettering an exhausted message failed");
                }
                continue;
            }
            let payload = settle.payload.clone();
            return Ok(Some(Delivery::new(key, payload, count, Box::new(settle))));
        }
    }
}

struct RabbitSettle {
    inner: Arc<Inner>,
    acker: Acker,
    queue: String,
    key: String,
    payload: Bytes,
    delivery_count: u32,
    max_deliveries: u32,
    dead: bool,
    settled: bool,
}

impl RabbitSettle {
    /// Republishes a copy carrying `attempts` (to the retry queue of `delay`, or the queue
    /// itself), then acks this one. A crash between the two leaves both copies: at least once,
    /// never lost.
    async fn requeue_copy(
        mut self: Box<Self>,
        delay: Option<Duration>,
        attempts: u32,
    ) -> Result<(), QueueError> {
        let route = self.inner.route(&self.queue, delay).await?;
        let envelope = Envelope {
            routing_key: &route,
            key: &self.key,
            payload: &self.payload,
            attempts,
        };
        self.inner.publish_confirmed(&envelope).await?;
        self.settled = true;
        let outcome = self.acker.ack(BasicAckOptions::default()).await;
        if let Err(err) = self.held(outcome) {
            // The copy is stored; the original comes back too, as a duplicate.
            tracing::warn!(%err, key = self.key, "requeued copy stored but original not acked");
        }
        Ok(())
    }

    /// An acker that fails or answers `false` belongs to a channel that is gone: the broker has
    /// already requeued the delivery.
    fn held(&self, outcome: Result<bool, lapin::Error>) -> Result<(), QueueError> {
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.stale("its channel closed")),
            Err(err) => Err(self.stale(&err.to_string())),
        }
    }

    fn stale(&self, reason: &str) -> QueueError {
        QueueError::StaleDelivery {
            key: self.key.clone(),
            reason: reason.to_owned(),
        }
    }

    async fn dead_letter(&mut self) -> Result<(), QueueError> {
        self.settled = true;
        let outcome = self
            .acker
            .reject(BasicRejectOptions { requeue: false })
            .await;
        self.held(outcome)
    }
}

#[async_trait]
impl Settle for RabbitSettle {
    async fn ack(mut self: Box<Self>) -> Result<(), QueueError> {
        self.settled = true;
        let outcome = self.acker.ack(BasicAckOptions::default()).await;
        self.held(outcome)
    }

    /// Republishes a copy carrying the delivery count (to the retry queue of `delay`, or the
    /// queue itself), then acks this one. A crash between the two leaves both copies: at least
    /// once, never lost. On the last allowed delivery it dead-letters instead. In a dead-letter
    /// queue it simply requeues (the delay does not apply there).
    async fn nack_requeue(mut self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError> {
        if self.dead {
            self.settled = true;
            let options = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            let outcome = self.acker.nack(options).await;
            return self.held(outcome);
        }
        if self.delivery_count >= self.max_deliveries {
            return self.dead_letter().await;
        }
        let attempts = self.delivery_count;
        self.requeue_copy(delay, attempts).await
    }

    /// As a requeue, but the copy carries the count from before this delivery, so a refusal
    /// is not counted against the message's allowed deliveries.
    async fn release(mut self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError> {
        if self.dead {
            return self.nack_requeue(None).await;
        }
        let before = self.delivery_count.saturating_sub(1);
        self.requeue_copy(delay, before).await
    }

    /// On a live message: dead-lettered (through the queue's dead-letter exchange). On a dead
    /// letter: discarded.
    async fn reject(mut self: Box<Self>) -> Result<(), QueueError> {
        self.dead_letter().await
    }
}

impl Drop for RabbitSettle {
    /// A delivery dropped unsettled goes back to the queue now, rather than when the channel
    /// closes: with a small prefetch it would otherwise block its consumer.
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let acker = self.acker.clone();
        runtime.spawn(async move {
            let options = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            let _ = acker.nack(options).await;
        });
    }
}
