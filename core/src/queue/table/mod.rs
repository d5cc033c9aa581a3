//! The embedded TaskQueue: messages are rows of `queue_messages` in the application database
//! (SQLite or PostgreSQL; the table's migration is [`schema::Migration`], which
//! `shardwork-migrations` lists in the application's schema), so `shardwork up` runs
//! with no broker.
//!
//! * **Claim**: one statement picks the oldest ready row and stamps a fresh lease token on it
//!   (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite's single writer on SQLite), so two
//!   consumers never hold the same message.
//! * **Visibility timeout**: a claim moves the row's `visible_at` forward by the queue's
//!   timeout; a consumer that dies without settling simply lets it pass, and the next claim
//!   counts another delivery. After `max_deliveries` the row is dead-lettered instead.
//! * **Settling** is guarded by the lease token: a consumer whose timeout ran out can neither
//!   ack nor requeue the row another consumer has since claimed
//!   ([`QueueError::StaleDelivery`]).
//! * **Idempotency**: `(queue, idempotency_key)` is unique, so publishing a key that is still in
//!   the queue, in flight or dead-lettered is a no-op. Once a message is acked its row is gone
//!   and the same key can be published again: deduplication holds for the message's lifetime.
//! * **Waiting**: consumers poll with a backoff from 5 ms to 200 ms, and consumers in the same
//!   process are woken at once by a publish or a requeue.
//!
//! Times are epoch milliseconds from this process's clock; processes sharing one database
//! should keep their clocks in sync (NTP), as a skew shifts visibility by the same amount.

mod consumer;
pub mod schema;
mod sql;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, TransactionTrait, Value};
use tokio::sync::Notify;

use super::{
    Consumer, Declared, OutgoingMessage, QueueError, QueueOptions, TaskQueue, check_message,
    validate_queue_name,
};
use consumer::TableConsumer;

/// The table-backed adapter. Cheap to clone; clones share declarations and wake-ups.
#[derive(Clone)]
pub struct TableQueue {
    shared: Arc<Shared>,
}

struct Shared {
    db: DatabaseConnection,
    queues: Declared,
    /// Wakes this process's waiting consumers when a message becomes ready.
    ready: Notify,
}

impl TableQueue {
    /// Uses `db`, which must already carry the `shardwork-migrations` schema.
    pub fn new(db: DatabaseConnection) -> Self {
        TableQueue {
            shared: Arc::new(Shared {
                db,
                queues: Declared::default(),
                ready: Notify::new(),
            }),
        }
    }

    /// The database this queue lives in.
    pub fn database(&self) -> &DatabaseConnection {
        &self.shared.db
    }

    fn options(&self, queue: &str) -> Result<QueueOptions, QueueError> {
        self.shared.queues.options(queue)
    }

    /// A consumer of `queue`, or of its dead letters when `dead`.
    fn consumer(&self, queue: &str, dead: bool) -> Result<Box<dyn Consumer>, QueueError> {
        let options = self.options(queue)?;
        let consumer = TableConsumer::new(self.shared.clone(), queue, options, dead);
        Ok(Box::new(consumer))
    }

    fn insert_values(queue: &str, message: OutgoingMessage, now: i64) -> Vec<Value> {
        let visible_at = now.saturating_add(millis(message.delay.unwrap_or_default()));
        vec![
            queue.into(),
            message.idempotency_key.into(),
            message.payload.to_vec().into(),
            visible_at.into(),
            false.into(),
            now.into(),
        ]
    }
}

#[async_trait]
impl TaskQueue for TableQueue {
    async fn declare(&self, queue: &str, options: &QueueOptions) -> Result<(), QueueError> {
        validate_queue_name(queue)?;
        options.validate()?;
        self.shared.queues.insert(queue, options);
        Ok(())
    }

    async fn publish(&self, queue: &str, message: OutgoingMessage) -> Result<(), QueueError> {
        self.options(queue)?;
        check_message(&message)?;
        let db = &self.shared.db;
        let values = Self::insert_values(queue, message, now_millis());
        db.execute_raw(sql::statement(
            db.get_database_backend(),
            sql::INSERT,
            values,
        ))
        .await
        .map_err(backend)?;
        self.shared.ready.notify_waiters();
        Ok(())
    }

    /// One transaction for the whole batch: one commit (one fsync) instead of one per message.
    async fn publish_batch(
        &self,
        queue: &str,
        messages: Vec<OutgoingMessage>,
    ) -> Result<(), QueueError> {
        self.options(queue)?;
        for message in &messages {
            check_message(message)?;
        }
        let db = &self.shared.db;
        let kind = db.get_database_backend();
        let now = now_millis();
        let txn = db.begin().await.map_err(backend)?;
        for message in messages {
            let values = Self::insert_values(queue, message, now);
            txn.execute_raw(sql::statement(kind, sql::INSERT, values))
                .await
                .map_err(backend)?;
        }
        txn.commit().await.map_err(backend)?;
        self.shared.ready.notify_waiters();
        Ok(())
    }

    async fn consume(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        self.consumer(queue, false)
    }

    async fn consume_dead_letters(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        self.consumer(queue, true)
    }

    async fn ready_count(&self, queue: &str) -> Result<u64, QueueError> {
        self.options(queue)?;
        let db = &self.shared.db;
        let values = vec![queue.into(), now_millis().into()];
        let row = db
            .query_one_raw(sql::statement(
                db.get_database_backend(),
                sql::READY_COUNT,
                values,
            ))
            .await
            .map_err(backend)?
            .ok_or_else(|| QueueError::Backend("COUNT(*) returned no row".into()))?;
        let n: i64 = row.try_get("", "n").map_err(backend)?;
        Ok(u64::try_from(n).unwrap_or_default())
    }
}

fn backend(err: DbErr) -> QueueError {
    QueueError::Backend(format!("queue table: {err}"))
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or_default()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
