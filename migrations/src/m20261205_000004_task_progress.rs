//! `task_progress`: every heartbeat's training progress, so a job's page can draw a loss curve
//! per task. Until this table, `tasks.progress` held the last heartbeat only, overwritten by the
//! next one.
//!
//! The key is (task, attempt, step): a worker heartbeats on a timer, so the same step can be
//! reported twice while a slow step runs, and the second report must not add a point. The
//! attempt is part of it because a task that goes back to the queue starts training again from
//! step 0 under a new lease, and that run's curve is a different curve.
//!
//! The API bounds the rows per task (`shardwork_api::domain::flow::progress`); the foreign key
//! takes them with their task.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261205_000004_task_progress"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(TaskProgress::Table)
                    .col(uuid(TaskProgress::TaskId))
                    // The task's attempt (1 for its first lease) the heartbeat came under.
                    .col(integer(TaskProgress::Attempt))
                    // Steps are u64 on the wire; bigint holds every count a run can reach.
                    .col(big_integer(TaskProgress::Step))
                    .col(big_integer(TaskProgress::TotalSteps))
                    .col(double_null(TaskProgress::Loss))
                    .col(double_null(TaskProgress::TokensPerSecond))
                    .col(timestamp_with_time_zone(TaskProgress::RecordedAt))
                    .primary_key(
                        Index::create()
                            .col(TaskProgress::TaskId)
                            .col(TaskProgress::Attempt)
                            .col(TaskProgress::Step),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(TaskProgress::Table, TaskProgress::TaskId)
                            .to(Tasks::Table, Tasks::Id)
                            .on_delete(ForeignKeyAction::Cascade)
                            .on_update(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TaskProgress::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum TaskProgress {
    Table,
    TaskId,
    Attempt,
    Step,
    TotalSteps,
    Loss,
    TokensPerSecond,
    RecordedAt,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Id,
}
