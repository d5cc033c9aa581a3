//! The worker service: take a task from the queue, claim its lease through the API and
//! acknowledge the message, then fetch and verify its inputs, train, heartbeat with progress
//! while training, upload the adapter and its metrics, and submit.
//!
//! The message is settled as soon as the claim succeeds because from then on the lease in the
//! API's database is the task's only source of truth: holding the delivery while training
//! would meet the broker's consumer timeout (RabbitMQ closes the channel after 30 minutes by
//! default and redelivers, counting towards the dead-letter limit; the table queue redelivers
//! after its visibility timeout), while an LLM task can train for hours. A worker that dies
//! mid-task costs only time: its lease stops being extended, expires, and the API's reaper
//! requeues the task (a new message) for another worker. A message for a task that is done,
//! failed or leased elsewhere is dropped after the API says so (409).
//!
//! A task has one path through the worker. Where a worker could do otherwise (the work it
//! trains with, how it comes by the adapter it hands in, what follows its submission), the
//! worker asks its [`Conduct`]; [`Honest`], what every operator's worker runs, does as the
//! task asks at each.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use candle_core::Device;
use shardwork_core::protocol::submission::{TRACE_FILE, TRACE_SEGMENTS};
use shardwork_core::protocol::{
    ContentId, JobSpec, PROTOCOL_VERSION, Submission, SubmissionMetrics, TASK_QUEUE, TaskMessage,
};
use shardwork_core::queue::{Delivery, TaskQueue};
use tokio::sync::watch;
use tracing::Instrument;

use crate::NodeError;
use crate::content::{Blobs, fetch_bundle, put_bundle};
use crate::models::WorkDir;
use crate::work::{self, Work};
use shardwork_client::{ApiClient, Lease, Progress};
use shardwork_core::store::keys::{BundleSeal, Sealed};
use shardwork_core::store::seal::SealingKey;
use shardwork_trainer::peft::Adapter;
use shardwork_trainer::train::trace::Span;

/// When a task refused to this worker becomes visible again.
const REFUSED_REDELIVERY: Duration = Duration::from_millis(500);
/// How long a worker stays off the queue after refusing a task.
const REFUSED_BACKOFF: Duration = Duration::from_secs(2);

/// The worker service: takes tasks from the queue, trains them and submits the adapters.
pub struct WorkerNode {
    /// The worker's own API client: registration, leases, heartbeats and submissions.
    pub api: Arc<ApiClient>,
    /// Where inputs are fetched from and adapters and metrics stored.
    pub blobs: Arc<dyn Blobs>,
    /// The task queue this worker consumes.
    pub queue: Arc<dyn TaskQueue>,
    /// Where models are trained.
    pub device: Device,
    /// Models are fetched here once per CID; task folders are made and removed under it.
    pub work_dir: WorkDir,
    /// How often a running task extends its lease.
    pub heartbeat: Duration,
    /// How it goes about a task: [`Honest`] for every operator's worker.
    pub conduct: Arc<dyn Conduct>,
    /// Training memory to register at most, MiB; `None` registers all that is measured at
    /// start ([`crate::capacity::measure`]).
    pub memory_limit_mb: Option<u64>,
    /// The slot it takes to train, one task at a time ([`TrainingSlot`]): shared by workers
    /// that share one process's cores, a slot of its own for a worker that has them to itself.
    pub training_slot: TrainingSlot,
}

/// The turn that in-process workers sharing one machine's cores take to train: one task at a
/// time, in the order they asked, each leased task waiting for it (its lease extended meanwhile).
///
/// Those workers train on one thread pool. Trained together, three tasks share the cores to the
/// end and hand in at the same moment, so every verdict of the round queues after the last
/// of them; trained in turn, the same work hands in one task a third of the way in, the next
/// two thirds in, and the validator judges the first ones while the last trains: the round
/// waits after its last submission for that one's verdict and the merge only. Whatever runs
/// alone also runs without the others' activations in memory and caches. A worker that only
/// copies (the copycat adversary) never asks for the slot.
#[derive(Clone)]
pub struct TrainingSlot(Arc<tokio::sync::Semaphore>);

impl Default for TrainingSlot {
    fn default() -> TrainingSlot {
        TrainingSlot::new()
    }
}

impl TrainingSlot {
    /// One slot, for every worker given a clone of it.
    pub fn new() -> TrainingSlot {
        TrainingSlot(Arc::new(tokio::sync::Semaphore::new(1)))
    }

    /// Waits for the slot; it is held until the permit is dropped.
    async fn take(&self) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        self.0
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| NodeError::Io(format!("training slot: {e}")))
    }
}

/// What one delivery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The task was claimed (its message acknowledged), trained and its adapter submitted.
    Submitted {
        /// The task submitted.
        task: uuid::Uuid,
    },
    /// The worker was stopping: the task was given back unfinished.
    Released {
        /// The task given back.
        task: uuid::Uuid,
    },
    /// Done, failed or held elsewhere: the message was dropped.
    Dropped {
        /// The API's answer, or why the message could not be decoded.
        reason: String,
    },
}

impl WorkerNode {
    /// Registers and consumes tasks until `shutdown` turns true; a task in progress then is
    /// given back to the API (released, its attempt returned) before the loop returns.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let capabilities = crate::capacity::measure(&self.device, self.memory_limit_mb)?;
        tracing::info!(%capabilities, "registering");
        self.api.register(capabilities).await?;
        let mut consumer = self.queue.consume(TASK_QUEUE).await?;
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let next = tokio::select! {
                next = consumer.next(Duration::from_millis(500)) => next?,
                _ = shutdown.changed() => continue,
            };
            let Some(delivery) = next else { continue };
            let key = delivery.idempotency_key.clone();
            match self.handle(delivery, &mut shutdown).await {
                Ok(outcome) => tracing::info!(%key, ?outcome, "task message handled"),
                Err(e) => tracing::warn!(%key, error = %e, "task not trained"),
            }
        }
    }

    /// Handles one delivery end to end and settles it; a task in progress when `shutdown`
    /// turns true is given back ([`Handled::Released`]).
    async fn handle(
        &self,
        delivery: Delivery,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Handled, NodeError> {
        let message: TaskMessage = match TaskMessage::decode(&delivery.payload) {
            Ok(m) => m,
            Err(e) => {
                delivery.reject().await?;
                return Ok(Handled::Dropped {
                    reason: format!("undecodable task message: {e}"),
                });
            }
        };
        let lease = match self.api.claim(message.task_id).await {
            Ok(lease) => lease,
            Err(e) if e.is_conflict() || e.is_not_found() => {
                delivery.ack().await?;
                return Ok(Handled::Dropped {
                    reason: e.to_string(),
                });
            }
            // Not for this worker (reputation, or its earlier adapter was rejected): back on
            // the queue for the others, uncounted (refusals must not dead-letter a task another
            // worker would take), and this worker steps back from the queue for a moment so an
            // idle worker, whose polling has slowed, gets it first.
            Err(e) if e.is_forbidden() => {
                delivery.release(Some(REFUSED_REDELIVERY)).await?;
                tokio::time::sleep(REFUSED_BACKOFF).await;
                return Ok(Handled::Dropped {
                    reason: e.to_string(),
                });
            }
            Err(e) => {
                delivery.nack_requeue(Some(Duration::from_secs(5))).await?;
                return Err(e.into());
            }
        };
        // The lease is ours: settle the message now (see the module's note). Should the ack
        // not reach the broker, the message comes back and its next claim is refused (409).
        if let Err(e) = delivery.ack().await {
            tracing::warn!(task = %lease.task_id, error = %e, "claimed, but the ack was lost; training anyway");
        }
        let span = tracing::info_span!("task", task = %lease.task_id, job = %lease.task.job_id,
            round = lease.task.round, shard = lease.task.shard_index);
        // Instrumented, not entered: a span guard held across an await leaks into whatever
        // else runs on the thread (other workers' and the validator's lines came out nested
        // in this task's span).
        async {
            let finished = tokio::select! {
                finished = self.run_task(&lease) => Some(finished),
                _ = shutdown.wait_for(|stop| *stop) => None,
            };
            match finished {
                // Stopping: the training is left behind (its thread ends with the process) and
                // the task goes back at once, its attempt returned, rather than holding the
                // process for as long as the task trains or leaving it to the lease's expiry,
                // which would count an attempt.
                None => {
                    match self.api.release(lease.task_id, lease.lease_token).await {
                        Ok((status, attempt_returned)) => tracing::info!(
                            %status,
                            attempt_returned,
                            "stopping: task given back"
                        ),
                        Err(e) => tracing::warn!(
                            error = %e,
                            "stopping: the task could not be given back; its lease will expire"
                        ),
                    }
                    Ok(Handled::Released {
                        task: lease.task_id,
                    })
                }
                Some(Ok(())) => Ok(Handled::Submitted {
                    task: lease.task_id,
                }),
                Some(Err(NodeError::Api(e))) if e.is_unavailable() => {
                    // The API went away mid-task (a restart, a deploy): not this worker's
                    // failure nor the job's. Given back as a stopping worker gives it (its
                    // attempt returned, the worker free to take it again), not abandoned, which
                    // would bar this worker from the task; where it is the only worker left,
                    // that stalled the job until its deadline.
                    match self.api.release(lease.task_id, lease.lease_token).await {
                        Ok((status, returned)) => tracing::warn!(
                            error = %e, %status, attempt_returned = returned,
                            "the API was unavailable: task given back"
                        ),
                        Err(report) => tracing::warn!(
                            error = %e, %report,
                            "the API was unavailable and the task could not be given back; its lease will expire"
                        ),
                    }
                    Err(NodeError::Api(e))
                }
                Some(Err(e)) => {
                    // Give the task back with the reason: it is requeued at once for another
                    // worker (or failed, with this reason, once its attempts are used up).
                    // Should the API not hear it, the lease expires and the reaper does the
                    // same, later.
                    match self
                        .api
                        .abandon(lease.task_id, lease.lease_token, &e.to_string())
                        .await
                    {
                        Ok(status) => tracing::warn!(error = %e, %status, "task abandoned"),
                        Err(report) => {
                            tracing::warn!(error = %e, %report, "task failed; its lease will expire")
                        }
                    }
                    Err(e)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// The sealed adapter `cid` the task names (none: `None`) fetched into `dir` and opened
    /// with the lease's `seal` for it; `what` names it when the lease gives no key.
    async fn fetch_sealed_adapter(
        &self,
        lease: &Lease,
        cid: Option<&ContentId>,
        seal: Option<&BundleSeal>,
        dir: &std::path::Path,
        what: &str,
    ) -> Result<Option<std::path::PathBuf>, NodeError> {
        let Some(cid) = cid else {
            return Ok(None);
        };
        let seal = seal.ok_or_else(|| {
            NodeError::Content(format!(
                "the lease of task {} gives no key to {what} {cid}",
                lease.task_id
            ))
        })?;
        fetch_bundle(self.blobs.as_ref(), &cid.to_string(), dir, Some(seal)).await?;
        Ok(Some(dir.to_owned()))
    }

    async fn run_task(&self, lease: &Lease) -> Result<(), NodeError> {
        let task = &lease.task;
        let dir = self.work_dir.scratch("task-")?;
        let spec_bytes = self
            .blobs
            .get(&task.job_spec_cid.to_string(), 1 << 20)
            .await?;
        let spec: JobSpec = serde_json::from_slice(&spec_bytes)
            .map_err(|e| NodeError::Content(format!("job spec {}: {e}", task.job_spec_cid)))?;
        let model_dir = self
            .work_dir
            .model(self.blobs.as_ref(), &task.base_model_cid)
            .await?;
        let shard_path = dir.path().join("shard.jsonl");
        let shard = self
            .blobs
            .get(&task.shard_cid.to_string(), crate::content::MAX_FILE_BYTES)
            .await?;
        std::fs::write(&shard_path, &shard).map_err(|e| NodeError::Io(e.to_string()))?;
        let seals = LeaseSeals::of(lease, &self.api.address().to_string())?;
        let previous = self
            .fetch_sealed_adapter(
                lease,
                task.previous_adapter_cid.as_ref(),
                seals.start.as_ref(),
                &dir.path().join("previous"),
                "its round's start",
            )
            .await?;
        // A preference job continuing from an adapter is judged against that adapter.
        let reference = self
            .fetch_sealed_adapter(
                lease,
                task.reference_adapter_cid.as_ref(),
                seals.reference.as_ref(),
                &dir.path().join("reference"),
                "its reference policy",
            )
            .await?;

        let files = Arc::new(TaskFiles {
            task: task.clone(),
            shard: shard_path,
            start: previous,
            out: dir.path().join("adapter"),
        });
        let steps = Steps::default();
        let trainer_steps = steps.clone();
        let device = self.device.clone();
        // The run's wall time counts from when it may train: a turn waited for is not its work.
        let started = Arc::new(std::sync::Mutex::new(Instant::now()));
        let training: Training = {
            let (files, conduct) = (files.clone(), self.conduct.clone());
            let (slot, started) = (self.training_slot.clone(), started.clone());
            Box::pin(async move {
                let turn = slot.take().await?;
                if let Ok(mut started) = started.lock() {
                    *started = Instant::now();
                }
                let task_id = files.task.task_id;
                tracing::info!(task = %task_id, "training started");
                let trained = tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
                    let reference = match reference {
                        Some(dir) => Some(Adapter::load(&dir, &device)?),
                        None => None,
                    };
                    let work = conduct.work(work::load(spec, &model_dir, reference, &device)?);
                    let start = match &files.start {
                        Some(p) => Some(Adapter::load(p, &device)?),
                        None => None,
                    };
                    let progress = &mut |p: &shardwork_trainer::train::Progress| {
                        if let Ok(mut steps) = trainer_steps.lock() {
                            steps.push(*p);
                        }
                    };
                    let span = Span::Whole {
                        segments: TRACE_SEGMENTS,
                    };
                    let round = files.task.round;
                    let trained =
                        work.train(start.as_ref(), &files.shard, &device, round, span, progress)?;
                    trained.adapter.save(&files.out)?;
                    trained.trace.save(&files.out.join(TRACE_FILE))?;
                    Ok(Claimed::from(&trained))
                });
                let trained = trained
                    .await
                    .map_err(|e| NodeError::Io(format!("training thread: {e}")));
                // Said before the turn passes on, so a log reads each run's start and end in
                // the order the slot gave them.
                tracing::info!(task = %task_id, "training ended");
                drop(turn);
                trained?
            })
        };
        let handing_in = {
            let (files, conduct) = (files.clone(), self.conduct.clone());
            tokio::spawn(async move { conduct.hand_in(&files, training).await })
        };
        let report = self.heartbeat_until(lease, handing_in, steps).await?;
        let samples = report.records;

        // The proof of training goes with the adapter where the hand-in holds one.
        let mut bundle = vec!["adapter_config.json", "adapter_model.safetensors"];
        if files.out.join(TRACE_FILE).exists() {
            bundle.push(TRACE_FILE);
        }
        let adapter_cid = put_bundle(
            self.blobs.as_ref(),
            "adapter",
            &files.out,
            &bundle,
            Some(&seals.submission),
        )
        .await?;
        let metrics = SubmissionMetrics {
            steps: report.steps as u64,
            final_train_loss: f64::from(report.final_loss),
            tokens_per_second: report.tokens_per_sec,
            wall_seconds: started
                .lock()
                .map_or(0.0, |started| started.elapsed().as_secs_f64()),
        };
        let metrics_json =
            serde_json::to_vec_pretty(&metrics).map_err(|e| NodeError::Content(e.to_string()))?;
        let metrics_cid = self
            .blobs
            .put(Bytes::from(seals.submission.seal_file(
                shardwork_core::protocol::submission::METRICS_FILE,
                &metrics_json,
            )))
            .await?;
        let parse = |cid: &str| {
            cid.parse::<ContentId>()
                .map_err(|e| NodeError::Content(format!("store answered a bad CID {cid}: {e}")))
        };
        let submission = Submission {
            version: PROTOCOL_VERSION,
            task_id: lease.task_id,
            lease_token: lease.lease_token,
            adapter_cid: parse(&adapter_cid)?,
            metrics_cid: parse(&metrics_cid)?,
            samples: samples as u64,
        };
        self.api.submit(&submission).await?;
        self.conduct.submitted(&files)?;
        tracing::info!(%adapter_cid, steps = report.steps, loss = report.final_loss, "adapter submitted");
        Ok(())
    }

    /// Waits for training, extending the lease with the latest progress every heartbeat; once
    /// training ends, reports the steps trained since the last heartbeat too (at most
    /// [`FINAL_POINTS`] of them, the last step always).
    ///
    /// A run shorter than a heartbeat (a small shard trains in a second or two) would otherwise
    /// leave no point of its curve at all, and a longer one a curve that stops up to a heartbeat
    /// before its final loss: the requester's page would show the task as not reporting.
    async fn heartbeat_until<T>(
        &self,
        lease: &Lease,
        training: tokio::task::JoinHandle<Result<T, NodeError>>,
        steps: Steps,
    ) -> Result<T, NodeError> {
        let mut training = training;
        let mut ticker = tokio::time::interval(self.heartbeat);
        ticker.tick().await;
        let mut latest = None;
        let mut sent: Option<Progress> = None;
        loop {
            tokio::select! {
                done = &mut training => {
                    let done = done.map_err(|e| NodeError::Io(format!("training thread: {e}")))?;
                    if done.is_ok() {
                        for report in final_reports(&take(&steps), sent.as_ref()) {
                            if let Err(e) = self.api.extend(lease.task_id, lease.lease_token, &report).await {
                                // The submission says whether the lease still holds; the curve's
                                // last points are not worth failing the work for.
                                tracing::warn!(error = %e, "reporting the run's last steps failed");
                                break;
                            }
                        }
                    }
                    return done;
                }
                _ = ticker.tick() => {
                    if let Some(last) = take(&steps).last() {
                        latest = Some(*last);
                    }
                    let report = report_of(latest);
                    match self.api.extend(lease.task_id, lease.lease_token, &report).await {
                        Ok(()) => sent = Some(report),
                        Err(e) => {
                            tracing::warn!(error = %e, "lease extension failed");
                            if e.is_conflict() {
                                training.abort();
                                return Err(e.into());
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The trainer's steps since the last heartbeat, pushed by the training thread.
type Steps = Arc<std::sync::Mutex<Vec<shardwork_trainer::train::Progress>>>;

/// The most steps reported once training ends, beyond the heartbeats: enough for the shape of
/// a run shorter than a heartbeat on the requester's chart, few enough that the extra lease
/// extensions do not matter.
const FINAL_POINTS: usize = 8;

/// Empties `steps`, returning what it held.
fn take(steps: &Steps) -> Vec<shardwork_trainer::train::Progress> {
    steps
        .lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default()
}

/// The heartbeat for the trainer's latest step (none yet: step 0, no figures).
fn report_of(latest: Option<shardwork_trainer::train::Progress>) -> Progress {
    match latest {
        Some(p) => Progress {
            step: p.step as u64,
            total_steps: p.total_steps.max(p.step) as u64,
            loss: p.loss.is_finite().then_some(f64::from(p.loss)),
            tokens_per_second: p.tokens_per_sec.is_finite().then_some(p.tokens_per_sec),
        },
        None => Progress {
            step: 0,
            total_steps: 1,
            loss: None,
            tokens_per_second: None,
        },
    }
}

/// What to report once training has ended, given the steps trained since the last heartbeat
/// (`sent`, if one went out): the steps after the one it carried, at most [`FINAL_POINTS`] of
/// them, each the last step of an equal stretch, so the run's last step is always among them.
fn final_reports(
    unsent: &[shardwork_trainer::train::Progress],
    sent: Option<&Progress>,
) -> Vec<Progress> {
    let after = sent.map_or(0, |s| s.step);
    let unsent: Vec<_> = unsent
        .iter()
        .filter(|p| sent.is_none() || p.step as u64 > after)
        .collect();
    let n = unsent.len();
    let k = n.min(FINAL_POINTS);
    (1..=k)
        .map(|i| report_of(Some(*unsent[i * n / k - 1])))
        .collect()
}

/// What a worker reports with its submission about the training it did (or claims it did).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claimed {
    /// Records of the shard trained on.
    pub records: usize,
    /// Optimiser steps taken.
    pub steps: usize,
    /// Mean training loss over the last steps.
    pub final_loss: f32,
    /// Training throughput.
    pub tokens_per_sec: f64,
}

impl From<&work::Trained> for Claimed {
    fn from(t: &work::Trained) -> Self {
        Claimed {
            records: t.records,
            steps: t.steps,
            final_loss: t.final_loss,
            tokens_per_sec: t.tokens_per_sec,
        }
    }
}

/// A task's inputs as the worker fetched them, and the folder its hand-in is written to.
#[derive(Debug)]
pub struct TaskFiles {
    /// The task, as its lease gives it.
    pub task: TaskMessage,
    /// The shard's records (JSONL).
    pub shard: PathBuf,
    /// The round's starting adapter, opened; `None` where the round starts from the bare model.
    pub start: Option<PathBuf>,
    /// Where the adapter handed in is written, with its proof of training
    /// ([`TRACE_FILE`]) beside it.
    pub out: PathBuf,
}

/// A task's training on a blocking thread, from the job's work to the hand-in's files: started
/// when first polled, so never run when dropped unpolled.
pub type Training = Pin<Box<dyn Future<Output = Result<Claimed, NodeError>> + Send>>;

/// How a worker goes about a task, at the points where a worker may do otherwise than the
/// task asks. Each method's default does what the task asks; the worker calls them in order
/// on its one path: [`Conduct::work`] and [`Conduct::hand_in`] before the submission,
/// [`Conduct::submitted`] after it.
#[async_trait::async_trait]
pub trait Conduct: Send + Sync {
    /// The work the task is trained with, given the job's own `work`: that work.
    fn work(&self, work: Arc<dyn Work>) -> Arc<dyn Work> {
        work
    }

    /// Writes the task's hand-in into `files.out` and says what it claims of the run: what
    /// `training` trains there.
    async fn hand_in(&self, files: &TaskFiles, training: Training) -> Result<Claimed, NodeError> {
        let _ = files;
        training.await
    }

    /// Told once the adapter in `files.out` has been submitted: nothing more to do.
    fn submitted(&self, files: &TaskFiles) -> Result<(), NodeError> {
        let _ = files;
        Ok(())
    }
}

/// The worker every operator runs: it trains the whole shard it is given and hands in what it
/// trained, with the proof of that training.
#[derive(Debug, Clone, Copy, Default)]
pub struct Honest;

impl Conduct for Honest {}

/// How a lease's adapters are sealed: what the worker hands in, the round's start, and a
/// preference job's reference policy.
struct LeaseSeals {
    submission: BundleSeal,
    start: Option<BundleSeal>,
    reference: Option<BundleSeal>,
}

impl LeaseSeals {
    /// `me` is the worker's address: a submission is sealed to its task and its worker.
    fn of(lease: &Lease, me: &str) -> Result<LeaseSeals, NodeError> {
        let task = &lease.task;
        let key = |hex: &str| {
            hex.parse::<SealingKey>().map_err(|e| {
                NodeError::Content(format!("a key of the lease of task {}: {e}", task.task_id))
            })
        };
        let submission = Sealed::Submission {
            task_id: task.task_id,
            worker: me.to_owned(),
        };
        Ok(LeaseSeals {
            submission: submission.seal_with(task.job_id, key(&lease.keys.submission)?),
            start: match &lease.keys.start {
                Some(hex) => Some(Sealed::start_of(task.round).seal_with(task.job_id, key(hex)?)),
                None => None,
            },
            reference: match &lease.keys.reference {
                Some(hex) => Some(Sealed::JOB_START.seal_with(task.job_id, key(hex)?)),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: usize, total_steps: usize, loss: f32) -> shardwork_trainer::train::Progress {
        shardwork_trainer::train::Progress {
            step,
            total_steps,
            loss,
            lr: 0.01,
            grad_norm: 1.0,
            tokens_per_sec: 900.0,
        }
    }

    #[test]
    fn a_run_shorter_than_a_heartbeat_still_reports_its_shape_and_last_step() {
        // No heartbeat went out while it trained: a few of its steps, spread over the run and
        // ending at its last, are its whole curve.
        let run: Vec<_> = (1..=69).map(|s| step(s, 69, 1.0 / s as f32)).collect();
        let reports = final_reports(&run, None);
        assert_eq!(reports.len(), FINAL_POINTS);
        let steps: Vec<u64> = reports.iter().map(|r| r.step).collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
        let last = reports.last().unwrap();
        assert_eq!((last.step, last.total_steps), (69, 69));
        assert_eq!(last.loss, Some(f64::from(1.0f32 / 69.0)));
        assert_eq!(last.tokens_per_second, Some(900.0));
        // A run of fewer steps than that reports each.
        let short: Vec<_> = (1..=3).map(|s| step(s, 3, 0.5)).collect();
        let steps: Vec<u64> = final_reports(&short, None).iter().map(|r| r.step).collect();
        assert_eq!(steps, [1, 2, 3]);
    }

    #[test]
    fn only_the_steps_after_the_last_heartbeat_are_reported() {
        let heartbeat = report_of(Some(step(8, 12, 0.5)));
        // The run went on after the last heartbeat: its end is reported.
        let tail: Vec<_> = (8..=12).map(|s| step(s, 12, 0.4)).collect();
        let steps: Vec<u64> = final_reports(&tail, Some(&heartbeat))
            .iter()
            .map(|r| r.step)
            .collect();
        assert_eq!(steps, [9, 10, 11, 12]);
        // The last heartbeat already carried the final step: nothing more to send.
        let heartbeat = report_of(Some(step(12, 12, 0.4)));
        assert!(final_reports(&[step(12, 12, 0.4)], Some(&heartbeat)).is_empty());
        // A run that reported no step (a hand-in that trained nothing) sends nothing.
        assert!(final_reports(&[], None).is_empty());
    }
}
