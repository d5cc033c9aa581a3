//! Federated merging of K LoRA adapters trained from the same base.
//!
//! A LoRA module contributes `ΔW_k = s·B_k·A_k`. The merged update a requester wants is
//! `ΔW = Σ w_k ΔW_k`, which generally has rank up to `K·r`; averaging the factors instead
//! (`mean(B)·mean(A)`) is a different matrix with cross terms `B_i·A_j`. [`MergeMode::Exact`]
//! computes `ΔW` and re-factors it to rank `r` by truncated SVD, reporting how much the
//! truncation dropped; [`MergeMode::Naive`] is the factor average, kept for comparison.
//! [`MergeMode::Median`] and [`MergeMode::TrimmedMean`] aggregate `ΔW` coordinate-wise, so a
//! minority of poisoned adapters cannot drag the result arbitrarily far; per-adapter norm
//! clipping bounds any one adapter's influence in every mode.
//!
//! `modules_to_save` tensors (a classification head) are averaged with the same weights (or
//! median / trimmed mean), which is exact for full tensors.
//!
//! ## The server learning rate
//! Averaging K updates that each took S local steps from the round's start moves the adapter
//! about as far as S steps would, while one run on the union of the shards takes K·S: on shards
//! of one distribution the averaged direction is right but the step is short by about K.
//! [`merge_from`] therefore takes the round's starting adapter and a `server_learning_rate` η
//! (FedAvg with a server step, "FedOpt" in Reddi et al., 2021), and returns
//! `start + η·(aggregate − start)`: η = 1 is the plain aggregate; η > 1 extrapolates along the
//! round's agreed direction. In exact mode the start's factors simply join the stacked product
//! with weight `1 − η`, so the result is still the exact rank-r truncation of the target.
//! Measured on chat SFT of SmolLM2 (docs/DESIGN.md, step 6), η = 2 and 3 ended worse than 1:
//! the shards' updates do not add up like sequential runs. The validator merges at 1; the rate
//! is for `shardwork merge` and the federated bench.
//!
//! [`combine`] is the signed linear combination of updates that an outer optimiser with state
//! needs (the federated bench's Nesterov momentum over rounds, measured and not adopted:
//! docs/DESIGN.md, step 6).

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::linalg::{self, Mat, Svd};
use crate::peft::Adapter;

/// How K adapters' LoRA updates are combined into one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum MergeMode {
    /// Weighted sum of `ΔW_k`, truncated SVD back to rank r.
    Exact,
    /// Weighted mean of the A's and of the B's (wrong in general; for comparison).
    Naive,
    /// Coordinate-wise median of `ΔW_k` (weights ignored).
    Median,
    /// Coordinate-wise mean after dropping the `trim` largest and `trim` smallest values
    /// (weights ignored).
    TrimmedMean {
        /// Values dropped at each end of every coordinate; `2·trim` must be below K.
        trim: usize,
    },
}

/// Settings of a [`merge`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeOptions {
    /// How the updates are combined.
    pub mode: MergeMode,
    /// Rank of the merged adapter; `None` keeps the inputs' r.
    pub rank: Option<usize>,
    /// Scale down any adapter whose total `‖ΔW‖_F` over all modules exceeds this.
    pub clip_norm: Option<f64>,
    /// Seeds the randomized SVD used for coordinate-wise modes.
    pub seed: u64,
    /// How far past the aggregate, from the round's start, the merge steps (1 = the aggregate
    /// itself); see the module documentation.
    #[serde(default = "unit_rate")]
    pub server_learning_rate: f64,
}

fn unit_rate() -> f64 {
    1.0
}

/// The largest server learning rate a merge accepts: far past any useful extrapolation, low
/// enough that a typo cannot blow an adapter up by orders of magnitude.
pub const MAX_SERVER_LEARNING_RATE: f64 = 8.0;

impl Default for MergeOptions {
    fn default() -> Self {
        Self {
            mode: MergeMode::Exact,
            rank: None,
            clip_norm: None,
            seed: 0,
            server_learning_rate: 1.0,
        }
    }
}

/// What a merge lost on one LoRA module.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleReport {
    /// The module path, e.g. `bert.encoder.layer.0.attention.self.query`.
    pub module: String,
    /// `‖ΔW − ΔW_r‖_F / ‖ΔW‖_F` of the target update and what the merged adapter encodes
    /// (0 for a zero update). For naive mode, the error against the exact weighted sum.
    pub relative_error: f64,
    /// Numerical rank of the aggregated update before truncation.
    pub rank_before: usize,
}

/// What a [`merge`] did and lost.
#[derive(Debug, Clone, Serialize)]
pub struct MergeReport {
    /// The mode the merge ran in.
    pub mode: MergeMode,
    /// LoRA rank of the merged adapter.
    pub rank: usize,
    /// Normalised weights actually used.
    pub weights: Vec<f64>,
    /// Per adapter: its `‖ΔW‖_F` over all modules and the factor clipping applied (1 = none).
    pub adapter_norms: Vec<f64>,
    /// Per adapter: the factor its update was scaled by under `clip_norm` (1 = none).
    pub clip_factors: Vec<f64>,
    /// What the merge lost on each LoRA module, in module order.
    pub modules: Vec<ModuleReport>,
    /// Largest `relative_error` over modules.
    pub max_relative_error: f64,
    /// The server learning rate the merge stepped by (1 = the aggregate itself).
    pub server_learning_rate: f64,
}

/// Where `adapter`'s tensors live, so a merged adapter lands on the same device.
fn device_of(adapter: &Adapter) -> Device {
    adapter
        .tensors
        .values()
        .next()
        .map(|t| t.device().clone())
        .unwrap_or(Device::Cpu)
}

fn to_mat(t: &Tensor) -> Result<Mat> {
    let (r, c) = t.dims2()?;
    let data: Vec<f64> = t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    Ok(Mat::from_vec(r, c, data))
}

fn to_tensor(m: &Mat, device: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(m.data.clone(), (m.rows, m.cols), device)?.to_dtype(DType::F32)?)
}

/// An adapter's `(B, A)` factors as f64 matrices, by module.
fn factor_mats(adapter: &Adapter) -> Result<BTreeMap<String, (Mat, Mat)>> {
    adapter
        .lora_pairs()?
        .into_iter()
        .map(|(m, p)| Ok((m, (to_mat(&p.b)?, to_mat(&p.a)?))))
        .collect()
}

/// `‖B·A‖_F` without forming the product: `sqrt(tr((BᵀB)(AAᵀ)))`.
fn product_norm(b: &Mat, a: &Mat) -> f64 {
    let btb = b.t().matmul(b);
    let aat = a.matmul(&a.t());
    let tr: f64 = (0..btb.rows)
        .map(|i| {
            (0..btb.cols)
                .map(|j| btb.at(i, j) * aat.at(j, i))
                .sum::<f64>()
        })
        .sum();
    tr.max(0.0).sqrt()
}

/// Checks that every adapter has the same config, modules and shapes.
fn check_compatible(adapters: &[Adapter]) -> Result<()> {
    let first = adapters
        .first()
        .ok_or_else(|| Error::Invalid("merge: no adapters given".into()))?;
    for (k, a) in adapters.iter().enumerate().skip(1) {
        check_same(first, a, &format!("adapter {k}"))?;
    }
    Ok(())
}

/// Checks that `other` (called `label` in errors) has `first`'s config, modules and shapes.
fn check_same(first: &Adapter, other: &Adapter, label: &str) -> Result<()> {
    if other.config.r != first.config.r || other.config.lora_alpha != first.config.lora_alpha {
        return Err(Error::Mismatch(format!(
            "{label} has r={}, alpha={}; adapter 0 has r={}, alpha={}",
            other.config.r, other.config.lora_alpha, first.config.r, first.config.lora_alpha
        )));
    }
    let names: Vec<_> = other.tensors.keys().collect();
    let first_names: Vec<_> = first.tensors.keys().collect();
    if names != first_names {
        return Err(Error::Mismatch(format!(
            "{label} has different tensors than adapter 0"
        )));
    }
    for (name, t) in &other.tensors {
        if t.dims() != first.tensors[name].dims() {
            return Err(Error::Mismatch(format!(
                "{name}: {label} has shape {:?}, adapter 0 {:?}",
                t.dims(),
                first.tensors[name].dims()
            )));
        }
    }
    Ok(())
}

fn normalise(weights: &[f64], k: usize) -> Result<Vec<f64>> {
    if weights.len() != k {
        return Err(Error::Invalid(format!(
            "merge: {} weights for {k} adapters",
            weights.len()
        )));
    }
    if let Some(w) = weights.iter().find(|w| !w.is_finite() || **w < 0.0) {
        return Err(Error::Invalid(format!(
            "merge: weight {w} is not a non-negative number"
        )));
    }
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return Err(Error::Invalid("merge: weights sum to 0".into()));
    }
    Ok(weights.iter().map(|w| w / sum).collect())
}

/// Merges `adapters` with `weights` (normalised to sum 1) as if they all started from a fresh
/// adapter (`B = 0`). Returns the merged adapter (same config, rank `opts.rank` or r) and a
/// report of what the merge lost.
pub fn merge(
    adapters: &[Adapter],
    weights: &[f64],
    opts: &MergeOptions,
) -> Result<(Adapter, MergeReport)> {
    merge_from(None, adapters, weights, opts)
}

/// Merges `adapters`, all trained from `start` (`None`: a fresh adapter, whose update is
/// zero), with `weights` (normalised to sum 1) and then steps `opts.server_learning_rate` times
/// the aggregate's change from `start`. Returns the merged adapter (same config, rank
/// `opts.rank` or r) and a report of what the merge lost.
pub fn merge_from(
    start: Option<&Adapter>,
    adapters: &[Adapter],
    weights: &[f64],
    opts: &MergeOptions,
) -> Result<(Adapter, MergeReport)> {
    check_compatible(adapters)?;
    if let Some(start) = start {
        check_same(&adapters[0], start, "the round's start")?;
    }
    let eta = opts.server_learning_rate;
    if !(eta > 0.0 && eta <= MAX_SERVER_LEARNING_RATE) {
        return Err(Error::Invalid(format!(
            "merge: server learning rate {eta} is outside (0, {MAX_SERVER_LEARNING_RATE}]"
        )));
    }
    let weights = normalise(weights, adapters.len())?;
    let base_cfg = &adapters[0].config;
    let rank = opts.rank.unwrap_or(base_cfg.r);
    if rank == 0 {
        return Err(Error::Invalid(
            "merge: rank 0 is below the minimum 1".into(),
        ));
    }
    if let MergeMode::TrimmedMean { trim } = opts.mode
        && 2 * trim >= adapters.len()
    {
        return Err(Error::Invalid(format!(
            "merge: trimming {trim} from each end of {} adapters leaves none",
            adapters.len()
        )));
    }
    let scale = base_cfg.lora_alpha / base_cfg.r as f64;
    let new_scale = base_cfg.lora_alpha / rank as f64;
    let device = device_of(&adapters[0]);

    // Factors as f64 matrices, per adapter, per module.
    let pairs: Vec<BTreeMap<String, (Mat, Mat)>> =
        adapters.iter().map(factor_mats).collect::<Result<_>>()?;

    let adapter_norms: Vec<f64> = pairs
        .iter()
        .map(|mods| {
            mods.values()
                .map(|(b, a)| (scale * product_norm(b, a)).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let clip_factors: Vec<f64> = adapter_norms
        .iter()
        .map(|&n| match opts.clip_norm {
            Some(c) if n > c => c / n,
            _ => 1.0,
        })
        .collect();

    let start_pairs = start.map(factor_mats).transpose()?;
    let stepped = eta != 1.0;

    // Modules merge independently (each its own SVD, seeded alike), so they run in parallel
    // and give the same bits as one after another; the validator's merge is on a round's
    // critical path (issue 47).
    let merged_modules = pairs[0]
        .keys()
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|module| -> Result<(String, Mat, Mat, ModuleReport)> {
            let mut factors: Vec<(Mat, &Mat)> = pairs
                .iter()
                .zip(&clip_factors)
                .map(|(p, &c)| {
                    let (b, a) = &p[module];
                    (b.scale(c), a)
                })
                .collect();
            let start_pair = start_pairs.as_ref().map(|p| &p[module]);
            // A fresh start is `B = 0`: nothing to ΔW, so exact mode needs no term for it. Naive
            // mode steps the factors, so it takes the fresh start's A as the adapters' weighted
            // mean, which leaves A the plain mean.
            let fresh =
                (start_pair.is_none() && stepped && opts.mode == MergeMode::Naive).then(|| {
                    let (_, a0) = &factors[0];
                    let mut a = Mat::zeros(a0.rows, a0.cols);
                    for ((_, ak), w) in factors.iter().zip(&weights) {
                        a.add_assign_scaled(ak, *w);
                    }
                    (Mat::zeros(factors[0].0.rows, a0.rows), a)
                });
            let (b_new, a_new, report) = match opts.mode {
                MergeMode::Exact | MergeMode::Naive => {
                    // start + η·(Σ w_k·x_k − start) = Σ η·w_k·x_k + (1 − η)·start, for the
                    // products (exact) and the factors (naive) alike.
                    let mut w: Vec<f64> = weights.iter().map(|w| w * eta).collect();
                    if let Some((b0, a0)) = start_pair.or(fresh.as_ref()).filter(|_| stepped) {
                        factors.push((b0.clone(), a0));
                        w.push(1.0 - eta);
                    }
                    if opts.mode == MergeMode::Exact {
                        exact(module, &factors, &w, scale, rank, new_scale)
                    } else {
                        naive(module, &factors, &w, scale, new_scale, rank)?
                    }
                }
                MergeMode::Median | MergeMode::TrimmedMean { .. } => {
                    coordinatewise(module, &factors, scale, rank, new_scale, opts, start_pair)
                }
            };
            Ok((module.clone(), b_new, a_new, report))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = BTreeMap::new();
    let mut modules = Vec::new();
    for (module, b_new, a_new, report) in merged_modules {
        out.insert(
            format!("{module}.lora_B.weight"),
            to_tensor(&b_new, &device)?,
        );
        out.insert(
            format!("{module}.lora_A.weight"),
            to_tensor(&a_new, &device)?,
        );
        modules.push(report);
    }
    for name in adapters[0].saved_modules().keys() {
        let values: Vec<Tensor> = adapters.iter().map(|a| a.tensors[name].clone()).collect();
        let mut merged = merge_full(&values, &weights, opts.mode)?;
        // A full tensor with no start to step from (a fresh head is each worker's own
        // initialisation) is the plain aggregate.
        if let Some(start) = start.filter(|_| stepped) {
            let s0 = start.tensors[name].to_dtype(DType::F32)?;
            merged = ((merged - &s0)?.affine(eta, 0.0)? + s0)?;
        }
        out.insert(name.clone(), merged);
    }
    let mut config = base_cfg.clone();
    config.r = rank;
    let max_relative_error = modules.iter().map(|m| m.relative_error).fold(0.0, f64::max);
    Ok((
        Adapter {
            config,
            tensors: out,
        },
        MergeReport {
            mode: opts.mode,
            rank,
            weights,
            adapter_norms,
            clip_factors,
            modules,
            max_relative_error,
            server_learning_rate: eta,
        },
    ))
}

/// The rank-`rank` truncation of `Σ c_i·ΔW_i`, module by module, for any real coefficients
/// `c_i` (negative ones included) and adapters of any rank that share alpha and modules: the
/// arithmetic an outer optimiser with state (a momentum of the rounds' updates) needs beyond a
/// weighted mean. `modules_to_save` tensors are combined with the same coefficients. Returns the
/// adapter (config of the first term, `r = rank`) and the largest relative truncation error
/// over modules.
pub fn combine(terms: &[(&Adapter, f64)], rank: usize) -> Result<(Adapter, f64)> {
    let (first, _) = terms
        .first()
        .ok_or_else(|| Error::Invalid("combine: no adapters given".into()))?;
    if rank == 0 {
        return Err(Error::Invalid(
            "combine: rank 0 is below the minimum 1".into(),
        ));
    }
    if let Some((_, c)) = terms.iter().find(|(_, c)| !c.is_finite()) {
        return Err(Error::Invalid(format!(
            "combine: coefficient {c} is not a number"
        )));
    }
    let alpha = first.config.lora_alpha;
    let pairs: Vec<BTreeMap<String, (Mat, Mat)>> = terms
        .iter()
        .map(|(a, _)| factor_mats(a))
        .collect::<Result<_>>()?;
    for ((adapter, _), mods) in terms.iter().zip(&pairs).skip(1) {
        if adapter.config.lora_alpha != alpha || mods.keys().ne(pairs[0].keys()) {
            return Err(Error::Mismatch(
                "combine: adapters differ in alpha or modules".into(),
            ));
        }
    }
    let new_scale = alpha / rank as f64;
    let device = device_of(first);
    // Each term's own scale `alpha / r_i` goes into its coefficient, so `exact` runs at 1.
    let weights: Vec<f64> = terms
        .iter()
        .map(|(a, c)| c * alpha / a.config.r as f64)
        .collect();
    let mut out = BTreeMap::new();
    let mut worst: f64 = 0.0;
    for module in pairs[0].keys() {
        let factors: Vec<(Mat, &Mat)> = pairs
            .iter()
            .map(|p| (p[module].0.clone(), &p[module].1))
            .collect();
        let (rows, cols) = (factors[0].0.rows, factors[0].1.cols);
        if factors
            .iter()
            .any(|(b, a)| b.rows != rows || a.cols != cols)
        {
            return Err(Error::Mismatch(format!(
                "combine: {module} has different shapes across adapters"
            )));
        }
        let (b, a, report) = exact(module, &factors, &weights, 1.0, rank, new_scale);
        worst = worst.max(report.relative_error);
        out.insert(format!("{module}.lora_B.weight"), to_tensor(&b, &device)?);
        out.insert(format!("{module}.lora_A.weight"), to_tensor(&a, &device)?);
    }
    for name in first.saved_modules().keys() {
        let mut acc: Option<Tensor> = None;
        for (adapter, c) in terms {
            let t = adapter
                .tensors
                .get(name)
                .ok_or_else(|| Error::Mismatch(format!("combine: an adapter has no {name}")))?
                .to_dtype(DType::F32)?
                .affine(*c, 0.0)?;
            acc = Some(match acc {
                Some(sum) => (sum + t)?,
                None => t,
            });
        }
        out.insert(name.clone(), acc.expect("at least one term"));
    }
    let mut config = first.config.clone();
    config.r = rank;
    Ok((
        Adapter {
            config,
            tensors: out,
        },
        worst,
    ))
}

/// Rank-`rank` factors `(B, A)` with `new_scale·B·A = U_r Σ_r V_rᵀ`, splitting each singular
/// value evenly between the factors so neither dominates further training.
fn factor(svd: &Svd, rank: usize, new_scale: f64, rows: usize, cols: usize) -> (Mat, Mat) {
    let mut b = Mat::zeros(rows, rank);
    let mut a = Mat::zeros(rank, cols);
    for i in 0..rank.min(svd.s.len()) {
        let root = (svd.s[i] / new_scale).sqrt();
        for r in 0..rows {
            b.data[r * rank + i] = svd.u.at(r, i) * root;
        }
        for c in 0..cols {
            a.data[i * cols + c] = svd.v.at(c, i) * root;
        }
    }
    (b, a)
}

fn truncation_error(s: &[f64], rank: usize) -> f64 {
    let total: f64 = s.iter().map(|x| x * x).sum();
    if total == 0.0 {
        return 0.0;
    }
    let dropped: f64 = s.iter().skip(rank).map(|x| x * x).sum();
    (dropped / total).sqrt()
}

fn numerical_rank(s: &[f64]) -> usize {
    let top = s.first().copied().unwrap_or(0.0);
    s.iter().filter(|&&x| x > top * 1e-10 && x > 0.0).count()
}

fn exact(
    module: &str,
    factors: &[(Mat, &Mat)],
    weights: &[f64],
    scale: f64,
    rank: usize,
    new_scale: f64,
) -> (Mat, Mat, ModuleReport) {
    // ΔW = Σ w_k s B_k A_k = [w_1 s B_1 | … ] · [A_1; …]: one product of rank ≤ K·r.
    let rows = factors[0].0.rows;
    let cols = factors[0].1.cols;
    let mut left = Mat::zeros(rows, 0);
    let mut right_t = Mat::zeros(cols, 0);
    for ((b, a), w) in factors.iter().zip(weights) {
        left = left.hcat(&b.scale(w * scale));
        right_t = right_t.hcat(&a.t());
    }
    let svd = linalg::svd_of_product(&left, &right_t.t());
    let (b, a) = factor(&svd, rank, new_scale, rows, cols);
    let report = ModuleReport {
        module: module.to_string(),
        relative_error: truncation_error(&svd.s, rank),
        rank_before: numerical_rank(&svd.s),
    };
    (b, a, report)
}

fn naive(
    module: &str,
    factors: &[(Mat, &Mat)],
    weights: &[f64],
    scale: f64,
    new_scale: f64,
    rank: usize,
) -> Result<(Mat, Mat, ModuleReport)> {
    if rank != factors[0].1.rows {
        return Err(Error::Invalid(
            "merge: naive averaging cannot change the rank".into(),
        ));
    }
    let mut b = Mat::zeros(factors[0].0.rows, factors[0].0.cols);
    let mut a = Mat::zeros(factors[0].1.rows, factors[0].1.cols);
    let mut exact_dw = Mat::zeros(b.rows, a.cols);
    for ((bk, ak), w) in factors.iter().zip(weights) {
        b.add_assign_scaled(bk, *w);
        a.add_assign_scaled(ak, *w);
        exact_dw.add_assign_scaled(&bk.matmul(ak), w * scale);
    }
    let mut err = b.matmul(&a).scale(new_scale);
    err.add_assign_scaled(&exact_dw, -1.0);
    let norm = exact_dw.frobenius();
    let report = ModuleReport {
        module: module.to_string(),
        relative_error: if norm > 0.0 {
            err.frobenius() / norm
        } else {
            0.0
        },
        rank_before: rank,
    };
    Ok((b, a, report))
}

fn coordinatewise(
    module: &str,
    factors: &[(Mat, &Mat)],
    scale: f64,
    rank: usize,
    new_scale: f64,
    opts: &MergeOptions,
    start: Option<&(Mat, Mat)>,
) -> (Mat, Mat, ModuleReport) {
    let dws: Vec<Mat> = factors
        .iter()
        .map(|(b, a)| b.matmul(a).scale(scale))
        .collect();
    let (rows, cols) = (dws[0].rows, dws[0].cols);
    let mut agg = Mat::zeros(rows, cols);
    let mut column = vec![0.0; dws.len()];
    for i in 0..rows * cols {
        for (v, dw) in column.iter_mut().zip(&dws) {
            *v = dw.data[i];
        }
        column.sort_by(f64::total_cmp);
        agg.data[i] = match opts.mode {
            MergeMode::TrimmedMean { trim } => {
                let kept = &column[trim..column.len() - trim];
                kept.iter().sum::<f64>() / kept.len() as f64
            }
            _ => {
                let n = column.len();
                if n % 2 == 1 {
                    column[n / 2]
                } else {
                    0.5 * (column[n / 2 - 1] + column[n / 2])
                }
            }
        };
    }
    // start + η·(aggregate − start); a fresh start's update is zero.
    let eta = opts.server_learning_rate;
    if eta != 1.0 {
        agg = agg.scale(eta);
        if let Some((b0, a0)) = start {
            agg.add_assign_scaled(&b0.matmul(a0), (1.0 - eta) * scale);
        }
    }
    // The aggregate is dense (full rank in general): randomized SVD with power iterations.
    let svd = linalg::randomized_svd(&agg, rank, rank + 10, 4, opts.seed);
    let (b, a) = factor(&svd, rank, new_scale, rows, cols);
    let mut resid = b.matmul(&a).scale(new_scale);
    resid.add_assign_scaled(&agg, -1.0);
    let norm = agg.frobenius();
    let report = ModuleReport {
        module: module.to_string(),
        relative_error: if norm > 0.0 {
            resid.frobenius() / norm
        } else {
            0.0
        },
        rank_before: numerical_rank(&linalg::svd(&agg.t().matmul(&agg)).s),
    };
    (b, a, report)
}

fn merge_full(values: &[Tensor], weights: &[f64], mode: MergeMode) -> Result<Tensor> {
    let stacked = Tensor::stack(values, 0)?.to_dtype(DType::F32)?;
    Ok(match mode {
        MergeMode::Exact | MergeMode::Naive => {
            let w = Tensor::from_vec(
                weights.iter().map(|&w| w as f32).collect::<Vec<_>>(),
                weights.len(),
                values[0].device(),
            )?;
            let mut shape = vec![weights.len()];
            shape.extend(std::iter::repeat_n(1, values[0].rank()));
            stacked.broadcast_mul(&w.reshape(shape)?)?.sum(0)?
        }
        MergeMode::Median | MergeMode::TrimmedMean { .. } => {
            let k = values.len();
            let trim = match mode {
                MergeMode::TrimmedMean { trim } => trim,
                _ => 0,
            };
            let sorted = stacked.sort_last_dim_along0(k)?;
            if matches!(mode, MergeMode::Median) {
                if k % 2 == 1 {
                    sorted.get(k / 2)?
                } else {
                    ((sorted.get(k / 2 - 1)? + sorted.get(k / 2)?)? * 0.5)?
                }
            } else {
                sorted.narrow(0, trim, k - 2 * trim)?.mean(0)?
            }
        }
    })
}

/// Sorting along dimension 0 of a stacked tensor, by moving it last (candle sorts last dims).
trait SortAlong0 {
    fn sort_last_dim_along0(&self, k: usize) -> Result<Tensor>;
}

impl SortAlong0 for Tensor {
    fn sort_last_dim_along0(&self, k: usize) -> Result<Tensor> {
        let rest: Vec<usize> = self.dims()[1..].to_vec();
        let n: usize = rest.iter().product();
        let flat = self.reshape((k, n))?.t()?.contiguous()?;
        let mut rows: Vec<Vec<f32>> = flat.to_vec2()?;
        for r in &mut rows {
            r.sort_by(f32::total_cmp);
        }
        let data: Vec<f32> = rows.into_iter().flatten().collect();
        let sorted = Tensor::from_vec(data, (n, k), self.device())?
            .t()?
            .contiguous()?;
        let mut shape = vec![k];
        shape.extend(rest);
        Ok(sorted.reshape(shape)?)
    }
}
