//! The table behind the embedded TaskQueue adapter, as a sea-orm migration: it lives beside the
//! adapter whose statements read it, and `shardwork-migrations` lists it in the application's
//! schema. [`QueueOnly`] applies it alone, for this crate's tests and benches.
//!
//! One row per message. Times are epoch milliseconds in `BIGINT`s rather than timestamps: the
//! adapter's claim is one hand-written statement per dialect, and integer comparisons read the
//! same in both, with no time-zone or text-format conversion on SQLite.
//!
//! * `(queue, idempotency_key)` is unique: publishing a key that is still present is a no-op.
//! * `visible_at`: the message can be claimed once the clock passes it (delayed retry, and the
//!   visibility timeout of a claim that was never settled).
//! * `lease_token`: the current claim's token; settling with any other token does nothing.
//! * `dead`: the message is in the queue's dead-letter queue.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

/// A migrator with only the queue's table, for a database that holds nothing else.
pub struct QueueOnly;

#[async_trait::async_trait]
impl MigratorTrait for QueueOnly {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(Migration)]
    }
}

/// The migration that creates the queue's table (`m20261122_000002_task_queue`).
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000002_task_queue"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(QueueMessages::Table)
                    .col(big_pk_auto(QueueMessages::Id))
                    .col(string_len(QueueMessages::Queue, 200))
                    .col(string(QueueMessages::IdempotencyKey))
                    .col(blob(QueueMessages::Payload))
                    .col(integer(QueueMessages::DeliveryCount).default(0))
                    .col(big_integer(QueueMessages::VisibleAt))
                    .col(string_len_null(QueueMessages::LeaseToken, 36))
                    .col(boolean(QueueMessages::Dead).default(false))
                    .col(text_null(QueueMessages::DeadReason))
                    .col(big_integer(QueueMessages::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_queue_messages_queue_key")
                    .table(QueueMessages::Table)
                    .col(QueueMessages::Queue)
                    .col(QueueMessages::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // The claim's scan: ready rows of one queue (live or dead-lettered), oldest first.
        manager
            .create_index(
                Index::create()
                    .name("idx_queue_messages_claim")
                    .table(QueueMessages::Table)
                    .col(QueueMessages::Queue)
                    .col(QueueMessages::Dead)
                    .col(QueueMessages::VisibleAt)
                    .col(QueueMessages::Id)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(QueueMessages::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum QueueMessages {
    Table,
    Id,
    Queue,
    IdempotencyKey,
    Payload,
    DeliveryCount,
    VisibleAt,
    LeaseToken,
    Dead,
    DeadReason,
    CreatedAt,
}
