//! The verdict on one adapter, as a pure function of its measurements, so it is tested alone.
//!
//! An adapter is **rejected** when
//! * any value is NaN or infinite;
//! * for any module, `‖scale·B·A‖_F` exceeds `max_relative_norm` times the base weight's
//!   `‖W‖_F` (an update that large rewrites the model rather than adapting it — and it is what a
//!   poisoned or random adapter looks like);
//! * it adds nothing to the round's starting adapter (a replay: what it added is below
//!   [`MIN_ADDITION_SHARE`] of the start's update; see [`super::similarity`]);
//! * what it added points the way an earlier submission of the round added (cosine at or above
//!   [`COPY_COSINE`]): a copy, and the later of two near-copies is the one rejected;
//! * its held-out metric does not beat the **round's starting adapter** (the base model in
//!   round 1) by at least the job's `validation.min_gain`, in the metric's direction: beating the
//!   base model is not enough from round 2 on, where the start already does.
//!
//! Otherwise it is **accepted** with quality `q`: the share of the possible improvement over
//! the base model that the adapter achieved ([`Metric::quality`]; for accuracy
//! `clamp((metric − base) / (1 − base), 0, 1)`; for a causal LM's held-out loss per learned
//! token, lower being better and 0 the best, `clamp((base − loss) / base, 0, 1)`, the share of
//! the base model's loss the adapter removed).
//!
//! `min_gain` is in the metric's own units: 0.01 is one point of accuracy, or a fall of 0.01
//! nats per learned token in loss; negative, how much worse than the start an adapter may
//! score. A job that does not set it gets its metric's default: 0.01 for loss; for accuracy,
//! one held-out example better than the base model in round 1, and from round 2 no worse than
//! the merged start by more than the held-out set's noise (one standard error of the start's
//! accuracy, plus one example; [`Metric::default_min_gain_for`]), since one honest shard's
//! update from a merged start can score a few examples below it.

use std::collections::BTreeSet;

use shardwork_trainer::peft::AdapterConfig;

use super::similarity::{COPY_COSINE, MIN_ADDITION_SHARE};
use crate::work::Metric;

/// The validator's own thresholds (the job sets its minimum gain): how far an update may reach,
/// and how far a merge lets one update weigh.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Largest `‖ΔW‖_F / ‖W‖_F` of any module.
    pub max_relative_norm: f64,
    /// Adapter update norms are clipped to this times the round's median before merging.
    pub clip_factor: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            // An order of magnitude above the weight it adapts: honest LoRA updates stay well
            // below (the sample model's reach ~2x at a high learning rate, MiniLM's far less);
            // noise or a poisoned update lands far above (~60x on the sample model).
            max_relative_norm: 10.0,
            clip_factor: 3.0,
        }
    }
}

/// The earlier submission whose addition is most nearly parallel to this one's.
#[derive(Debug, Clone, PartialEq)]
pub struct Nearest {
    /// Who handed it in.
    pub worker: String,
    /// Its submission id.
    pub submission: String,
    /// `cos(d, d_earlier)`.
    pub cosine: f64,
    /// `‖d‖ / ‖d_earlier‖`.
    pub norm_ratio: f64,
}

/// The measurements behind a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// What `metric` and `base_metric` measure, and which way is better.
    pub kind: Metric,
    /// The adapter's held-out score; NaN when it was not scored (a non-finite value or an
    /// update too large).
    pub metric: f64,
    /// The base model's held-out score: quality is measured from it.
    pub base_metric: f64,
    /// The round's starting adapter's held-out score (the base model's in round 1): the one to
    /// beat.
    pub start_metric: f64,
    /// The job's minimum gain over `start_metric`, in the metric's units.
    pub min_gain: f64,
    /// Largest `‖ΔW‖_F / ‖W‖_F` of the adapter's modules.
    pub max_relative_norm: f64,
    /// Whether every value of the adapter is finite.
    pub finite: bool,
    /// `‖ΔW − ΔW_start‖_F`: what the adapter added to the round's start.
    pub addition_norm: f64,
    /// `‖ΔW_start‖_F` (0 in round 1).
    pub start_norm: f64,
    /// The earlier submission of the round whose addition is most nearly parallel, if any.
    pub nearest: Option<Nearest>,
}

/// How a submitted adapter's PEFT configuration differs from the job's, if it does: a changed
/// `lora_alpha` or rank would be scored with one scale and merged with another, and different
/// modules cannot be merged at all.
pub fn config_problem(submitted: &AdapterConfig, job: &AdapterConfig) -> Option<String> {
    let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    let saved = |c: &AdapterConfig| set(c.modules_to_save.as_deref().unwrap_or_default());
    let differs = |field: &str, got: String, want: String| {
        Some(format!(
            "adapter_config.json {field} is {got}; the job's is {want}"
        ))
    };
    if submitted.r != job.r {
        return differs("r", submitted.r.to_string(), job.r.to_string());
    }
    if submitted.lora_alpha != job.lora_alpha {
        return differs(
            "lora_alpha",
            submitted.lora_alpha.to_string(),
            job.lora_alpha.to_string(),
        );
    }
    if set(&submitted.target_modules) != set(&job.target_modules) {
        return differs(
            "target_modules",
            format!("{:?}", submitted.target_modules),
            format!("{:?}", job.target_modules),
        );
    }
    if saved(submitted) != saved(job) {
        return differs(
            "modules_to_save",
            format!("{:?}", saved(submitted)),
            format!("{:?}", saved(job)),
        );
    }
    for (field, got, want) in [
        ("use_rslora", submitted.use_rslora, job.use_rslora),
        ("use_dora", submitted.use_dora, job.use_dora),
        (
            "fan_in_fan_out",
            submitted.fan_in_fan_out,
            job.fan_in_fan_out,
        ),
    ] {
        if got != want {
            return differs(field, got.to_string(), want.to_string());
        }
    }
    if submitted.bias != job.bias {
        return differs("bias", submitted.bias.clone(), job.bias.clone());
    }
    None
}

/// The verdict on measurements: accepted, quality, and the reason for a rejection.
pub fn judge(scores: &Scores, rules: &Rules) -> (bool, f64, Option<String>) {
    let reject = |reason: String| (false, 0.0, Some(reason));
    if !scores.finite {
        return reject("the adapter holds NaN or infinite values".into());
    }
    if scores.max_relative_norm > rules.max_relative_norm {
        return reject(format!(
            "an update is {:.2}x its base weight's norm (limit {:.2}x)",
            scores.max_relative_norm, rules.max_relative_norm
        ));
    }
    if scores.addition_norm <= MIN_ADDITION_SHARE * scores.start_norm || scores.addition_norm == 0.0
    {
        return reject(format!(
            "the adapter adds nothing to the round's starting adapter (|addition| {:.3e}, \
             |start| {:.3e}): a replay earns nothing",
            scores.addition_norm, scores.start_norm
        ));
    }
    if let Some(n) = &scores.nearest
        && n.cosine >= COPY_COSINE
    {
        return reject(format!(
            "the adapter's update copies submission {} by {} (cosine {:.4} >= {COPY_COSINE}, \
             norm ratio {:.3}): the later of two near-copies earns nothing",
            n.submission, n.worker, n.cosine, n.norm_ratio
        ));
    }
    // NaN (an unscored adapter) never passes: it is not at or above the minimum gain. The
    // slack keeps a gain of exactly the minimum (one held-out example) from failing on rounding.
    let gain = scores.kind.gain(scores.metric, scores.start_metric) + 1e-9;
    if !matches!(
        gain.partial_cmp(&scores.min_gain),
        Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
    ) {
        let start = if scores.start_norm > 0.0 {
            "the round's starting adapter's"
        } else {
            "the base model's"
        };
        return reject(format!(
            "held-out {} {:.4} does not beat {start} {:.4} by {:.3}",
            scores.kind.name(),
            scores.metric,
            scores.start_metric,
            scores.min_gain
        ));
    }
    let quality = scores.kind.quality(scores.metric, scores.base_metric);
    (true, quality, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::DefaultGain;
    use shardwork_core::protocol::HeldOutMetric;

    const ACCURACY: Metric = Metric {
        kind: HeldOutMetric::Accuracy,
        best: 1.0,
        default_min_gain: DefaultGain::WithinNoise,
    };

    /// A round-1 adapter (start = base = 0.5) that added something of its own.
    fn scores(metric: f64, norm: f64) -> Scores {
        Scores {
            kind: ACCURACY,
            metric,
            base_metric: 0.5,
            start_metric: 0.5,
            min_gain: 0.01,
            max_relative_norm: norm,
            finite: true,
            addition_norm: 1.0,
            start_norm: 0.0,
            nearest: None,
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
    fn from_round_two_the_start_is_the_one_to_beat_and_quality_still_counts_from_the_base() {
        let later = |metric: f64| Scores {
            start_metric: 0.8,
            start_norm: 2.0,
            ..scores(metric, 0.1)
        };
        let rules = Rules::default();
        // Beats the base by far, but not the round's start: what a free-rider gets.
        let (ok, _, why) = judge(&later(0.805), &rules);
        assert!(!ok && why.unwrap().contains("starting adapter"));
        let (ok, q, _) = judge(&later(0.9), &rules);
        assert!(ok && (q - 0.8).abs() < 1e-12);
        // The job's minimum gain is the bar.
        let strict = Scores {
            min_gain: 0.2,
            ..later(0.9)
        };
        assert!(!judge(&strict, &rules).0);
        // Accuracy's default bar: within the held-out set's noise of the start, so a plateaued
        // round and an honest shard a few examples below the merged start still pass (0.8 on 120
        // examples: 0.0365 + 0.0083 below), a sign flip tens of points below does not; and
        // exactly one held-out example in 120 clears a bar of one example despite rounding.
        let within_noise = |metric: f64| Scores {
            min_gain: ACCURACY.default_min_gain_for(0.8, 120, false),
            ..later(metric)
        };
        assert!(judge(&within_noise(0.8), &rules).0);
        assert!(judge(&within_noise(0.8 - 5.0 / 120.0), &rules).0);
        assert!(!judge(&within_noise(0.8 - 6.0 / 120.0), &rules).0);
        assert!(!judge(&within_noise(0.48), &rules).0);
        let one_example = Scores {
            metric: 116.0 / 120.0,
            start_metric: 115.0 / 120.0,
            min_gain: 1.0 / 120.0,
            ..later(0.0)
        };
        assert!(judge(&one_example, &rules).0);
    }

    #[test]
    fn replays_and_copies_are_rejected_whatever_they_score() {
        let rules = Rules::default();
        let replay = Scores {
            start_norm: 2.0,
            addition_norm: 1e-9,
            ..scores(0.9, 0.1)
        };
        let (ok, _, why) = judge(&replay, &rules);
        assert!(!ok && why.unwrap().contains("replay"));
        let copy = |cosine: f64| Scores {
            nearest: Some(Nearest {
                worker: "0xabc".into(),
                submission: "s1".into(),
                cosine,
                norm_ratio: 1.0,
            }),
            ..scores(0.9, 0.1)
        };
        let (ok, _, why) = judge(&copy(0.999), &rules);
        assert!(!ok && why.unwrap().contains("copies submission s1 by 0xabc"));
        assert!(
            judge(&copy(0.7), &rules).0,
            "honest pairs point alike, not the same way"
        );
    }

    #[test]
    fn a_changed_alpha_rank_or_module_list_is_named() {
        let job: AdapterConfig = serde_json::from_value(serde_json::json!({
            "peft_type": "LORA", "r": 8, "lora_alpha": 16.0, "target_modules": ["q_proj", "v_proj"]
        }))
        .unwrap();
        assert_eq!(config_problem(&job, &job), None);
        let reordered = AdapterConfig {
            target_modules: vec!["v_proj".into(), "q_proj".into()],
            ..job.clone()
        };
        assert_eq!(config_problem(&reordered, &job), None);
        let alpha = AdapterConfig {
            lora_alpha: 64.0,
            ..job.clone()
        };
        assert!(
            config_problem(&alpha, &job)
                .unwrap()
                .contains("lora_alpha is 64")
        );
        let rank = AdapterConfig {
            r: 4,
            ..job.clone()
        };
        assert!(config_problem(&rank, &job).unwrap().contains("r is 4"));
        let modules = AdapterConfig {
            target_modules: vec!["q_proj".into()],
            ..job.clone()
        };
        assert!(
            config_problem(&modules, &job)
                .unwrap()
                .contains("target_modules")
        );
    }

    #[test]
    fn a_loss_must_fall_by_the_minimum_gain() {
        let loss = |metric: f64| Scores {
            kind: Metric {
                kind: HeldOutMetric::Loss,
                best: 0.0,
                default_min_gain: DefaultGain::Fixed(0.01),
            },
            base_metric: 2.0,
            start_metric: 2.0,
            ..scores(metric, 0.1)
        };
        let rules = Rules::default();
        assert!(!judge(&loss(2.1), &rules).0);
        assert!(!judge(&loss(f64::NAN), &rules).0);
        let (ok, q, _) = judge(&loss(1.0), &rules);
        assert!(ok && (q - 0.5).abs() < 1e-12);
    }
}
