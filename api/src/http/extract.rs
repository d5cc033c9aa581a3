//! Request extractors whose failures are problem+json naming the field at fault.
//!
//! actix-web's own `Json` reports serde's message without the path of the failing field, so
//! bodies are decoded here with `serde_path_to_error` (through the protocol's `decode_json`).
//! Path and query extractors keep actix's types but get error handlers that answer
//! problem+json (see [`configure_extractors`]).

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::error::{PathError, QueryPayloadError};
use actix_web::web::{self, Bytes};
use actix_web::{FromRequest, HttpRequest};
use serde::de::DeserializeOwned;
use shardwork_core::protocol::validation::decode_json;

use crate::http::problem::{ApiError, ProblemKind};

/// A JSON body decoded into `T`; a decoding failure names the failing field.
#[derive(Debug)]
pub struct Json<T>(pub T);

/// Largest JSON body accepted, registered as app data by the app builder.
#[derive(Debug, Clone, Copy)]
pub struct JsonLimit(pub usize);

impl<T: DeserializeOwned + 'static> FromRequest for Json<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let limit = req.app_data::<JsonLimit>().map_or(1 << 20, |limit| limit.0);
        let content_type_ok = req
            .headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let essence = v.split(';').next().unwrap_or("").trim();
                essence.eq_ignore_ascii_case("application/json")
                    || essence.to_ascii_lowercase().ends_with("+json")
            });
        let body = Bytes::from_request(req, payload);
        Box::pin(async move {
            if !content_type_ok {
                return Err(ApiError::malformed(
                    "",
                    "the body must be JSON (Content-Type: application/json)",
                ));
            }
            let bytes = body.await.map_err(|err| payload_error(err, limit))?;
            if bytes.len() > limit {
                return Err(too_large(limit));
            }
            decode_json::<T>(&bytes)
                .map(Json)
                .map_err(|errors| ApiError::from_spec_errors(errors, false, ""))
        })
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        ProblemKind::PayloadTooLarge,
        format!("the body exceeds the limit of {limit} bytes"),
    )
}

fn payload_error(err: actix_web::Error, limit: usize) -> ApiError {
    if err.as_response_error().status_code() == actix_web::http::StatusCode::PAYLOAD_TOO_LARGE {
        too_large(limit)
    } else {
        ApiError::malformed("", format!("the body could not be read: {err}"))
    }
}

/// Path and query errors as problem+json. Also caps the raw body size actix buffers for
/// `Bytes` extraction at `limit`.
pub fn configure_extractors(cfg: &mut web::ServiceConfig, json_limit: usize) {
    cfg.app_data(JsonLimit(json_limit))
        .app_data(web::PayloadConfig::new(json_limit))
        .app_data(web::PathConfig::default().error_handler(|err, _req| {
            let message = match &err {
                PathError::Deserialize(inner) => inner.to_string(),
                other => other.to_string(),
            };
            ApiError::malformed("path", message).into()
        }))
        .app_data(web::QueryConfig::default().error_handler(|err, _req| {
            let message = match &err {
                QueryPayloadError::Deserialize(inner) => inner.to_string(),
                other => other.to_string(),
            };
            // serde_urlencoded names the field in its message (`missing field `x``,
            // `x: invalid digit`); the path says it is the query string.
            ApiError::malformed("query", message).into()
        }));
}
