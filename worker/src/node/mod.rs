//! The marketplace's services built on the trainer: the worker (`shardwork worker`) and the
//! validator (`shardwork validator`). Both talk to the API over HTTP with their own key
//! ([`api::ApiClient`]), read and write content through [`content::Blobs`], and never see the
//! database. The worker consumes the task queue; the validator polls the API.

pub mod api;
pub mod classify;
pub mod content;
pub mod sample;
pub mod validator;
pub mod worker;

/// Why a service step failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("API: {0}")]
    Api(#[from] api::ApiError),
    #[error("queue: {0}")]
    Queue(#[from] shardwork_core::queue::QueueError),
    #[error("content: {0}")]
    Content(String),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Trainer(#[from] crate::Error),
}
