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
    let queue = infra::open_queue(&config, Some(&db)).await?;
    let chain = infra::open_chain(&config).await?;
    tracing::info!(chain_id = chain.chain_id, escrow = %chain.escrow, operator = %chain.operator, dev_funding = chain.dev_funder.is_some(), "following the escrow");
    let ports = shardwork_api::Ports {
        db,
        store,
        queue,
        chain: Some(chain),
    };
    let queue_options = infra::queue_options(&config);
    shardwork_api::serve(config.api, ports, &queue_options, async {
        shardwork_node::service::stop_signal().await;
        tracing::info!("stopping: no new requests, finishing those in flight");
    })
    .await?;
    Ok(())
}
