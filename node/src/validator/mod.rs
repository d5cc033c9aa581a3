//! The validator service: scores each submitted adapter on the job's held-out set (which only
//! it can open), rules on it, and merges each round once all its adapters are accepted.
//!
//! * [`rules`]: the verdict, a pure function of an adapter's measurements;
//! * [`norms`]: the update norms the verdict and the merge read;
//! * [`context`]: each job's model, held-out set and base score, loaded once (ahead of time
//!   while idle);
//! * this module: the poll loop, scoring a submission and merging a round.
//!
//! ## The merge
//! Accepted adapters are merged exactly (weighted sum of `ΔW = B·A`, re-factored to rank r),
//! weighted by `samples × quality`, with each adapter's update norm clipped to
//! `clip_factor` times the round's median norm, so one outsized (if accepted) update cannot
//! dominate. The merge is scored like an adapter and reported with the merge's truncation error.

pub mod context;
pub mod norms;
pub mod rules;

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use serde_json::json;
use tokio::sync::watch;

use crate::NodeError;
use crate::content::{Blobs, fetch_bundle, put_bundle};
use crate::models::WorkDir;
use context::{Contexts, JobContext, JobRef, Loader};
pub use rules::{Rules, Scores, judge};
use shardwork_client::{Aggregate, ApiClient, PendingValidation, ReadyRound, Verdict};
use shardwork_trainer::merge::{self, MergeMode, MergeOptions};
use shardwork_trainer::peft::Adapter;

/// Merges one round's `adapters` with `weights` as the validator does: each update clipped at
/// `clip_factor` times the round's median update norm, then merged by `mode` (the validator's
/// is [`MergeMode::Exact`]), seeded by the job.
pub fn merge_adapters(
    adapters: &[Adapter],
    weights: &[f64],
    mode: MergeMode,
    clip_factor: f64,
    seed: u64,
) -> Result<(Adapter, merge::MergeReport), NodeError> {
    let mut norms = adapters
        .iter()
        .map(norms::update_norm)
        .collect::<Result<Vec<_>, _>>()?;
    norms.sort_by(f64::total_cmp);
    let median = norms.get(norms.len() / 2).copied().unwrap_or(0.0);
    Ok(merge::merge(
        adapters,
        weights,
        &MergeOptions {
            mode,
            rank: None,
            clip_norm: (median > 0.0).then_some(median * clip_factor),
            seed,
        },
    )?)
}

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
    /// Runs passes until `shutdown` turns true, preparing job contexts while idle; a failed pass
    /// is logged and retried at the next poll, not fatal.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let mut contexts = Contexts::default();
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let worked = match self.pass(&mut contexts).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "validator pass failed");
                    0
                }
            };
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

    /// Judges every pending submission and merges every ready round once; returns how many
    /// verdicts and merges the API took.
    pub async fn pass(&self, contexts: &mut Contexts) -> Result<usize, NodeError> {
        let loader = self.loader();
        let mut worked = 0;
        for pending in self.api.pending_validations(50).await? {
            let job = JobRef {
                job_id: pending.job_id,
                spec_cid: pending.job_spec_cid.as_deref(),
                held_out_cid: pending.held_out_cid.as_deref(),
            };
            let context = contexts.get(&loader, job).await?;
            let verdict = self.score(&context, &pending).await?;
            tracing::info!(submission = %pending.submission_id, worker = %pending.worker,
                accepted = verdict.accepted, quality = verdict.quality, reason = ?verdict.reason, "verdict");
            match self.api.verdict(pending.submission_id, &verdict).await {
                Ok(()) => worked += 1,
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        for ready in self.api.ready_rounds().await? {
            let job = JobRef {
                job_id: ready.job_id,
                spec_cid: ready.job_spec_cid.as_deref(),
                held_out_cid: ready.held_out_cid.as_deref(),
            };
            let context = contexts.get(&loader, job).await?;
            let aggregate = self.merge_round(&context, &ready).await?;
            tracing::info!(job = %ready.job_id, round = ready.round, metric = aggregate.metric,
                base = aggregate.base_metric, "round merged");
            match self
                .api
                .aggregate(ready.job_id, ready.round, &aggregate)
                .await
            {
                Ok(()) => worked += 1,
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
            if ready.last_round {
                contexts.finish(ready.job_id);
            }
        }
        Ok(worked)
    }

    async fn score(
        &self,
        context: &Arc<JobContext>,
        pending: &PendingValidation,
    ) -> Result<Verdict, NodeError> {
        let dir = self.work_dir.scratch("verdict-")?;
        let metric_name = context.work.metric().name;
        let reject = |reason: String| Verdict {
            accepted: false,
            quality: 0.0,
            reason: Some(reason),
            report: json!({ "base_metric": context.base_metric, "metric_name": metric_name }),
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
            let rejected = |reason: String| Verdict {
                accepted: false,
                quality: 0.0,
                reason: Some(reason),
                report: json!({}),
            };
            let adapter = match Adapter::load(&adapter_dir, &device) {
                Ok(a) => a,
                Err(e) => return Ok(rejected(format!("malformed adapter: {e}"))),
            };
            let work = context.work.as_ref();
            let finite = norms::all_finite(&adapter)?;
            let norm = norms::max_relative_norm(work, &adapter)?;
            let metric = if finite && norm <= rules.max_relative_norm {
                match work.score(Some(&adapter), &context.held_out, &device) {
                    Ok(m) => m,
                    Err(e) => {
                        return Ok(rejected(format!("the adapter does not fit the model: {e}")));
                    }
                }
            } else {
                f64::NAN
            };
            let scores = Scores {
                kind: work.metric(),
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
                    "metric_name": scores.kind.name,
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
        let dir = self.work_dir.scratch("merge-")?;
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
        let metric_name = context.work.metric().name;
        let context = context.clone();
        let device = self.device.clone();
        let clip_factor = self.rules.clip_factor;
        let out = out_dir.clone();
        let (metric, report) = tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
            let adapters = dirs
                .iter()
                .map(|d| Adapter::load(d, &device))
                .collect::<Result<Vec<_>, _>>()?;
            let (merged, report) = merge_adapters(
                &adapters,
                &weights,
                MergeMode::Exact,
                clip_factor,
                context.work.seed(),
            )?;
            let metric = context
                .work
                .score(Some(&merged), &context.held_out, &device)?;
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
            metric_name: metric_name.into(),
            details: json!({
                "merge": "exact",
                "weights": report.weights,
                "clip_factors": report.clip_factors,
                "max_truncation_error": report.max_relative_error,
                "adapters": ready.adapters.iter().map(|a| json!({"worker": a.worker, "shard": a.shard_index, "samples": a.samples, "quality": a.quality})).collect::<Vec<_>>(),
            }),
        })
    }
}
