//! Datasets: JSONL files with one record per line, and the Rotten Tomatoes fixture.

#[cfg(feature = "experiments")]
pub mod chatterbot;
pub mod classify;
pub mod jsonl;
#[cfg(feature = "experiments")]
pub mod rotten;
pub mod split;

pub use classify::{ClassificationSet, Label};
