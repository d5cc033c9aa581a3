//! The API's system of record: jobs and their shards, rounds and tasks (with leases), worker
//! submissions, workers and their reputation, the job event log that doubles as the
//! transactional outbox, chain transactions, and Sign-In with Ethereum nonces.
//!
//! Portable choices, so one migration serves PostgreSQL and SQLite:
//! * identifiers are UUIDs (`uuid` on PostgreSQL, text on SQLite) except the two append-only
//!   logs, whose auto-increment ids give a total order the event feed can page on;
//! * wei amounts and on-chain ids are decimal strings: they exceed 64 bits and neither database
//!   has a portable 256-bit integer;
//! * statuses are text checked by the API's state machine, not database enums, which SQLite lacks
//!   and which PostgreSQL makes painful to extend;
//! * times are `timestamptz` on PostgreSQL (text in RFC 3339 on SQLite), always UTC.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000001_core_schema"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in tables() {
            manager.create_table(table).await?;
        }
        for index in indexes() {
            manager.create_index(index).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Children before parents so foreign keys never block a drop.
        let order: [DynIden; 10] = [
            SiweNonces::Table.into_iden(),
            ChainTransactions::Table.into_iden(),
            JobEvents::Table.into_iden(),
            ReputationEvents::Table.into_iden(),
            Submissions::Table.into_iden(),
            Tasks::Table.into_iden(),
            Rounds::Table.into_iden(),
            Shards::Table.into_iden(),
            Workers::Table.into_iden(),
            Jobs::Table.into_iden(),
        ];
        for table in order {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

fn fk(
    from: (impl IntoIden, impl IntoIden),
    to: (impl IntoIden, impl IntoIden),
    on_delete: ForeignKeyAction,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(from.0, from.1)
        .to(to.0, to.1)
        .on_delete(on_delete)
        .on_update(ForeignKeyAction::Cascade)
        .to_owned()
}

fn created_at<T: IntoIden>(col: T) -> ColumnDef {
    timestamp_with_time_zone(col)
        .default(Expr::current_timestamp())
        .take()
}

fn tables() -> Vec<TableCreateStatement> {
    vec![
        Table::create()
            .table(Jobs::Table)
            .col(pk_uuid(Jobs::Id))
            .col(string_len(Jobs::Requester, 42))
            .col(string_len(Jobs::Kind, 16))
            .col(string_len(Jobs::Status, 32))
            // The validated JobSpec as submitted; spec_cid addresses the same bytes in the store.
            .col(json_binary(Jobs::Spec))
            .col(string_null(Jobs::SpecCid))
            .col(string_null(Jobs::DatasetCid))
            .col(string_null(Jobs::ManifestCid))
            // The sealed held-out set; its key is never stored in this database.
            .col(string_null(Jobs::HeldoutCid))
            .col(string_null(Jobs::ResultAdapterCid))
            .col(string_null(Jobs::EscrowJobId))
            .col(string_null(Jobs::EscrowAddress))
            .col(string(Jobs::StakeWei))
            .col(integer(Jobs::Shards))
            .col(integer(Jobs::Rounds))
            .col(integer(Jobs::CurrentRound).default(0))
            .col(timestamp_with_time_zone(Jobs::Deadline))
            .col(boolean(Jobs::DevFunded).default(false))
            // Optimistic concurrency: every state-machine transition bumps it.
            .col(integer(Jobs::Version).default(0))
            .col(created_at(Jobs::CreatedAt))
            .col(created_at(Jobs::UpdatedAt))
            .to_owned(),
        Table::create()
            .table(Workers::Table)
            .col(pk_uuid(Workers::Id))
            .col(string_len_uniq(Workers::Address, 42))
            .col(json_binary(Workers::Capabilities))
            .col(big_integer(Workers::Reputation).default(0))
            .col(string(Workers::EarningsWei).default("0"))
            .col(timestamp_with_time_zone_null(Workers::LastHeartbeatAt))
            .col(created_at(Workers::CreatedAt))
            .col(created_at(Workers::UpdatedAt))
            .to_owned(),
        Table::create()
            .table(Shards::Table)
            .col(pk_uuid(Shards::Id))
            .col(uuid(Shards::JobId))
            .col(integer(Shards::Index))
            .col(string(Shards::Cid))
            .col(big_integer(Shards::SampleCount))
            .col(big_integer(Shards::SizeBytes))
            .foreign_key(&mut fk(
                (Shards::Table, Shards::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::Cascade,
            ))
            .to_owned(),
        Table::create()
            .table(Rounds::Table)
            .col(pk_uuid(Rounds::Id))
            .col(uuid(Rounds::JobId))
            .col(integer(Rounds::Number))
            .col(string_len(Rounds::Status, 32))
            // The adapter this round starts from (none in round 1) and the merged result.
            .col(string_null(Rounds::BaseAdapterCid))
            .col(string_null(Rounds::AggregateAdapterCid))
            .col(json_binary_null(Rounds::Aggregate))
            .col(created_at(Rounds::CreatedAt))
            .col(timestamp_with_time_zone_null(Rounds::CompletedAt))
            .foreign_key(&mut fk(
                (Rounds::Table, Rounds::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::Cascade,
            ))
            .to_owned(),
        Table::create()
            .table(Tasks::Table)
            .col(pk_uuid(Tasks::Id))
            .col(uuid(Tasks::JobId))
            .col(uuid(Tasks::ShardId))
            .col(integer(Tasks::Round))
            .col(string_len(Tasks::Status, 32))
            // The lease: who holds the task, the token that proves it, and until when.
            .col(uuid_null(Tasks::LeaseHolder))
            .col(uuid_null(Tasks::LeaseToken))
            .col(timestamp_with_time_zone_null(Tasks::LeaseExpiresAt))
            .col(integer(Tasks::Attempts).default(0))
            .col(integer(Tasks::MaxAttempts))
            // Last heartbeat's progress (step, loss, tokens/s).
            .col(json_binary_null(Tasks::Progress))
            .col(created_at(Tasks::CreatedAt))
            .col(created_at(Tasks::UpdatedAt))
            .foreign_key(&mut fk(
                (Tasks::Table, Tasks::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                (Tasks::Table, Tasks::ShardId),
                (Shards::Table, Shards::Id),
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                (Tasks::Table, Tasks::LeaseHolder),
                (Workers::Table, Workers::Id),
                ForeignKeyAction::SetNull,
            ))
            .to_owned(),
        Table::create()
            .table(Submissions::Table)
            .col(pk_uuid(Submissions::Id))
            .col(uuid(Submissions::TaskId))
            .col(uuid(Submissions::WorkerId))
            .col(string(Submissions::AdapterCid))
            .col(string(Submissions::MetricsCid))
            .col(big_integer(Submissions::SampleCount))
            // Pending until the validator rules: accepted or rejected, with a reason.
            .col(string_len(Submissions::Verdict, 16).default("pending"))
            .col(double_null(Submissions::Quality))
            .col(text_null(Submissions::RejectReason))
            .col(created_at(Submissions::CreatedAt))
            .col(timestamp_with_time_zone_null(Submissions::ValidatedAt))
            .foreign_key(&mut fk(
                (Submissions::Table, Submissions::TaskId),
                (Tasks::Table, Tasks::Id),
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                (Submissions::Table, Submissions::WorkerId),
                (Workers::Table, Workers::Id),
                ForeignKeyAction::Restrict,
            ))
            .to_owned(),
        Table::create()
            .table(ReputationEvents::Table)
            .col(big_pk_auto(ReputationEvents::Id))
            .col(uuid(ReputationEvents::WorkerId))
            .col(uuid_null(ReputationEvents::JobId))
            .col(big_integer(ReputationEvents::Delta))
            .col(string(ReputationEvents::Reason))
            .col(string_null(ReputationEvents::TxHash))
            .col(created_at(ReputationEvents::CreatedAt))
            .foreign_key(&mut fk(
                (ReputationEvents::Table, ReputationEvents::WorkerId),
                (Workers::Table, Workers::Id),
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                (ReputationEvents::Table, ReputationEvents::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::SetNull,
            ))
            .to_owned(),
        // Written in the same transaction as every job transition; a dispatcher publishes
        // undispatched rows (queue messages, chain calls) and stamps dispatched_at, so a crash
        // between commit and publish repeats the publish instead of losing it.
        Table::create()
            .table(JobEvents::Table)
            .col(big_pk_auto(JobEvents::Id))
            .col(uuid(JobEvents::JobId))
            .col(string_len(JobEvents::Kind, 64))
            .col(json_binary(JobEvents::Payload))
            .col(created_at(JobEvents::CreatedAt))
            .col(boolean(JobEvents::NeedsDispatch).default(false))
            .col(timestamp_with_time_zone_null(JobEvents::DispatchedAt))
            .col(integer(JobEvents::DispatchAttempts).default(0))
            .col(text_null(JobEvents::LastDispatchError))
            .foreign_key(&mut fk(
                (JobEvents::Table, JobEvents::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::Cascade,
            ))
            .to_owned(),
        Table::create()
            .table(ChainTransactions::Table)
            .col(pk_uuid(ChainTransactions::Id))
            .col(uuid_null(ChainTransactions::JobId))
            .col(string_len(ChainTransactions::Kind, 64))
            .col(string_len(ChainTransactions::Status, 32))
            .col(string_len_null(ChainTransactions::TxHash, 66))
            .col(string_len_null(ChainTransactions::FromAddress, 42))
            .col(big_integer_null(ChainTransactions::Nonce))
            .col(big_integer_null(ChainTransactions::BlockNumber))
            .col(text_null(ChainTransactions::Error))
            .col(created_at(ChainTransactions::CreatedAt))
            .col(created_at(ChainTransactions::UpdatedAt))
            .foreign_key(&mut fk(
                (ChainTransactions::Table, ChainTransactions::JobId),
                (Jobs::Table, Jobs::Id),
                ForeignKeyAction::SetNull,
            ))
            .to_owned(),
        Table::create()
            .table(SiweNonces::Table)
            .col(string_len(SiweNonces::Nonce, 64).primary_key())
            .col(created_at(SiweNonces::CreatedAt))
            .col(timestamp_with_time_zone(SiweNonces::ExpiresAt))
            // Set once when a signed message spends the nonce; a second use finds it set.
            .col(timestamp_with_time_zone_null(SiweNonces::UsedAt))
            .to_owned(),
    ]
}

fn index(name: &str, table: impl IntoIden, cols: &[DynIden], unique: bool) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table(table);
    for col in cols {
        index.col(col.clone());
    }
    if unique {
        index.unique();
    }
    index.to_owned()
}

fn indexes() -> Vec<IndexCreateStatement> {
    vec![
        index(
            "idx_jobs_status",
            Jobs::Table,
            &[Jobs::Status.into_iden()],
            false,
        ),
        index(
            "idx_jobs_requester_created",
            Jobs::Table,
            &[
                Jobs::Requester.into_iden(),
                Jobs::CreatedAt.into_iden(),
                Jobs::Id.into_iden(),
            ],
            false,
        ),
        index(
            "idx_jobs_created_id",
            Jobs::Table,
            &[Jobs::CreatedAt.into_iden(), Jobs::Id.into_iden()],
            false,
        ),
        index(
            "uq_jobs_escrow_job_id",
            Jobs::Table,
            &[
                Jobs::EscrowAddress.into_iden(),
                Jobs::EscrowJobId.into_iden(),
            ],
            true,
        ),
        index(
            "uq_shards_job_index",
            Shards::Table,
            &[Shards::JobId.into_iden(), Shards::Index.into_iden()],
            true,
        ),
        index(
            "uq_rounds_job_number",
            Rounds::Table,
            &[Rounds::JobId.into_iden(), Rounds::Number.into_iden()],
            true,
        ),
        index(
            "uq_tasks_job_shard_round",
            Tasks::Table,
            &[
                Tasks::JobId.into_iden(),
                Tasks::ShardId.into_iden(),
                Tasks::Round.into_iden(),
            ],
            true,
        ),
        // The lease reaper scans leased tasks by expiry.
        index(
            "idx_tasks_status_lease_expiry",
            Tasks::Table,
            &[Tasks::Status.into_iden(), Tasks::LeaseExpiresAt.into_iden()],
            false,
        ),
        index(
            "idx_tasks_lease_holder",
            Tasks::Table,
            &[Tasks::LeaseHolder.into_iden()],
            false,
        ),
        // Submitting twice for the same task is idempotent: the second insert conflicts.
        index(
            "uq_submissions_task_worker",
            Submissions::Table,
            &[
                Submissions::TaskId.into_iden(),
                Submissions::WorkerId.into_iden(),
            ],
            true,
        ),
        index(
            "idx_submissions_verdict",
            Submissions::Table,
            &[
                Submissions::Verdict.into_iden(),
                Submissions::CreatedAt.into_iden(),
            ],
            false,
        ),
        index(
            "idx_submissions_worker",
            Submissions::Table,
            &[Submissions::WorkerId.into_iden()],
            false,
        ),
        index(
            "idx_reputation_events_worker",
            ReputationEvents::Table,
            &[
                ReputationEvents::WorkerId.into_iden(),
                ReputationEvents::Id.into_iden(),
            ],
            false,
        ),
        // The per-job event feed pages by id.
        index(
            "idx_job_events_job_id",
            JobEvents::Table,
            &[JobEvents::JobId.into_iden(), JobEvents::Id.into_iden()],
            false,
        ),
        // The outbox dispatcher's scan: rows that need dispatch and have none yet, oldest first.
        // (A partial index would be smaller, but sea-query builds none portably.)
        index(
            "idx_job_events_outbox",
            JobEvents::Table,
            &[
                JobEvents::NeedsDispatch.into_iden(),
                JobEvents::DispatchedAt.into_iden(),
                JobEvents::Id.into_iden(),
            ],
            false,
        ),
        index(
            "uq_chain_transactions_tx_hash",
            ChainTransactions::Table,
            &[ChainTransactions::TxHash.into_iden()],
            true,
        ),
        index(
            "idx_chain_transactions_status",
            ChainTransactions::Table,
            &[
                ChainTransactions::Status.into_iden(),
                ChainTransactions::CreatedAt.into_iden(),
            ],
            false,
        ),
        index(
            "idx_chain_transactions_job",
            ChainTransactions::Table,
            &[ChainTransactions::JobId.into_iden()],
            false,
        ),
        index(
            "uq_chain_transactions_sender_nonce",
            ChainTransactions::Table,
            &[
                ChainTransactions::FromAddress.into_iden(),
                ChainTransactions::Nonce.into_iden(),
            ],
            true,
        ),
        index(
            "idx_siwe_nonces_expires",
            SiweNonces::Table,
            &[SiweNonces::ExpiresAt.into_iden()],
            false,
        ),
    ]
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Id,
    Requester,
    Kind,
    Status,
    Spec,
    SpecCid,
    DatasetCid,
    ManifestCid,
    HeldoutCid,
    ResultAdapterCid,
    EscrowJobId,
    EscrowAddress,
    StakeWei,
    Shards,
    Rounds,
    CurrentRound,
    Deadline,
    DevFunded,
    Version,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Workers {
    Table,
    Id,
    Address,
    Capabilities,
    Reputation,
    EarningsWei,
    LastHeartbeatAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Shards {
    Table,
    Id,
    JobId,
    Index,
    Cid,
    SampleCount,
    SizeBytes,
}

#[derive(DeriveIden)]
enum Rounds {
    Table,
    Id,
    JobId,
    Number,
    Status,
    BaseAdapterCid,
    AggregateAdapterCid,
    Aggregate,
    CreatedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Id,
    JobId,
    ShardId,
    Round,
    Status,
    LeaseHolder,
    LeaseToken,
    LeaseExpiresAt,
    Attempts,
    MaxAttempts,
    Progress,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Submissions {
    Table,
    Id,
    TaskId,
    WorkerId,
    AdapterCid,
    MetricsCid,
    SampleCount,
    Verdict,
    Quality,
    RejectReason,
    CreatedAt,
    ValidatedAt,
}

#[derive(DeriveIden)]
enum ReputationEvents {
    Table,
    Id,
    WorkerId,
    JobId,
    Delta,
    Reason,
    TxHash,
    CreatedAt,
}

#[derive(DeriveIden)]
enum JobEvents {
    Table,
    Id,
    JobId,
    Kind,
    Payload,
    CreatedAt,
    NeedsDispatch,
    DispatchedAt,
    DispatchAttempts,
    LastDispatchError,
}

#[derive(DeriveIden)]
enum ChainTransactions {
    Table,
    Id,
    JobId,
    Kind,
    Status,
    TxHash,
    FromAddress,
    Nonce,
    BlockNumber,
    Error,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SiweNonces {
    Table,
    Nonce,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}
