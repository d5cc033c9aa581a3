//! The HTTP layer: routes, extractors, problem+json, the OpenAPI description, authentication,
//! telemetry and metrics. It calls the domain (`crate::domain`) and reads the shared state
//! (`crate::state`); domain errors become statuses in one place, `From<DomainError> for
//! ApiError` in [`problem`].

pub mod access;
pub mod app;
pub mod auth;
pub mod extract;
pub mod metrics;
pub mod openapi;
pub mod problem;
pub mod rate_limit;
pub mod routes;
pub mod stream_slots;
pub mod telemetry;
