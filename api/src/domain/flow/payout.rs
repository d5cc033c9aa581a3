//! Who is paid for a job, and with which quality score, from the verdicts of all its rounds.
//!
//! The escrow weighs contributor `i` by `quality_i x (REP_FLOOR + reputation_i)` and has no
//! notion of how much work each did. A worker that trained three shards did three shards' work,
//! so the score passed on chain folds the amount in:
//!
//! ```text
//! quality_i = 10_000 x sum over i's accepted adapters (samples x quality) / max_j samples_j
//! ```
//!
//! where `samples_j` counts every sample contributor `j` trained on in accepted adapters. The
//! largest contributor with perfect adapters scores 10,000; the same contributor with quality
//! 0.8 scores 8,000; one with a third of its samples, a third of that. A worker whose adapters
//! were all rejected is listed with 0: it is paid nothing and the chain lowers its reputation.

use std::collections::BTreeMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use shardwork_core::protocol::VerdictStatus;
pub use shardwork_core::protocol::events::Contribution;
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::{submission, task, worker};

/// The escrow's `MAX_QUALITY`.
pub const MAX_QUALITY_BPS: u16 = 10_000;

#[derive(Default)]
struct Tally {
    weighted: f64,
    samples: u64,
    accepted: u32,
    rejected: u32,
}

/// Every worker that submitted to `job_id`, sorted by address (the order the escrow wants).
pub async fn contributions<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
) -> Result<Vec<Contribution>, DomainError> {
    let task_ids: Vec<Uuid> = task::Entity::find()
        .filter(task::Column::JobId.eq(job_id))
        .all(db)
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    let submissions = submission::Entity::find()
        .filter(submission::Column::TaskId.is_in(task_ids))
        .all(db)
        .await?;
    let mut tallies: BTreeMap<Uuid, Tally> = BTreeMap::new();
    for s in &submissions {
        let tally = tallies.entry(s.worker_id).or_default();
        match s.verdict {
            VerdictStatus::Accepted => {
                tally.accepted += 1;
                tally.samples += s.sample_count as u64;
                tally.weighted += s.sample_count as f64 * s.quality.unwrap_or(0.0).clamp(0.0, 1.0);
            }
            VerdictStatus::Rejected => tally.rejected += 1,
            VerdictStatus::Pending => {}
        }
    }
    let workers = worker::Entity::find()
        .filter(worker::Column::Id.is_in(tallies.keys().copied().collect::<Vec<_>>()))
        .all(db)
        .await?;
    let max_samples = tallies.values().map(|t| t.samples).max().unwrap_or(0);
    let mut out: Vec<Contribution> = workers
        .into_iter()
        .filter_map(|w| {
            let tally = tallies.get(&w.id)?;
            Some(Contribution {
                address: w.address.to_ascii_lowercase(),
                quality_bps: score(tally.weighted, max_samples),
                samples: tally.samples,
                accepted: tally.accepted,
                rejected: tally.rejected,
            })
        })
        .collect();
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

fn score(weighted: f64, max_samples: u64) -> u16 {
    if max_samples == 0 {
        return 0;
    }
    let bps = (weighted / max_samples as f64 * f64::from(MAX_QUALITY_BPS)).round();
    bps.clamp(0.0, f64::from(MAX_QUALITY_BPS)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_perfect_contributor_scores_the_maximum() {
        assert_eq!(score(300.0, 300), 10_000);
        assert_eq!(score(240.0, 300), 8_000);
        assert_eq!(score(100.0, 300), 3_333);
    }

    #[test]
    fn nothing_accepted_scores_zero() {
        assert_eq!(score(0.0, 0), 0);
        assert_eq!(score(0.0, 300), 0);
    }
}
