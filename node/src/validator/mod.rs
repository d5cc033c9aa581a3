//! The validator service: scores each submitted adapter on the job's held-out set (which only
//! it can open), rules on it, and merges each round once all its adapters are accepted.
//!
//! * [`rules`]: the verdict, a pure function of an adapter's measurements;
//! * [`norms`]: the update norms the verdict and the merge read;
//! * [`similarity`]: what a submission added to its round's start, against what earlier
//!   submissions added (the replay and copy rules);
//! * [`replay`]: the proof of training, checked by training a stretch of the run again;
//! * [`gate`]: where a replay pauses for a verdict or a merge;
//! * [`context`]: each job's model, held-out set and base score, loaded once (ahead of time
//!   while idle);
//! * this module: the poll loop, scoring a submission, merging a round and checking a proof.
//!
//! ## Proofs after verdicts
//! A verdict waits only for what protects the requester's result: the held-out score and the
//! rules. The proof of training (a replayed stretch of the run) is checked after it, while the
//! next round trains: each pass first judges every pending submission and merges every ready
//! round, and only a pass that found none of that replays one due proof. A verdict or merge
//! that comes in while a replay runs does not wait for it: the replay stands aside between two
//! of its steps ([`gate`]) while it is handled. A round's merge and the next round's tasks
//! never wait for a replay; the job's payout does (the API computes it when the last proof is
//! decided). Docs: decisions/0042.
//!
//! ## Any number of validators
//! Each scoring, proof replay and merge is leased from the API before it starts and the lease
//! renewed while it runs ([`ValidatorNode::holding`]): validators sharing a deployment each
//! take different work, and what a killed validator held goes to another once its lease
//! lapses. Work another validator holds is neither listed nor leased. Docs: decisions/0043.
//!
//! ## Never stalled by one submission or one job
//! Whatever is wrong with a submission (unfetchable, unloadable, a configuration or shape that
//! is not the job's, NaN, a copy) becomes that submission's rejection with the reason. What is
//! wrong on the validator's side (the API, the store, a job whose model cannot be loaded) skips
//! that submission or round for this pass, logged, and the pass goes on with the others.
//!
//! ## The merge
//! Accepted adapters are merged the job's way (`validation.aggregation`: exact by default, the
//! weighted sum of `ΔW = B·A` re-factored to rank r, weighted by `samples × quality`; or the
//! coordinate-wise trimmed mean or median), with each adapter's update norm clipped to
//! `clip_factor` times the round's median norm, so one outsized (if accepted) update cannot
//! dominate. The merge is scored like an adapter and must beat the round's start; when it does
//! not, the round falls back to the median merge, then to the best accepted adapter alone (which
//! beat the start to be accepted), and the aggregate's details say which and why.

pub mod context;
pub mod gate;
pub mod norms;
pub mod replay;
pub mod rules;
pub mod sample;
pub mod similarity;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::Device;
use tokio::sync::watch;

use crate::NodeError;
use crate::content::{Blobs, fetch_adapter, fetch_bundle, put_bundle};
use crate::models::WorkDir;
use crate::work::ExampleScores;
use context::{Contexts, JobContext, JobRef, Loader, RoundSample};
use gate::StepGate;
use replay::StretchCheck;
pub use rules::{Nearest, Rules, Scores, judge};
use shardwork_client::{
    Aggregate, ApiClient, PendingValidation, ProofCheck, ReadyRound, ValidatorWork, Verdict,
};
use shardwork_core::protocol::{
    AggregateDetails, Aggregation, MergeMethod, MergedAdapter, NearestSubmission, VerdictReport,
};
use shardwork_core::store::keys::Sealed;
use shardwork_trainer::merge::{self, MergeMode, MergeOptions};
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use similarity::{Additions, Update};

/// Merges one round's `adapters`, trained from `start` (none in round 1), with `weights` as the
/// validator does: each update clipped at `clip_factor` times the round's median update norm,
/// merged by `mode` (the job's `validation.aggregation`), seeded by the job, then stepped
/// `server_learning_rate` times the merge's change from `start`.
pub fn merge_adapters(
    start: Option<&Adapter>,
    adapters: &[Adapter],
    weights: &[f64],
    mode: MergeMode,
    clip_factor: f64,
    server_learning_rate: f64,
    seed: u64,
) -> Result<(Adapter, merge::MergeReport), NodeError> {
    let mut norms = adapters
        .iter()
        .map(norms::update_norm)
        .collect::<Result<Vec<_>, _>>()?;
    norms.sort_by(f64::total_cmp);
    let median = norms.get(norms.len() / 2).copied().unwrap_or(0.0);
    Ok(merge::merge_from(
        start,
        adapters,
        weights,
        &MergeOptions {
            mode,
            rank: None,
            clip_norm: (median > 0.0).then_some(median * clip_factor),
            seed,
            server_learning_rate,
        },
    )?)
}

/// What one proof replay came to.
enum ReplayOutcome {
    /// The API took the check (or the proof was decided meanwhile).
    Recorded,
    /// Checked, but the API did not take it: checked again at a later pass.
    NotRecorded,
    /// Not checked now (its job cannot be loaded, the store failed): try the next proof.
    NotChecked,
}

/// The job `pending` belongs to, as the job contexts know it.
fn job_of(pending: &PendingValidation) -> JobRef<'_> {
    JobRef {
        job_id: pending.job_id,
        spec_cid: pending.job_spec_cid.as_deref(),
        held_out_cid: pending.held_out_cid.as_deref(),
    }
}

/// The most polls a replay runs between two pauses for verdicts and merges, once passes found
/// nothing they could do (about 19 s at the services' 0.3 s poll).
const MAX_POLLS_BETWEEN_PAUSES: u32 = 64;

/// Pending submissions listed per pass.
const PENDING_PAGE: u32 = 50;

/// The validator service: judges submitted adapters and merges ready rounds, polling the API
/// for both.
pub struct ValidatorNode {
    /// The validator's own API client: pending work comes from it, verdicts and merges go to it.
    pub api: Arc<ApiClient>,
    /// Where adapters and models are fetched from and merged adapters stored.
    pub blobs: Arc<dyn Blobs>,
    /// Where adapters are scored and merged.
    pub device: Device,
    /// Model cache and scratch folders for the adapters being scored or merged.
    pub work_dir: WorkDir,
    /// How often the validator asks the API for work when it had none.
    pub poll: Duration,
    /// The thresholds of the verdict and of the merge's norm clipping.
    pub rules: Rules,
}

impl ValidatorNode {
    /// Runs passes until `shutdown` turns true: verdicts and merges first, then, when there
    /// were none, one due proof of training; job contexts are prepared while idle. A failed
    /// pass is logged and retried at the next poll, not fatal.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let mut contexts = Contexts::default();
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let mut worked = match self.pass(&mut contexts).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "validator pass failed");
                    0
                }
            };
            if worked == 0 {
                worked = match self.proof_pass(&mut contexts).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(error = %e, "proof pass failed");
                        0
                    }
                };
            }
            if worked == 0 {
                contexts.prepare_one(&self.loader()).await;
                tokio::select! {
                    _ = tokio::time::sleep(self.poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }

    fn loader(&self) -> Loader<'_> {
        Loader {
            api: &self.api,
            blobs: self.blobs.as_ref(),
            work_dir: &self.work_dir,
            device: &self.device,
        }
    }

    /// Judges every pending submission and merges every ready round once (no proof is
    /// replayed here: see [`ValidatorNode::proof_pass`]); returns how many verdicts and merges
    /// the API took. Only failing to list the work fails the pass: a
    /// submission or round that cannot be handled now is logged and left for the next pass
    /// while the others go on.
    pub async fn pass(&self, contexts: &mut Contexts) -> Result<usize, NodeError> {
        let pending = self.api.pending_validations(PENDING_PAGE).await?;
        self.pass_over(contexts, pending).await
    }

    /// [`ValidatorNode::pass`] over the pending submissions already listed; the ready rounds
    /// are listed after their verdicts, so a round those verdicts close is merged in the same
    /// pass.
    async fn pass_over(
        &self,
        contexts: &mut Contexts,
        pending: Vec<PendingValidation>,
    ) -> Result<usize, NodeError> {
        let mut worked = 0;
        for pending in pending {
            let work = ValidatorWork::Verdict {
                submission_id: pending.submission_id,
            };
            if self
                .holding(work, self.give_verdict(contexts, &pending))
                .await?
                .unwrap_or(false)
            {
                worked += 1;
            }
        }
        for ready in self.api.ready_rounds().await? {
            let work = ValidatorWork::Merge {
                job_id: ready.job_id,
                round: ready.round,
            };
            if self
                .holding(work, self.merge(contexts, &ready))
                .await?
                .unwrap_or(false)
            {
                worked += 1;
            }
        }
        Ok(worked)
    }

    /// Scores `pending` and records its verdict; whether the API took it. What fails here is
    /// logged and left for a later pass (or another validator).
    async fn give_verdict(&self, contexts: &mut Contexts, pending: &PendingValidation) -> bool {
        let context = match contexts.get(&self.loader(), job_of(pending)).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(job = %pending.job_id, submission = %pending.submission_id,
                    error = %e, "job cannot be judged now; its submissions wait");
                return false;
            }
        };
        let started = Instant::now();
        let mut verdict = match self.score(&context, pending).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(submission = %pending.submission_id, error = %e,
                    "submission not judged this pass");
                return false;
            }
        };
        // What the scoring cost, fetches included: `bench validation` weighs it against the
        // training it judged.
        verdict.report.seconds = Some(started.elapsed().as_secs_f64());
        tracing::info!(submission = %pending.submission_id, worker = %pending.worker,
            accepted = verdict.accepted, quality = verdict.quality, reason = ?verdict.reason,
            proof_due = verdict.proof_due, "verdict");
        match self.api.verdict(pending.submission_id, &verdict).await {
            Ok(()) => true,
            Err(e) if e.is_conflict() => false,
            Err(e) => {
                tracing::warn!(submission = %pending.submission_id, error = %e,
                    "verdict not recorded; judged again next pass");
                false
            }
        }
    }

    /// Merges `ready` and records the merge; whether the API took it.
    async fn merge(&self, contexts: &mut Contexts, ready: &ReadyRound) -> bool {
        let job = JobRef {
            job_id: ready.job_id,
            spec_cid: ready.job_spec_cid.as_deref(),
            held_out_cid: ready.held_out_cid.as_deref(),
        };
        let started = Instant::now();
        let merged = match contexts.get(&self.loader(), job).await {
            Ok(context) => self
                .merge_round(&context, ready)
                .await
                .map(|merged| (context, merged)),
            Err(e) => Err(e),
        };
        let (
            context,
            MergedRound {
                mut aggregate,
                update,
                scores,
            },
        ) = match merged {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(job = %ready.job_id, round = ready.round, error = %e,
                    "round not merged this pass");
                return false;
            }
        };
        aggregate.details.seconds = Some(started.elapsed().as_secs_f64());
        tracing::info!(job = %ready.job_id, round = ready.round, metric = aggregate.metric,
            base = aggregate.base_metric, merge = ?aggregate.details.merge, "round merged");
        let recorded = match self
            .api
            .aggregate(ready.job_id, ready.round, &aggregate)
            .await
        {
            Ok(()) => true,
            Err(e) if e.is_conflict() => false,
            Err(e) => {
                tracing::warn!(job = %ready.job_id, round = ready.round, error = %e,
                    "merge not recorded; merged again next pass");
                return false;
            }
        };
        if ready.last_round {
            contexts.finish(ready.job_id);
        } else if recorded {
            // The merge is the next round's start: its scores and update, measured here, are
            // what that round's first verdict would otherwise fetch and score again, a whole
            // held-out pass on the round's critical path (the same figures to the last digit).
            let cid = aggregate.adapter_cid.to_string();
            context.remember_start_scores(&cid, scores);
            context.remember_update(ready.round + 1, &cid, update);
        }
        recorded
    }

    /// Runs `work` while holding this validator's lease on `what`, renewing it (the heartbeat)
    /// until `work` ends. `None` when the lease is not to be had (another validator holds the
    /// work, or it is already done), or when it is lost midway: then `work` is dropped, and its
    /// outcome is the new holder's to record.
    async fn holding<T>(
        &self,
        what: ValidatorWork,
        work: impl Future<Output = T>,
    ) -> Result<Option<T>, NodeError> {
        let lease = match self.api.lease_validator_work(&what).await {
            Ok(lease) => lease,
            Err(e) if e.is_conflict() || e.is_not_found() => {
                tracing::debug!(%what, error = %e, "not leased");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        // A third of the lease's length, measured on the API's clock: two heartbeats may fail
        // before the lease lapses.
        let period = ((lease.expires_at - lease.leased_at) / 3)
            .to_std()
            .unwrap_or_default()
            .max(Duration::from_millis(200));
        let renew = async {
            loop {
                tokio::time::sleep(period).await;
                match self.api.lease_validator_work(&what).await {
                    Ok(_) => {}
                    Err(e) if e.is_conflict() || e.is_not_found() => return e,
                    Err(e) => tracing::warn!(%what, error = %e, "lease not renewed; trying again"),
                }
            }
        };
        tokio::select! {
            out = work => Ok(Some(out)),
            lost = renew => {
                tracing::warn!(%what, error = %lost, "lease lost; the work is left to its holder");
                Ok(None)
            }
        }
    }

    /// Checks the oldest due proof of training this validator can check: replays the stretch of
    /// its run drawn for it and reports the outcome. Returns 1 when the API took a check, 0
    /// when none was due (or none could be checked now: each is logged and left for a later
    /// pass). While the replay runs, the verdicts and merges that come in are handled beside
    /// it, the replay paused between two of its steps ([`ValidatorNode::giving_way`]), so no
    /// round waits for a replay. Proofs other validators are replaying are not listed, and
    /// each is leased before its replay starts.
    pub async fn proof_pass(&self, contexts: &mut Contexts) -> Result<usize, NodeError> {
        let due = self.api.pending_proofs(50).await?;
        // Contexts of merged jobs are kept for their proofs, and released after the last.
        contexts.release_finished(&due.iter().map(|p| p.job_id).collect());
        for pending in due {
            let context = match contexts.get(&self.loader(), job_of(&pending)).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(job = %pending.job_id, submission = %pending.submission_id,
                        error = %e, "job cannot be replayed now; its proofs wait");
                    continue;
                }
            };
            let gate = Arc::new(StepGate::default());
            let work = ValidatorWork::Proof {
                submission_id: pending.submission_id,
            };
            let replay = self.holding(work, self.replay(context, &pending, gate.clone()));
            match self.giving_way(replay, &gate, contexts).await? {
                Some(ReplayOutcome::Recorded) => return Ok(1),
                Some(ReplayOutcome::NotRecorded) => return Ok(0),
                Some(ReplayOutcome::NotChecked) | None => {}
            }
        }
        Ok(0)
    }

    /// Drives `replay` to its end; every poll while it runs, when a verdict or a merge is
    /// waiting, holds `gate` shut (the replay stops at its next step boundary) and runs a
    /// [`ValidatorNode::pass`]. The replay is polled beside the pass, so its lease goes on
    /// being renewed. A pass that could do none of what was listed (a job that cannot be
    /// loaded now) doubles the polls before the replay stands aside again, up to
    /// [`MAX_POLLS_BETWEEN_PAUSES`], so work this validator cannot do does not stall it.
    async fn giving_way<T>(
        &self,
        replay: impl Future<Output = T>,
        gate: &StepGate,
        contexts: &mut Contexts,
    ) -> T {
        tokio::pin!(replay);
        let (mut polls_between, mut polls) = (1, 0);
        loop {
            tokio::select! {
                out = &mut replay => return out,
                _ = tokio::time::sleep(self.poll) => {}
            }
            polls += 1;
            if polls < polls_between {
                continue;
            }
            let Some(pending) = self.judgement_waiting().await else {
                continue;
            };
            polls = 0;
            let (held, paused) = (gate.hold(), Instant::now());
            let pass = self.pass_over(contexts, pending);
            tokio::pin!(pass);
            let mut finished = None;
            let worked = loop {
                tokio::select! {
                    worked = &mut pass => break worked,
                    out = &mut replay, if finished.is_none() => finished = Some(out),
                }
            };
            drop(held);
            let worked = match worked {
                Ok(n) => {
                    tracing::info!(
                        worked = n,
                        paused_s = paused.elapsed().as_secs_f64(),
                        "a proof replay stood aside for verdicts and merges"
                    );
                    n
                }
                Err(e) => {
                    tracing::warn!(error = %e, "validator pass failed");
                    0
                }
            };
            polls_between = if worked > 0 {
                1
            } else {
                (polls_between * 2).min(MAX_POLLS_BETWEEN_PAUSES)
            };
            if let Some(out) = finished {
                return out;
            }
        }
    }

    /// The pending submissions no other validator holds, when there are any or a round is
    /// ready to merge; `None` when neither is waiting. A failed listing says `None`: the replay
    /// goes on, and the next poll asks again.
    async fn judgement_waiting(&self) -> Option<Vec<PendingValidation>> {
        let pending = match self.api.pending_validations(PENDING_PAGE).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::debug!(error = %e, "pending verdicts not listed");
                return None;
            }
        };
        if !pending.is_empty() {
            return Some(pending);
        }
        match self.api.ready_rounds().await {
            Ok(ready) if !ready.is_empty() => Some(pending),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = %e, "ready rounds not listed");
                None
            }
        }
    }

    /// Replays `pending`'s proof and records the check.
    async fn replay(
        &self,
        context: Arc<JobContext>,
        pending: &PendingValidation,
        gate: Arc<StepGate>,
    ) -> ReplayOutcome {
        let check = match self.prove(&context, pending, gate).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(submission = %pending.submission_id, error = %e,
                    "proof not checked this pass");
                return ReplayOutcome::NotChecked;
            }
        };
        tracing::info!(submission = %pending.submission_id, worker = %pending.worker,
            passed = check.passed, reason = ?check.reason, "proof of training checked");
        match self.api.proof(pending.submission_id, &check).await {
            Ok(()) => ReplayOutcome::Recorded,
            // Decided meanwhile (another validator) or the job ended: nothing to record.
            Err(e) if e.is_conflict() => ReplayOutcome::Recorded,
            Err(e) => {
                tracing::warn!(submission = %pending.submission_id, error = %e,
                    "proof check not recorded; checked again next pass");
                ReplayOutcome::NotRecorded
            }
        }
    }

    /// The check of `pending`'s proof of training: its adapter bundle (with the run's trace)
    /// fetched and the drawn stretch replayed. `Err` only for what is not the submission's
    /// fault; a bundle that no longer opens is the worker's (it opened for the verdict).
    async fn prove(
        &self,
        context: &Arc<JobContext>,
        pending: &PendingValidation,
        gate: Arc<StepGate>,
    ) -> Result<ProofCheck, NodeError> {
        let dir = self.work_dir.scratch("proof-")?;
        let adapter_dir = dir.path().join("submitted");
        let sealed_to = context.submission_seal(pending.task_id, &pending.worker);
        if let Err(e) = fetch_bundle(
            self.blobs.as_ref(),
            &pending.adapter_cid,
            &adapter_dir,
            Some(&sealed_to),
        )
        .await
        {
            return Ok(ProofCheck {
                passed: false,
                reason: Some(format!(
                    "proof of training: the adapter's bundle could not be fetched: {e}"
                )),
                stretches: Vec::new(),
            });
        }
        let proof = self
            .check_proof(context, pending, &adapter_dir, gate)
            .await?;
        Ok(ProofCheck {
            passed: proof.failure.is_none(),
            reason: proof.failure,
            stretches: proof.checks.iter().map(StretchCheck::replay).collect(),
        })
    }

    /// The round's starting adapter (none in round 1) and its held-out scores on the whole set,
    /// example by example (the base model's in round 1), measured once per job and round.
    /// Failing here is the validator's problem (the start is its own merge), so it is an
    /// error, not a rejection.
    async fn round_start(
        &self,
        context: &Arc<JobContext>,
        round: i32,
        cid: Option<&str>,
    ) -> Result<(Option<Arc<Update>>, Arc<ExampleScores>), NodeError> {
        let Some(cid) = cid else {
            return Ok((None, context.base.clone()));
        };
        if let (Some(update), Some(scores)) =
            (context.update(round, cid), context.start_scores(cid))
        {
            return Ok((Some(update), scores));
        }
        let dir = self.work_dir.scratch("start-")?;
        fetch_bundle(
            self.blobs.as_ref(),
            cid,
            dir.path(),
            Some(&context.start_seal(round)),
        )
        .await?;
        let (context, device, path) = (
            context.clone(),
            self.device.clone(),
            dir.path().to_path_buf(),
        );
        let owned_cid = cid.to_owned();
        tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
            let start = Adapter::load(&path, &device)?;
            let scores = match context.start_scores(&owned_cid) {
                Some(s) => s,
                None => {
                    let scores = Arc::new(context.work.score_examples(
                        Some(&start),
                        &context.held_out,
                        &device,
                    )?);
                    // A whole held-out pass: for a merge, only where another validator (or
                    // this one before a restart) made it; the merger keeps its scores.
                    tracing::info!(job = %context.job_id, round, start = %owned_cid,
                        metric = scores.total().metric, "round's start scored");
                    scores
                }
            };
            let update = Arc::new(Update::of(&start)?);
            context.remember_start_scores(&owned_cid, scores.clone());
            context.remember_update(round, &owned_cid, update.clone());
            Ok((Some(update), scores))
        })
        .await
        .map_err(|e| NodeError::Io(format!("scoring the round's start: {e}")))?
    }

    /// The verdict on one submission. `Err` only for what is not the submission's fault (the
    /// API, the store, the round's start); everything wrong with the submission is a rejection.
    async fn score(
        &self,
        context: &Arc<JobContext>,
        pending: &PendingValidation,
    ) -> Result<Verdict, NodeError> {
        let metric_name = context.work.metric().kind;
        // Every submission of the round is scored on the round's sample of the held-out set,
        // and compared with the base model and the round's start on the same examples.
        let sample = context.round_sample(pending.round)?;
        let base_metric = context.base.over(&sample.picks)?.metric;
        let reject = |reason: String| Verdict {
            accepted: false,
            quality: 0.0,
            reason: Some(reason),
            report: VerdictReport::unmeasured(metric_name, base_metric),
            proof_due: false,
        };
        // Byte-for-byte replays and copies are told by their CIDs, before anything is fetched.
        if pending.previous_adapter_cid.as_deref() == Some(pending.adapter_cid.as_str()) {
            return Ok(reject(
                "the adapter is the round's starting adapter itself: a replay earns nothing".into(),
            ));
        }
        if let Some(original) = pending
            .earlier_submissions
            .iter()
            .find(|e| e.adapter_cid == pending.adapter_cid)
        {
            return Ok(reject(format!(
                "the adapter is submission {}'s by {}, byte for byte: a copy earns nothing",
                original.submission_id, original.worker
            )));
        }
        let began = Instant::now();
        let (start, start_scores) = self
            .round_start(
                context,
                pending.round,
                pending.previous_adapter_cid.as_deref(),
            )
            .await?;
        let start_metric = start_scores.over(&sample.picks)?.metric;
        let start_s = began.elapsed().as_secs_f64();
        let dir = self.work_dir.scratch("verdict-")?;
        let adapter_dir = dir.path().join("submitted");
        let sealed_to = context.submission_seal(pending.task_id, &pending.worker);
        // The adapter's files only: the proof of training in the bundle (most of its bytes)
        // is fetched by the replay, for the submissions drawn for one.
        if let Err(e) = fetch_adapter(
            self.blobs.as_ref(),
            &pending.adapter_cid,
            &adapter_dir,
            &sealed_to,
        )
        .await
        {
            return Ok(reject(format!(
                "the adapter could not be fetched as a bundle: {e}"
            )));
        }
        // Earlier submissions' updates, fetched once per round. One that cannot be fetched or
        // loaded was (or will be) rejected for it and is no original to copy from.
        let mut earlier = Vec::with_capacity(pending.earlier_submissions.len());
        for (k, e) in pending.earlier_submissions.iter().enumerate() {
            if let Some(update) = context.update(pending.round, &e.adapter_cid) {
                earlier.push((e.clone(), Ok(update)));
                continue;
            }
            let d = dir.path().join(format!("earlier-{k}"));
            let sealed_to = context.submission_seal(e.task_id, &e.worker);
            match fetch_adapter(self.blobs.as_ref(), &e.adapter_cid, &d, &sealed_to).await {
                Ok(_) => earlier.push((e.clone(), Err(d))),
                Err(err) => tracing::debug!(submission = %e.submission_id, error = %err,
                    "earlier submission not comparable"),
            }
        }
        let fetch_s = began.elapsed().as_secs_f64() - start_s;
        let proof_rate = context.validation.proof_rate();
        let context = context.clone();
        let device = self.device.clone();
        let rules = self.rules;
        let round = pending.round;
        let measured = tokio::task::spawn_blocking(move || -> Measured {
            let mut earlier_updates = Vec::with_capacity(earlier.len());
            for (e, kept) in earlier {
                let update = match kept {
                    Ok(u) => u,
                    Err(path) => match comparable_update(&context, &path, &device) {
                        Some(u) => {
                            let u = Arc::new(u);
                            context.remember_update(round, &e.adapter_cid, u.clone());
                            u
                        }
                        None => continue,
                    },
                };
                earlier_updates.push((e, update));
            }
            let against = Yardstick {
                sample: &sample,
                base_metric,
                start: start.as_deref(),
                start_metric,
            };
            let measured = measure(
                &context,
                &adapter_dir,
                &device,
                &rules,
                &against,
                &earlier_updates,
            );
            measured.unwrap_or_else(|e| Measured {
                verdict: Verdict {
                    accepted: false,
                    quality: 0.0,
                    reason: Some(format!("the adapter could not be scored: {e}")),
                    report: VerdictReport::unmeasured(metric_name, base_metric),
                    proof_due: false,
                },
                scored: false,
                checks_s: 0.0,
                score_s: 0.0,
            })
        })
        .await
        .map_err(|e| NodeError::Io(format!("scoring: {e}")))?;
        let Measured {
            verdict: mut judged,
            scored,
            checks_s,
            score_s,
        } = measured;
        // Where a verdict's time goes, for operators weighing the round's tail (issue 47): the
        // round's start (scored once a round), the fetches, the rules' checks before scoring
        // (norms, finiteness, the comparison with earlier submissions), the held-out scoring.
        tracing::debug!(submission = %pending.submission_id, start_s, fetch_s, checks_s,
            score_s, "verdict phases");
        // A scored adapter's proof is due whatever its verdict: were only accepted ones
        // replayed, a forgery that also fails a rule (a lazy run below the minimum gain, a
        // copy) would lose that task's pay and keep the job's, and forging would cost a cheat
        // nothing more than honest failure. An unscored one (malformed, NaN, oversized) is not:
        // there is no run's end to compare, and an honest run that diverged would replay to
        // the same NaN and be called a forgery. The replay comes after the verdict
        // (`proof_pass`), off the round's critical path. At a proof rate below 1 (a bonded
        // job, decisions/0044) only the submissions drawn at that rate are checked.
        judged.proof_due = scored && replay::proof_sampled(pending.submission_id, proof_rate);
        Ok(judged)
    }

    async fn merge_round(
        &self,
        context: &Arc<JobContext>,
        ready: &ReadyRound,
    ) -> Result<MergedRound, NodeError> {
        let (_, start_scores) = self
            .round_start(context, ready.round, ready.base_adapter_cid.as_deref())
            .await?;
        let start_metric = start_scores.total().metric;
        let began = Instant::now();
        let dir = self.work_dir.scratch("merge-")?;
        let mut dirs = Vec::new();
        for (i, a) in ready.adapters.iter().enumerate() {
            let d = dir.path().join(format!("in-{i}"));
            let sealed_to = context.submission_seal(a.task_id, &a.worker);
            fetch_adapter(self.blobs.as_ref(), &a.adapter_cid, &d, &sealed_to).await?;
            dirs.push(d);
        }
        let weights: Vec<f64> = ready
            .adapters
            .iter()
            .map(|a| a.samples.max(1) as f64 * a.quality.max(1e-3))
            .collect();
        let qualities: Vec<f64> = ready.adapters.iter().map(|a| a.quality).collect();
        let out_dir = dir.path().join("merged");
        let base_metric = context.base_metric();
        let metric_name = context.work.metric().kind;
        // Sealed to the round: the next round's leaseholders get its key with their leases, and
        // the API opens the last round's for the requester.
        let sealed_to = context.seal(&Sealed::RoundResult {
            round: ready.round as u32,
        });
        let context = context.clone();
        let device = self.device.clone();
        let clip_factor = self.rules.clip_factor;
        let out = out_dir.clone();
        let fetch_s = began.elapsed().as_secs_f64();
        let (scores, details, update, score_s) =
            tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
                let adapters = dirs
                    .iter()
                    .map(|d| Adapter::load(d, &device))
                    .collect::<Result<Vec<_>, _>>()?;
                let chosen = merge_round_adapters(
                    &context,
                    &adapters,
                    &weights,
                    &qualities,
                    clip_factor,
                    start_metric,
                    &device,
                )?;
                chosen.adapter.save(&out)?;
                // The next round's verdicts compare with the merge as the file they fetch holds it
                // (saved as f32), so its update is taken from the saved file.
                let update = Update::of(&Adapter::load(&out, &device)?)?;
                Ok((chosen.scores, chosen.details, update, chosen.score_s))
            })
            .await
            .map_err(|e| NodeError::Io(format!("merging: {e}")))??;
        let merge_s = began.elapsed().as_secs_f64() - fetch_s - score_s;
        let stored = Instant::now();
        let adapter_cid = put_bundle(
            self.blobs.as_ref(),
            "adapter",
            &out_dir,
            &["adapter_config.json", "adapter_model.safetensors"],
            Some(&sealed_to),
        )
        .await?;
        // Where a merge's time goes, as the verdicts' phases (issue 47): the adapters fetched;
        // loading, merging, saving and re-reading them; the held-out scoring of each candidate
        // tried; the merged bundle stored.
        let store_s = stored.elapsed().as_secs_f64();
        tracing::debug!(job = %ready.job_id, round = ready.round, fetch_s, merge_s, score_s,
            store_s, "merge phases");
        let adapter_cid = adapter_cid
            .parse()
            .map_err(|e| NodeError::Content(format!("merged adapter CID {adapter_cid}: {e}")))?;
        let details = AggregateDetails {
            start_metric: Some(start_metric),
            held_out_examples: Some(scores.len() as u32),
            adapters: ready
                .adapters
                .iter()
                .map(|a| MergedAdapter {
                    worker: a.worker.clone(),
                    shard: a.shard_index,
                    samples: a.samples,
                    quality: a.quality,
                })
                .collect(),
            ..details
        };
        Ok(MergedRound {
            aggregate: Aggregate {
                adapter_cid,
                metric: scores.total().metric,
                base_metric,
                metric_name,
                details,
            },
            update: Arc::new(update),
            scores: Arc::new(scores),
        })
    }
}

/// A round's merge as recorded, its update and its held-out scores: the next round's start,
/// whose scores and update the next round's verdicts need.
struct MergedRound {
    aggregate: Aggregate,
    update: Arc<Update>,
    scores: Arc<ExampleScores>,
}

/// What a submission is measured against: the round's sample of the held-out set, the base
/// model's and the round's start's metric on it, and the start's update.
#[derive(Clone, Copy)]
struct Yardstick<'a> {
    sample: &'a RoundSample,
    base_metric: f64,
    start: Option<&'a Update>,
    start_metric: f64,
}

/// What [`measure`] found of a submission.
struct Measured {
    /// The verdict of the rules ([`judge`]), or the rejection that kept them from being asked.
    verdict: Verdict,
    /// Whether the adapter was scored on the held-out set: it loaded, fit the job's model and
    /// was finite and within the norm limit, so its run's end can be compared with a replay's.
    scored: bool,
    /// Seconds spent loading and checking the adapter before scoring, and scoring it.
    checks_s: f64,
    score_s: f64,
}

/// Loads, checks and scores the submitted adapter in `adapter_dir` against the round's start
/// and the earlier submissions: the verdict. `Err` means the adapter could not be measured
/// (the caller rejects it with that reason).
fn measure(
    context: &JobContext,
    adapter_dir: &std::path::Path,
    device: &Device,
    rules: &Rules,
    against: &Yardstick<'_>,
    earlier: &[(shardwork_client::EarlierSubmission, Arc<Update>)],
) -> Result<Measured, NodeError> {
    let Yardstick {
        sample,
        base_metric,
        start,
        start_metric,
    } = *against;
    let began = Instant::now();
    let rejected = |reason: String| Measured {
        verdict: Verdict {
            accepted: false,
            quality: 0.0,
            reason: Some(reason),
            report: VerdictReport::default(),
            proof_due: false,
        },
        scored: false,
        checks_s: began.elapsed().as_secs_f64(),
        score_s: 0.0,
    };
    let adapter = match Adapter::load(adapter_dir, device) {
        Ok(a) => a,
        Err(e) => return Ok(rejected(format!("malformed adapter: {e}"))),
    };
    let work = context.work.as_ref();
    if let Some(problem) = rules::config_problem(&adapter.config, &work.adapter_config()) {
        return Ok(rejected(problem));
    }
    if let Some(problem) = shape_problem(work, &adapter)? {
        return Ok(rejected(problem));
    }
    let finite = norms::all_finite(&adapter)?;
    let norm = norms::max_relative_norm(work, &adapter)?;
    let (comparison, nearest) = if finite {
        let own = Update::of(&adapter)?;
        let updates: Vec<&Update> = earlier.iter().map(|(_, u)| u.as_ref()).collect();
        let c = Additions::measure(&own, start, &updates)?.compare();
        let nearest = c
            .cosines
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_finite())
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(k, cosine)| Nearest {
                worker: earlier[k].0.worker.clone(),
                submission: earlier[k].0.submission_id.to_string(),
                cosine: *cosine,
                norm_ratio: c.norm_ratios[k],
            });
        (Some(c), nearest)
    } else {
        (None, None)
    };
    let scored = finite && norm <= rules.max_relative_norm;
    let checks_s = began.elapsed().as_secs_f64();
    let (metric, beside) = if scored {
        match work.score_report(Some(&adapter), sample.held_out(context), device) {
            Ok(s) => (s.metric, Some(s.beside())),
            Err(e) => return Ok(rejected(format!("the adapter does not fit the model: {e}"))),
        }
    } else {
        (f64::NAN, None)
    };
    let scores = Scores {
        kind: work.metric(),
        metric,
        base_metric,
        start_metric,
        min_gain: context.validation.min_gain.unwrap_or_else(|| {
            work.metric()
                .default_min_gain_for(start_metric, sample.picks.len(), start.is_none())
        }),
        max_relative_norm: norm,
        finite,
        addition_norm: comparison.as_ref().map_or(f64::NAN, |c| c.addition_norm),
        start_norm: comparison.as_ref().map_or(0.0, |c| c.start_norm),
        nearest: nearest.clone(),
    };
    let (accepted, quality, reason) = judge(&scores, rules);
    let finite_or_null = |v: f64| v.is_finite().then_some(v);
    let verdict = Verdict {
        accepted,
        quality,
        reason,
        report: VerdictReport {
            metric_name: Some(scores.kind.kind),
            metric: finite_or_null(metric),
            held_out: beside,
            held_out_examples: Some(sample.picks.len() as u32),
            base_metric: Some(base_metric),
            start_metric: Some(start_metric),
            min_gain: Some(scores.min_gain),
            max_relative_norm: finite_or_null(norm),
            addition_norm: finite_or_null(scores.addition_norm),
            start_norm: Some(scores.start_norm),
            nearest: nearest.map(|n| NearestSubmission {
                submission: n.submission,
                worker: n.worker,
                cosine: finite_or_null(n.cosine),
                norm_ratio: finite_or_null(n.norm_ratio),
            }),
            seconds: None,
        },
        proof_due: false,
    };
    Ok(Measured {
        verdict,
        scored,
        checks_s,
        score_s: began.elapsed().as_secs_f64() - checks_s,
    })
}

/// An earlier submission's update, when this one can be compared with it: it loads, has the
/// job's configuration and fits the model's shapes. One that does not was (or will be) rejected
/// for it, and comparing an honest adapter with a mis-shaped one would fail the honest one's
/// measurement ("could not be scored"): one malformed submission must not sink the others
/// judged in the same pass.
fn comparable_update(
    context: &JobContext,
    dir: &std::path::Path,
    device: &Device,
) -> Option<Update> {
    let adapter = Adapter::load(dir, device).ok()?;
    let work = context.work.as_ref();
    if rules::config_problem(&adapter.config, &work.adapter_config()).is_some() {
        return None;
    }
    if !matches!(shape_problem(work, &adapter), Ok(None)) {
        return None;
    }
    Update::of(&adapter).ok()
}

/// A LoRA pair whose shapes are not `A: (r, in)`, `B: (out, r)` for the base weight it adapts
/// (the job's r), or a module the model lacks.
fn shape_problem(
    work: &dyn crate::work::Work,
    adapter: &Adapter,
) -> Result<Option<String>, NodeError> {
    let r = adapter.config.r;
    let pairs = match adapter.lora_pairs() {
        Ok(p) => p,
        Err(e) => return Ok(Some(format!("malformed adapter: {e}"))),
    };
    if pairs.is_empty() {
        return Ok(Some("the adapter holds no LoRA pair".into()));
    }
    for (module, pair) in pairs {
        let Some(w) = work.base_weight(&module)? else {
            return Ok(Some(format!("module {module} is not in the job's model")));
        };
        let (out, inp) = w.dims2().map_err(shardwork_trainer::Error::from)?;
        if pair.a.dims() != [r, inp] || pair.b.dims() != [out, r] {
            return Ok(Some(format!(
                "module {module}: lora_A is {:?} and lora_B {:?}; the job's r = {r} over a \
                 {out}x{inp} weight needs [{r}, {inp}] and [{out}, {r}]",
                pair.a.dims(),
                pair.b.dims()
            )));
        }
    }
    Ok(None)
}

/// A round's merge as chosen: the adapter, its held-out scores and what the aggregate reports.
struct ChosenMerge {
    adapter: Adapter,
    /// Its held-out scores on the whole set, example by example.
    scores: ExampleScores,
    details: AggregateDetails,
    /// Seconds spent scoring candidates on the held-out set (every one tried).
    score_s: f64,
}

/// The job's merge of the round's accepted `adapters`, or its fallbacks when that does not
/// beat the round's start (`start_metric`): the median merge, then the best accepted adapter
/// alone (the one with the highest quality, which beat the start to be accepted).
fn merge_round_adapters(
    context: &JobContext,
    adapters: &[Adapter],
    weights: &[f64],
    qualities: &[f64],
    clip_factor: f64,
    start_metric: f64,
    device: &Device,
) -> Result<ChosenMerge, NodeError> {
    let metric_kind = context.work.metric();
    let requested = context.validation.aggregation;
    let mut tried = Vec::new();
    let mut score_s = 0.0;
    let mut modes = vec![merge_mode(requested, adapters.len())];
    if modes[0] != MergeMode::Median && adapters.len() >= 3 {
        modes.push(MergeMode::Median);
    }
    for mode in modes {
        let method = merge_method(mode);
        // At a server learning rate of 1 the round's start does not enter the merge; issue 14's
        // bench measured larger steps from it as worse (docs/DESIGN.md, step 6).
        let attempt = merge_adapters(
            None,
            adapters,
            weights,
            mode,
            clip_factor,
            1.0,
            context.work.seed(),
        )
        .and_then(|(merged, report)| {
            let began = Instant::now();
            let scored = context
                .work
                .score_examples(Some(&merged), &context.held_out, device);
            score_s += began.elapsed().as_secs_f64();
            Ok((merged, report, scored?))
        });
        match attempt {
            Ok((merged, report, scores))
                if metric_kind.gain(scores.total().metric, start_metric) > 0.0 =>
            {
                let scored = scores.total();
                return Ok(ChosenMerge {
                    adapter: merged,
                    scores,
                    details: AggregateDetails {
                        merge: Some(method),
                        requested: Some(requested),
                        fallback: (!tried.is_empty()).then_some(tried),
                        held_out: Some(scored.beside()),
                        weights: report.weights,
                        clip_factors: report.clip_factors,
                        max_truncation_error: Some(report.max_relative_error),
                        ..AggregateDetails::default()
                    },
                    score_s,
                });
            }
            Ok((_, _, scores)) => tried.push(format!(
                "{} merge scored {:.4}, not better than the round's start {start_metric:.4}",
                method.name(),
                scores.total().metric
            )),
            Err(e) => tried.push(format!("{} merge failed: {e}", method.name())),
        }
    }
    let best = qualities
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(k, _)| k)
        .ok_or_else(|| NodeError::Content("a ready round without adapters".into()))?;
    // The job's own PEFT configuration, not whatever else the worker's file carried.
    let adapter = Adapter {
        config: AdapterConfig {
            ..context.work.adapter_config()
        },
        tensors: adapters[best].tensors.clone(),
    };
    let began = Instant::now();
    let scores = context
        .work
        .score_examples(Some(&adapter), &context.held_out, device)?;
    score_s += began.elapsed().as_secs_f64();
    let scored = scores.total();
    Ok(ChosenMerge {
        adapter,
        scores,
        score_s,
        details: AggregateDetails {
            merge: Some(MergeMethod::BestAdapter),
            requested: Some(requested),
            fallback: Some(tried),
            held_out: Some(scored.beside()),
            best_adapter: Some(best as u32),
            ..AggregateDetails::default()
        },
    })
}

/// The trainer's merge for the job's aggregation over `k` adapters. A trimmed mean drops a fifth
/// of the values at each end (at least one); with too few adapters to drop any, it is the
/// median.
fn merge_mode(aggregation: Aggregation, k: usize) -> MergeMode {
    match aggregation {
        Aggregation::Exact => MergeMode::Exact,
        Aggregation::Median => MergeMode::Median,
        Aggregation::TrimmedMean => {
            let trim = (k / 5).max(1);
            if 2 * trim < k {
                MergeMode::TrimmedMean { trim }
            } else {
                MergeMode::Median
            }
        }
    }
}

/// The protocol's name for what the trainer's merge `mode` did.
fn merge_method(mode: MergeMode) -> MergeMethod {
    match mode {
        MergeMode::Exact => MergeMethod::Exact,
        MergeMode::Naive => MergeMethod::Naive,
        MergeMode::Median => MergeMethod::Median,
        MergeMode::TrimmedMean { .. } => MergeMethod::TrimmedMean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_mean_of_too_few_adapters_is_their_median() {
        assert_eq!(merge_mode(Aggregation::TrimmedMean, 2), MergeMode::Median);
        assert_eq!(
            merge_mode(Aggregation::TrimmedMean, 3),
            MergeMode::TrimmedMean { trim: 1 }
        );
        assert_eq!(
            merge_mode(Aggregation::TrimmedMean, 10),
            MergeMode::TrimmedMean { trim: 2 }
        );
        assert_eq!(merge_mode(Aggregation::Exact, 1), MergeMode::Exact);
    }
}
