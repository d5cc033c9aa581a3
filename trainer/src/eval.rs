//! Evaluation metrics: accuracy and macro-F1 for classification, perplexity for language
//! models.

use serde::Serialize;

use crate::error::{Error, Result};

/// Held-out classification quality of a set of predictions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassificationMetrics {
    /// Fraction of predictions equal to the gold label.
    pub accuracy: f64,
    /// Unweighted mean of per-class F1 over the classes that occur in the gold labels or the
    /// predictions (as scikit-learn infers `labels`).
    pub macro_f1: f64,
    /// Number of examples compared.
    pub examples: usize,
}

/// Compares predictions with gold labels over `num_labels` classes.
pub fn classification(
    predicted: &[u32],
    gold: &[u32],
    num_labels: usize,
) -> Result<ClassificationMetrics> {
    if predicted.len() != gold.len() {
        return Err(Error::Invalid(format!(
            "{} predictions for {} labels",
            predicted.len(),
            gold.len()
        )));
    }
    if gold.is_empty() {
        return Err(Error::Invalid("no examples to evaluate".into()));
    }
    let mut tp = vec![0usize; num_labels];
    let mut fp = vec![0usize; num_labels];
    let mut fn_ = vec![0usize; num_labels];
    let mut correct = 0;
    for (&p, &g) in predicted.iter().zip(gold) {
        let (p, g) = (p as usize, g as usize);
        if p >= num_labels || g >= num_labels {
            return Err(Error::Invalid(format!(
                "label {} is outside 0..{num_labels}",
                p.max(g)
            )));
        }
        if p == g {
            correct += 1;
            tp[p] += 1;
        } else {
            fp[p] += 1;
            fn_[g] += 1;
        }
    }
    let mut f1_sum = 0.0;
    let mut classes = 0;
    for c in 0..num_labels {
        if tp[c] + fp[c] + fn_[c] == 0 {
            continue;
        }
        classes += 1;
        f1_sum += 2.0 * tp[c] as f64 / (2 * tp[c] + fp[c] + fn_[c]) as f64;
    }
    Ok(ClassificationMetrics {
        accuracy: correct as f64 / gold.len() as f64,
        macro_f1: f1_sum / classes.max(1) as f64,
        examples: gold.len(),
    })
}

/// Perplexity from a mean per-token negative log-likelihood (natural log).
pub fn perplexity(mean_nll: f64) -> f64 {
    mean_nll.exp()
}

/// Token-weighted mean of per-batch mean losses.
pub fn mean_loss(batches: &[(f64, usize)]) -> Option<f64> {
    let tokens: usize = batches.iter().map(|(_, n)| n).sum();
    (tokens > 0).then(|| batches.iter().map(|(l, n)| l * *n as f64).sum::<f64>() / tokens as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_f1_matches_a_hand_computed_example() {
        // Class 0: tp 2, fp 1, fn 0 -> F1 0.8. Class 1: tp 1, fp 0, fn 1 -> F1 2/3.
        let m = classification(&[0, 0, 0, 1], &[0, 0, 1, 1], 2).unwrap();
        assert!((m.accuracy - 0.75).abs() < 1e-12);
        assert!((m.macro_f1 - (0.8 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn predicting_one_class_scores_low_macro_f1_despite_accuracy() {
        let m = classification(&[1; 10], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 0], 2).unwrap();
        assert!((m.accuracy - 0.9).abs() < 1e-12);
        assert!(m.macro_f1 < 0.5);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(classification(&[0], &[0, 1], 2).is_err());
        assert!(classification(&[2], &[0], 2).is_err());
        assert!(classification(&[], &[], 2).is_err());
    }

    #[test]
    fn perplexity_of_uniform_over_v_is_v() {
        assert!((perplexity((50f64).ln()) - 50.0).abs() < 1e-9);
        assert_eq!(mean_loss(&[(1.0, 1), (4.0, 3)]), Some(3.25));
    }
}
