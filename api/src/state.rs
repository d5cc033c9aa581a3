//! What every handler and background loop may reach: the ports the caller built and the
//! shared pieces assembled from the configuration. Its own module so the HTTP layer, the
//! background loops and startup can all depend on it without depending on one another.

use std::sync::Arc;

use sea_orm::DatabaseConnection;
use shardwork_core::queue::TaskQueue;
use shardwork_core::store::ContentStore;

use crate::background::leadership::Role;
use crate::background::wakeups::Wakeups;
use crate::chain::Chain;
use crate::configuration::{ApiConfig, ConfigError};
use crate::domain::jobs::{JobReads, job_reads};
use crate::http::auth::tokens::TokenIssuer;
use crate::http::metrics::Metrics;
use crate::http::rate_limit::RequestLimits;
use crate::http::stream_slots::StreamSlots;
use crate::stake_tokens::StakeTokens;

/// The infrastructure the API runs on, built by the caller (the CLI, or a test).
#[derive(Clone)]
pub struct Ports {
    /// Migrated to `shardwork_migrations::Migrator`'s latest version.
    pub db: DatabaseConnection,
    /// The content-addressed store: job specs, datasets, shards, sealed held-out sets, uploads.
    pub store: Arc<dyn ContentStore>,
    /// The queue tasks are published to for workers to lease.
    pub queue: Arc<dyn TaskQueue>,
    /// The escrow the API follows and pays out through; without it jobs cannot be funded.
    pub chain: Option<Chain>,
}

/// Everything a handler may reach, shared by all workers of the server.
pub struct AppState {
    /// The validated settings.
    pub config: ApiConfig,
    /// The database, as in [`Ports::db`].
    pub db: DatabaseConnection,
    /// The content store, as in [`Ports::store`].
    pub store: Arc<dyn ContentStore>,
    /// The task queue, as in [`Ports::queue`].
    pub queue: Arc<dyn TaskQueue>,
    /// The escrow, as in [`Ports::chain`]; `None` when the API runs without a chain.
    pub chain: Option<Chain>,
    /// Issues and verifies access and refresh tokens.
    pub tokens: Arc<TokenIssuer>,
    /// The Prometheus counters and histograms served at `/metrics`.
    pub metrics: Metrics,
    /// Request budgets per caller, per client address and per client address's sign-ins,
    /// shared by the replicas on `db`.
    pub limits: RequestLimits,
    /// The event streams open on this replica, per caller and per client address, and their
    /// caps.
    pub streams: StreamSlots,
    /// `GET /v1/jobs/{id}`'s reads, coalesced into shared round trips.
    pub job_reads: JobReads,
    /// Signals that wake the background loops when there is work for them.
    pub wakeups: Wakeups,
    /// Whether this replica runs the background loops now (one replica at a time).
    pub background_role: Role,
    /// The escrow's allow-listed stake tokens, as last read from the chain.
    pub stake_tokens: StakeTokens,
}

impl AppState {
    /// Checks the configuration and assembles the state.
    pub fn new(config: ApiConfig, ports: Ports) -> Result<Arc<AppState>, Vec<ConfigError>> {
        config.validate()?;
        let tokens = Arc::new(TokenIssuer::new(
            config.jwt_secret.expose().as_bytes(),
            config.access_token_ttl_secs,
            config.refresh_token_ttl_secs,
        ));
        Ok(Arc::new(AppState {
            limits: RequestLimits::new(&config, ports.db.clone()),
            streams: StreamSlots::new(
                config.max_event_streams_per_caller,
                config.max_event_streams_per_ip,
            ),
            job_reads: job_reads(ports.db.clone()),
            wakeups: Wakeups::default(),
            background_role: Role::default(),
            stake_tokens: StakeTokens::default(),
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
