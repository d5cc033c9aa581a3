//! The trainer's error type. Every variant names what a user can fix: the file, the line, the
//! tensor or the setting that is wrong.

use std::path::PathBuf;

/// Errors from loading models, adapters and datasets, training, evaluation and merging.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A config file (config.json, adapter_config.json, tokenizer.json) that does not parse.
    #[error("{path}: {detail}")]
    Config { path: PathBuf, detail: String },
    /// A dataset record that does not parse; `line` is 1-based.
    #[error("{path}:{line}: {detail}")]
    Dataset {
        path: PathBuf,
        line: usize,
        detail: String,
    },
    /// A safetensors file that is truncated, has a bad header, or lacks/mis-shapes a tensor.
    #[error("{path}: {detail}")]
    Safetensors { path: PathBuf, detail: String },
    /// The training loss stopped being a finite number.
    #[error(
        "training diverged at step {step}: loss is {loss} (lower the learning rate or check the data)"
    )]
    NonFiniteLoss { step: usize, loss: f32 },
    /// A setting outside its valid range, named with the value given.
    #[error("{0}")]
    Invalid(String),
    /// Adapters that cannot be combined (different modules or shapes).
    #[error("adapter mismatch: {0}")]
    Mismatch(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
