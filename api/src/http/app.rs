//! The HTTP application: the routing table, the OpenAPI description and Swagger UI, the 405
//! and fallback answers, the extractor configuration and the telemetry middleware, assembled
//! into one actix-web `App` over the shared state.
//!
//! Its own module so the routes and the OpenAPI description (which lists the routes' handlers)
//! do not import each other: this one imports both.

use std::sync::Arc;

use actix_web::http::header::{self, ALLOW, HeaderValue};
use actix_web::{App, HttpRequest, HttpResponse, ResponseError, Route, web};
use utoipa_swagger_ui::{Config, SwaggerUi};

use crate::http::problem::{ApiError, ProblemKind};
use crate::http::routes::{auth, chain, content, health, jobs, portal, tasks, validator, workers};
use crate::http::{extract, openapi, telemetry};
use crate::state::AppState;

/// Registers state, extractor configuration, middleware-independent routes and the
/// problem+json fallback on an `App` (or a test service).
pub fn configure(state: Arc<AppState>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let json_limit = state.config.json_limit_bytes;
        cfg.app_data(web::Data::from(state.tokens.clone()))
            .app_data(web::Data::from(state));
        extract::configure_extractors(cfg, json_limit);
        routes(cfg);
        cfg.default_service(web::to(portal::fallback));
    }
}

/// The complete application: routes plus the telemetry/rate-limit middleware.
pub fn app(
    state: Arc<AppState>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .configure(configure(state))
        .wrap(actix_web::middleware::from_fn(telemetry::observe))
}

/// A resource at `path` whose unsupported methods answer 405 problem+json (actix's own 405 has
/// an empty body).
fn resource(path: &str, routes: Vec<Route>) -> actix_web::Resource {
    let mut resource = web::resource(path);
    for route in routes {
        resource = resource.route(route);
    }
    resource.default_service(web::to(method_not_allowed))
}

/// 405 with the `Allow` header RFC 9110 requires. actix cannot list a resource's methods, so
/// they come from the OpenAPI description, which a test keeps equal to the routes.
async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    let allow = req
        .match_pattern()
        .map(|pattern| openapi::documented_methods(&pattern).join(", "))
        .unwrap_or_default();
    let mut response = ApiError::new(
        ProblemKind::MethodNotAllowed,
        format!("this endpoint takes {allow}"),
    )
    .error_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(ALLOW, value);
    }
    response
}

/// The routing table: every endpoint the OpenAPI description lists, and the description.
fn routes(cfg: &mut web::ServiceConfig) {
    use jobs::{cancel, create, dev_fund, events, heldout, progress, quote, read, result};
    documentation(cfg);
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
                    "/jobs/{id}/progress",
                    vec![web::get().to(progress::progress)],
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
                .service(resource("/workers/me", vec![web::get().to(workers::me)]))
                .service(resource("/chain", vec![web::get().to(chain::info)]))
                .service(resource(
                    "/jobs/{id}/dev-fund",
                    vec![web::post().to(dev_fund::dev_fund)],
                ))
                .service(resource(
                    "/jobs/{id}/result",
                    vec![web::get().to(result::result)],
                ))
                .service(resource(
                    "/jobs/{id}/result/files/{name}",
                    vec![web::get().to(result::file)],
                ))
                .service(resource(
                    "/jobs/{id}/rounds/{round}/aggregate",
                    vec![web::post().to(validator::aggregate)],
                ))
                .service(resource(
                    "/jobs/{id}/model-failure",
                    vec![web::post().to(validator::model_failure)],
                ))
                .service(resource("/content", vec![web::post().to(content::upload)]))
                .service(resource(
                    "/content/{cid}",
                    vec![web::get().to(content::download)],
                ))
                .service(resource(
                    "/tasks/{id}/claim",
                    vec![web::post().to(tasks::claim)],
                ))
                .service(resource(
                    "/tasks/{id}/extend",
                    vec![web::post().to(tasks::extend)],
                ))
                .service(resource(
                    "/tasks/{id}/abandon",
                    vec![web::post().to(tasks::abandon)],
                ))
                .service(resource(
                    "/tasks/{id}/release",
                    vec![web::post().to(tasks::release)],
                ))
                .service(resource(
                    "/tasks/{id}/submit",
                    vec![web::post().to(tasks::submit)],
                ))
                .service(resource(
                    "/validator/submissions",
                    vec![web::get().to(validator::pending)],
                ))
                .service(resource(
                    "/validator/submissions/{id}/verdict",
                    vec![web::post().to(validator::verdict)],
                ))
                .service(resource(
                    "/validator/proofs",
                    vec![web::get().to(validator::pending_proofs)],
                ))
                .service(resource(
                    "/validator/submissions/{id}/proof",
                    vec![web::post().to(validator::proof)],
                ))
                .service(resource(
                    "/validator/rounds",
                    vec![web::get().to(validator::ready_rounds)],
                ))
                .service(resource(
                    "/validator/leases",
                    vec![web::post().to(validator::lease)],
                )),
        );
}

/// `GET /openapi.json` and the Swagger UI at `/docs/` (assets compiled into the binary: the
/// page works offline).
fn documentation(cfg: &mut web::ServiceConfig) {
    cfg.service(resource(
        "/openapi.json",
        vec![web::get().to(openapi::serve_document)],
    ))
    .service(
        web::resource(openapi::DOCS_PREFIX).route(web::get().to(|| async {
            HttpResponse::PermanentRedirect()
                .insert_header((header::LOCATION, "/docs/"))
                .finish()
        })),
    )
    .service(
        SwaggerUi::new("/docs/{_:.*}").config(
            Config::new(["/openapi.json"])
                .persist_authorization(true)
                .try_it_out_enabled(true),
        ),
    );
}
