//! What can go wrong in the domain, said in the domain's words.
//!
//! The state machine, the flow and the look-ups return [`DomainError`] and know nothing of
//! HTTP: the HTTP layer maps each variant to a status and a problem `type` in one place
//! (`crate::http::problem`), and the background loops log it. Each message is the sentence a
//! person reads (`task … is leased to another worker until …`), so the mapping passes it on
//! unchanged.

use shardwork_core::protocol::{FieldError, SpecErrors};

/// Why a domain operation failed; each variant carries the sentence a person reads.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// What was asked for does not exist (`no job …`).
    #[error("{0}")]
    NotFound(String),
    /// The request is at odds with the current state: an illegal transition, a race lost to
    /// another writer, a lease held by someone else.
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this to this object (too little reputation, a rejected adapter).
    #[error("{0}")]
    Forbidden(String),
    /// Values that break a rule, each with the path of the field at fault. Never empty.
    #[error("{}", describe(.0))]
    Invalid(Vec<FieldError>),
    /// A record breaks an invariant the code relies on (a task without its shard): a bug or a
    /// damaged database, never the caller's doing.
    #[error("{context}: {message}")]
    Internal {
        /// What was being done, as the reply names it (`task message`).
        context: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sea_orm::DbErr),
}

impl DomainError {
    /// One field at fault.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        DomainError::Invalid(vec![FieldError {
            path: path.into(),
            message: message.into(),
        }])
    }

    /// A broken invariant: `context` says what was being done, `message` what was found.
    pub fn internal(context: &'static str, message: impl std::fmt::Display) -> Self {
        DomainError::Internal {
            context,
            message: message.to_string(),
        }
    }
}

impl From<SpecErrors> for DomainError {
    fn from(errors: SpecErrors) -> Self {
        DomainError::Invalid(errors.0)
    }
}

/// `path: message` per field (the message alone for an empty path), joined by `; `.
pub fn describe(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| {
            if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_each_field_at_fault() {
        let mut errors = SpecErrors::default();
        errors.push("samples", "too many");
        errors.push("", "no fields");
        assert_eq!(
            DomainError::from(errors).to_string(),
            "samples: too many; no fields"
        );
        assert_eq!(
            DomainError::invalid("quality", "2 is outside 0..=1").to_string(),
            "quality: 2 is outside 0..=1"
        );
    }
}
