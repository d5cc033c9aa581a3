//! HTTP routes, one module per resource.

pub mod auth;
pub mod health;
pub mod jobs;
pub mod workers;

use actix_web::{HttpResponse, Route, web};

use crate::problem::{ApiError, ProblemKind};

/// A resource at `path` whose unsupported methods answer 405 problem+json (actix's own 405 has
/// an empty body).
fn resource(path: &str, routes: Vec<Route>) -> actix_web::Resource {
    let mut resource = web::resource(path);
    for route in routes {
        resource = resource.route(route);
    }
    resource.default_service(web::to(|| async {
        Err::<HttpResponse, _>(ApiError::new(
            ProblemKind::MethodNotAllowed,
            "this endpoint does not take this method",
        ))
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    use jobs::{cancel, create, events, heldout, quote, read};
    cfg.service(resource("/healthz", vec![web::get().to(health::healthz)]))
        .service(resource("/readyz", vec![web::get().to(health::readyz)]))
        .service(resource("/metrics", vec![web::get().to(health::metrics)]))
        .service(
            web::scope("/v1")
                .service(resource("/auth/nonce", vec![web::post().to(auth::nonce)]))
                .service(resource("/auth/verify", vec![web::post().to(auth::verify)]))
                .service(resource(
                    "/auth/refresh",
                    vec![web::post().to(auth::refresh)],
                ))
                .service(resource("/auth/me", vec![web::get().to(auth::me)]))
                .service(resource("/jobs/quote", vec![web::post().to(quote::quote)]))
                .service(resource(
                    "/jobs",
                    vec![web::post().to(create::create), web::get().to(read::list)],
                ))
                .service(resource("/jobs/{id}", vec![web::get().to(read::get)]))
                .service(resource(
                    "/jobs/{id}/cancel",
                    vec![web::post().to(cancel::cancel)],
                ))
                .service(resource(
                    "/jobs/{id}/events",
                    vec![web::get().to(events::list)],
                ))
                .service(resource(
                    "/jobs/{id}/events/stream",
                    vec![web::get().to(events::stream)],
                ))
                .service(resource(
                    "/jobs/{id}/held-out-key",
                    vec![web::get().to(heldout::held_out)],
                ))
                .service(resource(
                    "/workers/register",
                    vec![web::post().to(workers::register)],
                ))
                .service(resource(
                    "/workers/heartbeat",
                    vec![web::post().to(workers::heartbeat)],
                ))
                .service(resource("/workers/me", vec![web::get().to(workers::me)])),
        );
}
