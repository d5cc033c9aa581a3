//! Federated payouts: one transaction when the contributors fit it, else `beginFederated*` and
//! `payFederatedBatch`es. The batches carry each contributor's reputation as it was when the
//! payout began, so another job paying the same contributors between two batches changes
//! nobody's share; a payout resumed after a crash recovers those reputations from the
//! `ContributorsPaid` entries logged since it began (each names the reputation before it).

use std::collections::HashMap;

use alloy::primitives::{Address, Bytes, U256};

use super::{
    Contribution, FederatedAbort, FederatedCompletion, JobStatus, Ledger, LedgerError,
    PayoutLimits, PayoutProgress, Result, TxOutcome, transact, transact_within, view,
};
use crate::bindings::JobEscrow::{self, JobEscrowEvents};

/// `REP_FLOOR` of the escrow: weight = quality x (REP_FLOOR + reputation).
const REP_FLOOR: u64 = 10_000;

/// What a federated payout settles: a completion (the whole stake) or an abort paying the
/// completed rounds (part of it).
pub(super) enum Settlement<'a> {
    Complete(&'a FederatedCompletion),
    Abort(&'a FederatedAbort),
}

impl Settlement<'_> {
    fn job_id(&self) -> U256 {
        match self {
            Settlement::Complete(c) => c.job_id,
            Settlement::Abort(a) => a.job_id,
        }
    }

    fn contributions(&self) -> &[Contribution] {
        match self {
            Settlement::Complete(c) => &c.contributions,
            Settlement::Abort(a) => &a.contributions,
        }
    }
}

fn invalid(field: &'static str, problem: String) -> LedgerError {
    LedgerError::InvalidInput { field, problem }
}

/// [`Ledger::pay_federated_job`] and [`Ledger::pay_federated_abort`]: one transaction when the
/// contributors fit it, else begin + batches, resumed from `payoutOf` after a crash.
pub(super) async fn settle_federated<L: Ledger + ?Sized>(
    ledger: &L,
    escrow: Address,
    validator: Address,
    settlement: Settlement<'_>,
    limits: PayoutLimits,
) -> Result<Vec<TxOutcome>> {
    let job_id = settlement.job_id();
    let mut contributions = settlement.contributions().to_vec();
    contributions.sort_by_key(|c| c.contributor);
    let per_batch = limits.contributors_per_batch();
    let mut sent = Vec::new();
    let status = ledger.job(escrow, job_id).await?.status;
    // Paid already (by an earlier call that crashed before it was recorded); an abort may
    // also find the job ended another way (aborted, refunded), with nothing left to pay.
    let ended = match settlement {
        Settlement::Complete(_) => status == JobStatus::Completed,
        Settlement::Abort(_) => !matches!(status, JobStatus::Started | JobStatus::Paying),
    };
    if ended {
        return Ok(sent);
    }
    let mut progress = ledger.payout_progress(escrow, job_id).await?;
    // The reputations of the start, one per contributor not paid yet, in address order.
    let unpaid_reputations;
    if progress.expected == 0 {
        if contributions.len() <= per_batch {
            sent.push(
                settle_at_once(
                    ledger,
                    escrow,
                    validator,
                    &settlement,
                    &contributions,
                    limits,
                )
                .await?,
            );
            return Ok(sent);
        }
        let reputations = reputations_now(ledger, escrow, &contributions, per_batch).await?;
        let (total_weight, total_quality) = totals(&contributions, &reputations);
        let count = u32::try_from(contributions.len())
            .map_err(|_| invalid("contributions", format!("{} entries", contributions.len())))?;
        let outcome = match settlement {
            Settlement::Complete(completion) => {
                let call = JobEscrow::beginFederatedPayoutCall {
                    jobId: job_id,
                    adapterCid: completion.adapter_cid.clone(),
                    manifestCid: completion.manifest_cid.clone(),
                    contributorCount: count,
                    totalWeight: total_weight,
                    totalQuality: total_quality,
                };
                let action = format!("beginFederatedPayout({job_id})");
                transact(ledger, escrow, validator, call, U256::ZERO, action).await?
            }
            Settlement::Abort(abort) => {
                let call = JobEscrow::beginFederatedAbortCall {
                    jobId: job_id,
                    earnedBps: abort.earned_bps,
                    adapterCid: abort.adapter_cid.clone(),
                    reason: abort.reason.clone(),
                    contributorCount: count,
                    totalWeight: total_weight,
                    totalQuality: total_quality,
                };
                let action = format!("beginFederatedAbort({job_id}, {})", abort.earned_bps);
                transact(ledger, escrow, validator, call, U256::ZERO, action).await?
            }
        };
        sent.push(outcome);
        progress = ledger.payout_progress(escrow, job_id).await?;
        check_same_list(&progress, &contributions)?;
        unpaid_reputations = reputations;
    } else {
        check_same_list(&progress, &contributions)?;
        let unpaid = &contributions[progress.paid_count as usize..];
        unpaid_reputations =
            reputations_at_begin(ledger, escrow, job_id, &progress, unpaid, per_batch).await?;
    }
    let done = progress.paid_count as usize;
    for (index, (chunk, reps)) in contributions[done..]
        .chunks(per_batch)
        .zip(unpaid_reputations.chunks(per_batch))
        .enumerate()
    {
        let call = JobEscrow::payFederatedBatchCall {
            jobId: job_id,
            contributors: chunk.iter().map(|c| c.contributor).collect(),
            qualityScores: chunk.iter().map(|c| c.quality).collect(),
            reputations: packed(reps),
        };
        let action = format!("payFederatedBatch({job_id}, batch {})", index + 1);
        let gas_limit = Some(limits.batch_gas_limit(chunk.len()));
        sent.push(
            transact_within(
                ledger,
                escrow,
                validator,
                call,
                U256::ZERO,
                gas_limit,
                action,
            )
            .await?,
        );
    }
    Ok(sent)
}

/// The one-transaction settlement, for a list that fits one batch.
async fn settle_at_once<L: Ledger + ?Sized>(
    ledger: &L,
    escrow: Address,
    validator: Address,
    settlement: &Settlement<'_>,
    contributions: &[Contribution],
    limits: PayoutLimits,
) -> Result<TxOutcome> {
    match settlement {
        Settlement::Complete(completion) => {
            ledger
                .complete_federated_job(escrow, validator, completion)
                .await
        }
        Settlement::Abort(abort) => {
            let call = JobEscrow::abortFederatedJobCall {
                jobId: abort.job_id,
                earnedBps: abort.earned_bps,
                adapterCid: abort.adapter_cid.clone(),
                reason: abort.reason.clone(),
                contributors: contributions.iter().map(|c| c.contributor).collect(),
                qualityScores: contributions.iter().map(|c| c.quality).collect(),
            };
            let action = format!("abortFederatedJob({}, {})", abort.job_id, abort.earned_bps);
            let gas_limit = Some(limits.batch_gas_limit(contributions.len()));
            transact_within(
                ledger,
                escrow,
                validator,
                call,
                U256::ZERO,
                gas_limit,
                action,
            )
            .await
        }
    }
}

/// The payout under way on chain must be this list: as many contributors, and the last one it
/// paid where this list has it.
fn check_same_list(progress: &PayoutProgress, contributions: &[Contribution]) -> Result<()> {
    let done = progress.paid_count as usize;
    if progress.expected as usize != contributions.len()
        || done > contributions.len()
        || (done > 0 && contributions[done - 1].contributor != progress.last_contributor)
    {
        return Err(invalid(
            "contributions",
            format!(
                "the payout under way on chain announced {} contributors and paid {} up to \
                 {}; these {} contributions are another list",
                progress.expected,
                done,
                progress.last_contributor,
                contributions.len()
            ),
        ));
    }
    Ok(())
}

/// The contributors' reputations now, read in chunks of `per_call`.
async fn reputations_now<L: Ledger + ?Sized>(
    ledger: &L,
    escrow: Address,
    contributions: &[Contribution],
    per_call: usize,
) -> Result<Vec<u16>> {
    let mut reputations = Vec::with_capacity(contributions.len());
    for chunk in contributions.chunks(per_call) {
        let call = JobEscrow::reputationsOfCall {
            accounts: chunk.iter().map(|c| c.contributor).collect(),
        };
        reputations.extend(view(ledger, escrow, call, "reputationsOf").await?);
    }
    Ok(reputations)
}

/// The total weight and quality a payout of `contributions` at `reputations` announces.
fn totals(contributions: &[Contribution], reputations: &[u16]) -> (u64, u64) {
    contributions
        .iter()
        .zip(reputations)
        .fold((0, 0), |(weight, quality), (c, &reputation)| {
            let q = u64::from(c.quality);
            (
                weight + q * (REP_FLOOR + u64::from(reputation)),
                quality + q,
            )
        })
}

/// Reputations as `payFederatedBatch` takes them: two bytes each, big-endian.
fn packed(reputations: &[u16]) -> Bytes {
    reputations
        .iter()
        .flat_map(|r| r.to_be_bytes())
        .collect::<Vec<u8>>()
        .into()
}

/// What the unpaid contributors of a payout under way weighed when it began: their reputation
/// now, unless another job paid them since the payout's `PayoutStarted`, in which case the
/// first such `ContributorsPaid` entry names the reputation they had before. Checked against
/// what the payout still expects, so a wrong recovery is an error here, not a refused batch.
async fn reputations_at_begin<L: Ledger + ?Sized>(
    ledger: &L,
    escrow: Address,
    job_id: U256,
    progress: &PayoutProgress,
    unpaid: &[Contribution],
    per_call: usize,
) -> Result<Vec<u16>> {
    let mut reputations = reputations_now(ledger, escrow, unpaid, per_call).await?;
    let events = ledger.events(escrow, progress.began_at, None).await?;
    let began = events
        .iter()
        .position(|e| matches!(&e.event, JobEscrowEvents::PayoutStarted(p) if p.jobId == job_id))
        .ok_or_else(|| {
            invalid(
                "payout",
                format!(
                    "job {job_id}'s PayoutStarted is not in block {}, where payoutOf says it \
                     began",
                    progress.began_at
                ),
            )
        })?;
    let position: HashMap<Address, usize> = unpaid
        .iter()
        .enumerate()
        .map(|(i, c)| (c.contributor, i))
        .collect();
    let mut recovered = vec![false; unpaid.len()];
    for event in &events[began + 1..] {
        let JobEscrowEvents::ContributorsPaid(paid) = &event.event else {
            continue;
        };
        for entry in paid.payouts.chunks_exact(2) {
            let head = entry[0];
            let contributor = Address::from_slice(&head.to_be_bytes::<32>()[12..]);
            if let Some(&i) = position.get(&contributor)
                && !recovered[i]
            {
                recovered[i] = true;
                reputations[i] = u16::try_from((head >> 176) & U256::from(0xffff)).unwrap_or(0);
            }
        }
    }
    let (weight, _) = totals(unpaid, &reputations);
    let expected = progress.total_weight.saturating_sub(progress.weighed);
    if weight != expected {
        return Err(invalid(
            "payout",
            format!(
                "the unpaid contributors of job {job_id} weigh {weight} at the reputations \
                 recovered from the log, the payout expects {expected}"
            ),
        ));
    }
    Ok(reputations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_reputations_are_two_big_endian_bytes_each() {
        assert_eq!(
            packed(&[0, 2_500, 10_000]).as_ref(),
            [0, 0, 0x09, 0xc4, 0x27, 0x10]
        );
    }

    #[test]
    fn totals_weigh_quality_by_floor_plus_reputation() {
        let c = |quality| Contribution {
            contributor: Address::ZERO,
            quality,
        };
        assert_eq!(
            totals(&[c(6_000), c(8_000)], &[0, 2_500]),
            (6_000 * 10_000 + 8_000 * 12_500, 14_000)
        );
    }
}
