//! shardwork-node: the marketplace's services built on the trainer, the worker (`shardwork
//! worker`) and the validator (`shardwork validator`).
//!
//! Both talk to the API over HTTP with their own key ([`shardwork_client::ApiClient`]), read and
//! write content through [`content::Blobs`], and never see the database: this crate links no
//! database driver. The worker consumes the task queue; the validator polls the API. What a job
//! asks of the trainer (load its model, train a shard, score an adapter, merge) is behind one
//! seam, [`work`], so the loops here know no model family.
//!
//! The dishonest workers the tests, the demo and the benchmarks set against the validator
//! (`adversary`) compile only with the `adversaries` feature, which the operators' binary
//! leaves off; they wrap the worker through its seam ([`worker::Conduct`]).
#![warn(missing_docs)]

#[cfg(feature = "adversaries")]
pub mod adversary;
pub mod capacity;
pub mod content;
pub mod health;
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

impl NodeError {
    /// Whether the error lies in the job's own files (a model, tokenizer or held-out set that
    /// does not load, whatever node tries), not in this node, its device or the network: such
    /// a job can never run, and waiting for its deadline only holds its stake and its workers.
    pub fn is_the_jobs_fault(&self) -> bool {
        use shardwork_trainer::Error as E;
        matches!(
            self,
            NodeError::Trainer(
                E::Config { .. }
                    | E::Safetensors { .. }
                    | E::Dataset { .. }
                    | E::Invalid(_)
                    | E::Tokenizer(_)
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::NodeError;

    /// A file the job brought that does not load ends the job; this node's own trouble (disk,
    /// device, network, the API) never does.
    #[test]
    fn only_the_jobs_own_files_are_its_fault() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = dir.path().join("tokenizer.json");
        std::fs::write(&tokenizer, r#"{"model": {"type": "NoSuchModel"}}"#).unwrap();
        let unloadable = shardwork_trainer::text::TextTokenizer::from_file(&tokenizer, 16)
            .err()
            .expect("no tokenizer is built from it");
        assert!(NodeError::from(unloadable).is_the_jobs_fault());
        let io = shardwork_trainer::Error::Io {
            path: tokenizer,
            source: std::io::Error::other("disk full"),
        };
        assert!(!NodeError::from(io).is_the_jobs_fault());
        assert!(!NodeError::Io("a blocking task died".into()).is_the_jobs_fault());
        assert!(!NodeError::Content("the store did not answer".into()).is_the_jobs_fault());
    }
}
