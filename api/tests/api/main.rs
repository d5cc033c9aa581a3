//! HTTP-level tests of the API, each on SQLite and on PostgreSQL.

mod helpers;

mod auth;
mod health;
mod jobs;
mod quote;
mod workers;
