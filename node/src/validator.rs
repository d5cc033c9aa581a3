//! The validator service: scores each submitted adapter on the job's held-out set (which only
//! it can open), rules on it, and merges each round once all its adapters are accepted.
//!
//! ## The verdict
//! An adapter is **rejected** when
//! * its files do not load as a PEFT adapter of the job's shape (malformed);
//! * any value is NaN or infinite;
//! * for any module, `‖scale·B·A‖_F` exceeds `max_relative_norm` times the base weight's
//!   `‖W‖_F` (an update that large rewrites the model rather than adapting it — and it is what a
//!   poisoned or random adapter looks like);
//! * its held-out metric does not beat the base model's by at least `min_gain`.
//!
//! Otherwise it is **accepted** with quality
//! `q = clamp((metric − base) / (1 − base), 0, 1)`: the fraction of the possible improvement
//! over the base model (held-out accuracy for classification) the adapter achieved.
//!
//! ## The merge
//! Accepted adapters are merged exactly (weighted sum of `ΔW = B·A`, re-factored to rank r),
//! weighted by `samples × quality`, with each adapter's update norm clipped to
//! `clip_factor` times the round's median norm, so one outsized (if accepted) update cannot
//! dominate. The merge is scored like an adapter and reported with the merge's truncation error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use serde_json::json;
use shardwork_core::protocol::JobSpec;
use shardwork_core::store::seal::{self, SealingKey};
use tokio::sync::watch;
use uuid::Uuid;

use crate::NodeError;
use crate::content::{Blobs, fetch_bundle, put_bundle};
use crate::work::classify::ClassifyJob;
use shardwork_client::{Aggregate, ApiClient, PendingValidation, ReadyRound, Verdict};
use shardwork_trainer::merge::{self, MergeMode, MergeOptions};
use shardwork_trainer::peft::Adapter;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Held-out metric an adapter must add over the base model to be accepted.
    pub min_gain: f64,
    /// Largest `‖ΔW‖_F / ‖W‖_F` of any module.
    pub max_relative_norm: f64,
    /// Adapter update norms are clipped to this times the round's median before merging.
    pub clip_factor: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            min_gain: 0.01,
            // An order of magnitude above the weight it adapts: honest LoRA updates stay well
            // below (the sample model's reach ~2x at a high learning rate, MiniLM's far less);
            // noise or a poisoned update lands far above (~60x on the sample model).
            max_relative_norm: 10.0,
            clip_factor: 3.0,
        }
    }
}

/// The measurements behind a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub metric: f64,
    pub base_metric: f64,
    pub max_relative_norm: f64,
    pub finite: bool,
}

/// The rule above, on measurements; pure so it is tested on its own.
pub fn judge(scores: &Scores, rules: &Rules) -> (bool, f64, Option<String>) {
    if !scores.finite {
        return (
            false,
            0.0,
            Some("the adapter holds NaN or infinite values".into()),
        );
    }
    if scores.max_relative_norm > rules.max_relative_norm {
        return (
            false,
            0.0,
            Some(format!(
                "an update is {:.2}x its base weight's norm (limit {:.2}x)",
                scores.max_relative_norm, rules.max_relative_norm
            )),
        );
    }
    if scores.metric < scores.base_metric + rules.min_gain {
        return (
            false,
            0.0,
            Some(format!(
                "held-out accuracy {:.4} does not beat the base model's {:.4} by {:.2}",
                scores.metric, scores.base_metric, rules.min_gain
            )),
        );
    }
    let headroom = (1.0 - scores.base_metric).max(1e-9);
    let quality = ((scores.metric - scores.base_metric) / headroom).clamp(0.0, 1.0);
    (true, quality, None)
}

pub struct ValidatorNode {
    pub api: Arc<ApiClient>,
    pub blobs: Arc<dyn Blobs>,
    pub device: Device,
    pub work_dir: PathBuf,
    pub poll: Duration,
    pub rules: Rules,
}

/// Jobs whose context is kept ready at most (each holds a model in memory).
const MAX_PREPARED_JOBS: usize = 4;
/// How often an idle validator looks for open jobs to prepare.
const PREPARE_EVERY: Duration = Duration::from_secs(2);

/// What idle preparation remembers between polls.
#[derive(Default)]
struct Preparation {
    last_listed: Option<std::time::Instant>,
    /// Jobs whose context could not be loaded.
    failed: BTreeSet<Uuid>,
    /// Jobs whose last round is merged: open until the payout is seen on chain, but done here.
    finished: BTreeSet<Uuid>,
}

/// A job's model and held-out set, loaded once and kept while the job has work (opaque to
/// callers of [`ValidatorNode::pass`]).
pub struct JobContext {
    job: ClassifyJob,
    held_out: shardwork_trainer::data::ClassificationSet,
    base_metric: f64,
}

impl ValidatorNode {
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let mut contexts: BTreeMap<Uuid, Arc<JobContext>> = BTreeMap::new();
        let mut preparation = Preparation::default();
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let worked = match self.pass(&mut contexts, &mut preparation.finished).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "validator pass failed");
                    0
                }
            };
            if worked == 0 {
                self.prepare_open_job(&mut contexts, &mut preparation).await;
                tokio::select! {
                    _ = tokio::time::sleep(self.poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }

    /// While idle, loads the context (model, held-out set, base score) of one open job that
    /// has none yet, so the first submission of a job is scored at once instead of after the
    /// model is fetched and the base model scored: that took 2.5 s of the demo's critical path.
    async fn prepare_open_job(
        &self,
        contexts: &mut BTreeMap<Uuid, Arc<JobContext>>,
        preparation: &mut Preparation,
    ) {
        if preparation
            .last_listed
            .is_some_and(|t| t.elapsed() < PREPARE_EVERY)
        {
            return;
        }
        preparation.last_listed = Some(std::time::Instant::now());
        let jobs = match self.api.open_jobs().await {
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
        contexts.retain(|id, _| open.contains(id));
        preparation.finished.retain(|id| open.contains(id));
        preparation.failed.retain(|id| open.contains(id));
        if contexts.len() >= MAX_PREPARED_JOBS {
            return;
        }
        let candidate = jobs.iter().find_map(|job| {
            let id: Uuid = job["id"].as_str()?.parse().ok()?;
            let skip = contexts.contains_key(&id)
                || preparation.failed.contains(&id)
                || preparation.finished.contains(&id);
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
        match self
            .context(
                contexts,
                job_id,
                spec_cid.as_deref(),
                held_out_cid.as_deref(),
            )
            .await
        {
            Ok(context) => tracing::info!(job = %job_id, base = context.base_metric,
                "job prepared for validation"),
            Err(e) => {
                // Not retried while idle (a job this validator cannot score, say); its first
                // submission still loads it, and reports the error there.
                tracing::info!(job = %job_id, error = %e, "job not prepared");
                preparation.failed.insert(job_id);
            }
        }
    }

    /// Judges every pending submission and merges every ready round once.
    /// Jobs whose last round it merges are added to `finished`.
    pub async fn pass(
        &self,
        contexts: &mut BTreeMap<Uuid, Arc<JobContext>>,
        finished: &mut BTreeSet<Uuid>,
    ) -> Result<usize, NodeError> {
        let mut worked = 0;
        for pending in self.api.pending_validations(50).await? {
            let context = self
                .context(
                    contexts,
                    pending.job_id,
                    pending.job_spec_cid.as_deref(),
                    pending.held_out_cid.as_deref(),
                )
                .await?;
            let verdict = self.score(&context, &pending).await?;
            tracing::info!(submission = %pending.submission_id, worker = %pending.worker,
                accepted = verdict.accepted, quality = verdict.quality, reason = ?verdict.reason, "verdict");
            match self.api.verdict(pending.submission_id, &verdict).await {
                Ok(()) => worked += 1,
                Err(e) if e.status() == Some(409) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for ready in self.api.ready_rounds().await? {
            let context = self
                .context(
                    contexts,
                    ready.job_id,
                    ready.job_spec_cid.as_deref(),
                    ready.held_out_cid.as_deref(),
                )
                .await?;
            let aggregate = self.merge_round(&context, &ready).await?;
            tracing::info!(job = %ready.job_id, round = ready.round, metric = aggregate.metric,
                base = aggregate.base_metric, "round merged");
            match self
                .api
                .aggregate(ready.job_id, ready.round, &aggregate)
                .await
            {
                Ok(()) => worked += 1,
                Err(e) if e.status() == Some(409) => {}
                Err(e) => return Err(e.into()),
            }
            if ready.last_round {
                contexts.remove(&ready.job_id);
                finished.insert(ready.job_id);
            }
        }
        Ok(worked)
    }

    async fn context(
        &self,
        contexts: &mut BTreeMap<Uuid, Arc<JobContext>>,
        job_id: Uuid,
        spec_cid: Option<&str>,
        held_out_cid: Option<&str>,
    ) -> Result<Arc<JobContext>, NodeError> {
        if let Some(c) = contexts.get(&job_id) {
            return Ok(c.clone());
        }
        let missing = |what: &str| NodeError::Content(format!("job {job_id} has no {what}"));
        let spec_bytes = self
            .blobs
            .get(spec_cid.ok_or_else(|| missing("spec"))?, 1 << 20)
            .await?;
        let spec: JobSpec = serde_json::from_slice(&spec_bytes)
            .map_err(|e| NodeError::Content(format!("job {job_id} spec: {e}")))?;
        let model_dir = self
            .work_dir
            .join("models")
            .join(spec.base_model.cid.to_string());
        if !model_dir.join(".complete").exists() {
            fetch_bundle(
                self.blobs.as_ref(),
                &spec.base_model.cid.to_string(),
                &model_dir,
            )
            .await?;
            std::fs::write(model_dir.join(".complete"), b"")
                .map_err(|e| NodeError::Io(e.to_string()))?;
        }
        let key_hex = self.api.held_out_key(job_id).await?;
        let key: SealingKey = key_hex
            .parse()
            .map_err(|e| NodeError::Content(format!("held-out key of job {job_id}: {e}")))?;
        let sealed = self
            .blobs
            .get(
                held_out_cid.ok_or_else(|| missing("held-out set"))?,
                crate::content::MAX_FILE_BYTES,
            )
            .await?;
        let plain =
            seal::open(&key, &sealed, &seal::held_out_associated_data(job_id)).map_err(|e| {
                NodeError::Content(format!("opening the held-out set of job {job_id}: {e}"))
            })?;
        let dir = self.work_dir.join("jobs").join(job_id.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| NodeError::Io(e.to_string()))?;
        let held_out_path = dir.join("held-out.jsonl");
        std::fs::write(&held_out_path, plain).map_err(|e| NodeError::Io(e.to_string()))?;
        let device = self.device.clone();
        let context = tokio::task::spawn_blocking(move || -> Result<JobContext, NodeError> {
            let job = ClassifyJob::load(spec, &model_dir, &device)?;
            let held_out = job.dataset(&held_out_path)?;
            let base_metric = job.evaluate(None, &held_out, &device)?.accuracy;
            Ok(JobContext {
                job,
                held_out,
                base_metric,
            })
        })
        .await
        .map_err(|e| NodeError::Io(format!("loading job {job_id}: {e}")))??;
        let context = Arc::new(context);
        contexts.insert(job_id, context.clone());
        Ok(context)
    }

    async fn score(
        &self,
        context: &Arc<JobContext>,
        pending: &PendingValidation,
    ) -> Result<Verdict, NodeError> {
        let dir = tempfile::tempdir_in(self.ensure_work_dir()?)
            .map_err(|e| NodeError::Io(e.to_string()))?;
        let reject = |reason: String| Verdict {
            accepted: false,
            quality: 0.0,
            reason: Some(reason),
            report: json!({ "base_metric": context.base_metric, "metric_name": "accuracy" }),
        };
        if let Err(e) = fetch_bundle(self.blobs.as_ref(), &pending.adapter_cid, dir.path()).await {
            return Ok(reject(format!(
                "the adapter could not be fetched as a bundle: {e}"
            )));
        }
        let context = context.clone();
        let device = self.device.clone();
        let adapter_dir = dir.path().to_path_buf();
        let rules = self.rules;
        let judged = tokio::task::spawn_blocking(move || -> Result<Verdict, NodeError> {
            let adapter = match Adapter::load(&adapter_dir, &device) {
                Ok(a) => a,
                Err(e) => {
                    return Ok(Verdict {
                        accepted: false,
                        quality: 0.0,
                        reason: Some(format!("malformed adapter: {e}")),
                        report: json!({}),
                    });
                }
            };
            let finite = all_finite(&adapter)?;
            let norm = max_relative_norm(&context.job, &adapter)?;
            let metric = if finite && norm <= rules.max_relative_norm {
                match context
                    .job
                    .evaluate(Some(&adapter), &context.held_out, &device)
                {
                    Ok(m) => m.accuracy,
                    Err(e) => {
                        return Ok(Verdict {
                            accepted: false,
                            quality: 0.0,
                            reason: Some(format!("the adapter does not fit the model: {e}")),
                            report: json!({}),
                        });
                    }
                }
            } else {
                f64::NAN
            };
            let scores = Scores {
                metric,
                base_metric: context.base_metric,
                max_relative_norm: norm,
                finite,
            };
            let (accepted, quality, reason) = judge(&scores, &rules);
            Ok(Verdict {
                accepted,
                quality,
                reason,
                report: json!({
                    "metric_name": "accuracy",
                    "metric": metric.is_finite().then_some(metric),
                    "base_metric": context.base_metric,
                    "max_relative_norm": norm.is_finite().then_some(norm),
                }),
            })
        })
        .await
        .map_err(|e| NodeError::Io(format!("scoring: {e}")))??;
        Ok(judged)
    }

    async fn merge_round(
        &self,
        context: &Arc<JobContext>,
        ready: &ReadyRound,
    ) -> Result<Aggregate, NodeError> {
        let dir = tempfile::tempdir_in(self.ensure_work_dir()?)
            .map_err(|e| NodeError::Io(e.to_string()))?;
        let mut dirs = Vec::new();
        for (i, a) in ready.adapters.iter().enumerate() {
            let d = dir.path().join(format!("in-{i}"));
            fetch_bundle(self.blobs.as_ref(), &a.adapter_cid, &d).await?;
            dirs.push(d);
        }
        let weights: Vec<f64> = ready
            .adapters
            .iter()
            .map(|a| a.samples.max(1) as f64 * a.quality.max(1e-3))
            .collect();
        let out_dir = dir.path().join("merged");
        let base_metric = context.base_metric;
        let context = context.clone();
        let device = self.device.clone();
        let clip_factor = self.rules.clip_factor;
        let out = out_dir.clone();
        let (metric, report) = tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
            let adapters = dirs
                .iter()
                .map(|d| Adapter::load(d, &device))
                .collect::<Result<Vec<_>, _>>()?;
            let norms = adapters
                .iter()
                .map(update_norm)
                .collect::<Result<Vec<_>, _>>()?;
            let mut sorted = norms.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let (merged, report) = merge::merge(
                &adapters,
                &weights,
                &MergeOptions {
                    mode: MergeMode::Exact,
                    rank: None,
                    clip_norm: (median > 0.0).then_some(median * clip_factor),
                    seed: context.job.training.seed,
                },
            )?;
            let metric = context
                .job
                .evaluate(Some(&merged), &context.held_out, &device)?
                .accuracy;
            merged.save(&out)?;
            Ok((metric, report))
        })
        .await
        .map_err(|e| NodeError::Io(format!("merging: {e}")))??;
        let adapter_cid = put_bundle(
            self.blobs.as_ref(),
            "adapter",
            &out_dir,
            &["adapter_config.json", "adapter_model.safetensors"],
        )
        .await?;
        let adapter_cid = adapter_cid
            .parse()
            .map_err(|e| NodeError::Content(format!("merged adapter CID {adapter_cid}: {e}")))?;
        Ok(Aggregate {
            adapter_cid,
            metric,
            base_metric,
            metric_name: "accuracy".into(),
            details: json!({
                "merge": "exact",
                "weights": report.weights,
                "clip_factors": report.clip_factors,
                "max_truncation_error": report.max_relative_error,
                "adapters": ready.adapters.iter().map(|a| json!({"worker": a.worker, "shard": a.shard_index, "samples": a.samples, "quality": a.quality})).collect::<Vec<_>>(),
            }),
        })
    }

    fn ensure_work_dir(&self) -> Result<&Path, NodeError> {
        std::fs::create_dir_all(&self.work_dir)
            .map_err(|e| NodeError::Io(format!("{}: {e}", self.work_dir.display())))?;
        Ok(&self.work_dir)
    }
}

/// `‖ΔW‖_F` over all the adapter's modules (the quantity the merge clips).
fn update_norm(adapter: &Adapter) -> Result<f64, NodeError> {
    let scale = adapter.config.lora_alpha / adapter.config.r.max(1) as f64;
    let mut sum = 0.0;
    for pair in adapter.lora_pairs()?.values() {
        let delta = pair
            .b
            .matmul(&pair.a)
            .map_err(shardwork_trainer::Error::from)?;
        sum += f64::from(frobenius_sq(&delta)?) * scale * scale;
    }
    Ok(sum.sqrt())
}

fn frobenius_sq(t: &candle_core::Tensor) -> Result<f32, NodeError> {
    Ok(t.to_dtype(candle_core::DType::F32)
        .and_then(|t| t.sqr())
        .and_then(|t| t.sum_all())
        .and_then(|t| t.to_scalar::<f32>())
        .map_err(shardwork_trainer::Error::from)?)
}

fn all_finite(adapter: &Adapter) -> Result<bool, NodeError> {
    for t in adapter.tensors.values() {
        let values: Vec<f32> = t
            .to_dtype(candle_core::DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(shardwork_trainer::Error::from)?;
        if values.iter().any(|v| !v.is_finite()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Largest `‖scale·B·A‖_F / ‖W‖_F` over the adapter's modules (infinite when a module has no
/// base weight to compare with: an adapter for modules the model lacks is malformed).
fn max_relative_norm(job: &ClassifyJob, adapter: &Adapter) -> Result<f64, NodeError> {
    let (model, _) = job.build()?;
    let frozen: BTreeMap<String, candle_core::Tensor> =
        model.frozen_tensors().into_iter().collect();
    let scale = adapter.config.lora_alpha / adapter.config.r.max(1) as f64;
    let mut worst: f64 = 0.0;
    for (module, pair) in adapter.lora_pairs()? {
        let key = format!("{}.weight", module.trim_start_matches("bert."));
        let Some(w) = frozen.get(&key) else {
            return Ok(f64::INFINITY);
        };
        let delta = pair
            .b
            .matmul(&pair.a)
            .map_err(shardwork_trainer::Error::from)?;
        let norm = |t: &candle_core::Tensor| -> Result<f64, NodeError> {
            Ok(f64::from(frobenius_sq(t)?).sqrt())
        };
        let ratio = scale * norm(&delta)? / norm(w)?.max(1e-12);
        if !ratio.is_finite() {
            return Ok(f64::INFINITY);
        }
        worst = worst.max(ratio);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(metric: f64, norm: f64) -> Scores {
        Scores {
            metric,
            base_metric: 0.5,
            max_relative_norm: norm,
            finite: true,
        }
    }

    #[test]
    fn quality_is_the_share_of_possible_improvement() {
        let (ok, q, _) = judge(&scores(0.75, 0.1), &Rules::default());
        assert!(ok);
        assert!((q - 0.5).abs() < 1e-12);
    }

    #[test]
    fn no_gain_huge_norms_and_nan_are_rejected() {
        let rules = Rules::default();
        assert!(!judge(&scores(0.505, 0.1), &rules).0);
        let (ok, q, why) = judge(&scores(0.9, 60.0), &rules);
        assert!(!ok && q == 0.0 && why.unwrap().contains("60.00x"));
        let nan = Scores {
            finite: false,
            ..scores(0.9, 0.1)
        };
        assert!(!judge(&nan, &rules).0);
    }
}
