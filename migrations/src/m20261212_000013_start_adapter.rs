//! `jobs.start_adapter_cid`: the adapter a job continues from (issue 48, `base_model.adapter`),
//! sealed again to the job when it was posted (`Sealed::RoundResult { round: 0 }`): round 1's
//! tasks start from it and the validator judges round 1 against it. Null for a job that starts
//! from the bare base model, as every job did before.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261212_000013_start_adapter"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(string_null(Jobs::StartAdapterCid))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(Jobs::StartAdapterCid)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    StartAdapterCid,
}
