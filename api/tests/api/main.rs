//! HTTP-level tests of the API, each on SQLite and on PostgreSQL.

mod helpers;

mod auth;
mod best_round;
mod bonds;
mod chain_follow;
mod content;
mod flow;
mod health;
mod jobs;
mod leadership;
mod limits;
mod models;
mod openapi;
mod progress;
mod quote;
mod schemathesis;
mod stake_tokens;
mod starting;
mod validator_leases;
mod workers;
