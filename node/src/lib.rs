//! shardwork-node: the marketplace's services built on the trainer, the worker (`shardwork
//! worker`) and the validator (`shardwork validator`).
//!
//! Both talk to the API over HTTP with their own key ([`shardwork_client::ApiClient`]), read and
//! write content through [`content::Blobs`], and never see the database: this crate links no
//! database driver. The worker consumes the task queue; the validator polls the API. What a job
//! asks of the trainer (load its model, train a shard, score an adapter, merge) is behind one
//! seam, [`work`], so the loops here know no model family.
#![warn(missing_docs)]

pub mod adversary;
pub mod capacity;
pub mod content;
pub mod models;
pub mod service;
pub mod validator;
pub mod work;
pub mod worker;

/// Why a service step failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A call to the API failed or was refused.
    #[error("API: {0}")]
    Api(#[from] shardwork_client::ApiError),
    /// The task queue failed to deliver or settle a message.
    #[error("queue: {0}")]
    Queue(#[from] shardwork_core::queue::QueueError),
    /// Content could not be fetched, verified, decoded or stored.
    #[error("content: {0}")]
    Content(String),
    /// A local file operation failed, or a blocking task died.
    #[error("{0}")]
    Io(String),
    /// Loading, training, scoring or merging in the trainer failed.
    #[error(transparent)]
    Trainer(#[from] shardwork_trainer::Error),
}
