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
//!
//! A worker one of whose submissions failed its proof of training (a replayed stretch did not
//! end where it said: [`ProofStatus::Failed`]) forfeits the job and scores 0 too,
//! whatever else it had accepted, and its samples leave the largest-contributor count, so the
//! honest are scored as if it had never taken part.

use std::collections::BTreeMap;

use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter};
pub use shardwork_core::protocol::events::Contribution;
use shardwork_core::protocol::{ProofStatus, VerdictStatus};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::entities::{submission, task, worker};

/// The escrow's `MAX_QUALITY`.
pub const MAX_QUALITY_BPS: u16 = 10_000;

/// One worker's verdicts in a job, summed.
#[derive(Default)]
struct Tally {
    weighted: f64,
    samples: u64,
    accepted: u32,
    rejected: u32,
    forfeited: bool,
}

impl Tally {
    /// Counts one submission: its verdict, the samples it trained on, its quality and where
    /// its proof of training stands.
    fn add(
        &mut self,
        verdict: VerdictStatus,
        samples: u64,
        quality: Option<f64>,
        proof: ProofStatus,
    ) {
        match verdict {
            VerdictStatus::Accepted => {
                self.accepted += 1;
                self.samples += samples;
                self.weighted += samples as f64 * quality.unwrap_or(0.0).clamp(0.0, 1.0);
            }
            VerdictStatus::Rejected => self.rejected += 1,
            VerdictStatus::Pending => {}
        }
        self.forfeited |= proof == ProofStatus::Failed;
    }
}

/// Each worker's score, from its tally: the samples-weighted quality against the largest
/// contributor that did not forfeit; 0 for one that did.
fn scores(tallies: &BTreeMap<Uuid, Tally>) -> BTreeMap<Uuid, u16> {
    let max_samples = tallies
        .values()
        .filter(|t| !t.forfeited)
        .map(|t| t.samples)
        .max()
        .unwrap_or(0);
    tallies
        .iter()
        .map(|(id, t)| {
            let bps = if t.forfeited {
                0
            } else {
                score(t.weighted, max_samples)
            };
            (*id, bps)
        })
        .collect()
}

/// Every worker that submitted to `job_id`, sorted by address (the order the escrow wants).
pub async fn contributions<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
) -> Result<Vec<Contribution>, DomainError> {
    contributions_in(db, job_id, None).await
}

/// Every worker that submitted to rounds `1 ..= last_round` of `job_id`, scored exactly as
/// [`contributions`] scores a whole job but from those rounds' verdicts only: what an abort
/// pays for the rounds that completed, so work in the round that failed earns nothing.
pub async fn contributions_through_round<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    last_round: i32,
) -> Result<Vec<Contribution>, DomainError> {
    contributions_in(db, job_id, Some(last_round)).await
}

async fn contributions_in<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    last_round: Option<i32>,
) -> Result<Vec<Contribution>, DomainError> {
    let mut tasks = task::Entity::find().filter(task::Column::JobId.eq(job_id));
    if let Some(last) = last_round {
        tasks = tasks.filter(task::Column::Round.lte(last));
    }
    let task_ids: Vec<Uuid> = tasks.all(db).await?.into_iter().map(|t| t.id).collect();
    let submissions = submission::Entity::find()
        .filter(submission::Column::TaskId.is_in(task_ids))
        .all(db)
        .await?;
    let mut tallies: BTreeMap<Uuid, Tally> = BTreeMap::new();
    for s in &submissions {
        tallies.entry(s.worker_id).or_default().add(
            s.verdict,
            s.sample_count.max(0) as u64,
            s.quality,
            s.proof_status,
        );
    }
    let scores = scores(&tallies);
    let workers = worker::Entity::find()
        .filter(worker::Column::Id.is_in(tallies.keys().copied().collect::<Vec<_>>()))
        .all(db)
        .await?;
    let mut out: Vec<Contribution> = workers
        .into_iter()
        .filter_map(|w| {
            let tally = tallies.get(&w.id)?;
            Some(Contribution {
                address: w.address.to_ascii_lowercase(),
                quality_bps: scores.get(&w.id).copied().unwrap_or(0),
                samples: tally.samples,
                accepted: tally.accepted,
                rejected: tally.rejected,
                forfeited: tally.forfeited,
            })
        })
        .collect();
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

/// How many of job `job_id`'s proofs of training are still to be checked: its payout is
/// computed only once none is.
pub async fn pending_proofs<C: ConnectionTrait>(db: &C, job_id: Uuid) -> Result<u32, DomainError> {
    pending_proofs_in(db, job_id, None).await
}

/// [`pending_proofs`] of rounds `1 ..= last_round` only: what an early end, which pays those
/// rounds, waits for.
pub async fn pending_proofs_through_round<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    last_round: i32,
) -> Result<u32, DomainError> {
    pending_proofs_in(db, job_id, Some(last_round)).await
}

async fn pending_proofs_in<C: ConnectionTrait>(
    db: &C,
    job_id: Uuid,
    last_round: Option<i32>,
) -> Result<u32, DomainError> {
    let mut tasks = Query::select()
        .column(task::Column::Id)
        .from(task::Entity)
        .and_where(task::Column::JobId.eq(job_id))
        .to_owned();
    if let Some(last) = last_round {
        tasks.and_where(task::Column::Round.lte(last));
    }
    let n = submission::Entity::find()
        .filter(submission::Column::TaskId.in_subquery(tasks))
        .filter(submission::Column::ProofStatus.eq(ProofStatus::Pending))
        .count(db)
        .await?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
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

    /// A worker that was accepted in round 1 and caught forging its proof in round 2 scores 0
    /// for the job, and the honest worker with fewer samples becomes the largest contributor.
    #[test]
    fn a_worker_caught_forging_a_proof_forfeits_every_round() {
        let (honest, cheat) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut tallies: BTreeMap<Uuid, Tally> = BTreeMap::new();
        // The forgery was accepted on the held-out rules (its verdict stands) and caught by
        // the replay that came after.
        for (worker, verdict, samples, proof) in [
            (honest, VerdictStatus::Accepted, 100, ProofStatus::Passed),
            (honest, VerdictStatus::Accepted, 100, ProofStatus::NotDue),
            (cheat, VerdictStatus::Accepted, 300, ProofStatus::Passed),
            (cheat, VerdictStatus::Accepted, 300, ProofStatus::Failed),
        ] {
            tallies
                .entry(worker)
                .or_default()
                .add(verdict, samples, Some(0.5), proof);
        }
        let scores = scores(&tallies);
        assert_eq!(scores[&cheat], 0);
        assert_eq!(
            scores[&honest], 5_000,
            "half the way, from the largest honest sample"
        );
        assert!(tallies[&cheat].forfeited && !tallies[&honest].forfeited);
        assert_eq!(tallies[&cheat].accepted, 2, "its verdicts still show");
    }

    #[test]
    fn nothing_accepted_scores_zero() {
        assert_eq!(score(0.0, 0), 0);
        assert_eq!(score(0.0, 300), 0);
    }
}
