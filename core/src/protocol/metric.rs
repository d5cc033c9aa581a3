//! The held-out metrics a validator judges and reports by, and which way each is better: one
//! definition for the nodes that measure them, the API that picks a job's result by them, and
//! the reports that print them.

use serde::{Deserialize, Serialize};

/// A held-out metric, by the name it is reported under (`Aggregated::metric_name`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldOutMetric {
    /// A causal LM's mean cross-entropy per learned token: lower is better.
    Loss,
    /// A classifier's share of correct labels: higher is better.
    Accuracy,
    /// A preference job's mean DPO (or IPO) loss per held-out pair against the job's
    /// reference policy (ln 2 at the reference, for DPO): lower is better.
    DpoLoss,
}

impl HeldOutMetric {
    /// Every metric.
    pub const ALL: [HeldOutMetric; 3] = [
        HeldOutMetric::Loss,
        HeldOutMetric::Accuracy,
        HeldOutMetric::DpoLoss,
    ];

    /// The name it is reported under.
    pub const fn name(self) -> &'static str {
        match self {
            HeldOutMetric::Loss => "loss",
            HeldOutMetric::Accuracy => "accuracy",
            HeldOutMetric::DpoLoss => "dpo_loss",
        }
    }

    /// The metric reported as `name`, if it is one.
    pub fn named(name: &str) -> Option<HeldOutMetric> {
        HeldOutMetric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether a lower value is better.
    pub const fn lower_is_better(self) -> bool {
        matches!(self, HeldOutMetric::Loss | HeldOutMetric::DpoLoss)
    }

    /// Whether `value` is at least as good as `than`.
    pub fn at_least_as_good(self, value: f64, than: f64) -> bool {
        if self.lower_is_better() {
            value <= than
        } else {
            value >= than
        }
    }
}

impl std::fmt::Display for HeldOutMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_metric_is_better_its_own_way_and_named_once() {
        for m in HeldOutMetric::ALL {
            assert_eq!(HeldOutMetric::named(m.name()), Some(m));
            assert_eq!(
                serde_json::to_value(m).unwrap(),
                m.name(),
                "serde writes the name"
            );
        }
        assert_eq!(HeldOutMetric::named("perplexity"), None);
        assert!(HeldOutMetric::Loss.at_least_as_good(1.4, 1.8));
        assert!(!HeldOutMetric::Loss.at_least_as_good(1.9, 1.8));
        assert!(HeldOutMetric::Accuracy.at_least_as_good(0.9, 0.8));
        assert!(HeldOutMetric::Accuracy.at_least_as_good(0.8, 0.8));
        assert!(!HeldOutMetric::Accuracy.at_least_as_good(0.7, 0.8));
        assert!(HeldOutMetric::DpoLoss.at_least_as_good(0.5, std::f64::consts::LN_2));
    }
}
