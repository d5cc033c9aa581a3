//! The trainer's error type. Every variant names what a user can fix: the file, the line, the
//! tensor or the setting that is wrong.

use std::path::PathBuf;

/// Errors from loading models, adapters and datasets, training, evaluation and merging.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A config file (config.json, adapter_config.json, tokenizer.json) that does not parse.
    #[error("{path}: {detail}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong: the parser's message (with line and column) or the bad setting.
        detail: String,
    },
    /// A dataset record that does not parse; `line` is 1-based.
    #[error("{path}:{line}: {detail}")]
    Dataset {
        /// The dataset file.
        path: PathBuf,
        /// The record's line, counting from 1.
        line: usize,
        /// What is wrong with the record.
        detail: String,
    },
    /// A safetensors file that is truncated, has a bad header, or lacks/mis-shapes a tensor.
    #[error("{path}: {detail}")]
    Safetensors {
        /// The safetensors file.
        path: PathBuf,
        /// What is wrong with it, naming the tensor where one is at fault.
        detail: String,
    },
    /// The training loss stopped being a finite number.
    #[error(
        "training diverged at step {step}: loss is {loss} (lower the learning rate or check the data)"
    )]
    NonFiniteLoss {
        /// The optimiser step at which the loss went non-finite.
        step: usize,
        /// The loss value (NaN or infinite).
        loss: f32,
    },
    /// A setting outside its valid range, named with the value given.
    #[error("{0}")]
    Invalid(String),
    /// Adapters that cannot be combined (different modules or shapes).
    #[error("adapter mismatch: {0}")]
    Mismatch(String),
    /// A tokenizer or chat template that cannot be built or fails on the input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A tensor operation that failed in candle (shape, dtype or device errors).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The trainer's result type, with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
