//! The verdict on one adapter, as a pure function of its measurements, so it is tested alone.
//!
//! An adapter is **rejected** when
//! * any value is NaN or infinite;
//! * for any module, `‖scale·B·A‖_F` exceeds `max_relative_norm` times the base weight's
//!   `‖W‖_F` (an update that large rewrites the model rather than adapting it — and it is what a
//!   poisoned or random adapter looks like);
//! * its held-out metric does not beat the base model's by at least `min_gain`, in the metric's
//!   direction.
//!
//! Otherwise it is **accepted** with quality `q`: the share of the possible improvement over
//! the base model that the adapter achieved ([`Metric::quality`]; for accuracy
//! `clamp((metric − base) / (1 − base), 0, 1)`; for a causal LM's held-out loss per learned
//! token, lower being better and 0 the best, `clamp((base − loss) / base, 0, 1)`, the share of
//! the base model's loss the adapter removed).
//!
//! `min_gain` is in the metric's own units: 0.01 is one point of accuracy, or a fall of 0.01
//! nats per learned token in loss.

use crate::work::Metric;

/// The validator's thresholds: when an adapter is accepted, and how far a merge lets one
/// update reach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Held-out metric an adapter must add over the base model to be accepted.
    pub min_gain: f64,
    /// Largest `‖ΔW‖_F / ‖W‖_F` of any module.
    pub max_relative_norm: f64,
    /// Adapter update norms are clipped to this times the round's median before merging.
    pub clip_factor: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            min_gain: 0.01,
            // An order of magnitude above the weight it adapts: honest LoRA updates stay well
            // below (the sample model's reach ~2x at a high learning rate, MiniLM's far less);
            // noise or a poisoned update lands far above (~60x on the sample model).
            max_relative_norm: 10.0,
            clip_factor: 3.0,
        }
    }
}

/// The measurements behind a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// What `metric` and `base_metric` measure, and which way is better.
    pub kind: Metric,
    /// The adapter's held-out score; NaN when it was not scored (a non-finite value or an
    /// update too large).
    pub metric: f64,
    /// The base model's held-out score, the one to beat.
    pub base_metric: f64,
    /// Largest `‖ΔW‖_F / ‖W‖_F` of the adapter's modules.
    pub max_relative_norm: f64,
    /// Whether every value of the adapter is finite.
    pub finite: bool,
}

/// The verdict on measurements: accepted, quality, and the reason for a rejection.
pub fn judge(scores: &Scores, rules: &Rules) -> (bool, f64, Option<String>) {
    if !scores.finite {
        return (
            false,
            0.0,
            Some("the adapter holds NaN or infinite values".into()),
        );
    }
    if scores.max_relative_norm > rules.max_relative_norm {
        return (
            false,
            0.0,
            Some(format!(
                "an update is {:.2}x its base weight's norm (limit {:.2}x)",
                scores.max_relative_norm, rules.max_relative_norm
            )),
        );
    }
    // NaN (an unscored adapter) never passes: it is not at or above the minimum gain.
    let gain = scores.kind.gain(scores.metric, scores.base_metric);
    if !matches!(
        gain.partial_cmp(&rules.min_gain),
        Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
    ) {
        return (
            false,
            0.0,
            Some(format!(
                "held-out {} {:.4} does not beat the base model's {:.4} by {:.2}",
                scores.kind.name, scores.metric, scores.base_metric, rules.min_gain
            )),
        );
    }
    let quality = scores.kind.quality(scores.metric, scores.base_metric);
    (true, quality, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::Direction;

    fn scores(metric: f64, norm: f64) -> Scores {
        Scores {
            kind: Metric {
                name: "accuracy",
                direction: Direction::HigherIsBetter,
                best: 1.0,
            },
            metric,
            base_metric: 0.5,
            max_relative_norm: norm,
            finite: true,
        }
    }

    #[test]
    fn quality_is_the_share_of_possible_improvement() {
        let (ok, q, _) = judge(&scores(0.75, 0.1), &Rules::default());
        assert!(ok);
        assert!((q - 0.5).abs() < 1e-12);
    }

    #[test]
    fn no_gain_huge_norms_and_nan_are_rejected() {
        let rules = Rules::default();
        assert!(!judge(&scores(0.505, 0.1), &rules).0);
        let (ok, q, why) = judge(&scores(0.9, 60.0), &rules);
        assert!(!ok && q == 0.0 && why.unwrap().contains("60.00x"));
        let nan = Scores {
            finite: false,
            ..scores(0.9, 0.1)
        };
        assert!(!judge(&nan, &rules).0);
    }

    #[test]
    fn a_loss_must_fall_by_the_minimum_gain() {
        let loss = |metric: f64| Scores {
            kind: Metric {
                name: "loss",
                direction: Direction::LowerIsBetter,
                best: 0.0,
            },
            metric,
            base_metric: 2.0,
            max_relative_norm: 0.1,
            finite: true,
        };
        let rules = Rules::default();
        assert!(!judge(&loss(2.1), &rules).0);
        assert!(!judge(&loss(f64::NAN), &rules).0);
        let (ok, q, _) = judge(&loss(1.0), &rules);
        assert!(ok && (q - 0.5).abs() < 1e-12);
    }
}
