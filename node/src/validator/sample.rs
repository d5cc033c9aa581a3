//! Which held-out examples a round's verdicts score (decisions/0052).
//!
//! Every submission of a round is scored on the same sample, so that its contributors are
//! compared on the same examples and the round's start and the base model, scored once on the
//! whole set, are read off on that sample without scoring again. The sample is a function of
//! the job's seed and the round alone: every validator of a deployment draws the same one, and
//! a verdict can be recomputed. Round `r` takes the `r`-th window of one fixed shuffle of the
//! set, so successive rounds score different examples until the set is used up.

/// The examples, ascending, of a set of `total` that round `round` (1-based) of a job seeded
/// `seed` scores its verdicts on: `size` of them (the whole set at or above `total`).
pub fn verdict_sample(seed: u64, total: usize, size: usize, round: u32) -> Vec<usize> {
    if size >= total {
        return (0..total).collect();
    }
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by_key(|&i| (mix(seed ^ SALT, i as u64), i));
    let first = (round.max(1) as usize - 1) * size % total;
    let mut picks: Vec<usize> = (0..size).map(|k| order[(first + k) % total]).collect();
    picks.sort_unstable();
    picks
}

/// Keeps the shuffle apart from the other draws the job's seed feeds (the merge's).
const SALT: u64 = 0x7665_7264_6963_7473; // "verdicts"

/// SplitMix64's finaliser over `seed` and `i`: a fixed, well-spread key per example.
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_scores_its_own_window_of_one_shuffle_the_same_for_every_validator() {
        let (seed, total, size) = (42, 24, 8);
        let rounds: Vec<Vec<usize>> = (1..=3)
            .map(|r| verdict_sample(seed, total, size, r))
            .collect();
        for picks in &rounds {
            assert_eq!(picks.len(), size);
            assert!(picks.windows(2).all(|w| w[0] < w[1]), "{picks:?}");
            assert!(picks.iter().all(|&i| i < total));
        }
        // Three rounds of 8 use every one of the 24 examples once.
        let mut all: Vec<usize> = rounds.concat();
        all.sort_unstable();
        assert_eq!(all, (0..total).collect::<Vec<_>>());
        // The fourth round starts over; the draw depends on nothing but its inputs.
        assert_eq!(verdict_sample(seed, total, size, 4), rounds[0]);
        assert_eq!(verdict_sample(seed, total, size, 2), rounds[1]);
        // Another job's seed draws other examples, not the first eight.
        assert_ne!(verdict_sample(7, total, size, 1), rounds[0]);
        assert_ne!(rounds[0], (0..size).collect::<Vec<_>>());
    }

    #[test]
    fn a_sample_as_large_as_the_set_is_the_set() {
        assert_eq!(verdict_sample(1, 5, 5, 3), vec![0, 1, 2, 3, 4]);
        assert_eq!(verdict_sample(1, 5, 9, 1), vec![0, 1, 2, 3, 4]);
        // Windows that wrap around the shuffle still pick distinct examples.
        let picks = verdict_sample(3, 10, 4, 3);
        assert_eq!(picks.len(), 4);
        assert!(picks.windows(2).all(|w| w[0] < w[1]));
    }
}
