//! What a validator measured behind a verdict and a merge: one definition for the validator that
//! writes it, the API that stores and serves it, the CLI and demo that print it and (through the
//! OpenAPI document) the portal that draws it.
//!
//! Every field is optional: a submission rejected before it was measured (a copy told by its CID,
//! an adapter that would not load) carries only what was known by then, and events recorded by
//! earlier validators carry what those measured. Unknown fields are ignored for the same reason:
//! a stored event must stay readable when the report grows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Aggregation, HeldOutMetric};

/// Measures of one held-out pass reported beside the judged metric (`reward_accuracy` for a
/// preference job), by name; null where a measure was not finite. Reported, never judged.
/// The report fields below spell the type out: utoipa documents an alias as a schema named
/// after the aliased type (`BTreeMap`) instead of a map.
pub type BesideMetrics = BTreeMap<String, Option<f64>>;

/// The measurements behind a verdict.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerdictReport {
    /// The held-out metric the adapter was judged by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_name: Option<HeldOutMetric>,
    /// The adapter's held-out metric; absent when it was not scored (or not finite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<f64>,
    /// Other measures of the same held-out pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<BTreeMap<String, Option<f64>>>,
    /// How many held-out examples the verdict scored: the round's sample of the set
    /// (`validation.verdict_examples`), on which `metric`, `held_out`, `base_metric` and
    /// `start_metric` are all measured. Absent in verdicts made before samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_examples: Option<u32>,
    /// The base model's held-out metric (on the verdict's examples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_metric: Option<f64>,
    /// The round's starting adapter's held-out metric (the base model's in round 1 of a fresh
    /// job), on the verdict's examples: what the adapter had to beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_metric: Option<f64>,
    /// The gain over the start the adapter had to show, in the metric's units (negative: the
    /// start's noise it may fall short by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gain: Option<f64>,
    /// The largest `‖ΔW‖ / ‖W‖` over the adapted modules; absent when not finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_relative_norm: Option<f64>,
    /// The norm of what the adapter adds to the round's start; absent when not finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addition_norm: Option<f64>,
    /// The norm of the round's start (0 in round 1 of a fresh job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_norm: Option<f64>,
    /// The earlier submission of the round whose update is the most alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<NearestSubmission>,
    /// Seconds the judging took, fetches included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

impl VerdictReport {
    /// The report of a submission rejected before it was measured: the job's metric and the base
    /// model's score, nothing of the adapter.
    pub fn unmeasured(metric_name: HeldOutMetric, base_metric: f64) -> VerdictReport {
        VerdictReport {
            metric_name: Some(metric_name),
            base_metric: Some(base_metric),
            ..VerdictReport::default()
        }
    }
}

/// The round's earlier submission most like the one judged (copies and near-copies earn
/// nothing).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearestSubmission {
    /// That submission.
    pub submission: String,
    /// The worker who handed it in.
    pub worker: String,
    /// Cosine between the two updates; null when not finite.
    pub cosine: Option<f64>,
    /// The judged update's norm over that one's; null when not finite.
    pub norm_ratio: Option<f64>,
}

/// How a round's adapters were combined into its result.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMethod {
    /// The weighted sum of the updates, re-factored to the job's rank.
    Exact,
    /// The weighted mean of the LoRA factors themselves.
    Naive,
    /// The coordinate-wise median of the updates.
    Median,
    /// The coordinate-wise mean after trimming each end.
    TrimmedMean,
    /// No merge beat the round's start: the accepted adapter with the highest quality, alone.
    BestAdapter,
}

impl MergeMethod {
    /// The name it is reported under.
    pub const fn name(self) -> &'static str {
        match self {
            MergeMethod::Exact => "exact",
            MergeMethod::Naive => "naive",
            MergeMethod::Median => "median",
            MergeMethod::TrimmedMean => "trimmed_mean",
            MergeMethod::BestAdapter => "best_adapter",
        }
    }
}

/// What the validator measured of a round's merge.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateDetails {
    /// How the result was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeMethod>,
    /// The aggregation the job asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<Aggregation>,
    /// Why the merges tried before this one were not taken (each scored no better than the
    /// round's start, or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Vec<String>>,
    /// Other measures of the result's held-out pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<BTreeMap<String, Option<f64>>>,
    /// The round's start's held-out metric, which the result had to beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_metric: Option<f64>,
    /// How many held-out examples the result and its start were scored on: the whole set
    /// (each verdict scores a sample of it and says how many in its own report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_examples: Option<u32>,
    /// The normalised weights the merge used, one per adapter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<f64>,
    /// The factor each adapter's update was clipped by (1: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clip_factors: Vec<f64>,
    /// The largest relative error of re-factoring a merged module to the job's rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_truncation_error: Option<f64>,
    /// With `best_adapter`: which of `adapters` it was, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_adapter: Option<u32>,
    /// The accepted adapters that went in, in the order of `weights`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<MergedAdapter>,
    /// Seconds the merge took, fetches and scoring included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// One accepted adapter of a merge, with what the merge weighed it by.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedAdapter {
    /// The worker who trained it.
    pub worker: String,
    /// The shard it was trained on.
    pub shard: i32,
    /// Training records it saw.
    pub samples: i64,
    /// Its quality from the verdict, 0 ..= 1.
    pub quality: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_what_earlier_validators_wrote_and_omits_what_it_did_not_measure() {
        // As an earlier validator wrote it: nulls for what was not finite, an unknown key.
        let stored = serde_json::json!({
            "metric_name": "loss", "metric": null, "base_metric": 2.5, "start_metric": 2.5,
            "held_out": {"reward_accuracy": null}, "nearest": null, "retired_key": 1,
        });
        let report: VerdictReport = serde_json::from_value(stored).unwrap();
        assert_eq!(report.metric_name, Some(HeldOutMetric::Loss));
        assert_eq!(report.metric, None);
        assert_eq!(report.held_out.unwrap()["reward_accuracy"], None);
        let rejected = VerdictReport::unmeasured(HeldOutMetric::Accuracy, 0.5);
        assert_eq!(
            serde_json::to_value(&rejected).unwrap(),
            serde_json::json!({"metric_name": "accuracy", "base_metric": 0.5})
        );
        // The first merge taken wrote `"fallback": null`.
        let details: AggregateDetails =
            serde_json::from_value(serde_json::json!({"merge": "exact", "fallback": null}))
                .unwrap();
        assert_eq!(details.fallback, None);
        let details: AggregateDetails = serde_json::from_value(serde_json::json!({
            "merge": "trimmed_mean", "requested": "trimmed_mean", "weights": [0.5, 0.5],
        }))
        .unwrap();
        assert_eq!(details.merge, Some(MergeMethod::TrimmedMean));
        for m in [
            MergeMethod::Exact,
            MergeMethod::Naive,
            MergeMethod::Median,
            MergeMethod::TrimmedMean,
            MergeMethod::BestAdapter,
        ] {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        assert_eq!(details.requested, Some(Aggregation::TrimmedMean));
    }
}
