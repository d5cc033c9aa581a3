//! What the validator keeps per job: the job's work (its model), its opened held-out set and
//! the base model's scores, loaded once and kept while the job has work; each round's verdict
//! sample of the held-out set; and the idle-time
//! preparation that loads an open job's context before its first submission arrives.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use candle_core::Device;
use shardwork_core::protocol::{JobSpec, ValidationSpec};
use shardwork_core::store::keys::{BundleSeal, Sealed};
use shardwork_core::store::seal::{self, SealingKey};
use shardwork_trainer::peft::Adapter;
use uuid::Uuid;

use super::sample::verdict_sample;
use super::similarity::Update;
use crate::NodeError;
use crate::content::{Blobs, MAX_FILE_BYTES, fetch_bundle};
use crate::models::WorkDir;
use crate::work::{self, ExampleScores, HeldOut, Work};
use shardwork_client::ApiClient;

/// Jobs whose context is kept ready at most (each holds a model in memory).
pub const MAX_PREPARED_JOBS: usize = 4;
/// How long a job whose context failed to load waits before the next try.
pub const RETRY_FAILED_LOAD: Duration = Duration::from_secs(30);
/// How often an idle validator looks for open jobs to prepare.
pub const PREPARE_EVERY: Duration = Duration::from_secs(2);

/// A job's work, held-out set and base scores (opaque to callers of the validator's pass), and
/// what its verdicts measured once and reuse: each round start's scores, each round's sample
/// and the updates of the round's submissions.
pub struct JobContext {
    pub(crate) work: Arc<dyn Work>,
    pub(crate) held_out: HeldOut,
    /// The base model's held-out scores, example by example.
    pub(crate) base: Arc<ExampleScores>,
    /// The job it is.
    pub(crate) job_id: Uuid,
    /// Held-out examples each verdict scores ([`ValidationSpec::verdict_examples`]).
    verdict_examples: usize,
    /// The root of the job's adapter keys: opens every submission and merge of the job.
    job_key: SealingKey,
    /// The job's rules for its verdicts and merges.
    pub(crate) validation: ValidationSpec,
    /// Held-out scores of each round's starting adapter on the whole set, example by example,
    /// by CID.
    start_scores: Mutex<BTreeMap<String, Arc<ExampleScores>>>,
    /// The latest round's verdict sample.
    sample: Mutex<Option<Arc<RoundSample>>>,
    /// Updates of adapters already fetched, by CID, with their round (only the latest round's
    /// are kept: a round's submissions are all judged before the next round opens).
    updates: Mutex<(i32, BTreeMap<String, Arc<Update>>)>,
}

impl JobContext {
    /// How `what` of this job is sealed.
    pub(crate) fn seal(&self, what: &Sealed) -> BundleSeal {
        what.seal_for(self.job_id, &self.job_key)
    }

    /// How the round `round`'s starting adapter is sealed, when it has one.
    pub(crate) fn start_seal(&self, round: i32) -> BundleSeal {
        self.seal(&Sealed::start_of(round as u32))
    }

    /// How worker `worker`'s submission for task `task_id` is sealed.
    pub(crate) fn submission_seal(&self, task_id: Uuid, worker: &str) -> BundleSeal {
        self.seal(&Sealed::Submission {
            task_id,
            worker: worker.to_owned(),
        })
    }

    /// The base model's metric over the whole held-out set.
    pub(crate) fn base_metric(&self) -> f64 {
        self.base.total().metric
    }

    /// The held-out scores of the round's start at `cid`, if measured before.
    pub(crate) fn start_scores(&self, cid: &str) -> Option<Arc<ExampleScores>> {
        self.start_scores.lock().ok()?.get(cid).cloned()
    }

    pub(crate) fn remember_start_scores(&self, cid: &str, scores: Arc<ExampleScores>) {
        if let Ok(mut m) = self.start_scores.lock() {
            m.insert(cid.to_owned(), scores);
        }
    }

    /// The held-out examples round `round`'s verdicts score, drawn on first use
    /// ([`verdict_sample`]): the same for every validator.
    pub(crate) fn round_sample(&self, round: i32) -> Result<Arc<RoundSample>, NodeError> {
        let round = u32::try_from(round.max(1)).unwrap_or(1);
        let mut kept = self
            .sample
            .lock()
            .map_err(|_| NodeError::Io("a verdict sample's lock was poisoned".into()))?;
        if let Some(sample) = kept.as_ref().filter(|s| s.round == round) {
            return Ok(sample.clone());
        }
        let total = self.held_out.len();
        let picks = verdict_sample(self.work.seed(), total, self.verdict_examples, round);
        let held_out = if picks.len() < total {
            Some(self.held_out.sample(&picks)?)
        } else {
            None
        };
        let sample = Arc::new(RoundSample {
            round,
            picks,
            held_out,
        });
        *kept = Some(sample.clone());
        Ok(sample)
    }

    /// The update of the adapter at `cid` in round `round`, if kept.
    pub(crate) fn update(&self, round: i32, cid: &str) -> Option<Arc<Update>> {
        let kept = self.updates.lock().ok()?;
        (kept.0 == round)
            .then(|| kept.1.get(cid).cloned())
            .flatten()
    }

    pub(crate) fn remember_update(&self, round: i32, cid: &str, update: Arc<Update>) {
        if let Ok(mut kept) = self.updates.lock() {
            if kept.0 < round {
                *kept = (round, BTreeMap::new());
            }
            if kept.0 == round {
                kept.1.insert(cid.to_owned(), update);
            }
        }
    }
}

/// The held-out examples one round's verdicts score.
pub struct RoundSample {
    /// The round (1-based).
    round: u32,
    /// Indices into the job's held-out set, ascending.
    pub(crate) picks: Vec<usize>,
    /// Those examples as a set of their own; `None` when they are the whole set.
    held_out: Option<HeldOut>,
}

impl RoundSample {
    /// The set a verdict scores: the sample, or the job's whole set.
    pub(crate) fn held_out<'a>(&'a self, context: &'a JobContext) -> &'a HeldOut {
        self.held_out.as_ref().unwrap_or(&context.held_out)
    }
}

/// Where a job's inputs are, as the API names them.
pub struct JobRef<'a> {
    /// The job these inputs belong to.
    pub job_id: Uuid,
    /// CID of the job's spec; without one the context cannot be loaded.
    pub spec_cid: Option<&'a str>,
    /// CID of the job's sealed held-out set, which only validators can open.
    pub held_out_cid: Option<&'a str>,
}

/// The loaded contexts, and what idle preparation remembers between polls.
#[derive(Default)]
pub struct Contexts {
    loaded: BTreeMap<Uuid, Arc<JobContext>>,
    last_listed: Option<Instant>,
    /// Jobs whose context could not be loaded.
    failed: BTreeSet<Uuid>,
    /// The last load error of a job and when it happened: its submissions wait
    /// [`RETRY_FAILED_LOAD`] before the next try instead of refetching a model every pass.
    load_errors: BTreeMap<Uuid, (Instant, String)>,
    /// Jobs whose last round is merged: open until the payout is seen on chain, but done here.
    pub(crate) finished: BTreeSet<Uuid>,
    /// Jobs this validator reported as unloadable (`report_model_failure`), so each is
    /// reported once.
    reported: BTreeSet<Uuid>,
}

/// What the validator needs to load a context.
pub struct Loader<'a> {
    /// Lists open jobs and hands over each job's held-out key.
    pub api: &'a ApiClient,
    /// Where specs, models and held-out sets are fetched from.
    pub blobs: &'a dyn Blobs,
    /// Caches models and keeps each job's opened held-out set.
    pub work_dir: &'a WorkDir,
    /// Where models are loaded and the base model scored.
    pub device: &'a Device,
}

impl Contexts {
    /// The job's context, loaded on first use.
    pub async fn get(
        &mut self,
        loader: &Loader<'_>,
        job: JobRef<'_>,
    ) -> Result<Arc<JobContext>, NodeError> {
        if let Some(c) = self.loaded.get(&job.job_id) {
            return Ok(c.clone());
        }
        if let Some((at, error)) = self.load_errors.get(&job.job_id)
            && at.elapsed() < RETRY_FAILED_LOAD
        {
            return Err(NodeError::Content(error.clone()));
        }
        match load(loader, &job).await {
            Ok(context) => {
                let context = Arc::new(context);
                self.load_errors.remove(&job.job_id);
                self.loaded.insert(job.job_id, context.clone());
                Ok(context)
            }
            Err(e) => {
                self.load_errors
                    .insert(job.job_id, (Instant::now(), e.to_string()));
                if e.is_the_jobs_fault() && self.reported.insert(job.job_id) {
                    // The job can never run: end it now (its completed rounds paid, the rest
                    // refunded) instead of letting its tasks fail worker by worker.
                    match loader
                        .api
                        .report_model_failure(job.job_id, &e.to_string())
                        .await
                    {
                        Ok(recorded) => tracing::warn!(job = %job.job_id, error = %e, recorded,
                            "the job's model cannot be loaded; reported, the job is ended"),
                        Err(report) => {
                            tracing::warn!(job = %job.job_id, error = %report,
                                "reporting the job's model failure failed; reported again next time");
                            self.reported.remove(&job.job_id);
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// The job's last round is merged: no more verdicts or merges, and idle preparation skips
    /// it. Its context stays for the proofs still due ([`Contexts::release_finished`]).
    pub fn finish(&mut self, job_id: Uuid) {
        self.finished.insert(job_id);
    }

    /// Drops the contexts of finished jobs none of whose proofs are in `due`.
    pub fn release_finished(&mut self, due: &BTreeSet<Uuid>) {
        let finished = &self.finished;
        self.loaded
            .retain(|id, _| !finished.contains(id) || due.contains(id));
    }

    /// While idle, loads the context (model, held-out set, base score) of one open job that
    /// has none yet, so the first submission of a job is scored at once instead of after the
    /// model is fetched and the base model scored: that took 2.5 s of the demo's critical path.
    pub async fn prepare_one(&mut self, loader: &Loader<'_>) {
        if self
            .last_listed
            .is_some_and(|t| t.elapsed() < PREPARE_EVERY)
        {
            return;
        }
        self.last_listed = Some(Instant::now());
        let jobs = match loader.api.open_jobs().await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::debug!(error = %e, "listing open jobs to prepare");
                return;
            }
        };
        // A job that is no longer open (refunded, cancelled) needs no context any more.
        let open: BTreeSet<Uuid> = jobs
            .iter()
            .filter_map(|job| job["id"].as_str()?.parse().ok())
            .collect();
        self.loaded.retain(|id, _| open.contains(id));
        self.finished.retain(|id| open.contains(id));
        self.failed.retain(|id| open.contains(id));
        self.load_errors.retain(|id, _| open.contains(id));
        self.reported.retain(|id| open.contains(id));
        if self.loaded.len() >= MAX_PREPARED_JOBS {
            return;
        }
        let candidate = jobs.iter().find_map(|job| {
            let id: Uuid = job["id"].as_str()?.parse().ok()?;
            let skip = self.loaded.contains_key(&id)
                || self.failed.contains(&id)
                || self.finished.contains(&id);
            (!skip).then(|| {
                (
                    id,
                    job["spec_cid"].as_str().map(str::to_owned),
                    job["held_out_cid"].as_str().map(str::to_owned),
                )
            })
        });
        let Some((job_id, spec_cid, held_out_cid)) = candidate else {
            return;
        };
        let job = JobRef {
            job_id,
            spec_cid: spec_cid.as_deref(),
            held_out_cid: held_out_cid.as_deref(),
        };
        match self.get(loader, job).await {
            Ok(context) => tracing::info!(job = %job_id, base = context.base_metric(),
                "job prepared for validation"),
            Err(e) => {
                // Not retried while idle (a job this validator cannot score, say); its first
                // submission still loads it, and reports the error there.
                tracing::info!(job = %job_id, error = %e, "job not prepared");
                self.failed.insert(job_id);
            }
        }
    }
}

/// Fetches the job's spec and model, opens its sealed held-out set with the key the API gives
/// validators, and scores the base model.
async fn load(loader: &Loader<'_>, job: &JobRef<'_>) -> Result<JobContext, NodeError> {
    let job_id = job.job_id;
    let missing = |what: &str| NodeError::Content(format!("job {job_id} has no {what}"));
    let spec_bytes = loader
        .blobs
        .get(job.spec_cid.ok_or_else(|| missing("spec"))?, 1 << 20)
        .await?;
    let spec: JobSpec = serde_json::from_slice(&spec_bytes)
        .map_err(|e| NodeError::Content(format!("job {job_id} spec: {e}")))?;
    let model_dir = loader
        .work_dir
        .model(loader.blobs, &spec.base_model.cid)
        .await?;
    let keys = loader.api.job_keys(job_id).await?;
    let key: SealingKey = keys
        .held_out
        .parse()
        .map_err(|e| NodeError::Content(format!("held-out key of job {job_id}: {e}")))?;
    let job_key: SealingKey = keys
        .job
        .parse()
        .map_err(|e| NodeError::Content(format!("job key of job {job_id}: {e}")))?;
    let sealed = loader
        .blobs
        .get(
            job.held_out_cid.ok_or_else(|| missing("held-out set"))?,
            MAX_FILE_BYTES,
        )
        .await?;
    let plain =
        seal::open(&key, &sealed, &seal::held_out_associated_data(job_id)).map_err(|e| {
            NodeError::Content(format!("opening the held-out set of job {job_id}: {e}"))
        })?;
    let held_out_path = loader.work_dir.job_dir(job_id)?.join("held-out.jsonl");
    std::fs::write(&held_out_path, plain)
        .map_err(|e| NodeError::Io(format!("{}: {e}", held_out_path.display())))?;
    // A preference job continuing from an adapter is judged against that adapter.
    let reference_dir = match (&keys.start_adapter, &spec.training.dpo) {
        (Some(cid), Some(_)) => {
            let dir = loader.work_dir.job_dir(job_id)?.join("reference");
            let seal = Sealed::JOB_START.seal_for(job_id, &job_key);
            fetch_bundle(loader.blobs, cid, &dir, Some(&seal)).await?;
            Some(dir)
        }
        _ => None,
    };
    let device = loader.device.clone();
    let validation = spec.validation;
    let shards = spec.shards;
    tokio::task::spawn_blocking(move || -> Result<JobContext, NodeError> {
        let reference = match reference_dir {
            Some(dir) => Some(Adapter::load(&dir, &device)?),
            None => None,
        };
        let work = work::load(spec, &model_dir, reference, &device)?;
        let held_out = work.held_out(&held_out_path)?;
        let base = work.score_examples(None, &held_out, &device)?;
        let verdict_examples = validation.verdict_examples(held_out.len(), shards);
        Ok(JobContext {
            work,
            base: Arc::new(base),
            held_out,
            job_id,
            verdict_examples,
            job_key,
            validation,
            start_scores: Mutex::default(),
            sample: Mutex::default(),
            updates: Mutex::default(),
        })
    })
    .await
    .map_err(|e| NodeError::Io(format!("loading job {job_id}: {e}")))?
}
