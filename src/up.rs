//! `shardwork up`: everything in one process on the configured (by default embedded) adapters.
//!
//! Today it brings the infrastructure up and proves each port works end to end; the API server,
//! workers and validator join it as their issues land.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use shardwork_core::queue::OutgoingMessage;

use crate::config::{Config, redact_url};
use crate::infra;

/// Queue used only by the start-up self-check, so real task queues are never touched.
const SELF_CHECK_QUEUE: &str = "shardwork.self-check";

pub async fn run(config: Config) -> anyhow::Result<()> {
    println!(
        "Effective configuration (secrets redacted):\n{}",
        config.redacted_toml()
    );
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data folder {}", config.data_dir.display()))?;

    let url = config.effective_database_url();
    let db = infra::connect_database(&url).await?;
    println!("database    ready: {} (schema migrated)", redact_url(&url));

    let store = infra::open_store(&config).await?;
    let probe = Bytes::from(format!(
        "shardwork self-check {}",
        chrono::Utc::now().to_rfc3339()
    ));
    let cid = store
        .put(probe.clone())
        .await
        .context("storing the self-check object")?;
    let back = store
        .get_bytes(&cid, 1 << 20)
        .await
        .context("reading the self-check object")?;
    if back != probe {
        bail!("content store returned different bytes for {cid}");
    }
    println!(
        "store       ready: {:?}, round trip of {cid} verified",
        config.store.kind
    );

    let queue = infra::open_queue(&config, &db).await?;
    queue
        .declare(SELF_CHECK_QUEUE, &infra::queue_options(&config))
        .await?;
    let key = format!("self-check/{}", uuid::Uuid::new_v4());
    queue
        .publish(
            SELF_CHECK_QUEUE,
            OutgoingMessage {
                idempotency_key: key.clone(),
                payload: probe.clone(),
                delay: None,
            },
        )
        .await?;
    let mut consumer = queue.consume(SELF_CHECK_QUEUE).await?;
    // Earlier runs may have left self-check messages; settle them until ours arrives.
    loop {
        let Some(delivery) = consumer.next(Duration::from_secs(10)).await? else {
            bail!("the task queue did not deliver the self-check message within 10 s");
        };
        let ours = delivery.idempotency_key == key;
        delivery.ack().await?;
        if ours {
            break;
        }
    }
    println!(
        "queue       ready: {:?}, publish/consume/ack verified",
        config.queue.kind
    );

    println!(
        "\nInfrastructure is up in {}. The API server, workers and validator are not built yet \
         (issues 5 and 6); nothing more to run, exiting.",
        config.data_dir.display()
    );
    Ok(())
}
