//! The Shardwork HTTP API: Sign-In with Ethereum, job quotes, worker registration; problem+json
//! errors, request tracing, Prometheus metrics and per-caller rate limits.
//!
//! Three layers, imports pointing one way:
//!
//! * [`domain`]: the job lifecycle, the flow of a funded job, the dataset pipeline, sizing,
//!   sealing and job look-ups. Knows nothing of HTTP; returns [`domain::DomainError`].
//! * [`http`]: routes, extractors, problem+json, OpenAPI, auth, telemetry. Calls the domain and
//!   maps its errors to statuses in one place.
//! * [`background`]: the outbox dispatcher, the chain follower and the reaper, loops over the
//!   domain.
//!
//! [`state`] holds what the HTTP layer and the loops share; [`startup`] composes them. The CLI
//! builds [`state::Ports`] and an [`configuration::ApiConfig`] and calls [`startup::serve`];
//! tests use [`http::app::app`] or [`startup::Application`].
#![warn(missing_docs)]

pub mod background;
pub mod chain;
pub mod coalesce;
pub mod configuration;
pub mod domain;
pub mod entities;
pub mod http;
pub mod stake_tokens;
pub mod startup;
pub mod state;

pub use configuration::ApiConfig;
pub use startup::{Application, Running, StartupError, serve, start};
pub use state::Ports;
