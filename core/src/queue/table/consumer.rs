//! Claiming and settling rows of `queue_messages`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sea_orm::{ConnectionTrait, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Shared, backend, millis, now_millis, sql};
use crate::queue::{Consumer, Delivery, QueueError, QueueOptions, Settle};

const MIN_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(200);

pub(super) struct TableConsumer {
    shared: Arc<Shared>,
    queue: String,
    options: QueueOptions,
    /// Consuming the dead-letter rows of `queue` instead of its live ones.
    dead: bool,
    /// Deliveries handed out and not yet settled or dropped, bounded by the prefetch.
    in_flight: Arc<InFlight>,
}

struct InFlight {
    count: AtomicUsize,
    settled: Notify,
}

struct Claimed {
    id: i64,
    key: String,
    payload: Vec<u8>,
    delivery_count: i32,
    token: String,
}

impl TableConsumer {
    pub(super) fn new(shared: Arc<Shared>, queue: &str, options: QueueOptions, dead: bool) -> Self {
        TableConsumer {
            shared,
            queue: queue.to_owned(),
            options,
            dead,
            in_flight: Arc::new(InFlight {
                count: AtomicUsize::new(0),
                settled: Notify::new(),
            }),
        }
    }

    async fn claim(&self) -> Result<Option<Claimed>, QueueError> {
        let db = &self.shared.db;
        let backend_kind = db.get_database_backend();
        let now = now_millis();
        let token = uuid::Uuid::new_v4().to_string();
        let values: Vec<Value> = vec![
            token.clone().into(),
            now.saturating_add(millis(self.options.visibility_timeout))
                .into(),
            self.queue.clone().into(),
            self.dead.into(),
            now.into(),
        ];
        let row = db
            .query_one_raw(sql::statement(
                backend_kind,
                sql::claim(backend_kind),
                values,
            ))
            .await
            .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(Claimed {
            id: row.try_get("", "id").map_err(backend)?,
            key: row.try_get("", "idempotency_key").map_err(backend)?,
            payload: row.try_get("", "payload").map_err(backend)?,
            delivery_count: row.try_get("", "delivery_count").map_err(backend)?,
            token,
        }))
    }

    /// Claims the next deliverable row, dead-lettering any that has used up its deliveries.
    async fn next_ready(&self) -> Result<Option<Delivery>, QueueError> {
        loop {
            let Some(claimed) = self.claim().await? else {
                return Ok(None);
            };
            let count = u32::try_from(claimed.delivery_count).unwrap_or(u32::MAX);
            let settle = TableSettle {
                shared: self.shared.clone(),
                id: claimed.id,
                token: claimed.token,
                key: claimed.key.clone(),
                dead: self.dead,
                delivery_count: count,
                max_deliveries: self.options.max_deliveries,
                _slot: Slot::take(self.in_flight.clone()),
            };
            if !self.dead && count > self.options.max_deliveries {
                // Delivered max_deliveries times and never settled (its consumers died or timed
                // out): this claim is not a delivery, so record the count it really had.
                let reason = format!(
                    "delivered {} times without being settled",
                    self.options.max_deliveries
                );
                settle.dead_letter(reason, count - 1).await?;
                continue;
            }
            return Ok(Some(Delivery::new(
                claimed.key,
                Bytes::from(claimed.payload),
                count,
                Box::new(settle),
            )));
        }
    }
}

#[async_trait]
impl Consumer for TableConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<Delivery>, QueueError> {
        let deadline = Instant::now() + timeout;
        let mut poll = MIN_POLL;
        loop {
            // Register for wake-ups before looking, so a publish in between is not missed.
            let ready = self.shared.ready.notified();
            let settled = self.in_flight.settled.notified();
            tokio::pin!(ready, settled);
            ready.as_mut().enable();
            settled.as_mut().enable();

            let prefetch = usize::from(self.options.prefetch);
            if self.in_flight.count.load(Ordering::Acquire) < prefetch
                && let Some(delivery) = self.next_ready().await?
            {
                return Ok(Some(delivery));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let nap = poll.min(deadline - now);
            tokio::select! {
                _ = ready => poll = MIN_POLL,
                _ = settled => poll = MIN_POLL,
                _ = tokio::time::sleep(nap) => poll = (poll * 2).min(MAX_POLL),
            }
        }
    }
}

/// One prefetch slot, returned when the delivery is settled or dropped.
struct Slot(Arc<InFlight>);

impl Slot {
    fn take(in_flight: Arc<InFlight>) -> Self {
        in_flight.count.fetch_add(1, Ordering::AcqRel);
        Slot(in_flight)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
        self.0.settled.notify_waiters();
    }
}

struct TableSettle {
    shared: Arc<Shared>,
    id: i64,
    token: String,
    key: String,
    dead: bool,
    delivery_count: u32,
    max_deliveries: u32,
    _slot: Slot,
}

impl TableSettle {
    /// Runs a statement guarded by this claim's token; no row changed means the claim is lost.
    async fn guarded(&self, sql: &str, mut values: Vec<Value>) -> Result<(), QueueError> {
        values.push(self.id.into());
        values.push(self.token.clone().into());
        let db = &self.shared.db;
        let result = db
            .execute_raw(sql::statement(db.get_database_backend(), sql, values))
            .await
            .map_err(backend)?;
        if result.rows_affected() == 0 {
            return Err(QueueError::StaleDelivery {
                key: self.key.clone(),
                reason: "its visibility timeout passed and it was claimed again or settled".into(),
            });
        }
        Ok(())
    }

    async fn dead_letter(&self, reason: String, delivery_count: u32) -> Result<(), QueueError> {
        let values = vec![reason.into(), now_millis().into(), delivery_count.into()];
        self.guarded(sql::DEAD_LETTER_HELD, values).await?;
        self.shared.ready.notify_waiters();
        Ok(())
    }
}

#[async_trait]
impl Settle for TableSettle {
    async fn ack(self: Box<Self>) -> Result<(), QueueError> {
        self.guarded(sql::DELETE_HELD, Vec::new()).await
    }

    async fn nack_requeue(self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError> {
        if !self.dead && self.delivery_count >= self.max_deliveries {
            let reason = format!(
                "requeued after its last allowed delivery ({})",
                self.max_deliveries
            );
            return self.dead_letter(reason, self.delivery_count).await;
        }
        let visible_at = now_millis().saturating_add(millis(delay.unwrap_or_default()));
        self.guarded(sql::RELEASE_HELD, vec![visible_at.into()])
            .await?;
        self.shared.ready.notify_waiters();
        Ok(())
    }

    async fn release(self: Box<Self>, delay: Option<Duration>) -> Result<(), QueueError> {
        let visible_at = now_millis().saturating_add(millis(delay.unwrap_or_default()));
        self.guarded(sql::RETURN_HELD, vec![visible_at.into()])
            .await?;
        self.shared.ready.notify_waiters();
        Ok(())
    }

    /// On a live message: straight to the dead-letter queue. On a dead letter: discarded.
    async fn reject(self: Box<Self>) -> Result<(), QueueError> {
        if self.dead {
            return self.guarded(sql::DELETE_HELD, Vec::new()).await;
        }
        self.dead_letter("rejected by a consumer".into(), self.delivery_count)
            .await
    }
}
