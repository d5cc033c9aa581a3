//! Following a job's events and how they read to a person, shared by `shardwork demo` and
//! `shardwork job watch`. The events are the protocol's typed [`JobEvent`]s.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shardwork_client::ApiClient;
use shardwork_core::protocol::{EventView, JobEvent, JobStatus, ProofStatus};
use uuid::Uuid;

/// Follows job `id` until it reaches a terminal status, which it returns: `on_event` sees every
/// event once, in order (including those written as the job ended), and may stop the watch
/// with an error; `on_poll` sees the status after each poll. Gives up after `timeout`.
pub async fn follow(
    api: &ApiClient,
    id: Uuid,
    timeout: Duration,
    poll: Duration,
    on_event: &mut dyn FnMut(&EventView) -> anyhow::Result<()>,
    on_poll: &mut dyn FnMut(JobStatus),
) -> anyhow::Result<JobStatus> {
    let started = Instant::now();
    let mut after = 0;
    loop {
        // The status is read before the events, so the events of a job seen ended are all in.
        let job = api.job(id).await?;
        let status: JobStatus = serde_json::from_value(job["status"].clone())
            .with_context(|| format!("job {id} has no status the CLI knows: {}", job["status"]))?;
        for event in api.events(id, after).await? {
            after = event.id;
            on_event(&event)?;
        }
        on_poll(status);
        if status.is_terminal() {
            return Ok(status);
        }
        if started.elapsed() > timeout {
            bail!("job {id} is still {status} after {} s", timeout.as_secs());
        }
        tokio::time::sleep(poll).await;
    }
}

/// A one-line description of a job event.
pub fn describe(event: &JobEvent) -> String {
    match event {
        JobEvent::Funded(_) => "escrow funding seen on chain; the job is open".to_owned(),
        JobEvent::RoundOpened(e) => format!("round {} opened: {} tasks queued", e.round, e.tasks),
        JobEvent::TaskClaimed(e) => format!(
            "round {} shard {} claimed by {}",
            e.round, e.shard, e.worker
        ),
        JobEvent::Submitted(e) => format!(
            "round {} shard {} adapter submitted ({} samples)",
            e.round, e.shard, e.samples
        ),
        JobEvent::Verdict(e) => format!(
            "round {} verdict on {}: {}{}{}",
            e.round,
            e.worker,
            if e.accepted {
                format!("accepted, quality {:.3}", e.quality)
            } else {
                "REJECTED".into()
            },
            e.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            if e.proof == ProofStatus::Pending {
                "; proof of training to be replayed"
            } else {
                ""
            }
        ),
        JobEvent::ProofChecked(e) => format!(
            "round {} proof of training of {} {} by {}{}; {} still to check",
            e.round,
            e.worker,
            if e.proof == ProofStatus::Passed {
                "replayed and matched"
            } else {
                "FAILED (the worker forfeits the job)"
            },
            e.validator,
            e.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
            e.pending
        ),
        JobEvent::BondSlashed(e) => format!(
            "bond of {} slashed by {} wei to the requester (tx {})",
            e.worker, e.amount_wei, e.tx_hash
        ),
        JobEvent::AwaitingProofs(e) => format!(
            "last round merged; the payout waits for {} proof{} of training",
            e.pending,
            if e.pending == 1 { "" } else { "s" }
        ),
        JobEvent::Aggregated(e) => format!(
            "round {} merged: held-out {} {:.4} (base {:.4})",
            e.round, e.metric_name, e.metric, e.base_metric
        ),
        JobEvent::TaskRequeued(e) => format!("task requeued: {}", e.reason),
        JobEvent::TaskFailed(e) => format!("task failed after {} attempts", e.attempts),
        JobEvent::Paid(e) => format!("{} contributors paid (tx {})", e.payouts.len(), e.tx_hash),
        JobEvent::Completed(e) => format!("completed on chain (tx {})", e.tx_hash),
        JobEvent::AbortDue(e) => format!("the job cannot finish, ending it on chain: {}", e.reason),
        JobEvent::Refunded(e) => format!(
            "refunded {} wei to the requester (tx {}){}",
            e.stake_wei,
            e.tx_hash,
            e.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        other => other.kind().to_owned(),
    }
}
