//! What a node process needs around its loop, shared by the `shardwork` CLI (`shardwork worker`,
//! `validator`, and the in-process nodes of `up` and `demo`) and the standalone
//! `shardwork-node` binary: its signing key, its training device, its timings, and a stop on
//! Ctrl-C or SIGTERM.

use std::path::Path;
use std::time::Duration;

use alloy::signers::local::PrivateKeySigner;
use candle_core::Device;
use tokio::sync::watch;

use crate::NodeError;

/// How often a worker extends its lease while training.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How often an idle validator asks the API for work.
pub const VALIDATOR_POLL: Duration = Duration::from_millis(300);

/// The device training runs on: the first CUDA GPU when built with `cuda` and one is present.
/// On a GPU, memory freed between steps stays in the process's pool for the next step.
pub fn training_device() -> Device {
    let device = Device::cuda_if_available(0).unwrap_or(Device::Cpu);
    if let Err(e) = shardwork_trainer::gpu::keep_freed_memory(&device) {
        // Only speed depends on it: each step then allocates from the driver again.
        tracing::warn!("freed GPU memory goes back to the driver at each step: {e}");
    }
    device
}

/// A hex secp256k1 private key from `key_file`, else from the environment variable `variable`.
pub fn signing_key(key_file: Option<&Path>, variable: &str) -> Result<PrivateKeySigner, NodeError> {
    let text = match key_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| NodeError::Io(format!("reading the key file {}: {e}", path.display())))?,
        None => std::env::var(variable).map_err(|_| {
            NodeError::Io(format!(
                "no key: set {variable} (hex private key) or pass --key-file"
            ))
        })?,
    };
    if text.trim().is_empty() {
        return Err(NodeError::Io(match key_file {
            Some(path) => format!(
                "the key file {} is empty: write the node's own hex private key there \
                 (`shardwork secrets` prints fresh ones)",
                path.display()
            ),
            None => format!(
                "{variable} is empty: set it to the node's own hex private key \
                 (`shardwork secrets` prints fresh ones)"
            ),
        }));
    }
    text.trim().parse().map_err(|_| {
        NodeError::Io(match key_file {
            Some(path) => format!("{} is not a hex secp256k1 private key", path.display()),
            None => format!("{variable} is not a hex secp256k1 private key"),
        })
    })
}

/// A receiver that turns true on Ctrl-C or SIGTERM (what `docker stop` sends); a second
/// signal exits the process at once. Must be called inside a Tokio runtime.
pub fn shutdown_on_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!(
            "shutting down: a worker gives its task back, the validator finishes its verdict"
        );
        let _ = tx.send(true);
    });
    rx
}

/// Resolves on the first Ctrl-C or SIGTERM. From then on a second one exits the process at
/// once (status 130), for when an orderly stop takes longer than the person waiting wants.
pub async fn stop_signal() {
    one_signal().await;
    tokio::spawn(async {
        one_signal().await;
        eprintln!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn one_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn an_empty_or_malformed_key_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        std::fs::write(&path, "  \n").unwrap();
        let err = signing_key(Some(&path), "SHARDWORK_NODE_KEY")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is empty") && err.contains("node.key"),
            "{err}"
        );
        std::fs::write(&path, "not hex").unwrap();
        let err = signing_key(Some(&path), "SHARDWORK_NODE_KEY")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a hex secp256k1 private key"), "{err}");
        std::fs::write(&path, format!("{}\n", "11".repeat(32))).unwrap();
        assert!(signing_key(Some(&path), "SHARDWORK_NODE_KEY").is_ok());
    }
}
