//! Composes the API: checks the configuration, assembles the state (`crate::state`), binds the
//! HTTP application (`crate::http::app`) and starts the background loops
//! (`crate::background`). Nothing in the crate imports this module; the CLI and the tests do.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::HttpServer;
use actix_web::dev::Server;
use shardwork_core::queue::QueueOptions;

use crate::background::{self, Background};
use crate::configuration::{ApiConfig, ConfigError};
use crate::http::app::app;
use crate::state::{AppState, Ports};

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The configuration failed its checks; every problem is listed.
    #[error("invalid configuration: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Config(Vec<ConfigError>),
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The configured `bind` address.
        address: std::net::SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The server failed while running, or the background work could not start.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// A bound, not yet running server; `port` is the one the OS gave when binding port 0.
pub struct Application {
    /// The port the server listens on.
    pub port: u16,
    /// The state the server's handlers share.
    pub state: Arc<AppState>,
    server: Server,
}

impl Application {
    /// Checks the configuration, assembles the state and binds the listener. The server runs once
    /// [`Application::run_until_stopped`] is awaited; no background work is started.
    pub fn build(config: ApiConfig, ports: Ports) -> Result<Application, StartupError> {
        let address = config.bind;
        let state = AppState::new(config, ports).map_err(StartupError::Config)?;
        let listener =
            TcpListener::bind(address).map_err(|source| StartupError::Bind { address, source })?;
        let port = listener.local_addr()?.port();
        tracing::info!(%address, port, "API listening");
        let shared = state.clone();
        // The process decides when to stop (`Running::run_until`): actix's own Ctrl-C handling
        // stopped the server while the in-process nodes and background loops ran on.
        let server = HttpServer::new(move || app(shared.clone()))
            .disable_signals()
            .keep_alive(KEEP_ALIVE)
            .shutdown_timeout(SHUTDOWN_GRACE_SECS)
            .listen(listener)?
            .run();
        Ok(Application {
            port,
            state,
            server,
        })
    }

    /// Serves until the server stops. Starts no background work (see [`start`]).
    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        Ok(self.server.await?)
    }
}

/// A started API: the HTTP server and its background work (outbox, chain follower, reaper).
pub struct Running {
    /// The port the server listens on.
    pub port: u16,
    /// The state the server's handlers and the background loops share.
    pub state: Arc<AppState>,
    background: Background,
    handle: actix_web::dev::ServerHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Serves until `stop` resolves (or the server ends on its own), then stops in order: the
    /// background loops first (so nothing starts a chain call or a publish that would be cut
    /// short), then the server, which finishes the requests in flight within
    /// `SHUTDOWN_GRACE_SECS` and closes.
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), StartupError> {
        let Running {
            mut server,
            background,
            handle,
            ..
        } = self;
        let ended = tokio::select! {
            ended = &mut server => Some(ended),
            () = stop => None,
        };
        drop(background);
        let ended = match ended {
            Some(ended) => ended,
            None => {
                handle.stop(true).await;
                server.await
            }
        };
        let result = ended.map_err(|e| StartupError::Io(std::io::Error::other(e)))?;
        tracing::info!("API stopped");
        Ok(result?)
    }

    /// A handle that stops the server gracefully.
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.handle.clone()
    }
}

/// Binds the API and starts its background work; the server runs once awaited or spawned.
pub async fn start(
    config: ApiConfig,
    ports: Ports,
    queue_options: &QueueOptions,
) -> Result<Running, StartupError> {
    tracing::info!(config = %serde_json::to_string(&config).unwrap_or_default(), "effective API configuration");
    let application = Application::build(config, ports)?;
    let background = background::start(application.state.clone(), queue_options)
        .await
        .map_err(|e| StartupError::Io(std::io::Error::other(e)))?;
    let handle = application.server.handle();
    // Spawned so the server accepts connections while the caller goes on (in-process nodes).
    let server = tokio::spawn(application.server);
    Ok(Running {
        port: application.port,
        state: application.state,
        background,
        handle,
        server,
    })
}

/// Starts the API with its background work and serves until `stop` resolves.
pub async fn serve(
    config: ApiConfig,
    ports: Ports,
    queue_options: &QueueOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), StartupError> {
    start(config, ports, queue_options)
        .await?
        .run_until(stop)
        .await
}

/// How long a stopping server lets requests in flight finish.
pub const SHUTDOWN_GRACE_SECS: u64 = 5;

/// How long an idle client connection stays open. actix's default, 5 s, is the workers' lease
/// heartbeat: a worker's connection sat idle for just that long between two extensions, so the
/// server closed it as the next one was sent, and the client saw a failed request and retried
/// ("API unavailable" twice in a demo run). Clients pool connections for less than this
/// (`shardwork_client`: 30 s), so they drop a connection before the server would.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);
