//! What a worker submits for a task: where its adapter and metrics are, and how much data it saw.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::PROTOCOL_VERSION;
use super::ids::ContentId;
use super::validation::SpecErrors;

/// The name a submission's metrics (metrics.json) are sealed under, beside its adapter's
/// files, with the submission's key (`store::keys::Sealed::Submission`).
pub const METRICS_FILE: &str = "metrics.json";

/// The file of a submission's adapter bundle, beside `adapter_config.json` and
/// `adapter_model.safetensors`, that proves the training was done: the loss of every step and
/// the optimiser's state where the run crosses from one of [`TRACE_SEGMENTS`] equal stretches
/// of its steps into the next. The validator trains one stretch again from the state at its
/// start and compares where it ends (docs/decisions/0033).
pub const TRACE_FILE: &str = "training_trace.safetensors";

/// Equal stretches of steps a task's run is cut into for the proof of training ([`TRACE_FILE`];
/// fewer when the run has fewer steps). A worker that does less than one stretch's worth of
/// the work has forged every stretch and is caught by any replay. A run that skipped a share
/// `s` of its steps is caught by one drawn stretch with probability at least `s`, however many
/// stretches there are, while a replay costs `1 / TRACE_SEGMENTS` of the run: eight, not the
/// first four, halves the validator's replays at the same odds (issue 47; decisions/0033,
/// amended). An honest stretch of one step still replays across kernels well inside the
/// tolerances (AMX against gemm: update cosine 0.99999, norm ratio 1.000).
pub const TRACE_SEGMENTS: usize = 8;

/// The stretch counts a validator accepts in a trace: this release's [`TRACE_SEGMENTS`] first,
/// then the four that workers built before 2026-12-06 cut their runs into. The protocol version
/// did not change with the count, so during a rolling upgrade an honest worker still on the
/// old build must not forfeit its job (and its bond) for the shape of its proof. Accepting four
/// costs the validator a quarter of a run for each of that worker's drawn proofs instead of an
/// eighth, at the same odds of catching a skipped share of the steps (decisions/0033).
pub const ACCEPTED_TRACE_SEGMENTS: [usize; 2] = [TRACE_SEGMENTS, 4];

// A proof check reports at most `TRACE_SEGMENTS` stretches (the API bounds it so): no accepted
// count may be larger.
const _: () = {
    let mut i = 0;
    while i < ACCEPTED_TRACE_SEGMENTS.len() {
        assert!(ACCEPTED_TRACE_SEGMENTS[i] <= TRACE_SEGMENTS);
        i += 1;
    }
};

/// Training metrics a worker reports; stored as metrics.json beside the adapter.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmissionMetrics {
    /// Optimizer steps taken.
    pub steps: u64,
    /// Training loss at the end of training.
    pub final_train_loss: f64,
    /// Training throughput, in tokens per second.
    pub tokens_per_second: f64,
    /// Wall-clock time of the training, in seconds.
    pub wall_seconds: f64,
}

/// What a worker hands in for a task it holds the lease on.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    /// The protocol version; this server speaks 1.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1))]
    pub version: u32,
    /// The task it trained.
    pub task_id: Uuid,
    /// Lease token from the claim: proves this worker still holds the task.
    pub lease_token: Uuid,
    /// The trained adapter's bundle.
    pub adapter_cid: ContentId,
    /// Its training metrics document (metrics.json).
    pub metrics_cid: ContentId,
    /// Training records the adapter saw (weights the merge).
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub samples: u64,
}

impl Submission {
    /// Every problem with this submission, each with its field path.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut e = SpecErrors::default();
        e.check(self.version == PROTOCOL_VERSION, "version", || {
            format!("version {} is not supported", self.version)
        });
        e.check(self.samples > 0, "samples", || {
            "an adapter is trained on at least one sample".into()
        });
        e.check(self.adapter_cid != self.metrics_cid, "metrics_cid", || {
            "metrics and adapter must be different documents".into()
        });
        e.into_result()
    }
}

impl SubmissionMetrics {
    /// Refuses a figure that is not finite or is negative, naming each.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut e = SpecErrors::default();
        for (path, value) in [
            ("final_train_loss", self.final_train_loss),
            ("tokens_per_second", self.tokens_per_second),
            ("wall_seconds", self.wall_seconds),
        ] {
            e.check(value.is_finite() && value >= 0.0, path, || {
                format!("{value} is not a finite non-negative number")
            });
        }
        e.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_metrics_are_refused() {
        let m = SubmissionMetrics {
            steps: 3,
            final_train_loss: f64::NAN,
            tokens_per_second: 1.0,
            wall_seconds: f64::INFINITY,
        };
        let err = m.validate().unwrap_err();
        let paths: Vec<_> = err.errors().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["final_train_loss", "wall_seconds"]);
    }
}
