//! `shardwork up`: everything in one process on the configured (by default embedded) adapters.
//!
//! It brings the infrastructure up, proves each port works end to end, then serves the API on
//! it. The in-process workers and validator join it with the end-to-end issue.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use shardwork_core::queue::OutgoingMessage;

use crate::config::{Config, redact_url};
use crate::infra;

/// Queue used only by the start-up self-check, so real task queues are never touched.
const SELF_CHECK_QUEUE: &str = "shardwork.self-check";

pub async fn run(mut config: Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data folder {}", config.data_dir.display()))?;
    if crate::dev_secrets::fill_unset(&mut config)? {
        println!(
            "DEVELOPMENT MODE: API secrets not configured; using generated ones kept in {}",
            config.data_dir.join("dev-secrets.toml").display()
        );
    }
    println!(
        "Effective configuration (secrets redacted):\n{}",
        config.redacted_toml()
    );

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
    drop(consumer);

    println!(
        "api         serving on http://{} (Ctrl-C stops). Workers and the validator are not \
         built yet (issue 6).",
        config.api.bind
    );
    let ports = shardwork_api::Ports { db, store, queue };
    shardwork_api::serve(config.api, ports).await?;
    Ok(())
}
