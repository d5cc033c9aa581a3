//! Text generation with a KV cache: greedy decoding or seeded temperature / top-p sampling.

use candle_core::{DType, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::llama::{KvCache, Llama, LlamaError};

/// How the next token is picked from the logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Always the most likely token: deterministic, what tests and evaluation use.
    Greedy,
    /// Softmax at `temperature`, restricted to the smallest set of tokens whose probability
    /// reaches `top_p`, drawn from a generator seeded with `seed`.
    Temperature {
        /// Divides the logits before the softmax; higher spreads probability over more tokens.
        temperature: f64,
        /// Nucleus cutoff: cumulative probability the candidate set must reach, in (0, 1].
        top_p: f64,
        /// Seeds the sampling generator, so a run is reproducible.
        seed: u64,
    },
}

/// Limits and decoding strategy for [`generate`].
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate after the prompt.
    pub max_new_tokens: usize,
    /// How each next token is picked.
    pub sampling: Sampling,
    /// Generation stops after emitting any of these.
    pub stop_tokens: Vec<u32>,
}

/// Why generation could not run.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The prompt has no tokens.
    #[error("generate: empty prompt")]
    EmptyPrompt,
    /// The sampling temperature is zero, negative or not finite.
    #[error("generate: temperature {0} must be positive and finite (use Greedy for 0)")]
    Temperature(f64),
    /// The top-p cutoff is outside (0, 1].
    #[error("generate: top_p {0} must be in (0, 1]")]
    TopP(f64),
    /// The model's forward pass failed.
    #[error(transparent)]
    Model(#[from] LlamaError),
    /// A tensor operation on the logits failed.
    #[error("generate: {0}")]
    Tensor(#[from] candle_core::Error),
}

/// Continues `prompt` and returns only the new tokens (including a stop token if one ended it).
pub fn generate(
    model: &Llama,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<Vec<u32>, GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let mut rng = match opts.sampling {
        Sampling::Greedy => None,
        Sampling::Temperature {
            temperature,
            top_p,
            seed,
        } => {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(GenerateError::Temperature(temperature));
            }
            if !(top_p > 0.0 && top_p <= 1.0) {
                return Err(GenerateError::TopP(top_p));
            }
            Some(StdRng::seed_from_u64(seed))
        }
    };
    let mut cache = KvCache::new(model.layers.len());
    let mut input = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    let mut out = Vec::with_capacity(opts.max_new_tokens);
    for _ in 0..opts.max_new_tokens {
        let logits = model
            .forward_cached(&input, &mut cache)?
            .squeeze(0)?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?;
        let next = match (&opts.sampling, rng.as_mut()) {
            (
                Sampling::Temperature {
                    temperature, top_p, ..
                },
                Some(rng),
            ) => sample(&logits, *temperature, *top_p, rng),
            _ => argmax(&logits),
        };
        out.push(next);
        if opts.stop_tokens.contains(&next) {
            break;
        }
        input = Tensor::new(&[next], model.device())?.unsqueeze(0)?;
    }
    Ok(out)
}

fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 { (i, v) } else { best }
        })
        .0 as u32
}

fn sample(logits: &[f32], temperature: f64, top_p: f64, rng: &mut StdRng) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut probs: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, ((l as f64 - max) / temperature).exp()))
        .collect();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = probs.iter().map(|p| p.1).sum();
    let mut kept = 0.0;
    let mut cut = probs.len();
    for (i, p) in probs.iter().enumerate() {
        kept += p.1 / total;
        if kept >= top_p {
            cut = i + 1;
            break;
        }
    }
    probs.truncate(cut);
    let mass: f64 = probs.iter().map(|p| p.1).sum();
    let mut draw = rng.random::<f64>() * mass;
    for (id, p) in &probs {
        draw -= p;
        if draw <= 0.0 {
            return *id;
        }
    }
    probs.last().map(|p| p.0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_picks_the_largest_logit() {
        assert_eq!(argmax(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn tiny_top_p_sampling_reduces_to_the_most_likely_token() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..20 {
            assert_eq!(sample(&[0.0, 5.0, 1.0], 1.0, 1e-6, &mut rng), 1);
        }
    }

    #[test]
    fn sampling_is_reproducible_for_a_seed_and_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()];
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..4000)
                .filter(|_| sample(&logits, 1.0, 1.0, &mut rng) == 1)
                .count()
        };
        assert_eq!(draw(1), draw(1));
        let share = draw(1) as f64 / 4000.0;
        assert!(
            (share - 0.75).abs() < 0.03,
            "token 1 drawn {share} of the time, expected 0.75"
        );
    }
}
