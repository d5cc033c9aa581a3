//! Proof of training, checked: every submission carries its run's trace
//! ([`TRACE_FILE`]: each step's loss and the optimiser's state at the boundaries of
//! [`TRACE_SEGMENTS`] stretches of steps), and the validator trains one stretch of it again,
//! drawn from the submission id, from the state the trace gives for the stretch's start (the
//! round's start for the first), then compares where the replay ends with where the trace (or,
//! for the last stretch, the adapter) says the run went, and the replay's losses with the
//! trace's. A `validation.spot_check` share of submissions has every stretch replayed: the
//! whole run checked, at the cost of training the task again. A trace cut into the four
//! stretches of workers built before the count went to eight is replayed as four
//! ([`ACCEPTED_TRACE_SEGMENTS`]): an honest worker mid-upgrade keeps its pay and its bond.
//!
//! Every scored submission is replayed, rejected or not, so that failing a rule never shelters
//! a forgery from forfeiting the job. The replay runs after the verdict, off the round's
//! critical path (docs/decisions/0042); the job's payout waits for it. It pauses between steps
//! for the verdicts and merges that come in while it runs ([`super::gate`]).
//!
//! Why it catches lazy work without training every task again: a worker that did less than a
//! stretch's worth of the steps cannot say where any stretch ends, so whichever is drawn
//! fails; one that skipped a single stretch of `k` is caught with probability `1/k` per task.
//! Why and the measured tolerances: docs/decisions/0033-proof-of-training-by-stretch-replay.md.

use std::path::Path;
use std::sync::Arc;

use shardwork_client::{PendingValidation, StretchReplay};
use shardwork_core::protocol::ShardManifest;
use shardwork_core::protocol::submission::{ACCEPTED_TRACE_SEGMENTS, TRACE_FILE, TRACE_SEGMENTS};
use shardwork_trainer::peft::Adapter;
use shardwork_trainer::train::trace::{Divergence, Span, TrainTrace, boundaries, loss_gap};

use super::ValidatorNode;
use super::context::JobContext;
use super::gate::StepGate;
use crate::NodeError;
use crate::content::fetch_bundle;

/// A replayed stretch passes when its update points where the claimed one does (cosine at
/// least this) ...
pub const REPLAY_COSINE: f64 = 0.98;
/// ... with the same size, within this share ...
pub const REPLAY_NORM_TOLERANCE: f64 = 0.1;
/// ... and every step's loss within this share of the replay's. Training is deterministic
/// given its start, data order and dropout positions: an honest stretch replayed on the
/// machine that trained it matches to the last bit (cosine 1, ratio 1, loss gap 0, in the
/// demo and the tests); the margins absorb another thread count's summation order.
pub const REPLAY_LOSS_TOLERANCE: f64 = 0.02;

/// What replaying one stretch measured.
#[derive(Debug, Clone, Copy)]
pub struct StretchCheck {
    /// Which stretch, from 0.
    pub index: usize,
    /// Its first and last step (the steps `from + 1 ..= until`).
    pub from: usize,
    /// See `from`.
    pub until: usize,
    /// How the claimed end compares with the replayed one.
    pub divergence: Divergence,
    /// The largest relative gap between the claimed and the replayed losses.
    pub loss_gap: f64,
    /// How long the replay took.
    pub seconds: f64,
}

impl StretchCheck {
    /// Why the claimed stretch is not what training gives, if it is not.
    pub fn mismatch(&self) -> Option<String> {
        let d = self.divergence;
        let matches = d.cosine >= REPLAY_COSINE
            && (d.norm_ratio - 1.0).abs() <= REPLAY_NORM_TOLERANCE
            && self.loss_gap <= REPLAY_LOSS_TOLERANCE;
        (!matches).then(|| {
            format!(
                "proof of training: steps {}..={} (stretch {} of the run) trained again from the \
                 trace's state at step {} do not end where the submission says (update cosine \
                 {:.4}, norm ratio {:.3}, largest loss gap {:.2}%; an honest run gives at least \
                 {REPLAY_COSINE}, 1 ± {REPLAY_NORM_TOLERANCE} and {:.0}%): the work was not done \
                 as asked",
                self.from + 1,
                self.until,
                self.index + 1,
                self.from,
                d.cosine,
                d.norm_ratio,
                100.0 * self.loss_gap,
                100.0 * REPLAY_LOSS_TOLERANCE,
            )
        })
    }

    /// The check as the API records it.
    pub fn replay(&self) -> StretchReplay {
        let finite = |x: f64| x.is_finite().then_some(x);
        StretchReplay {
            stretch: self.index as u32,
            steps: [self.from as u64 + 1, self.until as u64],
            cosine: finite(self.divergence.cosine),
            norm_ratio: finite(self.divergence.norm_ratio),
            loss_gap: finite(self.loss_gap),
            seconds: self.seconds,
        }
    }
}

/// The outcome of checking a submission's proof of training.
pub struct Proof {
    /// The stretches replayed, in the order they were.
    pub checks: Vec<StretchCheck>,
    /// Why the proof is missing, malformed or does not replay (the submission's rejection);
    /// `None` when every replayed stretch matched.
    pub failure: Option<String>,
}

impl Proof {
    fn failed(reason: String, checks: Vec<StretchCheck>) -> Proof {
        Proof {
            checks,
            failure: Some(reason),
        }
    }
}

/// Whether submission `id` has its whole run replayed at `fraction`. The id is drawn by the API
/// when the worker submits (so no worker can aim for or away from a check); its UUIDv7 bits
/// (time, a counter, random bits) are mixed into a uniform number in [0, 1) and compared.
pub fn fully_replayed(id: uuid::Uuid, fraction: f64) -> bool {
    (uniform(id, 0) as f64 / (1u64 << 53) as f64) < fraction
}

/// Whether submission `id`'s proof of training is checked at all, at the job's proof rate
/// (`validation.proof_rate`, decisions/0044): drawn like [`fully_replayed`], independently
/// of it and of which stretch is replayed.
pub fn proof_sampled(id: uuid::Uuid, rate: f64) -> bool {
    (uniform(id, 2) as f64 / (1u64 << 53) as f64) < rate
}

/// The stretches of `stretches` to replay for submission `id`: all of them when it is drawn
/// for a full check at `fraction`, else one drawn from the id, independently of that draw.
pub fn stretches_to_replay(id: uuid::Uuid, fraction: f64, stretches: usize) -> Vec<usize> {
    if stretches == 0 {
        return Vec::new();
    }
    if fully_replayed(id, fraction) {
        return (0..stretches).collect();
    }
    vec![(uniform(id, 1) % stretches as u64) as usize]
}

/// 53 uniform bits from `id`, one independent draw per `salt`.
fn uniform(id: uuid::Uuid, salt: u64) -> u64 {
    // SplitMix64's finaliser: every input bit moves every output bit.
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let (hi, lo) = id.as_u64_pair();
    mix(hi ^ mix(lo ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))) >> 11
}

/// How `trace` cuts a run of `total` steps, when it is shaped as an honest whole run leaves it:
/// every step's loss, and a state at each boundary between stretches, for one of the
/// [`ACCEPTED_TRACE_SEGMENTS`] (this release's count first). Returns the count and the
/// boundaries (0 and `total` included); otherwise what is wrong, named against this release's
/// shape.
fn trace_shape(trace: &TrainTrace, total: usize) -> Result<(usize, Vec<usize>), String> {
    if trace.total_steps != total || trace.first_step != 0 || trace.losses.len() != total {
        return Err(format!(
            "the trace covers {} steps from step {} ({} losses), the task's run takes {total}",
            trace.total_steps,
            trace.first_step,
            trace.losses.len()
        ));
    }
    let kept: Vec<usize> = trace.checkpoints.iter().map(|c| c.state.step).collect();
    let inner = |bounds: &[usize]| bounds[1..bounds.len() - 1].to_vec();
    ACCEPTED_TRACE_SEGMENTS
        .iter()
        .map(|&segments| (segments, boundaries(total, segments)))
        .find(|(_, bounds)| inner(bounds) == kept)
        .ok_or_else(|| {
            let asked = inner(&boundaries(total, TRACE_SEGMENTS));
            format!("the trace keeps the states of steps {kept:?}, a run of {total} steps keeps {asked:?}")
        })
}

impl ValidatorNode {
    /// Replays the stretches of `pending`'s run drawn for it (see [`stretches_to_replay`]) and
    /// compares each with the submission's trace, read from `submitted_dir` beside its adapter.
    /// `Err` only for what is not the submission's fault (the store, the round's start, the
    /// shard); a missing, malformed or mismatched proof is a [`Proof`] with its `failure`.
    pub(super) async fn check_proof(
        &self,
        context: &Arc<JobContext>,
        pending: &PendingValidation,
        submitted_dir: &Path,
        gate: Arc<StepGate>,
    ) -> Result<Proof, NodeError> {
        let failed = |reason: String| Proof::failed(reason, Vec::new());
        let trace_path = submitted_dir.join(TRACE_FILE);
        if !trace_path.exists() {
            return Ok(failed(format!(
                "proof of training: the adapter's bundle has no {TRACE_FILE}"
            )));
        }
        let trace = match TrainTrace::load(&trace_path, &candle_core::Device::Cpu) {
            Ok(trace) => trace,
            Err(e) => return Ok(failed(format!("proof of training: {e}"))),
        };
        let dir = self.work_dir.scratch("replay-")?;
        let shard_path = dir.path().join("shard.jsonl");
        self.fetch_shard(pending, &shard_path).await?;
        let start_dir = match &pending.previous_adapter_cid {
            Some(cid) => {
                let d = dir.path().join("start");
                fetch_bundle(
                    self.blobs.as_ref(),
                    cid,
                    &d,
                    Some(&context.start_seal(pending.round)),
                )
                .await?;
                Some(d)
            }
            None => None,
        };
        let (context, device, submitted_dir) = (
            context.clone(),
            self.device.clone(),
            submitted_dir.to_path_buf(),
        );
        let (submission, fraction) = (pending.submission_id, context.validation.spot_check());
        // The round the API leased the task in (numbered from 1), never the worker's word: a
        // job-wide schedule's rates depend on it.
        let round = u32::try_from(pending.round).unwrap_or(1);
        tokio::task::spawn_blocking(move || -> Result<Proof, NodeError> {
            let work = &context.work;
            let total = work.total_steps(&shard_path)?;
            let (segments, bounds) = match trace_shape(&trace, total) {
                Ok(shape) => shape,
                Err(reason) => return Ok(failed(format!("proof of training: {reason}"))),
            };
            let start = start_dir.map(|d| Adapter::load(&d, &device)).transpose()?;
            let submitted = Adapter::load(&submitted_dir, &device)?;
            let mut checks = Vec::new();
            for index in stretches_to_replay(submission, fraction, bounds.len() - 1) {
                let (from, until) = (bounds[index], bounds[index + 1]);
                let (started, waited) = (std::time::Instant::now(), gate.waited());
                tracing::info!(%submission, from, until, "proof of training: replaying a stretch");
                let resume = (index > 0).then(|| Box::new(trace.checkpoints[index - 1].clone()));
                let span = Span::Segment {
                    index,
                    segments,
                    from: resume,
                };
                let replay = match work.train(
                    start.as_ref(),
                    &shard_path,
                    &device,
                    round,
                    span,
                    &mut |_| gate.pass(),
                ) {
                    Ok(replay) => replay,
                    // The trace's own state did not fit the job's model: the worker's fault.
                    Err(e @ shardwork_trainer::Error::Mismatch(_)) => {
                        return Ok(Proof::failed(
                            format!("proof of training: the state at step {from}: {e}"),
                            checks,
                        ));
                    }
                    Err(e) => return Err(e.into()),
                };
                let [replay_start, replay_end] = &replay.trace.checkpoints[..] else {
                    return Err(NodeError::Io(
                        "a replayed stretch kept no start and end".into(),
                    ));
                };
                let claimed_end = match trace.at(until) {
                    Some(c) => &c.state.values,
                    None => &submitted.tensors,
                };
                let divergence = match Divergence::measure(
                    &replay_start.state.values,
                    claimed_end,
                    &replay_end.state.values,
                ) {
                    Ok(d) => d,
                    Err(e) => {
                        return Ok(Proof::failed(
                            format!("proof of training: the state at step {until}: {e}"),
                            checks,
                        ));
                    }
                };
                let claimed_losses = trace.losses_of(from, until).unwrap_or(&[]);
                let check = StretchCheck {
                    index,
                    from,
                    until,
                    divergence,
                    loss_gap: loss_gap(claimed_losses, &replay.trace.losses),
                    // Its compute: the time it stood aside for verdicts and merges is not.
                    seconds: (started.elapsed().saturating_sub(gate.waited() - waited))
                        .as_secs_f64(),
                };
                let mismatch = check.mismatch();
                checks.push(check);
                if let Some(reason) = mismatch {
                    return Ok(Proof::failed(reason, checks));
                }
            }
            Ok(Proof {
                checks,
                failure: None,
            })
        })
        .await
        .map_err(|e| NodeError::Io(format!("proof of training: {e}")))?
    }

    /// Writes the shard `pending`'s task trained on, from the job's manifest, to `path`.
    async fn fetch_shard(&self, pending: &PendingValidation, path: &Path) -> Result<(), NodeError> {
        let manifest_cid = pending.manifest_cid.as_deref().ok_or_else(|| {
            NodeError::Content(format!("job {} has no shard manifest", pending.job_id))
        })?;
        let manifest: ShardManifest =
            serde_json::from_slice(&self.blobs.get(manifest_cid, 1 << 20).await?)
                .map_err(|e| NodeError::Content(format!("shard manifest {manifest_cid}: {e}")))?;
        let shard = manifest
            .shards
            .get(pending.shard_index as usize)
            .ok_or_else(|| {
                NodeError::Content(format!(
                    "the manifest of job {} has no shard {}",
                    pending.job_id, pending.shard_index
                ))
            })?;
        let bytes = self
            .blobs
            .get(&shard.cid.to_string(), crate::content::MAX_FILE_BYTES)
            .await?;
        std::fs::write(path, &bytes).map_err(|e| NodeError::Io(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_replays_take_the_asked_share_and_single_stretches_spread_evenly() {
        let ids: Vec<uuid::Uuid> = (0..4000).map(|_| uuid::Uuid::now_v7()).collect();
        let share =
            |f: f64| ids.iter().filter(|id| fully_replayed(**id, f)).count() as f64 / 4000.0;
        assert_eq!(share(0.0), 0.0);
        assert_eq!(share(1.0), 1.0);
        assert!((share(0.1) - 0.1).abs() < 0.025, "{}", share(0.1));
        let mut counts = [0usize; 4];
        for id in &ids {
            let picked = stretches_to_replay(*id, 0.0, 4);
            assert_eq!(picked.len(), 1);
            counts[picked[0]] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(stretches_to_replay(ids[0], 1.0, 4), vec![0, 1, 2, 3]);
        assert!(stretches_to_replay(ids[0], 1.0, 0).is_empty());
    }

    #[test]
    fn proofs_are_sampled_at_the_rate_independently_of_the_full_replays() {
        let ids: Vec<uuid::Uuid> = (0..4000).map(|_| uuid::Uuid::now_v7()).collect();
        let sampled = |rate: f64| ids.iter().filter(|id| proof_sampled(**id, rate)).count();
        assert_eq!(sampled(1.0), 4000);
        assert_eq!(sampled(0.0), 0);
        let quarter = sampled(0.25) as f64 / 4000.0;
        assert!((quarter - 0.25).abs() < 0.03, "{quarter}");
        // Of the sampled ones, a tenth still has its whole run replayed.
        let both = ids
            .iter()
            .filter(|id| proof_sampled(**id, 0.25) && fully_replayed(**id, 0.1))
            .count() as f64
            / sampled(0.25) as f64;
        assert!((both - 0.1).abs() < 0.04, "{both}");
    }

    #[test]
    fn a_stretch_that_differs_in_direction_size_or_losses_is_a_mismatch() {
        let check = |cosine, norm_ratio, loss_gap| StretchCheck {
            index: 1,
            from: 2,
            until: 4,
            divergence: Divergence { cosine, norm_ratio },
            loss_gap,
            seconds: 1.0,
        };
        assert!(check(1.0, 1.0, 0.0).mismatch().is_none());
        assert!(check(0.995, 1.05, 0.01).mismatch().is_none());
        let why = check(0.9, 1.0, 0.0).mismatch().unwrap();
        assert!(
            why.contains("steps 3..=4") && why.contains("cosine 0.9000"),
            "{why}"
        );
        assert!(
            check(0.99, 0.3, 0.0).mismatch().is_some(),
            "a fraction of the steps"
        );
        assert!(check(1.0, 1.0, 0.2).mismatch().is_some(), "other losses");
        assert!(check(f64::NAN, 1.0, 0.0).mismatch().is_some());
        assert!(check(1.0, 1.0, f64::INFINITY).mismatch().is_some());
    }

    /// A trace of a run of `total` steps keeping the states of `kept`.
    fn trace_keeping(total: usize, kept: &[usize]) -> TrainTrace {
        use shardwork_trainer::optim::OptimState;
        use shardwork_trainer::train::trace::Checkpoint;
        TrainTrace {
            total_steps: total,
            first_step: 0,
            losses: vec![1.0; total],
            checkpoints: kept
                .iter()
                .map(|&step| Checkpoint {
                    state: OptimState {
                        step,
                        ..OptimState::default()
                    },
                    dropout: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_trace_not_shaped_like_the_tasks_run_is_named() {
        let why = trace_shape(&trace_keeping(10, &[]), 10).unwrap_err();
        let asked = &boundaries(10, TRACE_SEGMENTS)[1..TRACE_SEGMENTS];
        assert!(why.contains(&format!("{asked:?}")), "{why}");
        assert!(
            trace_shape(&trace_keeping(10, &[]), 100)
                .unwrap_err()
                .contains("takes 100")
        );
        // Neither eight stretches nor four: two.
        assert!(trace_shape(&trace_keeping(20, &[10]), 20).is_err());
    }

    #[test]
    fn this_releases_stretches_and_the_four_of_older_workers_are_both_accepted() {
        let eight = boundaries(20, TRACE_SEGMENTS);
        let (segments, bounds) =
            trace_shape(&trace_keeping(20, &eight[1..TRACE_SEGMENTS]), 20).unwrap();
        assert_eq!((segments, &bounds), (TRACE_SEGMENTS, &eight));
        // A worker built before the count went to eight kept the states of steps 5, 10, 15:
        // its stretches are replayed as four.
        let (segments, bounds) = trace_shape(&trace_keeping(20, &[5, 10, 15]), 20).unwrap();
        assert_eq!((segments, bounds), (4, vec![0, 5, 10, 15, 20]));
    }
}
