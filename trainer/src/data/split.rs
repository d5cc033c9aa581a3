//! Seeded, reproducible splits: the same seed gives the same held-out set and shards on every
//! machine (the validator and every worker must agree on them).

pub use shardwork_core::protocol::shuffle::permutation;

use super::ClassificationSet;
use crate::error::{Error, Result};

/// `(train, held_out)` with `round(len · held_out_fraction)` held-out records.
pub fn train_test(
    set: &ClassificationSet,
    held_out_fraction: f64,
    seed: u64,
) -> Result<(ClassificationSet, ClassificationSet)> {
    if !(0.0..1.0).contains(&held_out_fraction) || held_out_fraction == 0.0 {
        return Err(Error::Invalid(format!(
            "held_out_fraction: {held_out_fraction} is outside (0, 1)"
        )));
    }
    let perm = permutation(set.len(), seed);
    let n_test = ((set.len() as f64) * held_out_fraction).round() as usize;
    let (test, train) = perm.split_at(n_test.min(set.len()));
    Ok((set.subset(train), set.subset(test)))
}

/// `k` disjoint shards of near-equal size covering `set`.
pub fn shards(set: &ClassificationSet, k: usize, seed: u64) -> Result<Vec<ClassificationSet>> {
    if k == 0 || k > set.len() {
        return Err(Error::Invalid(format!(
            "shards: {k} is outside 1..={}",
            set.len()
        )));
    }
    let perm = permutation(set.len(), seed);
    Ok((0..k)
        .map(|s| {
            let idx: Vec<usize> = perm.iter().skip(s).step_by(k).copied().collect();
            set.subset(&idx)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize) -> ClassificationSet {
        ClassificationSet {
            texts: (0..n).map(|i| i.to_string()).collect(),
            labels: (0..n).map(|i| (i % 2) as u32).collect(),
            label_names: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn split_is_disjoint_complete_and_reproducible() {
        let s = set(101);
        let (tr, te) = train_test(&s, 0.2, 9).unwrap();
        assert_eq!(te.len(), 20);
        assert_eq!(tr.len(), 81);
        let mut all: Vec<String> = tr.texts.iter().chain(&te.texts).cloned().collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 101);
        assert_eq!(train_test(&s, 0.2, 9).unwrap().1, te);
        assert_ne!(train_test(&s, 0.2, 10).unwrap().1, te);
    }

    #[test]
    fn shards_partition_the_set() {
        let s = set(10);
        let sh = shards(&s, 4, 1).unwrap();
        assert_eq!(
            sh.iter().map(|x| x.len()).collect::<Vec<_>>(),
            vec![3, 3, 2, 2]
        );
        assert!(shards(&s, 0, 1).is_err());
        assert!(shards(&s, 11, 1).is_err());
    }
}
