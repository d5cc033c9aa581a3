//! Liveness, readiness and metrics.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::problem::{ApiError, ProblemKind};
use crate::startup::AppState;

/// The process is up and serving HTTP.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// The process can do its work: the database answers.
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.db.ping().await.map_err(|err| {
        tracing::warn!(error = %err, "readiness: database ping failed");
        ApiError::new(ProblemKind::Unavailable, "the database does not answer")
    })?;
    Ok(HttpResponse::Ok().json(json!({ "status": "ready", "database": "ok" })))
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}
