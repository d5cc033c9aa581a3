//! The one typed configuration of the `shardwork` binary.
//!
//! Sources, later ones winning: built-in defaults (everything embedded, no servers) < a TOML
//! file (`--config`, or `shardwork.toml` when present) < environment variables `SHARDWORK_…`,
//! with `__` between nested keys (`SHARDWORK_QUEUE__KIND=rabbitmq`).

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};
use shardwork_api::ApiConfig;
use shardwork_api::configuration::Secret;
use shardwork_contracts::ledger::PayoutLimits;

// Defaults come from serde (`#[serde(default)]` on every section) rather than from a serialized
// default provider: a provider would round-trip the API secrets through their redacting
// `Serialize` and turn "unset" into a literal string.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Folder for everything embedded: SQLite database, blockstore, chain state.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; empty means the SQLite file in `data_dir`.
    pub database_url: String,
    pub store: StoreConfig,
    pub queue: QueueConfig,
    pub chain: ChainConfig,
    pub api: ApiConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainKind {
    /// revm in-process, state in `data_dir/chain.json`, the dev accounts funded.
    Embedded,
    /// An Ethereum JSON-RPC node (anvil, Sepolia, mainnet, an L2).
    Rpc,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChainConfig {
    pub kind: ChainKind,
    pub rpc_url: String,
    /// The JobEscrow the API follows. Empty on a development chain: one is deployed at first
    /// start and remembered in `data_dir/escrow.toml`.
    pub escrow_address: String,
    /// Hex private key of the account holding the escrow's VALIDATOR_ROLE (markStarted,
    /// payouts). Empty on a development chain (chain id 31337): the second dev account.
    pub operator_key: Secret,
    /// Let requesters have the server fund their escrow from a development account
    /// (`POST /v1/jobs/{id}/dev-fund`). Refused on any chain but a development one.
    pub dev_funding: bool,
    /// Blocks an event must be under before the API acts on it, so that a reorg shallower than
    /// this cannot take back a funding the API already opened a job for. Unset: 0 on the
    /// embedded chain and on a development chain (31337: anvil mines a block per transaction,
    /// so a depth would wait for transactions nobody sends), [`RPC_CONFIRMATIONS`] on any other.
    pub confirmations: Option<u64>,
    pub poll_interval_ms: u64,
    /// The chain's gas cap per transaction (EIP-7825 under Osaka: 2^24). Payouts are split
    /// into batches that fit it, and no transaction is sent with a higher gas limit.
    pub tx_gas_cap: u64,
}

/// The confirmation depth on a chain other than a development one when `chain.confirmations`
/// is unset: about 2.5 minutes of Ethereum mainnet's 12 s blocks, past the one- and two-block
/// reorgs the beacon chain still sees, and well short of a job's deadline.
pub const RPC_CONFIRMATIONS: u64 = 12;

impl ChainConfig {
    /// The depth the chain follower waits for: the configured one, else the default of a chain
    /// of this kind and id.
    pub fn confirmations_for(&self, chain_id: u64) -> u64 {
        self.confirmations.unwrap_or(match self.kind {
            ChainKind::Embedded => 0,
            // The development chain id (`infra`'s DEV_CHAIN_ID): anvil's.
            ChainKind::Rpc if chain_id == 31337 => 0,
            ChainKind::Rpc => RPC_CONFIRMATIONS,
        })
    }
}

impl Default for ChainConfig {
    fn default() -> Self {
        ChainConfig {
            kind: ChainKind::Embedded,
            rpc_url: "http://127.0.0.1:8545".into(),
            escrow_address: String::new(),
            operator_key: Secret::default(),
            dev_funding: true,
            confirmations: None,
            poll_interval_ms: 500,
            tx_gas_cap: PayoutLimits::default().tx_gas_cap,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// Folder blockstore in `data_dir/blocks`, Kubo-compatible CIDs.
    Embedded,
    /// A Kubo node's RPC API.
    Kubo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub kind: StoreKind,
    pub kubo_url: String,
    /// Largest single object accepted (datasets, models), in bytes.
    pub max_put_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// A table in the application database.
    Embedded,
    #[serde(rename = "rabbitmq")]
    RabbitMq,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    pub kind: QueueKind,
    pub amqp_url: String,
    /// Deliveries before a message is dead-lettered.
    pub max_deliveries: u32,
    /// Seconds an unacknowledged delivery stays invisible (embedded queue).
    pub visibility_timeout_secs: u64,
    pub prefetch: u16,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(".shardwork"),
            database_url: String::new(),
            store: StoreConfig::default(),
            queue: QueueConfig::default(),
            chain: ChainConfig::default(),
            api: ApiConfig::default(),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Embedded,
            kubo_url: "http://127.0.0.1:5001".into(),
            max_put_bytes: 8 << 30,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            kind: QueueKind::Embedded,
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            max_deliveries: 5,
            visibility_timeout_secs: 300,
            prefetch: 1,
        }
    }
}

/// Top-level keys of [`Config`], the only `SHARDWORK_…` variables read as configuration.
const SECTIONS: [&str; 6] = ["data_dir", "database_url", "store", "queue", "chain", "api"];

impl Config {
    /// Loads defaults < `file` (or ./shardwork.toml if present) < `SHARDWORK_…` environment.
    pub fn load(file: Option<&Path>) -> Result<Config, Box<figment::Error>> {
        let mut figment = Figment::new();
        match file {
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None => figment = figment.merge(Toml::file("shardwork.toml")),
        }
        // Only the configuration's own sections: SHARDWORK_LOG, SHARDWORK_CONFIG, the
        // deployer key and the test switches share the prefix but are not configuration.
        figment = figment.merge(Env::prefixed("SHARDWORK_").split("__").filter(|key| {
            // Keys keep the variable's case here; figment matches fields case-insensitively.
            let key = key.as_str().to_ascii_lowercase();
            let section = key.split('.').next().unwrap_or_default();
            SECTIONS.contains(&section)
        }));
        figment.extract().map_err(Box::new)
    }

    /// The database URL in effect: the configured one, or the SQLite file in `data_dir`.
    pub fn effective_database_url(&self) -> String {
        if self.database_url.is_empty() {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("shardwork.db").display()
            )
        } else {
            self.database_url.clone()
        }
    }

    /// The configuration as TOML with passwords in URLs replaced by `***`, safe to log.
    pub fn redacted_toml(&self) -> String {
        // API secrets print as <redacted> through their own Serialize.
        let mut shown = self.clone();
        shown.database_url = redact_url(&self.effective_database_url());
        shown.queue.amqp_url = redact_url(&self.queue.amqp_url);
        shown.store.kubo_url = redact_url(&self.store.kubo_url);
        toml::to_string_pretty(&shown).unwrap_or_else(|err| format!("<unprintable: {err}>"))
    }
}

/// Replaces the password of `scheme://user:password@host` with `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{masked}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment's own error
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_the_printed_config() {
        let mut config = Config {
            database_url: "postgres://app:s3cret@db:5432/shardwork".into(),
            ..Config::default()
        };
        config.api.jwt_secret = shardwork_api::configuration::Secret::new("jwt-secret-value");
        let shown = config.redacted_toml();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("jwt-secret-value"), "{shown}");
        assert!(!shown.contains("guest:guest"), "{shown}");
        assert!(
            shown.contains("postgres://app:***@db:5432/shardwork"),
            "{shown}"
        );
    }

    #[test]
    fn rpc_chains_wait_for_confirmations_unless_development_or_configured() {
        let rpc = ChainConfig {
            kind: ChainKind::Rpc,
            ..ChainConfig::default()
        };
        assert_eq!(rpc.confirmations_for(1), RPC_CONFIRMATIONS);
        assert_eq!(rpc.confirmations_for(11_155_111), RPC_CONFIRMATIONS);
        assert_eq!(rpc.confirmations_for(31337), 0, "anvil mines on demand");
        assert_eq!(
            ChainConfig::default().confirmations_for(31337),
            0,
            "embedded"
        );
        let configured = ChainConfig {
            confirmations: Some(3),
            ..rpc
        };
        assert_eq!(configured.confirmations_for(1), 3);
        assert_eq!(configured.confirmations_for(31337), 3);
        figment::Jail::expect_with(|jail| {
            jail.set_env("SHARDWORK_CHAIN__CONFIRMATIONS", "0");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(
                config.chain.confirmations,
                Some(0),
                "0 is a choice, not unset"
            );
            Ok(())
        });
    }

    #[test]
    fn redact_url_keeps_urls_without_credentials() {
        assert_eq!(redact_url("http://127.0.0.1:5001"), "http://127.0.0.1:5001");
        assert_eq!(redact_url("amqp://u@h/%2f"), "amqp://u@h/%2f");
        assert_eq!(redact_url("amqp://u:p@h/v?x=@"), "amqp://u:***@h/v?x=@");
    }

    #[test]
    fn file_then_environment_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "custom.toml",
                "data_dir = \"/srv/sw\"\n[queue]\nkind = \"rabbitmq\"\n",
            )?;
            jail.set_env("SHARDWORK_QUEUE__MAX_DELIVERIES", "9");
            jail.set_env("SHARDWORK_REQUIRE_SERVICES", "1");
            jail.set_env("SHARDWORK_LOG", "debug");
            jail.set_env("SHARDWORK_CONFIG", "custom.toml");
            let config = Config::load(Some(Path::new("custom.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(config.data_dir, PathBuf::from("/srv/sw"));
            assert_eq!(config.queue.kind, QueueKind::RabbitMq);
            assert_eq!(config.queue.max_deliveries, 9);
            assert_eq!(config.store.kind, StoreKind::Embedded);
            assert_eq!(config.store.kubo_url, StoreConfig::default().kubo_url);
            assert!(
                config.api.jwt_secret.expose().is_empty(),
                "unset secrets stay empty"
            );
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_an_error_naming_the_key() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("bad.toml", "[queue]\nmax_delivery = 3\n")?;
            let err = Config::load(Some(Path::new("bad.toml"))).unwrap_err();
            assert!(err.to_string().contains("max_delivery"), "{err}");
            Ok(())
        });
    }
}
