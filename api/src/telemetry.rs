//! Per-request observability and admission: one tracing span per request (with a request id
//! echoed in `x-request-id`), Prometheus counters, and the per-caller rate limit.
//!
//! The caller's bearer token is verified here once, both to key the rate limit on the signed-in
//! address (not on a header an attacker can vary) and so the `Authenticated` extractor reuses
//! the result.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, ResponseError, web};
use tracing::Instrument;

use crate::auth::extractor::{BearerCheck, check_bearer};
use crate::problem::{ApiError, ProblemKind};
use crate::startup::AppState;

/// Fixed one-minute windows per caller. Coarser than a token bucket (a burst of 2× the limit
/// can straddle a window edge) but one map entry per caller and no timers.
pub struct RateLimiter {
    per_minute: u32,
    windows: Mutex<HashMap<String, (i64, u32)>>,
}

/// Entries kept before stale windows are swept.
const SWEEP_AT: usize = 100_000;

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request by `key` at unix time `now_secs`; `Err(retry_after_secs)` when over.
    pub fn admit(&self, key: &str, now_secs: i64) -> Result<(), i64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let minute = now_secs.div_euclid(60);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() >= SWEEP_AT {
            windows.retain(|_, (m, _)| *m == minute);
        }
        let entry = windows.entry(key.to_owned()).or_insert((minute, 0));
        if entry.0 != minute {
            *entry = (minute, 0);
        }
        if entry.1 >= self.per_minute {
            return Err(60 - now_secs.rem_euclid(60));
        }
        entry.1 += 1;
        Ok(())
    }
}

/// Probes and scrapes are never rate limited: a limited probe would restart a healthy server.
pub(crate) fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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
            let key = match &check.0 {
                Some(Ok(claims)) => {
                    span.record("caller", tracing::field::display(&claims.sub));
                    format!("addr:{}", claims.sub)
                }
                _ => format!(
                    "ip:{}",
                    req.peer_addr()
                        .map_or_else(|| "unknown".into(), |a| a.ip().to_string())
                ),
            };
            req.extensions_mut().insert::<BearerCheck>(check);
            match state.limiter.admit(&key, chrono::Utc::now().timestamp()) {
                Ok(()) => next
                    .call(req)
                    .instrument(span.clone())
                    .await?
                    .map_into_left_body(),
                Err(retry_after) => {
                    let err = ApiError::new(
                        ProblemKind::RateLimited,
                        format!(
                            "more than {} requests this minute; retry in {retry_after} s",
                            state.config.rate_limit_per_minute
                        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_resets_with_the_next_minute() {
        let limiter = RateLimiter::new(2);
        assert!(limiter.admit("a", 120).is_ok());
        assert!(limiter.admit("a", 130).is_ok());
        assert_eq!(limiter.admit("a", 135), Err(45));
        assert!(limiter.admit("b", 135).is_ok(), "callers are counted apart");
        assert!(limiter.admit("a", 180).is_ok());
    }

    #[test]
    fn zero_means_unlimited() {
        let limiter = RateLimiter::new(0);
        for _ in 0..1000 {
            assert!(limiter.admit("a", 0).is_ok());
        }
    }
}
