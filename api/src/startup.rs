//! Builds the actix-web application from the configuration and the ports, and runs it.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use sea_orm::DatabaseConnection;
use shardwork_core::queue::TaskQueue;
use shardwork_core::store::ContentStore;

use crate::auth::TokenIssuer;
use crate::configuration::{ApiConfig, ConfigError};
use crate::metrics::Metrics;
use crate::problem::ApiError;
use crate::routes;
use crate::telemetry::{self, RateLimiter};

/// The infrastructure the API runs on, built by the caller (the CLI, or a test).
#[derive(Clone)]
pub struct Ports {
    /// Migrated to `shardwork_migrations::Migrator`'s latest version.
    pub db: DatabaseConnection,
    pub store: Arc<dyn ContentStore>,
    pub queue: Arc<dyn TaskQueue>,
}

/// Everything a handler may reach, shared by all workers of the server.
pub struct AppState {
    pub config: ApiConfig,
    pub db: DatabaseConnection,
    pub store: Arc<dyn ContentStore>,
    pub queue: Arc<dyn TaskQueue>,
    pub tokens: Arc<TokenIssuer>,
    pub metrics: Metrics,
    pub limiter: RateLimiter,
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
            metrics: Metrics::default(),
            tokens,
            config,
            db: ports.db,
            store: ports.store,
            queue: ports.queue,
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
        cfg.default_service(web::to(|| async {
            Err::<actix_web::HttpResponse, _>(ApiError::not_found("no such endpoint"))
        }));
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
        let server = HttpServer::new(move || app(state.clone()))
            .listen(listener)?
            .run();
        Ok(Application { port, server })
    }

    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        Ok(self.server.await?)
    }
}

/// Starts the API and serves until the process is stopped.
pub async fn serve(config: ApiConfig, ports: Ports) -> Result<(), StartupError> {
    tracing::info!(config = %serde_json::to_string(&config).unwrap_or_default(), "effective API configuration");
    Application::build(config, ports)?.run_until_stopped().await
}
