//! Liveness, readiness and metrics.

use actix_web::{HttpResponse, web};
use serde::Serialize;

use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody, ProblemKind};
use crate::state::AppState;

/// The liveness answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Liveness {
    /// Always `ok`.
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// The readiness answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Always `ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// Always `ok`: an unreachable database answers 503 instead.
    #[schema(example = "ok")]
    pub database: &'static str,
    /// `leader` when this replica runs the background loops (outbox, chain follower, reaper),
    /// `standby` while another replica does (one at a time; a standby takes over within
    /// seconds of the leader's death). Both serve every route.
    #[schema(example = "leader")]
    pub background: &'static str,
}

/// The process is up and serving HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    extensions(("x-shardwork-role" = json!("public"))),
    responses((status = 200, description = "Serving", body = Liveness))
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Liveness { status: "ok" })
}

/// The process can do its work: the database answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    extensions(("x-shardwork-role" = json!("public"))),
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "The database does not answer", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.db.ping().await.map_err(|err| {
        tracing::warn!(error = %err, "readiness: database ping failed");
        ApiError::new(ProblemKind::Unavailable, "the database does not answer")
    })?;
    Ok(HttpResponse::Ok().json(Readiness {
        status: "ready",
        database: "ok",
        background: state.background_role.name(),
    }))
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    extensions(("x-shardwork-role" = json!("public"))),
    responses((
        status = 200,
        description = "Request counters and latency histograms",
        body = String,
        content_type = "text/plain; version=0.0.4; charset=utf-8"
    ))
)]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}
