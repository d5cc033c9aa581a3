//! Per-request observability and admission: one tracing span per request (with a request id
//! echoed in `x-request-id`), Prometheus counters, and the rate limits (per caller, per client
//! address, per client address's sign-ins).
//!
//! The caller's bearer token is verified here once, both to key the rate limit on the signed-in
//! address (not on a header an attacker can vary) and so the `Authenticated` extractor reuses
//! the result.

use std::time::Instant;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, ResponseError, web};
use tracing::Instrument;

use crate::http::auth::Role;
use crate::http::auth::extractor::{BearerCheck, check_bearer};
use crate::http::problem::{ApiError, ProblemKind};
use crate::http::rate_limit::{Caller, Refusal, exempt, request_client_ip, sign_in_path};
use crate::state::AppState;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The middleware: traces the request in its own span, rate-limits it by caller (429 over the
/// limit), records its metrics, echoes its `x-request-id`, and wakes the outbox after a write.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let started = Instant::now();
    let request_id = uuid::Uuid::new_v4().to_string();
    let method = req.method().to_string();
    let span = tracing::info_span!(
        "http_request",
        %method,
        path = %req.path(),
        request_id = %request_id,
        caller = tracing::field::Empty,
        route = tracing::field::Empty,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    let state = req.app_data::<web::Data<AppState>>().cloned();

    let mut response = match &state {
        Some(state) if !exempt(req.path()) => {
            let check = check_bearer(req.request(), &state.tokens);
            let (subject, own_validator) = match &check.0 {
                Some(Ok(claims)) => {
                    span.record("caller", tracing::field::display(&claims.sub));
                    // The token's role, and the address still configured: a removed
                    // validator's token lives on for its TTL.
                    let own = claims.has(Role::Validator)
                        && state.config.validator_addresses.contains(&claims.sub);
                    (Some(claims.sub.to_string()), own)
                }
                _ => (None, false),
            };
            let caller = match subject.as_deref() {
                _ if own_validator => Caller::OwnValidator,
                Some(sub) => Caller::SignedIn(sub),
                None => Caller::Anonymous,
            };
            let ip = request_client_ip(req.request(), &state.config.trusted_proxies);
            req.extensions_mut().insert::<BearerCheck>(check);
            match state
                .limits
                .admit(
                    caller,
                    ip,
                    sign_in_path(req.path()),
                    chrono::Utc::now().timestamp(),
                )
                .await
            {
                Ok(()) => next
                    .call(req)
                    .instrument(span.clone())
                    .await?
                    .map_into_left_body(),
                Err(Refusal {
                    retry_after,
                    detail,
                }) => {
                    let err = ApiError::new(
                        ProblemKind::RateLimited,
                        format!("{detail}; retry in {retry_after} s"),
                    );
                    let mut response = err.error_response();
                    response.headers_mut().insert(
                        actix_web::http::header::RETRY_AFTER,
                        HeaderValue::from(retry_after),
                    );
                    req.into_response(response).map_into_right_body()
                }
            }
        }
        _ => next
            .call(req)
            .instrument(span.clone())
            .await?
            .map_into_left_body(),
    };

    let status = response.status().as_u16();
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".into());
    let elapsed = started.elapsed();
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID.clone(), value);
    }
    if let Some(state) = &state {
        state.metrics.observe(&method, &route, status, elapsed);
        // A write that succeeded has committed; if it recorded work for the outbox (a round
        // opened, a finalization), the dispatcher takes it now instead of at its next poll.
        if response.status().is_success() && !matches!(method.as_str(), "GET" | "HEAD") {
            state.wakeups.outbox.notify_one();
        }
    }
    span.record("route", route.as_str());
    span.record("status", status);
    span.record("latency_ms", elapsed.as_secs_f64() * 1e3);
    span.in_scope(|| tracing::info!("request finished"));
    Ok(response)
}
