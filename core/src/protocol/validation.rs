//! Collecting every problem of a message, each with the path of the field at fault.

use std::fmt;

/// One problem: `path` uses dots and indices (`lora.target_modules[2]`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldError {
    /// Where the problem is; empty for the document as a whole.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// All problems found in one message. Never empty when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SpecErrors(pub Vec<FieldError>);

impl SpecErrors {
    /// Records `message` at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records `message` at `path` unless `ok`.
    pub fn check(&mut self, ok: bool, path: &str, message: impl FnOnce() -> String) {
        if !ok {
            self.push(path, message());
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in the order they were found.
    pub fn errors(&self) -> &[FieldError] {
        &self.0
    }

    /// Ok when nothing was recorded.
    pub fn into_result(self) -> Result<(), SpecErrors> {
        if self.is_empty() { Ok(()) } else { Err(self) }
    }

    /// The error for a document that could not be decoded at all; serde stops at the first
    /// problem, so this holds one entry with the path serde reached.
    pub fn from_json_error<E: fmt::Display>(err: serde_path_to_error::Error<E>) -> SpecErrors {
        let path = err.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let mut errors = SpecErrors::default();
        errors.push(path, err.into_inner().to_string());
        errors
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if error.path.is_empty() {
                write!(f, "{}", error.message)?;
            } else {
                write!(f, "{}: {}", error.path, error.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

/// Decodes JSON into `T`, reporting the failing field's path.
pub fn decode_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, SpecErrors> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(SpecErrors::from_json_error)
}
