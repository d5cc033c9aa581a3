//! Development secrets for `shardwork up`: generated once per data folder and kept there, so the
//! embedded marketplace runs with no setup and its tokens and sealed held-out sets survive a
//! restart. `shardwork serve` never does this: production secrets come from configuration.

use std::path::Path;

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
