//! `shardwork health`: the API image's health check. Asks the local server's `/readyz` and exits
//! 0 when it answers 200 (leader or standby), 1 naming why not. The image has no shell or curl,
//! so the check is the binary itself.

use std::time::Duration;

use anyhow::{Context, bail};

use crate::config::Config;

/// How long a health check waits for the server: an answer slower than this is a sick server.
const TIMEOUT: Duration = Duration::from_secs(4);

pub async fn run(config: &Config, url: Option<String>) -> anyhow::Result<()> {
    let url = url.unwrap_or_else(|| ready_url(config.api.bind));
    // The workspace's reqwest carries no TLS provider of its own (an https URL needs one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("GET {url} answered {status}");
    }
    println!("{url}: {status}");
    Ok(())
}

/// `/readyz` on the bound address, reached on this host (an unspecified bind address such as
/// 0.0.0.0 is reached through loopback).
fn ready_url(bind: std::net::SocketAddr) -> String {
    let host = match bind.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    format!("http://{host}:{}/readyz", bind.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_binds_are_asked_on_loopback() {
        assert_eq!(
            ready_url("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080/readyz"
        );
        assert_eq!(
            ready_url("[::]:9000".parse().unwrap()),
            "http://[::1]:9000/readyz"
        );
        assert_eq!(
            ready_url("10.1.2.3:80".parse().unwrap()),
            "http://10.1.2.3:80/readyz"
        );
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_is_unhealthy() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = run(
            &Config::default(),
            Some(format!("http://127.0.0.1:{port}/readyz")),
        )
        .await
        .unwrap_err();
        assert!(format!("{err:#}").contains("/readyz"), "{err:#}");
    }
}
