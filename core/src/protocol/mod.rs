//! The Shardwork protocol: what requesters, the API, workers and the validator exchange.
//!
//! Every message carries a `version` so a component can refuse what it does not understand
//! instead of misreading it. Parsing returns *every* problem with its field path (see
//! [`validation::SpecErrors`]), so a requester fixes a spec in one round trip.

pub mod adapter;
pub mod bundle;
pub mod events;
pub mod ids;
pub mod job_spec;
pub mod manifest;
pub mod metric;
pub mod model_files;
pub mod node;
pub mod problem;
pub mod records;
pub mod report;
pub mod shuffle;
#[cfg(feature = "siwe")]
pub mod siwe;
pub mod status;
pub mod submission;
pub mod task;
pub mod validation;

pub use adapter::{ADAPTER_FORMAT_PEFT, AdapterMeta};
pub use bundle::Bundle;
pub use events::{EventKind, EventView, JobEvent, StatusChange};
pub use ids::{ContentId, EthAddress, WeiAmount};
pub use job_spec::{
    Aggregation, Architecture, BaseModel, DpoArgs, JobKind, JobSpec, LoraSpec, LrSchedule,
    ModelFormat, PreferenceLoss, Stake, TrainingArgs, TrainingTask, ValidationSpec,
};
pub use manifest::{HeldOutRef, ShardManifest, ShardRef};
pub use metric::HeldOutMetric;
pub use records::{ChatMessage, DatasetRecord, Label, PreferencePrompt, RecordError, RecordsFor};
pub use report::{
    AggregateDetails, BesideMetrics, MergeMethod, MergedAdapter, NearestSubmission, VerdictReport,
};
pub use status::{JobStatus, ProofStatus, RoundStatus, TaskStatus, VerdictStatus};
pub use submission::{Submission, SubmissionMetrics};
pub use task::{TASK_QUEUE, TaskMessage};
pub use validation::{FieldError, SpecErrors};

/// Version of every protocol message defined here. Bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;
