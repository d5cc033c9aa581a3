//! Federated merging on synthetic adapters, where the exact answer Σ w_k·s·B_k·A_k is known.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::merge::{MergeMode, MergeOptions, merge};
use shardwork_trainer::peft::{Adapter, AdapterConfig};

const MODULES: [&str; 2] = ["m.layer.0.q", "m.layer.0.v"];
const R: usize = 4;
const ALPHA: f64 = 8.0;
const OUT: usize = 24;
const IN: usize = 16;

fn adapter(seed: u64, scale_b: f64) -> Adapter {
    let dev = Device::Cpu;
    let cfg = LoraConfig::new(R, ALPHA, 0.0, &["q", "v"], &["head"]).unwrap();
    let mut tensors = BTreeMap::new();
    // Tensor::randn is not seedable on CPU; derive distinct values from the seed instead.
    let det = |rows: usize, cols: usize, salt: u64| {
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let x = (((i as u64 + 1) * 2654435761) ^ ((seed * 97 + salt) * 40503)) % 10_007;
                (x as f32 / 10_007.0) - 0.5
            })
            .collect();
        Tensor::from_vec(data, (rows, cols), &dev).unwrap()
    };
    for (j, m) in MODULES.iter().enumerate() {
        tensors.insert(format!("{m}.lora_A.weight"), det(R, IN, 2 * j as u64));
        tensors.insert(
            format!("{m}.lora_B.weight"),
            (det(OUT, R, 2 * j as u64 + 1) * scale_b).unwrap(),
        );
    }
    tensors.insert("head.weight".into(), det(2, IN, 99));
    Adapter {
        config: AdapterConfig::from_lora(&cfg, "SEQ_CLS", None),
        tensors,
    }
}

fn delta(a: &Adapter, module: &str) -> Tensor {
    let s = a.config.lora_alpha / a.config.r as f64;
    let b = &a.tensors[&format!("{module}.lora_B.weight")];
    let aa = &a.tensors[&format!("{module}.lora_A.weight")];
    (b.to_dtype(DType::F64)
        .unwrap()
        .matmul(&aa.to_dtype(DType::F64).unwrap())
        .unwrap()
        * s)
        .unwrap()
}

fn fro(t: &Tensor) -> f64 {
    t.sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
        .sqrt()
}

fn weighted_delta(adapters: &[Adapter], w: &[f64], module: &str) -> Tensor {
    let total: f64 = w.iter().sum();
    let mut acc = (delta(&adapters[0], module) * (w[0] / total)).unwrap();
    for (a, wk) in adapters.iter().zip(w).skip(1) {
        acc = (acc + (delta(a, module) * (wk / total)).unwrap()).unwrap();
    }
    acc
}

#[test]
fn exact_merge_reproduces_the_weighted_delta_within_the_reported_truncation_error() {
    let adapters: Vec<Adapter> = (0..3).map(|k| adapter(k, 1.0)).collect();
    let w = [1.0, 2.0, 3.0];
    let (merged, report) = merge(&adapters, &w, &MergeOptions::default()).unwrap();
    assert_eq!(merged.config.r, R);
    for (i, m) in MODULES.iter().enumerate() {
        let want = weighted_delta(&adapters, &w, m);
        let got = delta(&merged, m);
        let err = fro(&(got - &want).unwrap()) / fro(&want);
        let reported = report.modules[i].relative_error;
        // Three rank-4 updates: rank 12 truncated to 4 loses something, and exactly what's reported.
        assert_eq!(report.modules[i].rank_before, 12);
        assert!(reported > 0.01, "{reported}");
        assert!(
            (err - reported).abs() < 1e-5,
            "actual {err} vs reported {reported}"
        );
    }
    // With enough rank the merge is exact.
    let opts = MergeOptions {
        rank: Some(3 * R),
        ..Default::default()
    };
    let (merged, report) = merge(&adapters, &w, &opts).unwrap();
    assert!(report.max_relative_error < 1e-12);
    for m in MODULES {
        let want = weighted_delta(&adapters, &w, m);
        let err = fro(&(delta(&merged, m) - &want).unwrap()) / fro(&want);
        assert!(err < 1e-5, "{err}");
    }
    // The head (a module to save) is the weighted mean.
    let head = merged.tensors["head.weight"].to_vec2::<f32>().unwrap();
    let want: f32 = adapters
        .iter()
        .zip(w)
        .map(|(a, wk)| a.tensors["head.weight"].to_vec2::<f32>().unwrap()[1][3] * (wk / 6.0) as f32)
        .sum();
    assert!((head[1][3] - want).abs() < 1e-6, "{} vs {want}", head[1][3]);
}

#[test]
fn naive_factor_averaging_differs_from_the_exact_weighted_delta() {
    let adapters: Vec<Adapter> = (0..4).map(|k| adapter(k, 1.0)).collect();
    let w = [1.0; 4];
    let naive_opts = MergeOptions {
        mode: MergeMode::Naive,
        ..Default::default()
    };
    let exact_opts = MergeOptions {
        rank: Some(4 * R),
        ..Default::default()
    };
    let (naive, naive_report) = merge(&adapters, &w, &naive_opts).unwrap();
    let (exact, _) = merge(&adapters, &w, &exact_opts).unwrap();
    for (i, m) in MODULES.iter().enumerate() {
        let want = weighted_delta(&adapters, &w, m);
        let naive_err = fro(&(delta(&naive, m) - &want).unwrap()) / fro(&want);
        let exact_err = fro(&(delta(&exact, m) - &want).unwrap()) / fro(&want);
        assert!(naive_err > 0.1, "naive error only {naive_err}");
        assert!(exact_err < 1e-5);
        assert!((naive_report.modules[i].relative_error - naive_err).abs() < 1e-6);
    }
}

#[test]
fn median_and_clipping_resist_one_poisoned_adapter() {
    // Honest workers agree up to small differences in scale; one sends a 1000× update.
    let mut adapters: Vec<Adapter> = [1.0, 1.1, 0.9, 1.05]
        .iter()
        .map(|&s| adapter(0, s))
        .collect();
    adapters.push(adapter(9, 1000.0)); // a poisoned update, 1000× larger
    let w = [1.0; 5];
    let honest = weighted_delta(&adapters[..4], &[1.0; 4], MODULES[0]);
    // (The merged rank 2r covers the rank-r honest update, so truncation adds nothing.)
    let err_of = |opts: MergeOptions| {
        let (m, report) = merge(&adapters, &w, &opts).unwrap();
        (
            fro(&(delta(&m, MODULES[0]) - &honest).unwrap()) / fro(&honest),
            report,
        )
    };
    let full = |mode| MergeOptions {
        mode,
        rank: Some(2 * R),
        ..Default::default()
    };
    let (mean_err, _) = err_of(full(MergeMode::Exact));
    let (median_err, _) = err_of(full(MergeMode::Median));
    let (trimmed_err, _) = err_of(full(MergeMode::TrimmedMean { trim: 1 }));
    let (clipped_err, report) = err_of(MergeOptions {
        clip_norm: Some(2.0 * report_norm(&adapters[0])),
        ..full(MergeMode::Exact)
    });
    assert!(
        mean_err > 10.0,
        "poison should wreck the plain mean: {mean_err}"
    );
    assert!(median_err < 0.1, "median {median_err}");
    assert!(trimmed_err < 0.1, "trimmed mean {trimmed_err}");
    assert!(clipped_err < 1.0, "clipped mean {clipped_err}");
    assert!(
        report.clip_factors[4] < 0.01 && report.clip_factors[0] == 1.0,
        "{:?}",
        report.clip_factors
    );
}

fn report_norm(a: &Adapter) -> f64 {
    MODULES
        .iter()
        .map(|m| fro(&delta(a, m)).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn incompatible_adapters_and_bad_weights_are_errors() {
    let a = adapter(0, 1.0);
    let mut b = adapter(1, 1.0);
    b.tensors.remove("head.weight");
    assert!(merge(&[a.clone(), b], &[1.0, 1.0], &MergeOptions::default()).is_err());
    assert!(merge(&[a.clone(), a.clone()], &[1.0], &MergeOptions::default()).is_err());
    assert!(
        merge(
            &[a.clone(), a.clone()],
            &[-1.0, 2.0],
            &MergeOptions::default()
        )
        .is_err()
    );
    assert!(
        merge(
            &[a.clone(), a.clone()],
            &[0.0, 0.0],
            &MergeOptions::default()
        )
        .is_err()
    );
    let trim = MergeOptions {
        mode: MergeMode::TrimmedMean { trim: 1 },
        ..Default::default()
    };
    assert!(merge(&[a.clone(), a], &[1.0, 1.0], &trim).is_err());
}
