//! The domain: what a job is and how it moves, with no HTTP in sight. The job lifecycle (the
//! one place job statuses change), the flow of a funded job (rounds, tasks, verdicts, payout),
//! the dataset pipeline, adapter sizing, held-out sealing, job look-ups and a job's event feed,
//! workers and their standing, and sign-in nonces.
//!
//! Everything here returns [`DomainError`] (or, where a refusal is not one of its kinds, an
//! error that wraps it: `sign_in::SpendError`); the HTTP layer (`crate::http`) and the background
//! loops (`crate::background`) call in, never the other way round.

pub mod cancelling;
pub mod capacity;
pub mod content;
pub mod error;
pub mod feed;
pub mod flow;
pub mod jobs;
pub mod lifecycle;
pub mod models;
pub mod pipeline;
pub mod posting;
pub mod sealing;
pub mod sign_in;
pub mod sizing;
pub mod starting;
pub mod workers;

pub use error::DomainError;
