//! Multinomial Naive Bayes over lower-cased word counts with Laplace smoothing: the classic
//! baseline for short-text sentiment, computed on the same split a LoRA run is judged on.

use std::collections::HashMap;

use crate::data::ClassificationSet;

/// A fitted Naive Bayes text classifier: per-class log priors and smoothed word log likelihoods.
pub struct NaiveBayes {
    log_prior: Vec<f64>,
    log_likelihood: Vec<HashMap<String, f64>>,
    log_unseen: Vec<f64>,
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl NaiveBayes {
    /// `alpha` is the additive smoothing count (1.0 is Laplace).
    pub fn fit(train: &ClassificationSet, alpha: f64) -> Self {
        let k = train.num_labels();
        let mut doc_counts = vec![0usize; k];
        let mut counts: Vec<HashMap<String, f64>> = vec![HashMap::new(); k];
        let mut totals = vec![0f64; k];
        let mut vocab: HashMap<String, ()> = HashMap::new();
        for (text, &label) in train.texts.iter().zip(&train.labels) {
            let c = label as usize;
            doc_counts[c] += 1;
            for w in words(text) {
                *counts[c].entry(w.clone()).or_default() += 1.0;
                totals[c] += 1.0;
                vocab.insert(w, ());
            }
        }
        let v = vocab.len() as f64;
        let n = train.len() as f64;
        let log_prior = doc_counts
            .iter()
            .map(|&d| ((d as f64 + alpha) / (n + alpha * k as f64)).ln())
            .collect();
        let log_unseen: Vec<f64> = totals
            .iter()
            .map(|t| (alpha / (t + alpha * v)).ln())
            .collect();
        let log_likelihood = counts
            .into_iter()
            .zip(&totals)
            .map(|(m, t)| {
                m.into_iter()
                    .map(|(w, c)| (w, ((c + alpha) / (t + alpha * v)).ln()))
                    .collect()
            })
            .collect();
        Self {
            log_prior,
            log_likelihood,
            log_unseen,
        }
    }

    /// Most likely label for `text`; words never seen in training get the smoothed unseen mass.
    pub fn predict(&self, text: &str) -> u32 {
        let mut scores = self.log_prior.clone();
        for w in words(text) {
            for (c, s) in scores.iter_mut().enumerate() {
                *s += self.log_likelihood[c]
                    .get(&w)
                    .copied()
                    .unwrap_or(self.log_unseen[c]);
            }
        }
        scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    }

    /// Predicted label for every text of `set`, in order.
    pub fn predict_all(&self, set: &ClassificationSet) -> Vec<u32> {
        set.texts.iter().map(|t| self.predict(t)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_sentiment_words() {
        let train = ClassificationSet {
            texts: vec![
                "great fun great cast".into(),
                "a great film".into(),
                "dull and boring".into(),
                "boring mess".into(),
            ],
            labels: vec![1, 1, 0, 0],
            label_names: vec!["neg".into(), "pos".into()],
        };
        let nb = NaiveBayes::fit(&train, 1.0);
        assert_eq!(nb.predict("Great!"), 1);
        assert_eq!(nb.predict("so boring"), 0);
    }
}
