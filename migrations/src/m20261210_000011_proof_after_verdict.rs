//! Proofs of training checked after the verdict (issue 47, decision 0042): a submission's
//! verdict no longer waits for its replay, so the replay's outcome gets columns of its own.
//! - `proof_status`: `not_due` (not scored, or not judged yet), `pending`, `passed`, `failed`;
//!   indexed, since the validators poll for the pending ones and the payout waits for them.
//! - `proof_report`: the replayed stretches and, for a failure, why.
//! - `proof_checked_at`, `proof_checked_by`: when and by which validator it was decided.
//! - `validated_by`: the validator that gave the verdict.
//!
//! SQLite alters one column per statement, so each column is its own `ALTER TABLE`.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261210_000011_proof_after_verdict"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            string(Submissions::ProofStatus)
                .default("not_due")
                .to_owned(),
            json_binary_null(Submissions::ProofReport),
            timestamp_with_time_zone_null(Submissions::ProofCheckedAt),
            string_null(Submissions::ProofCheckedBy),
            string_null(Submissions::ValidatedBy),
        ];
        for mut column in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(Submissions::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_submissions_proof_status")
                    .table(Submissions::Table)
                    .col(Submissions::ProofStatus)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_submissions_proof_status")
                    .table(Submissions::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            Submissions::ValidatedBy,
            Submissions::ProofCheckedBy,
            Submissions::ProofCheckedAt,
            Submissions::ProofReport,
            Submissions::ProofStatus,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Submissions::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Submissions {
    Table,
    ProofStatus,
    ProofReport,
    ProofCheckedAt,
    ProofCheckedBy,
    ValidatedBy,
}
