//! The kinds of error the API answers with, as RFC 7807 problem `type`s: one definition for the
//! server that sends them and the clients that branch on them (a worker told "conflict" drops
//! the task, told "forbidden" leaves it to others).

use serde::{Deserialize, Serialize};

/// A problem's kind. Its `type` URI is `urn:shardwork:problem:<slug>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemType {
    /// The request could not be decoded (bad JSON, wrong field type, missing part).
    MalformedRequest,
    /// The request decoded but a value breaks a rule.
    Validation,
    /// The request needs an access token and came without a valid one.
    Unauthenticated,
    /// The caller's role may not do this.
    Forbidden,
    /// No such job, task, submission or content.
    NotFound,
    /// The endpoint does not take this HTTP method.
    MethodNotAllowed,
    /// The request conflicts with the current state (a lease no longer held, say).
    Conflict,
    /// The request body is over the endpoint's limit.
    PayloadTooLarge,
    /// Too many requests; retry later.
    RateLimited,
    /// The service or one it depends on is not ready; retry later.
    Unavailable,
    /// The server failed; not the caller's fault.
    Internal,
}

/// The prefix of every problem `type` URI: a URN rather than a URL, stable, and promising no
/// page at a host the project may not own.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:shardwork:problem:";

impl ProblemType {
    /// Every kind.
    pub const ALL: [ProblemType; 11] = [
        ProblemType::MalformedRequest,
        ProblemType::Validation,
        ProblemType::Unauthenticated,
        ProblemType::Forbidden,
        ProblemType::NotFound,
        ProblemType::MethodNotAllowed,
        ProblemType::Conflict,
        ProblemType::PayloadTooLarge,
        ProblemType::RateLimited,
        ProblemType::Unavailable,
        ProblemType::Internal,
    ];

    /// The kind's name: the end of its `type` URI, and its JSON form.
    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::MalformedRequest => "malformed-request",
            ProblemType::Validation => "validation",
            ProblemType::Unauthenticated => "unauthenticated",
            ProblemType::Forbidden => "forbidden",
            ProblemType::NotFound => "not-found",
            ProblemType::MethodNotAllowed => "method-not-allowed",
            ProblemType::Conflict => "conflict",
            ProblemType::PayloadTooLarge => "payload-too-large",
            ProblemType::RateLimited => "rate-limited",
            ProblemType::Unavailable => "unavailable",
            ProblemType::Internal => "internal",
        }
    }

    /// A short summary of the kind, the same for every problem of that kind (the `title`).
    pub fn title(self) -> &'static str {
        match self {
            ProblemType::MalformedRequest => "The request could not be decoded",
            ProblemType::Validation => "The request breaks a rule",
            ProblemType::Unauthenticated => "Authentication is required",
            ProblemType::Forbidden => "Your role may not do this",
            ProblemType::NotFound => "Not found",
            ProblemType::MethodNotAllowed => "The endpoint does not take this method",
            ProblemType::Conflict => "The request conflicts with the current state",
            ProblemType::PayloadTooLarge => "The request body is too large",
            ProblemType::RateLimited => "Too many requests",
            ProblemType::Unavailable => "The service is not ready",
            ProblemType::Internal => "Internal error",
        }
    }

    /// The HTTP status the API sends with this kind.
    pub fn status(self) -> u16 {
        match self {
            ProblemType::MalformedRequest => 400,
            ProblemType::Validation => 422,
            ProblemType::Unauthenticated => 401,
            ProblemType::Forbidden => 403,
            ProblemType::NotFound => 404,
            ProblemType::MethodNotAllowed => 405,
            ProblemType::Conflict => 409,
            ProblemType::PayloadTooLarge => 413,
            ProblemType::RateLimited => 429,
            ProblemType::Unavailable => 503,
            ProblemType::Internal => 500,
        }
    }

    /// The problem `type` URI: [`PROBLEM_TYPE_PREFIX`] and the slug.
    pub fn type_uri(self) -> String {
        format!("{PROBLEM_TYPE_PREFIX}{}", self.slug())
    }

    /// The kind a problem `type` URI names, if it is one of ours.
    pub fn from_type_uri(uri: &str) -> Option<ProblemType> {
        let slug = uri.strip_prefix(PROBLEM_TYPE_PREFIX)?;
        ProblemType::ALL.into_iter().find(|k| k.slug() == slug)
    }

    /// The kind an answer without a problem body most likely means (a proxy's 502, say).
    pub fn from_status(status: u16) -> Option<ProblemType> {
        match status {
            502 | 504 => Some(ProblemType::Unavailable),
            _ => ProblemType::ALL.into_iter().find(|k| k.status() == status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_type_uri_and_serde() {
        for kind in ProblemType::ALL {
            assert_eq!(ProblemType::from_type_uri(&kind.type_uri()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.slug()));
            assert_eq!(ProblemType::from_status(kind.status()), Some(kind));
        }
        assert_eq!(
            ProblemType::from_type_uri("urn:shardwork:problem:nope"),
            None
        );
        assert_eq!(ProblemType::from_type_uri("about:blank"), None);
    }
}
