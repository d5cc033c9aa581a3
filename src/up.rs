//! `shardwork up`: everything in one process on the configured (by default embedded) adapters.

use anyhow::Context;
use shardwork_migrations::{Migrator, MigratorTrait};

use crate::config::Config;

pub async fn run(config: Config) -> anyhow::Result<()> {
    println!("Effective configuration (secrets redacted):\n{}", config.redacted_toml());
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data folder {}", config.data_dir.display()))?;

    let url = config.effective_database_url();
    let db = shardwork_migrations::sea_orm::Database::connect(&url)
        .await
        .with_context(|| format!("connecting to {}", crate::config::redact_url(&url)))?;
    Migrator::up(&db, None).await.context("applying database migrations")?;
    let applied = Migrator::get_applied_migrations(&db).await?.len();
    println!("database ready: {} ({applied} migrations applied)", crate::config::redact_url(&url));
    Ok(())
}
