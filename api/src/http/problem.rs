//! RFC 7807 problem details: every error the API returns is `application/problem+json` with a
//! stable `type` a client can branch on, a human `detail`, and for bad input the field(s) at
//! fault in `errors: [{path, message}]`.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use shardwork_core::protocol::{FieldError, SpecErrors};

use crate::domain::DomainError;
use crate::domain::error::describe;
use crate::domain::sign_in::SpendError;

/// The kinds of problem, each with its stable `type` URI, title and status: the protocol's one
/// definition, which the clients branch on too.
pub use shardwork_core::protocol::problem::ProblemType as ProblemKind;

/// The problem+json body (RFC 7807).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody {
    /// Stable kind of problem to branch on: `urn:shardwork:problem:` and one of
    /// malformed-request, validation, unauthenticated, forbidden, not-found,
    /// method-not-allowed, conflict, payload-too-large, rate-limited, unavailable, internal.
    #[serde(rename = "type")]
    #[schema(
        pattern = "^urn:shardwork:problem:[a-z-]+$",
        example = "urn:shardwork:problem:validation"
    )]
    pub type_uri: String,
    /// A short summary of the kind, the same for every problem of that kind.
    pub title: String,
    /// The HTTP status, repeated.
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    /// What went wrong this time, for a person.
    pub detail: String,
    /// The fields at fault, each with its path in the request (`spec.lora.r`,
    /// `query.limit`, `dataset[3]`); absent when no field is to blame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// An error a handler returns; rendered as problem+json.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{detail}")]
pub struct ApiError {
    /// The kind of problem: decides the status and the `type`.
    pub kind: ProblemKind,
    /// What went wrong, for a person; becomes the body's `detail`.
    pub detail: String,
    /// The fields at fault, each with its path; empty when no field is to blame.
    pub errors: Vec<FieldError>,
}

impl ApiError {
    /// A problem of `kind` with no field to blame.
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        ApiError {
            kind,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// One field at fault.
    pub fn field(kind: ProblemKind, path: impl Into<String>, message: impl Into<String>) -> Self {
        let (path, message) = (path.into(), message.into());
        let detail = if path.is_empty() {
            message.clone()
        } else {
            format!("{path}: {message}")
        };
        ApiError {
            kind,
            detail,
            errors: vec![FieldError { path, message }],
        }
    }

    /// One field the request could not be decoded at (400).
    pub fn malformed(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::field(ProblemKind::MalformedRequest, path, message)
    }

    /// One field that breaks a rule (422).
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::field(ProblemKind::Validation, path, message)
    }

    /// No valid credentials (401, with `WWW-Authenticate: Bearer`).
    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::Unauthenticated, detail)
    }

    /// Authenticated, but not allowed to do this (403).
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::Forbidden, detail)
    }

    /// What was asked for does not exist (404).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::NotFound, detail)
    }

    /// At odds with the current state (409).
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::Conflict, detail)
    }

    /// A failure that is ours, not the caller's: logged in full, reported without internals.
    pub fn internal(context: &str, err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "{context}");
        Self::new(
            ProblemKind::Internal,
            format!("{context} failed; the error was logged"),
        )
    }

    /// Spec errors: a decoding failure (serde stops at the first) is malformed, anything the
    /// rules caught is a validation problem. Each keeps its path.
    pub fn from_spec_errors(errors: SpecErrors, decoded: bool, prefix: &str) -> Self {
        let kind = if decoded {
            ProblemKind::Validation
        } else {
            ProblemKind::MalformedRequest
        };
        let errors: Vec<FieldError> = errors
            .0
            .into_iter()
            .map(|e| FieldError {
                path: join_path(prefix, &e.path),
                message: e.message,
            })
            .collect();
        Self::fields(kind, errors)
    }

    /// Several fields at fault; the detail names each (`path: message; …`).
    pub fn fields(kind: ProblemKind, errors: Vec<FieldError>) -> Self {
        ApiError {
            kind,
            detail: describe(&errors),
            errors,
        }
    }

    /// The problem+json body this error renders as.
    pub fn body(&self) -> ProblemBody {
        ProblemBody {
            type_uri: self.kind.type_uri(),
            title: self.kind.title().into(),
            status: self.kind.status(),
            detail: self.detail.clone(),
            errors: self.errors.clone(),
        }
    }
}

/// `prefix` + `path` with a dot between when both are present.
pub fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// The media type of every error response.
pub const PROBLEM_JSON: &str = "application/problem+json";

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)));
        if self.kind == ProblemKind::Unauthenticated {
            response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        response.body(serde_json::to_vec(&self.body()).unwrap_or_default())
    }
}

/// The one place a domain error becomes an HTTP status and problem `type`. The domain's
/// sentence is the `detail`; an internal failure is logged in full and reported without its
/// internals.
impl From<DomainError> for ApiError {
    fn from(err: DomainError) -> Self {
        match err {
            DomainError::NotFound(detail) => ApiError::not_found(detail),
            DomainError::Conflict(detail) => ApiError::conflict(detail),
            DomainError::Forbidden(detail) => ApiError::forbidden(detail),
            DomainError::Invalid(errors) => ApiError::fields(ProblemKind::Validation, errors),
            DomainError::Internal { context, message } => ApiError::internal(context, message),
            DomainError::Db(err) => err.into(),
        }
    }
}

/// A refused sign-in nonce means the sign-in does not hold (401, the refusal as the detail);
/// a failure to read or write it is mapped as any domain error.
impl From<SpendError> for ApiError {
    fn from(err: SpendError) -> Self {
        match err {
            SpendError::Refused(refused) => ApiError::unauthenticated(refused.to_string()),
            SpendError::Failed(err) => err.into(),
        }
    }
}

/// An unlisted token is the spec's fault (`spec.stake.token`); an unreadable chain is ours to
/// retry.
impl From<crate::stake_tokens::StakeTokenError> for ApiError {
    fn from(err: crate::stake_tokens::StakeTokenError) -> Self {
        use crate::stake_tokens::StakeTokenError;
        match err {
            StakeTokenError::NotAllowed { .. } => {
                ApiError::invalid("spec.stake.token", err.to_string())
            }
            StakeTokenError::Chain(_) => ApiError::new(ProblemKind::Unavailable, err.to_string()),
        }
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(err: sea_orm::DbErr) -> Self {
        ApiError::internal("database access", err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_with_dots_except_indices() {
        assert_eq!(join_path("spec", "lora.r"), "spec.lora.r");
        assert_eq!(join_path("spec", "[2]"), "spec[2]");
        assert_eq!(join_path("", "lora.r"), "lora.r");
        assert_eq!(join_path("spec", ""), "spec");
    }

    #[test]
    fn spec_errors_keep_every_path_and_the_kind_follows_decoding() {
        let mut errors = SpecErrors::default();
        errors.push("lora.r", "0 is outside 1..=256");
        errors.push("shards", "0 is outside 1..=1024");
        let problem = ApiError::from_spec_errors(errors.clone(), true, "spec");
        assert_eq!(problem.kind, ProblemKind::Validation);
        let body = problem.body();
        assert_eq!(body.status, 422);
        assert_eq!(body.type_uri, "urn:shardwork:problem:validation");
        assert_eq!(body.errors[1].path, "spec.shards");
        assert_eq!(
            body.detail,
            "spec.lora.r: 0 is outside 1..=256; spec.shards: 0 is outside 1..=1024"
        );
        assert_eq!(
            ApiError::from_spec_errors(errors, false, "").kind.status(),
            400
        );
    }
}
