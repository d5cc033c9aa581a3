//! Development secrets for `shardwork up`: generated once per data folder and kept there, so the
//! embedded marketplace runs with no setup and its tokens and sealed held-out sets survive a
//! restart. `shardwork serve` never does this: production secrets come from configuration.
//!
//! The in-process validator's and workers' signing keys are generated the same way
//! (`node-keys.toml`), never taken from the public development accounts: whoever holds the
//! validator's key reads every job's held-out set and judges and merges its work, and anvil's
//! well-known keys are known to everyone (issue 46, decision 0038).

use std::path::Path;

use alloy::signers::local::PrivateKeySigner;
use anyhow::Context;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use shardwork_api::configuration::Secret;

use crate::config::Config;

const FILE_NAME: &str = "dev-secrets.toml";

#[derive(Serialize, Deserialize)]
struct DevSecrets {
    jwt_secret: String,
    sealing_secret: String,
}

/// Fills every unset API secret of `config` from `data_dir/dev-secrets.toml`, creating the file
/// (mode 0600) with fresh random secrets when it does not exist. Returns whether any secret was
/// filled in, so the caller can say it runs in development mode.
pub fn fill_unset(config: &mut Config) -> anyhow::Result<bool> {
    let api = &config.api;
    if !api.jwt_secret.expose().is_empty() && !api.sealing_secret.expose().is_empty() {
        return Ok(false);
    }
    let secrets = load_or_create(&config.data_dir.join(FILE_NAME))?;
    if config.api.jwt_secret.expose().is_empty() {
        config.api.jwt_secret = Secret::new(secrets.jwt_secret);
    }
    if config.api.sealing_secret.expose().is_empty() {
        config.api.sealing_secret = Secret::new(secrets.sealing_secret);
    }
    Ok(true)
}

fn load_or_create(path: &Path) -> anyhow::Result<DevSecrets> {
    if path.exists() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return toml::from_str(&text).with_context(|| format!("parsing {}", path.display()));
    }
    let secrets = DevSecrets {
        jwt_secret: random_hex(),
        sealing_secret: random_hex(),
    };
    let text = toml::to_string(&secrets).context("encoding development secrets")?;
    write_private(path, &text).with_context(|| format!("writing {}", path.display()))?;
    Ok(secrets)
}

const NODE_KEYS_FILE: &str = "node-keys.toml";

#[derive(Serialize, Deserialize)]
struct NodeKeyFile {
    /// The first validator's (the only one before `up --validators`).
    validator: String,
    /// The second validator's and on.
    #[serde(default)]
    more_validators: Vec<String>,
    #[serde(default)]
    workers: Vec<String>,
}

/// The signing keys of `shardwork up`'s own validators and workers.
pub struct NodeKeys {
    /// One per in-process validator, at least one: the addresses the API grants the
    /// validator role.
    pub validators: Vec<PrivateKeySigner>,
    /// One per in-process worker, in order.
    pub workers: Vec<PrivateKeySigner>,
}

/// The in-process nodes' keys from `data_dir/node-keys.toml`: created (mode 0600) with fresh
/// random keys when missing, and given more keys when `validators` (at least 1) or `workers`
/// asks for more than it holds. The same folder gives the same identities after a restart
/// (reputation, leases and payouts stay theirs).
pub fn node_keys(data_dir: &Path, validators: usize, workers: usize) -> anyhow::Result<NodeKeys> {
    anyhow::ensure!(validators >= 1, "at least one validator");
    let path = data_dir.join(NODE_KEYS_FILE);
    let mut file = if path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
    } else {
        NodeKeyFile {
            validator: random_key_hex(),
            more_validators: Vec::new(),
            workers: Vec::new(),
        }
    };
    let grown = file.workers.len() < workers || file.more_validators.len() < validators - 1;
    while file.workers.len() < workers {
        file.workers.push(random_key_hex());
    }
    while file.more_validators.len() < validators - 1 {
        file.more_validators.push(random_key_hex());
    }
    if grown || !path.exists() {
        let text = toml::to_string(&file).context("encoding the node keys")?;
        replace_private(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    }
    let parse = |hex: &str, what: &str| -> anyhow::Result<PrivateKeySigner> {
        hex.trim().parse().with_context(|| {
            format!(
                "{}: the {what} key is not a hex private key",
                path.display()
            )
        })
    };
    Ok(NodeKeys {
        validators: std::iter::once(&file.validator)
            .chain(&file.more_validators[..validators - 1])
            .enumerate()
            .map(|(i, hex)| parse(hex, &format!("validator {i}")))
            .collect::<anyhow::Result<_>>()?,
        workers: file.workers[..workers]
            .iter()
            .enumerate()
            .map(|(i, hex)| parse(hex, &format!("worker {i}")))
            .collect::<anyhow::Result<_>>()?,
    })
}

/// Fresh secrets for a deployment, as the `.env` lines `compose.yaml` reads: nothing in it is
/// shared with any other deployment or published anywhere.
pub fn deployment_env() -> String {
    let validator = random_key_hex();
    let address = validator
        .parse::<PrivateKeySigner>()
        .map(|k| format!("{:#x}", k.address()))
        .unwrap_or_default();
    format!(
        "# Generated by `shardwork secrets`: keep private (chmod 600), never commit.\n\
         SHARDWORK_JWT_SECRET={}\n\
         SHARDWORK_SEALING_SECRET={}\n\
         SHARDWORK_VALIDATOR_KEY={validator}\n\
         SHARDWORK_VALIDATOR_ADDRESS={address}\n\
         SHARDWORK_WORKER_1_KEY={}\n\
         SHARDWORK_WORKER_2_KEY={}\n",
        random_hex(),
        random_hex(),
        random_key_hex(),
        random_key_hex(),
    )
}

/// A fresh secp256k1 private key, hex: 32 random bytes, drawn again in the negligible case that
/// they are not a valid scalar.
fn random_key_hex() -> String {
    loop {
        let hex = random_hex();
        if hex.parse::<PrivateKeySigner>().is_ok() {
            return hex;
        }
    }
}

/// Writes `text` to `path` readable by its owner only, replacing what was there in one rename.
fn replace_private(path: &Path, text: &str) -> std::io::Result<()> {
    let staging = path.with_extension("toml.new");
    let _ = std::fs::remove_file(&staging);
    write_private(&staging, text)?;
    std::fs::rename(&staging, path)
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_generated_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        assert!(fill_unset(&mut first).unwrap());
        assert_eq!(first.api.jwt_secret.expose().len(), 64);
        assert_ne!(first.api.jwt_secret, first.api.sealing_secret);

        let mut second = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        fill_unset(&mut second).unwrap();
        assert_eq!(first.api.jwt_secret, second.api.jwt_secret);
        assert_eq!(first.api.sealing_secret, second.api.sealing_secret);
    }

    #[test]
    fn node_keys_are_private_random_reused_and_grown() {
        let dir = tempfile::tempdir().unwrap();
        let first = node_keys(dir.path(), 1, 2).unwrap();
        let public = shardwork_contracts::dev_keys::dev_addresses();
        let mut addresses = vec![first.validators[0].address()];
        addresses.extend(first.workers.iter().map(|k| k.address()));
        assert_eq!(addresses.len(), 3);
        for a in &addresses {
            assert!(!public.contains(a), "{a} is a public development account");
        }
        addresses.sort();
        addresses.dedup();
        assert_eq!(addresses.len(), 3, "distinct keys");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(NODE_KEYS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A restart asking for more validators and workers keeps the first ones and adds more.
        let again = node_keys(dir.path(), 3, 3).unwrap();
        assert_eq!(again.validators[0].address(), first.validators[0].address());
        assert_eq!(again.workers[1].address(), first.workers[1].address());
        assert!(!addresses.contains(&again.workers[2].address()));
        assert_eq!(again.validators.len(), 3);
        for v in &again.validators[1..] {
            assert!(!addresses.contains(&v.address()) && !public.contains(&v.address()));
        }
        assert_ne!(again.validators[1].address(), again.validators[2].address());
        assert_eq!(
            node_keys(dir.path(), 2, 0).unwrap().validators[1].address(),
            again.validators[1].address(),
            "asking for fewer reuses the first ones"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(NODE_KEYS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "still private after growing");
        }
        // Another data folder, other identities.
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            node_keys(other.path(), 1, 0).unwrap().validators[0].address(),
            first.validators[0].address()
        );
    }

    #[test]
    fn deployment_secrets_are_fresh_and_consistent() {
        let parse = |text: &str| -> std::collections::BTreeMap<String, String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        };
        let (a, b) = (parse(&deployment_env()), parse(&deployment_env()));
        assert_eq!(a.len(), 6);
        for (name, value) in &a {
            assert!(!value.is_empty(), "{name}");
            assert_ne!(Some(value), b.get(name), "{name} repeats across runs");
        }
        assert!(a["SHARDWORK_JWT_SECRET"].len() >= 32);
        let validator: PrivateKeySigner = a["SHARDWORK_VALIDATOR_KEY"].parse().unwrap();
        assert_eq!(
            format!("{:#x}", validator.address()),
            a["SHARDWORK_VALIDATOR_ADDRESS"]
        );
        let public = shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS;
        for key in [
            "SHARDWORK_VALIDATOR_KEY",
            "SHARDWORK_WORKER_1_KEY",
            "SHARDWORK_WORKER_2_KEY",
        ] {
            assert!(!public.contains(&a[key].as_str()));
        }
    }

    #[test]
    fn configured_secrets_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        config.api.jwt_secret = Secret::new("j".repeat(40));
        config.api.sealing_secret = Secret::new("s".repeat(40));
        assert!(!fill_unset(&mut config).unwrap());
        assert!(!dir.path().join(FILE_NAME).exists());
    }
}
