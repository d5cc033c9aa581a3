//! Locating the real servers (PostgreSQL, RabbitMQ, anvil, Kubo) a test needs.
//!
//! With `SHARDWORK_REQUIRE_SERVICES=1` (CI) a missing server is a test failure. Without it the
//! test returns early and appends one line to the file named by `SHARDWORK_SKIP_LOG`, which
//! `scripts/test` prints loudly at the end, so a skipped suite is never mistaken for a pass.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A server a test can ask for, with the URL it is reached at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// PostgreSQL; by default a local `test` database.
    Postgres,
    /// RabbitMQ; by default a local broker, as `guest`.
    RabbitMq,
    /// anvil, the local Ethereum node; no default URL, as tests start their own.
    Anvil,
    /// A Kubo (IPFS) node; used only when `SHARDWORK_TEST_KUBO_URL` names one.
    Kubo,
}

impl Service {
    /// Environment variable that overrides the default URL.
    pub fn env_var(self) -> &'static str {
        match self {
            Service::Postgres => "SHARDWORK_TEST_DATABASE_URL",
            Service::RabbitMq => "SHARDWORK_TEST_AMQP_URL",
            Service::Anvil => "SHARDWORK_TEST_ANVIL",
            Service::Kubo => "SHARDWORK_TEST_KUBO_URL",
        }
    }

    /// Where the server is expected on a developer machine and in CI.
    pub fn default_url(self) -> Option<&'static str> {
        match self {
            Service::Postgres => Some("postgres://postgres@127.0.0.1:5432/test"),
            Service::RabbitMq => Some("amqp://guest:guest@127.0.0.1:5672/%2f"),
            // anvil is a binary the test starts itself (installed by scripts/install/npm-tools).
            Service::Anvil => None,
            // There is no Kubo binary on our machines; a real node is used only when named.
            Service::Kubo => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Service::Postgres => "PostgreSQL",
            Service::RabbitMq => "RabbitMQ",
            Service::Anvil => "anvil",
            Service::Kubo => "Kubo",
        }
    }
}

/// True when CI asked for every server to be present.
pub fn services_required() -> bool {
    std::env::var("SHARDWORK_REQUIRE_SERVICES").is_ok_and(|v| v == "1" || v == "true")
}

/// Returns the URL of `service` if it answers, `None` (after logging the skip) if it does not
/// and servers are optional, and panics with a clear message if it does not and they are
/// required. `suite` names the test suite in the skip line.
pub fn service_url(service: Service, suite: &str) -> Option<String> {
    let url = std::env::var(service.env_var())
        .ok()
        .or_else(|| service.default_url().map(str::to_owned));
    let reachable = url.as_deref().is_some_and(reachable);
    match (reachable, url) {
        (true, Some(url)) => Some(url),
        (_, url) => {
            let why = match url {
                Some(url) => format!("{} not reachable at {url}", service.name()),
                None => format!(
                    "{} not configured (set {})",
                    service.name(),
                    service.env_var()
                ),
            };
            if services_required() && service != Service::Kubo {
                panic!("{suite}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
            }
            record_skip(suite, &why);
            None
        }
    }
}

/// Appends a skip line for `scripts/test` to print.
pub fn record_skip(suite: &str, why: &str) {
    eprintln!("SKIPPED {suite}: {why}");
    let Ok(path) = std::env::var("SHARDWORK_SKIP_LOG") else {
        return;
    };
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = opened {
        // Best effort: the line already went to stderr.
        let _ = writeln!(file, "SKIPPED {suite}: {why}");
    }
}

/// A TCP connect to the URL's host and port within one second.
fn reachable(url: &str) -> bool {
    let Some(rest) = url.split("://").nth(1) else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let Ok(mut addrs) = host_port.to_socket_addrs() else {
        return false;
    };
    addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}
