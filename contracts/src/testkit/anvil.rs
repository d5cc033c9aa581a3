//! Starts the pinned anvil (scripts/install/npm-tools) on a free port for one test, as an
//! Osaka chain with EIP-7825's per-transaction gas cap.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shardwork_core::testkit::services::{record_skip, services_required};

/// A running anvil, killed on drop.
#[derive(Debug)]
pub struct Anvil {
    child: Child,
    url: String,
}

impl Anvil {
    /// Starts anvil with its default dev accounts, or returns `None` after recording a loud
    /// skip when it is not installed (a panic instead under `SHARDWORK_REQUIRE_SERVICES=1`).
    pub fn start(suite: &str) -> Option<Self> {
        let Some(binary) = locate() else {
            let why = "anvil not installed (run scripts/install/npm-tools)";
            if services_required() {
                panic!("{suite}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
            }
            record_skip(suite, why);
            return None;
        };
        Some(
            Self::spawn(&binary)
                .unwrap_or_else(|e| panic!("{suite}: starting {}: {e}", binary.display())),
        )
    }

    fn spawn(binary: &std::path::Path) -> std::io::Result<Self> {
        // Port 0: the OS picks a free port and anvil prints it, so parallel tests never clash.
        // Osaka with EIP-7825's per-transaction cap of 2^24 gas, which anvil leaves off unless
        // asked: the escrow's payouts must fit the strictest chain it targets.
        let mut child = Command::new(binary)
            .args(["--port", "0", "--host", "127.0.0.1"])
            .args(["--hardfork", "osaka", "--enable-tx-gas-limit"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        // Keep draining stdout after the port is known, or anvil blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent && let Some(address) = line.strip_prefix("Listening on ") {
                    let _ = tx.send(address.trim().to_owned());
                    sent = true;
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(address) => Ok(Self {
                child,
                url: format!("http://{address}"),
            }),
            Err(_) => {
                let _ = child.kill();
                Err(std::io::Error::other(
                    "anvil did not print its address within 30 s",
                ))
            }
        }
    }

    /// Its JSON-RPC endpoint, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `anvil` from `.tools/bin` of this checkout, else from `PATH`.
fn locate() -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let local = repo.join(".tools/bin/anvil");
    if local.is_file() {
        return Some(local);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join("anvil"))
        .find(|candidate| candidate.is_file())
}
