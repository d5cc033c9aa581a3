//! `content_claims`: who holds a claim on which content, keyed by the content's multihash
//! (`shardwork_core::store::content_key`), never by a CID's spelling.
//!
//! * `upload`: `owner` stored it through `POST /v1/content` (`size_bytes` of it); counted
//!   against the owner's storage quota and expired unless a job names it (`referenced_at`).
//! * `dataset`: a job's dataset as posted, readable only by `owner` (its requester),
//!   validators and admins.
//! * `held_out`: a job's sealed held-out set, readable only by validators and admins.
//!
//! The claims of jobs posted before this table are written here from `jobs`, so their datasets
//! stay guarded under every spelling after the upgrade.
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261208_000008_content_claims"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ContentClaims::Table)
                    .col(big_pk_auto(ContentClaims::Id))
                    .col(string_len(ContentClaims::Multihash, 160))
                    .col(string_len(ContentClaims::Kind, 16))
                    .col(string_len(ContentClaims::Owner, 64))
                    .col(uuid_null(ContentClaims::JobId))
                    .col(text(ContentClaims::Cid))
                    .col(big_integer(ContentClaims::SizeBytes).default(0))
                    .col(
                        timestamp_with_time_zone(ContentClaims::CreatedAt)
                            .default(Expr::current_timestamp()),
                    )
                    .col(timestamp_with_time_zone_null(ContentClaims::ReferencedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(ContentClaims::Table, ContentClaims::JobId)
                            .to(Jobs::Table, Jobs::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        // Every access check looks a content up by its multihash.
        manager
            .create_index(
                Index::create()
                    .name("idx_content_claims_multihash")
                    .table(ContentClaims::Table)
                    .col(ContentClaims::Multihash)
                    .to_owned(),
            )
            .await?;
        // The quota sums an owner's uploads; the expiry walks uploads by age.
        manager
            .create_index(
                Index::create()
                    .name("idx_content_claims_owner")
                    .table(ContentClaims::Table)
                    .col(ContentClaims::Owner)
                    .col(ContentClaims::Kind)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_content_claims_kind_created")
                    .table(ContentClaims::Table)
                    .col(ContentClaims::Kind)
                    .col(ContentClaims::CreatedAt)
                    .to_owned(),
            )
            .await?;
        backfill(manager, (Jobs::DatasetCid, "dataset_cid"), "dataset").await?;
        backfill(manager, (Jobs::HeldoutCid, "heldout_cid"), "held_out").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ContentClaims::Table).to_owned())
            .await
    }
}

/// A claim of `kind` for every job's content in `column`, one distinct CID text at a time (the
/// multihash is computed here, not in SQL).
async fn backfill(
    manager: &SchemaManager<'_>,
    (column, name): (Jobs, &str),
    kind: &str,
) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let select = Query::select()
        .distinct()
        .column(column)
        .from(Jobs::Table)
        .and_where(Expr::col(column).is_not_null())
        .to_owned();
    let cids = db.query_all(&select).await?;
    for row in cids {
        let cid: String = row.try_get("", name)?;
        // A CID that does not parse guards nothing under any spelling; it is left as it was.
        let Ok(key) = shardwork_core::store::content_key_of(&cid) else {
            continue;
        };
        manager
            .exec_stmt(
                Query::insert()
                    .into_table(ContentClaims::Table)
                    .columns([
                        ContentClaims::Multihash,
                        ContentClaims::Kind,
                        ContentClaims::Owner,
                        ContentClaims::JobId,
                        ContentClaims::Cid,
                    ])
                    .select_from(
                        Query::select()
                            .expr(Expr::val(key))
                            .expr(Expr::val(kind))
                            .expr(Func::lower(Expr::col(Jobs::Requester)))
                            .column(Jobs::Id)
                            .column(column)
                            .from(Jobs::Table)
                            .and_where(Expr::col(column).eq(cid))
                            .to_owned(),
                    )
                    .map_err(|e| DbErr::Custom(e.to_string()))?
                    .to_owned(),
            )
            .await?;
    }
    Ok(())
}

#[derive(DeriveIden)]
enum ContentClaims {
    Table,
    Id,
    Multihash,
    Kind,
    Owner,
    JobId,
    Cid,
    SizeBytes,
    CreatedAt,
    ReferencedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    Id,
    Requester,
    DatasetCid,
    HeldoutCid,
}
