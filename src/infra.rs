//! Building the configured adapters of each port: the one place that turns configuration into
//! running infrastructure, shared by `up`, the component subcommands and `bench`.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, bail};
use shardwork_api::chain::Chain;
use shardwork_contracts::Ledger;
use shardwork_contracts::dev_keys;
use shardwork_contracts::ledger::embedded::EmbeddedLedger;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::ledger::{DeployParams, ETH, PayoutLimits};
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::table::TableQueue;
use shardwork_core::queue::{QueueOptions, TaskQueue};
use shardwork_core::store::ContentStore;
use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};
use shardwork_core::store::kubo::{KuboConfig, KuboStore};
use shardwork_migrations::sea_orm::{ConnectOptions, Database, DatabaseConnection};
use shardwork_migrations::{Migrator, MigratorTrait};

use crate::config::{ChainKind, Config, QueueKind, StoreKind, redact_url};

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
    // The default pings every connection on every checkout: a second round trip per query.
    // Only a connection idle long enough for a server, proxy or firewall to have dropped it
    // is pinged; a hot one that broke fails its query, which the caller sees as an error.
    options.test_before_acquire_if_idle_for(std::time::Duration::from_secs(30));
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

/// The configured task queue; the embedded one lives in `db` (a process without database
/// access, a remote worker, can only use RabbitMQ).
pub async fn open_queue(
    config: &Config,
    db: Option<&DatabaseConnection>,
) -> anyhow::Result<Arc<dyn TaskQueue>> {
    Ok(match config.queue.kind {
        QueueKind::Embedded => {
            let db = db.context(
                "the embedded queue lives in the database; give this process the database or                  use queue.kind = \"rabbitmq\"",
            )?;
            Arc::new(TableQueue::new(db.clone()))
        }
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

/// Chain id of development chains (anvil, hardhat, the embedded EVM): their dev keys are public.
const DEV_CHAIN_ID: u64 = 31337;

/// Where a development deployment of the escrow is remembered between runs.
fn escrow_file(config: &Config, chain_id: u64) -> std::path::PathBuf {
    config.data_dir.join(format!("escrow-{chain_id}.toml"))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RememberedEscrow {
    address: Address,
    block: u64,
}

/// The configured chain with the escrow the API follows: connects (or opens the embedded
/// EVM), picks the operator key, and on a development chain without a configured escrow
/// deploys one (remembered in the data folder, so a restart follows the same contract).
pub async fn open_chain(config: &Config) -> anyhow::Result<Chain> {
    let chain_config = &config.chain;
    let operator_key = chain_config.operator_key.expose().trim();
    let dev_signers = dev_keys::dev_signers();
    let ledger: Arc<dyn Ledger> = match chain_config.kind {
        ChainKind::Embedded => Arc::new(
            EmbeddedLedger::open(config.data_dir.join("chain.json"))
                .context("opening the embedded chain")?,
        ),
        ChainKind::Rpc => {
            let mut signers = dev_signers.clone();
            if !operator_key.is_empty() {
                let key: PrivateKeySigner = operator_key
                    .parse()
                    .context("chain.operator_key is not a hex secp256k1 private key")?;
                signers = vec![key];
            }
            Arc::new(
                RpcLedger::connect(
                    RpcConfig {
                        tx_gas_cap: chain_config.tx_gas_cap,
                        ..RpcConfig::new(chain_config.rpc_url.clone())
                    },
                    signers,
                )
                .await
                .with_context(|| {
                    format!(
                        "connecting to the chain at {}",
                        redact_url(&chain_config.rpc_url)
                    )
                })?,
            )
        }
    };
    let chain_id = ledger.chain_id().await.context("reading the chain id")?;
    let dev_chain = chain_id == DEV_CHAIN_ID;
    // Dev account 0 deploys and administers, 1 operates (validator role), 2 funds on
    // requesters' behalf: the roles stay distinct even on a laptop.
    let operator = if operator_key.is_empty() {
        if !dev_chain {
            bail!("chain.operator_key must be set on chain {chain_id} (not a development chain)");
        }
        dev_signers[1].address()
    } else {
        operator_key
            .parse::<PrivateKeySigner>()
            .context("chain.operator_key is not a hex secp256k1 private key")?
            .address()
    };
    if chain_config.dev_funding && !dev_chain {
        bail!("chain.dev_funding is only allowed on a development chain (31337), not {chain_id}");
    }
    let dev_funder = chain_config.dev_funding.then(|| dev_signers[2].address());
    let (escrow, start_block) = if chain_config.escrow_address.trim().is_empty() {
        if !dev_chain {
            bail!(
                "chain.escrow_address must be set on chain {chain_id}; deploy with `shardwork contracts deploy`"
            );
        }
        dev_escrow(config, ledger.as_ref(), chain_id, operator).await?
    } else {
        let address: Address = chain_config
            .escrow_address
            .trim()
            .parse()
            .context("chain.escrow_address is not an address")?;
        if ledger.code_at(address).await?.is_empty() {
            bail!("no contract at chain.escrow_address {address} on chain {chain_id}");
        }
        (address, 0)
    };
    Ok(Chain {
        ledger,
        chain_id,
        escrow,
        operator,
        dev_funder,
        poll_interval: Duration::from_millis(chain_config.poll_interval_ms.max(50)),
        confirmations: chain_config.confirmations_for(chain_id),
        start_block,
        payout_limits: PayoutLimits {
            tx_gas_cap: chain_config.tx_gas_cap,
        },
    })
}

/// The development escrow: the remembered one if its code is still on chain and is this
/// build's escrow, else a new one (a data folder kept across an upgrade that changed the
/// contract would otherwise leave `up` calling functions the old escrow does not have).
async fn dev_escrow(
    config: &Config,
    ledger: &dyn Ledger,
    chain_id: u64,
    operator: Address,
) -> anyhow::Result<(Address, u64)> {
    let file = escrow_file(config, chain_id);
    if let Ok(text) = std::fs::read_to_string(&file) {
        let remembered: RememberedEscrow =
            toml::from_str(&text).with_context(|| format!("reading {}", file.display()))?;
        let code = ledger.code_at(remembered.address).await?;
        let this_build = shardwork_contracts::artifacts::Artifact::job_escrow()
            .deployed_with_immutables_from(&code);
        if this_build.is_some_and(|expected| expected == code.as_ref()) {
            return Ok((remembered.address, remembered.block));
        }
        if !code.is_empty() {
            tracing::warn!(escrow = %remembered.address,
                "the remembered development escrow is another version of the contract; deploying this build's");
        }
    }
    let admin = dev_keys::dev_addresses()[0];
    let block = ledger.block_number().await?;
    let params = DeployParams {
        admin,
        validator: operator,
        fee_manager: admin,
        treasury: admin,
        fee_bps: 250,
    };
    let escrow = ledger
        .deploy_escrow(admin, &params)
        .await
        .context("deploying the development escrow")?;
    std::fs::create_dir_all(&config.data_dir)?;
    std::fs::write(
        &file,
        toml::to_string(&RememberedEscrow {
            address: escrow,
            block,
        })?,
    )
    .with_context(|| format!("writing {}", file.display()))?;
    Ok((escrow, block))
}

/// The development stake token: a mintable ERC-20 (`MockERC20`, "Shardwork Test Dollar", tUSD,
/// 18 decimals) allow-listed on the development escrow, with [`DEV_TOKEN_MINTED`] whole tokens
/// minted to each development account, so ERC-20 stakes can be tried in the portal and the CLI
/// as ETH stakes can. Deployed once per chain and remembered in the data folder; deployed again
/// when the chain no longer has it or the escrow does not accept it (a restarted anvil).
/// Only beside the development escrow (chain 31337, no `chain.escrow_address` configured),
/// whose admin is development account 0: `None` elsewhere.
/// What each in-process worker holds bonded on a development chain: enough for several of
/// the demo's 1-ether jobs' tasks at the highest `validation.bond_multiple` it uses.
pub const DEV_WORKER_BOND_ETH: u64 = 5;

/// On the embedded development chain, bonds [`DEV_WORKER_BOND_ETH`] for each in-process
/// worker (funded from dev account 0, which holds the chain's ether), so the jobs that ask for
/// a bond (`validation.bond_multiple`) lease them tasks. A worker already bonded that much is
/// left alone. Returns how many were bonded now; nothing on a JSON-RPC chain, whose workers
/// bond with `shardwork worker bond` from their own keys.
pub async fn bond_dev_workers(
    chain: &Chain,
    workers: &[PrivateKeySigner],
) -> anyhow::Result<usize> {
    if chain.chain_id != DEV_CHAIN_ID {
        return Ok(0);
    }
    let ledger = chain.ledger.as_ref();
    let bond = U256::from(DEV_WORKER_BOND_ETH) * U256::from(10u64).pow(U256::from(18u64));
    let funder = dev_keys::dev_addresses()[0];
    let mut bonded = 0;
    for key in workers {
        if ledger.unlock_key(key).await.is_err() {
            return Ok(0);
        }
        let worker = key.address();
        let held = ledger.bond_of(chain.escrow, worker, ETH).await?.active;
        if held >= bond {
            continue;
        }
        let missing = bond - held;
        ledger
            .send_transaction(shardwork_contracts::ledger::TxRequest {
                from: funder,
                to: Some(worker),
                input: Default::default(),
                value: missing,
                gas_limit: None,
            })
            .await
            .context("funding an in-process worker's bond")?;
        ledger
            .bond(chain.escrow, worker, ETH, missing)
            .await
            .context("bonding for an in-process worker")?;
        bonded += 1;
    }
    Ok(bonded)
}

pub async fn dev_stake_token(config: &Config, chain: &Chain) -> anyhow::Result<Option<Address>> {
    if chain.chain_id != DEV_CHAIN_ID || !config.chain.escrow_address.trim().is_empty() {
        return Ok(None);
    }
    let ledger = chain.ledger.as_ref();
    let file = config
        .data_dir
        .join(format!("test-token-{}.toml", chain.chain_id));
    if let Ok(text) = std::fs::read_to_string(&file) {
        let remembered: RememberedToken =
            toml::from_str(&text).with_context(|| format!("reading {}", file.display()))?;
        if !ledger.code_at(remembered.address).await?.is_empty()
            && ledger
                .token_allowed(chain.escrow, remembered.address)
                .await?
        {
            return Ok(Some(remembered.address));
        }
    }
    let accounts = dev_keys::dev_addresses();
    let admin = accounts[0];
    let token = ledger
        .deploy_test_token(admin, "Shardwork Test Dollar", "tUSD")
        .await
        .context("deploying the development stake token")?;
    ledger
        .set_token_allowed(chain.escrow, admin, token, true)
        .await
        .context("allow-listing the development stake token")?;
    // A whole token earned moves reputation a full step (ERC-20s start at none; ETH's step is
    // the escrow's DEFAULT_ETH_REPUTATION_UNIT, 0.01 ether).
    let one = U256::from(10u64).pow(U256::from(18u64));
    ledger
        .set_reputation_unit(chain.escrow, admin, token, one)
        .await
        .context("setting the development stake token's reputation unit")?;
    for account in accounts {
        ledger
            .mint_test_token(token, admin, account, one * U256::from(DEV_TOKEN_MINTED))
            .await
            .context("minting the development stake token")?;
    }
    std::fs::create_dir_all(&config.data_dir)?;
    std::fs::write(&file, toml::to_string(&RememberedToken { address: token })?)
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(Some(token))
}

/// Whole tUSD minted to each development account when the development stake token is deployed.
pub const DEV_TOKEN_MINTED: u64 = 1_000_000;

#[derive(serde::Serialize, serde::Deserialize)]
struct RememberedToken {
    address: Address,
}
