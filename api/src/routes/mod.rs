//! HTTP routes, one module per resource.

pub mod auth;
pub mod health;
pub mod jobs;
pub mod workers;

use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics))
        .service(
            web::scope("/v1")
                .route("/auth/nonce", web::post().to(auth::nonce))
                .route("/auth/verify", web::post().to(auth::verify))
                .route("/auth/refresh", web::post().to(auth::refresh))
                .route("/auth/me", web::get().to(auth::me))
                .route("/jobs/quote", web::post().to(jobs::quote::quote))
                .route("/jobs", web::post().to(jobs::create::create))
                .route("/jobs", web::get().to(jobs::read::list))
                .route("/jobs/{id}", web::get().to(jobs::read::get))
                .route("/jobs/{id}/cancel", web::post().to(jobs::cancel::cancel))
                .route("/jobs/{id}/events", web::get().to(jobs::events::list))
                .route(
                    "/jobs/{id}/events/stream",
                    web::get().to(jobs::events::stream),
                )
                .route(
                    "/jobs/{id}/held-out-key",
                    web::get().to(jobs::heldout::held_out),
                )
                .route("/workers/register", web::post().to(workers::register))
                .route("/workers/heartbeat", web::post().to(workers::heartbeat))
                .route("/workers/me", web::get().to(workers::me)),
        );
}
