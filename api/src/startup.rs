//! Builds the actix-web application from the configuration and the ports, and runs it.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use sea_orm::DatabaseConnection;
use shardwork_core::queue::{QueueOptions, TaskQueue};
use shardwork_core::store::ContentStore;

use crate::auth::TokenIssuer;
use crate::background::Wakeups;
use crate::chain::Chain;
use crate::configuration::{ApiConfig, ConfigError};
use crate::metrics::Metrics;
use crate::routes;
use crate::routes::jobs::read::{JobReads, job_reads};
use crate::telemetry::{self, RateLimiter};

/// The infrastructure the API runs on, built by the caller (the CLI, or a test).
#[derive(Clone)]
pub struct Ports {
    /// Migrated to `shardwork_migrations::Migrator`'s latest version.
    pub db: DatabaseConnection,
    pub store: Arc<dyn ContentStore>,
    pub queue: Arc<dyn TaskQueue>,
    /// The escrow the API follows and pays out through; without it jobs cannot be funded.
    pub chain: Option<Chain>,
}

/// Everything a handler may reach, shared by all workers of the server.
pub struct AppState {
    pub config: ApiConfig,
    pub db: DatabaseConnection,
    pub store: Arc<dyn ContentStore>,
    pub queue: Arc<dyn TaskQueue>,
    pub chain: Option<Chain>,
    pub tokens: Arc<TokenIssuer>,
    pub metrics: Metrics,
    pub limiter: RateLimiter,
    /// `GET /v1/jobs/{id}`'s reads, coalesced into shared round trips.
    pub job_reads: JobReads,
    pub wakeups: Wakeups,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("invalid configuration: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Config(Vec<ConfigError>),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

impl AppState {
    /// Checks the configuration and assembles the state.
    pub fn new(config: ApiConfig, ports: Ports) -> Result<Arc<AppState>, StartupError> {
        config.validate().map_err(StartupError::Config)?;
        let tokens = Arc::new(TokenIssuer::new(
            config.jwt_secret.expose().as_bytes(),
            config.access_token_ttl_secs,
            config.refresh_token_ttl_secs,
        ));
        Ok(Arc::new(AppState {
            limiter: RateLimiter::new(config.rate_limit_per_minute),
            job_reads: job_reads(ports.db.clone()),
            wakeups: Wakeups::default(),
            metrics: Metrics::default(),
            tokens,
            config,
            db: ports.db,
            store: ports.store,
            queue: ports.queue,
            chain: ports.chain,
        }))
    }
}

/// Registers state, extractor configuration, middleware-independent routes and the
/// problem+json fallback on an `App` (or a test service).
pub fn configure(state: Arc<AppState>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let json_limit = state.config.json_limit_bytes;
        cfg.app_data(web::Data::from(state.tokens.clone()))
            .app_data(web::Data::from(state));
        crate::extract::configure_extractors(cfg, json_limit);
        routes::configure(cfg);
        cfg.default_service(web::to(routes::portal::fallback));
    }
}

/// The complete application: routes plus the telemetry/rate-limit middleware.
pub fn app(
    state: Arc<AppState>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .configure(configure(state))
        .wrap(actix_web::middleware::from_fn(telemetry::observe))
}

/// A bound, not yet running server; `port` is the one the OS gave when binding port 0.
pub struct Application {
    pub port: u16,
    pub state: Arc<AppState>,
    server: Server,
}

impl Application {
    pub fn build(config: ApiConfig, ports: Ports) -> Result<Application, StartupError> {
        let address = config.bind;
        let state = AppState::new(config, ports)?;
        let listener =
            TcpListener::bind(address).map_err(|source| StartupError::Bind { address, source })?;
        let port = listener.local_addr()?.port();
        tracing::info!(%address, port, "API listening");
        let shared = state.clone();
        let server = HttpServer::new(move || app(shared.clone()))
            .listen(listener)?
            .run();
        Ok(Application {
            port,
            state,
            server,
        })
    }

    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        Ok(self.server.await?)
    }
}

/// A started API: the HTTP server and its background work (outbox, chain follower, reaper).
pub struct Running {
    pub port: u16,
    pub state: Arc<AppState>,
    background: crate::background::Background,
    handle: actix_web::dev::ServerHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Serves until the server is stopped (Ctrl-C, or the handle's `stop`).
    pub async fn wait(self) -> Result<(), StartupError> {
        let Running {
            server, background, ..
        } = self;
        let result = server
            .await
            .map_err(|e| StartupError::Io(std::io::Error::other(e)))?;
        drop(background);
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
    let background = crate::background::start(application.state.clone(), queue_options)
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

/// Starts the API with its background work and serves until the process is stopped.
pub async fn serve(
    config: ApiConfig,
    ports: Ports,
    queue_options: &QueueOptions,
) -> Result<(), StartupError> {
    start(config, ports, queue_options).await?.wait().await
}
