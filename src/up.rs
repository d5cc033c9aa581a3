//! `shardwork up`: everything in one process on the configured (by default embedded) adapters.
//!
//! It brings the infrastructure up, proves each port works end to end, starts the API (with its
//! outbox, chain follower and reaper), and runs the validator and N workers in the same
//! process against it. `shardwork demo` does the same and then posts a job.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use shardwork_core::queue::OutgoingMessage;
use shardwork_node::adversary::Behaviour;

use crate::config::{Config, redact_url};
use crate::infra;

/// Queue used only by the start-up self-check, so real task queues are never touched.
const SELF_CHECK_QUEUE: &str = "shardwork.self-check";
/// How long `up` lets its nodes finish what they are doing when asked to stop.
const NODES_GRACE: Duration = Duration::from_secs(8);

/// A running marketplace: the API, its background work and the in-process nodes.
pub struct Deployment {
    pub running: shardwork_api::Running,
    /// The in-process workers told to cheat (`demo --adversaries`), by address.
    pub dishonest: Vec<shardwork_core::protocol::EthAddress>,
    pub nodes: crate::nodes::NodeSet,
    pub api_url: String,
    pub store: std::sync::Arc<dyn shardwork_core::store::ContentStore>,
}

/// `shardwork up`: starts everything and serves until Ctrl-C.
pub async fn run(config: Config, validators: usize, workers: usize) -> anyhow::Result<()> {
    let deployment = start(config, validators, workers, (0, Behaviour::Honest)).await?;
    println!(
        "marketplace serving on {} with {validators} validator(s) and {workers} worker(s) (Ctrl-C stops)",
        deployment.api_url
    );
    let Deployment { running, nodes, .. } = deployment;
    // One signal stops everything in order: the nodes first, while the API they talk to still
    // answers (a validator facing a stopped API retried for minutes), then the API.
    running
        .run_until(async move {
            crate::nodes::stop_signal().await;
            println!("stopping: the validator and workers, then the API (Ctrl-C again exits now)");
            nodes.stop_within(NODES_GRACE).await;
        })
        .await?;
    println!("stopped");
    Ok(())
}

/// The most in-process validators: each loads every job's model of its own.
pub const MAX_DEV_VALIDATORS: usize = 4;

pub async fn start(
    mut config: Config,
    validators: usize,
    workers: usize,
    (adversaries, adversary): (usize, Behaviour),
) -> anyhow::Result<Deployment> {
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

    let queue = infra::open_queue(&config, Some(&db)).await?;
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

    let chain = infra::open_chain(&config).await?;
    println!(
        "chain       ready: {:?} chain {}, escrow {}, operator {}{}",
        config.chain.kind,
        chain.chain_id,
        chain.escrow,
        chain.operator,
        if chain.dev_funder.is_some() {
            ", development funding on"
        } else {
            ""
        }
    );
    if let Some(token) = infra::dev_stake_token(&config, &chain).await? {
        println!(
            "chain       development stake token tUSD at {token}: allow-listed, {} minted to each development account",
            infra::DEV_TOKEN_MINTED
        );
    }
    // The in-process validators sign in with keys generated for this data folder (never a
    // public development key: its holder would read every held-out set and judge every
    // submission), and their addresses alone get the role here.
    anyhow::ensure!(
        workers <= crate::nodes::MAX_DEV_WORKERS,
        "at most {} in-process workers, not {workers}",
        crate::nodes::MAX_DEV_WORKERS
    );
    anyhow::ensure!(
        (1..=MAX_DEV_VALIDATORS).contains(&validators),
        "1 to {MAX_DEV_VALIDATORS} in-process validators, not {validators}"
    );
    let keys = crate::dev_secrets::node_keys(&config.data_dir, validators, workers)?;
    let validator_addresses: Vec<_> = keys
        .validators
        .iter()
        .map(crate::nodes::address_of)
        .collect();
    let dishonest = keys
        .workers
        .iter()
        .take(adversaries)
        .map(crate::nodes::address_of)
        .collect();
    for validator in &validator_addresses {
        if !config.api.validator_addresses.contains(validator) {
            config.api.validator_addresses.push(*validator);
        }
    }
    let bonded = infra::bond_dev_workers(&chain, &keys.workers).await?;
    if bonded > 0 {
        println!(
            "chain       {bonded} in-process worker(s) bonded {} ETH each (jobs with validation.bond_multiple lease against it)",
            infra::DEV_WORKER_BOND_ETH
        );
    }
    let ports = shardwork_api::Ports {
        db,
        store: store.clone(),
        queue: queue.clone(),
        chain: Some(chain),
    };
    let running =
        shardwork_api::start(config.api.clone(), ports, &infra::queue_options(&config)).await?;
    let api_url = format!("http://127.0.0.1:{}", running.port);
    println!("api         serving on {api_url}");
    let nodes = crate::nodes::spawn_in_process(crate::nodes::InProcess {
        api_url: api_url.clone(),
        store: store.clone(),
        queue,
        work_dir: &config.data_dir.join("nodes"),
        keys,
        adversaries,
        adversary,
    })?;
    println!(
        "nodes       ready: validator(s) {}, {workers} worker(s){}",
        validator_addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if adversaries > 0 {
            format!(" ({adversaries} dishonest: {adversary:?})")
        } else {
            String::new()
        }
    );
    Ok(Deployment {
        running,
        dishonest,
        nodes,
        api_url,
        store,
    })
}
