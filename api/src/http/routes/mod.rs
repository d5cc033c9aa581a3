//! HTTP routes, one module per resource.

pub mod auth;
pub mod chain;
pub mod content;
pub mod health;
pub mod jobs;
pub mod portal;
pub mod tasks;
pub mod validator;
pub mod workers;
