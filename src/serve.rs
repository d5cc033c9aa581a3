//! `shardwork serve`: the API alone, on the configured adapters (production: PostgreSQL,
//! RabbitMQ, Kubo). Secrets must be configured; nothing is generated.

use crate::config::{Config, redact_url};
use crate::infra;

pub async fn run(config: Config) -> anyhow::Result<()> {
    // Checked before anything is connected, so a server (or its container) started without its
    // secrets exits at once naming them, not after a database or chain timeout.
    check_settings(&config)?;
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

/// Every `api` setting that keeps the server from starting, each named as its file key and
/// its environment variable (how a container is given it).
fn check_settings(config: &Config) -> anyhow::Result<()> {
    let Err(errors) = config.api.validate() else {
        return Ok(());
    };
    let lines: Vec<String> = errors
        .iter()
        .map(|e| {
            format!(
                "{e} (environment: SHARDWORK_API__{})",
                e.field.to_ascii_uppercase()
            )
        })
        .collect();
    anyhow::bail!("cannot serve: {}", lines.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_secrets_are_named_with_their_variables() {
        let err = check_settings(&Config::default()).unwrap_err().to_string();
        for name in ["SHARDWORK_API__JWT_SECRET", "SHARDWORK_API__SEALING_SECRET"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(err.contains("is not set"), "{err}");
    }
}
