//! The one deterministic shuffle of the protocol: the API cuts a job's dataset with it, and the
//! trainer orders its batches and its local splits with it.
//!
//! Reproducibility: ChaCha20 (`rand_chacha`, whose output stream is fixed by its crate's
//! stability promise, unlike `StdRng`) and a Fisher–Yates pass written here, so the same length
//! and seed give the same order on any machine and any version of `rand`.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// `0..n` permuted by ChaCha20 seeded with `seed` (Fisher–Yates, unbiased by rejection).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = uniform_below(&mut rng, (i + 1) as u64) as usize;
        order.swap(i, j);
    }
    order
}

/// A uniform integer in `0..bound` (bound ≥ 1) without modulo bias.
fn uniform_below(rng: &mut ChaCha20Rng, bound: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % bound;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_fixed_by_the_seed() {
        let p = permutation(10, 42);
        assert_eq!(p, permutation(10, 42));
        assert_ne!(p, permutation(10, 43));
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        // Pinned: a change here changes every published shard, so it must be deliberate.
        assert_eq!(permutation(8, 7), PINNED_8_7);
    }
    const PINNED_8_7: [usize; 8] = [0, 7, 3, 4, 6, 2, 5, 1];

    #[test]
    fn empty_and_single_orders_are_trivial() {
        assert!(permutation(0, 1).is_empty());
        assert_eq!(permutation(1, 1), [0]);
    }
}
