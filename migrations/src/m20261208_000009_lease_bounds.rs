//! Leases a worker cannot hold forever or take again after giving up (issue 46):
//! - `spent_attempts`: each worker whose attempt at a task ended without a result (abandoned,
//!   let expire, released past the uncounted releases, adapter rejected). Such a worker may not
//!   claim that task again, so a task's counted attempts are always distinct workers. Rejected
//!   submissions from before this migration are copied in, since they barred their worker too.
//! - `tasks.leased_at`: when the current lease began, from which its whole life is bounded.
//! - `jobs.task_time_limit_secs`: that bound, estimated at posting from the job's work.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261208_000009_lease_bounds"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SpentAttempts::Table)
                    .col(uuid(SpentAttempts::TaskId))
                    .col(uuid(SpentAttempts::WorkerId))
                    .col(timestamp_with_time_zone(SpentAttempts::EndedAt))
                    .col(text(SpentAttempts::Reason))
                    .primary_key(
                        Index::create()
                            .col(SpentAttempts::TaskId)
                            .col(SpentAttempts::WorkerId),
                    )
                    .to_owned(),
            )
            .await?;
        // SQLite alters one column per statement.
        manager
            .alter_table(
                Table::alter()
                    .table(Tasks::Table)
                    .add_column(timestamp_with_time_zone_null(Tasks::LeasedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(big_integer_null(Jobs::TaskTimeLimitSecs))
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared(
                "INSERT INTO spent_attempts (task_id, worker_id, ended_at, reason) \
                 SELECT task_id, worker_id, created_at, 'adapter rejected' \
                 FROM submissions WHERE verdict = 'rejected'",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(Jobs::TaskTimeLimitSecs)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tasks::Table)
                    .drop_column(Tasks::LeasedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(SpentAttempts::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SpentAttempts {
    Table,
    TaskId,
    WorkerId,
    EndedAt,
    Reason,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    LeasedAt,
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    TaskTimeLimitSecs,
}
