//! The domain: what a job is and how it moves, with no HTTP in sight. The job lifecycle (the
//! one place job statuses change), the flow of a funded job (rounds, tasks, verdicts, payout),
//! the dataset pipeline, adapter sizing, held-out sealing and job look-ups.
//!
//! Everything here returns [`DomainError`]; the HTTP layer (`crate::http`) and the background
//! loops (`crate::background`) call in, never the other way round.

pub mod capacity;
pub mod content;
pub mod error;
pub mod flow;
pub mod jobs;
pub mod lifecycle;
pub mod models;
pub mod pipeline;
pub mod posting;
pub mod sealing;
pub mod sizing;
pub mod starting;

pub use error::DomainError;
