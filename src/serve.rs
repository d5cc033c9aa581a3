//! `shardwork serve`: the API alone, on the configured adapters (production: PostgreSQL,
//! RabbitMQ, Kubo). Secrets must be configured; nothing is generated.

use crate::config::{Config, redact_url};
use crate::infra;

pub async fn run(config: Config) -> anyhow::Result<()> {
    tracing::info!(config = %config.redacted_toml(), "effective configuration");
    let url = config.effective_database_url();
    let db = infra::connect_database(&url).await?;
    tracing::info!(database = %redact_url(&url), "database migrated");
    let store = infra::open_store(&config).await?;
    let queue = infra::open_queue(&config, &db).await?;
    shardwork_api::serve(config.api, shardwork_api::Ports { db, store, queue }).await?;
    Ok(())
}
