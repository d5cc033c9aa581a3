//! Building the configured adapters of each port: the one place that turns configuration into
//! running infrastructure, shared by `up`, the component subcommands and `bench`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::table::TableQueue;
use shardwork_core::queue::{QueueOptions, TaskQueue};
use shardwork_core::store::ContentStore;
use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};
use shardwork_core::store::kubo::{KuboConfig, KuboStore};
use shardwork_migrations::sea_orm::{ConnectOptions, Database, DatabaseConnection};
use shardwork_migrations::{Migrator, MigratorTrait};

use crate::config::{Config, QueueKind, StoreKind, redact_url};

/// Connects to the configured database and applies every pending migration.
pub async fn connect_database(url: &str) -> anyhow::Result<DatabaseConnection> {
    connect_database_with(url, None).await
}

/// As [`connect_database`], with at most `max_connections` pooled connections.
pub async fn connect_database_with(
    url: &str,
    max_connections: Option<u32>,
) -> anyhow::Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url);
    options.sqlx_logging(false);
    if let Some(max) = max_connections {
        options.max_connections(max);
    }
    let db = Database::connect(options)
        .await
        .with_context(|| format!("connecting to {}", redact_url(url)))?;
    Migrator::up(&db, None)
        .await
        .context("applying database migrations")?;
    Ok(db)
}

/// The configured content store.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn ContentStore>> {
    Ok(match config.store.kind {
        StoreKind::Embedded => {
            let mut store_config = EmbeddedConfig::new(config.data_dir.join("blocks"));
            store_config.max_put_size = config.store.max_put_bytes;
            Arc::new(
                EmbeddedStore::open(store_config)
                    .await
                    .context("opening the blockstore")?,
            )
        }
        StoreKind::Kubo => {
            let kubo = KuboConfig {
                max_put_size: config.store.max_put_bytes,
                ..KuboConfig::new(config.store.kubo_url.clone())
            };
            Arc::new(KuboStore::new(&kubo).context("configuring the Kubo client")?)
        }
    })
}

/// The configured task queue; the embedded one lives in `db`.
pub async fn open_queue(
    config: &Config,
    db: &DatabaseConnection,
) -> anyhow::Result<Arc<dyn TaskQueue>> {
    Ok(match config.queue.kind {
        QueueKind::Embedded => Arc::new(TableQueue::new(db.clone())),
        QueueKind::RabbitMq => Arc::new(
            RabbitQueue::connect(&config.queue.amqp_url, RabbitSettings::default())
                .await
                .with_context(|| format!("connecting to {}", redact_url(&config.queue.amqp_url)))?,
        ),
    })
}

/// Per-queue behaviour from the configuration.
pub fn queue_options(config: &Config) -> QueueOptions {
    QueueOptions {
        max_deliveries: config.queue.max_deliveries,
        visibility_timeout: Duration::from_secs(config.queue.visibility_timeout_secs),
        prefetch: config.queue.prefetch,
    }
}
