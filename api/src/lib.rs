//! The Shardwork HTTP API: Sign-In with Ethereum, job quotes, worker registration; problem+json
//! errors, request tracing, Prometheus metrics and per-caller rate limits.
//!
//! The CLI builds [`startup::Ports`] and an [`configuration::ApiConfig`] and calls
//! [`startup::serve`]; tests use [`startup::app`] or [`startup::Application`].

pub mod auth;
pub mod background;
pub mod chain;
pub mod coalesce;
pub mod configuration;
pub mod entities;
pub mod extract;
pub mod flow;
pub mod follower;
pub mod lifecycle;
pub mod metrics;
pub mod openapi;
pub mod outbox;
pub mod pipeline;
pub mod problem;
pub mod reaper;
pub mod routes;
pub mod sealing;
pub mod sizing;
pub mod startup;
pub mod telemetry;

pub use configuration::ApiConfig;
pub use startup::{Application, Ports, Running, StartupError, serve, start};
