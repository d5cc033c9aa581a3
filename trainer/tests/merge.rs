//! Federated merging on synthetic adapters, where the exact answer Σ w_k·s·B_k·A_k is known.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::merge::{MergeMode, MergeOptions, combine, merge, merge_from};
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

/// `start + η·(target − start)` for a module's update, in f64.
fn stepped(start: &Adapter, target: &Tensor, module: &str, eta: f64) -> Tensor {
    let s0 = delta(start, module);
    ((target - &s0).unwrap() * eta + s0).unwrap()
}

#[test]
fn a_server_learning_rate_steps_from_the_rounds_start_past_the_merge() {
    let start = adapter(7, 1.0);
    let adapters: Vec<Adapter> = (0..3).map(|k| adapter(k, 1.0)).collect();
    let w = [1.0, 2.0, 3.0];
    // Rank enough for the three updates and the start: every mode's target is then exact.
    let full = |mode, eta| MergeOptions {
        mode,
        rank: Some(4 * R),
        server_learning_rate: eta,
        ..Default::default()
    };
    let (merged, report) =
        merge_from(Some(&start), &adapters, &w, &full(MergeMode::Exact, 2.5)).unwrap();
    assert_eq!(report.server_learning_rate, 2.5);
    assert!(report.max_relative_error < 1e-12, "{report:?}");
    for m in MODULES {
        let want = stepped(&start, &weighted_delta(&adapters, &w, m), m, 2.5);
        let err = fro(&(delta(&merged, m) - &want).unwrap()) / fro(&want);
        assert!(err < 1e-5, "{m}: {err}");
    }
    // The head steps the same way from the start's head.
    let head = |a: &Adapter| a.tensors["head.weight"].to_vec2::<f32>().unwrap()[1][3] as f64;
    let mean: f64 = adapters
        .iter()
        .zip(w)
        .map(|(a, wk)| head(a) * wk / 6.0)
        .sum();
    let want = head(&start) + 2.5 * (mean - head(&start));
    assert!(
        (head(&merged) - want).abs() < 1e-5,
        "{} vs {want}",
        head(&merged)
    );

    // At 1 the start changes nothing: the plain merge, bit for bit.
    let (plain, _) = merge(&adapters, &w, &MergeOptions::default()).unwrap();
    let (at_one, _) = merge_from(Some(&start), &adapters, &w, &MergeOptions::default()).unwrap();
    for (name, t) in &plain.tensors {
        let d = fro(&(t.to_dtype(DType::F64).unwrap()
            - at_one.tensors[name].to_dtype(DType::F64).unwrap())
        .unwrap());
        assert_eq!(d, 0.0, "{name}");
    }

    // The coordinate-wise median steps from the start too.
    let (median, _) =
        merge_from(Some(&start), &adapters, &w, &full(MergeMode::Median, 2.0)).unwrap();
    let (median_plain, _) = merge(&adapters, &w, &full(MergeMode::Median, 1.0)).unwrap();
    for m in MODULES {
        let want = stepped(&start, &delta(&median_plain, m), m, 2.0);
        let err = fro(&(delta(&median, m) - &want).unwrap()) / fro(&want);
        assert!(err < 1e-4, "{m}: {err}");
    }
}

#[test]
fn with_no_start_a_server_learning_rate_scales_the_update_and_keeps_naive_factors_sane() {
    let adapters: Vec<Adapter> = (0..3).map(|k| adapter(k, 1.0)).collect();
    let w = [1.0, 1.0, 2.0];
    let opts = |mode| MergeOptions {
        mode,
        rank: if mode == MergeMode::Exact {
            Some(3 * R)
        } else {
            None
        },
        server_learning_rate: 3.0,
        ..Default::default()
    };
    let (exact, _) = merge_from(None, &adapters, &w, &opts(MergeMode::Exact)).unwrap();
    for m in MODULES {
        let want = (weighted_delta(&adapters, &w, m) * 3.0).unwrap();
        let err = fro(&(delta(&exact, m) - &want).unwrap()) / fro(&want);
        assert!(err < 1e-5, "{m}: {err}");
    }
    // Naive: B steps from a fresh B = 0, A stays the mean, so the product is 3 × naive.
    let (naive, _) = merge_from(None, &adapters, &w, &opts(MergeMode::Naive)).unwrap();
    let (naive_plain, _) = merge(
        &adapters,
        &w,
        &MergeOptions {
            mode: MergeMode::Naive,
            ..Default::default()
        },
    )
    .unwrap();
    for m in MODULES {
        let want = (delta(&naive_plain, m) * 3.0).unwrap();
        let err = fro(&(delta(&naive, m) - &want).unwrap()) / fro(&want);
        assert!(err < 1e-5, "{m}: {err}");
    }
    // A fresh head has no common start: it is the plain weighted mean.
    assert_eq!(
        naive.tensors["head.weight"].to_vec2::<f32>().unwrap(),
        naive_plain.tensors["head.weight"].to_vec2::<f32>().unwrap()
    );
}

#[test]
fn a_bad_server_learning_rate_or_start_is_refused_by_name() {
    let adapters: Vec<Adapter> = (0..2).map(|k| adapter(k, 1.0)).collect();
    for eta in [0.0, -1.0, f64::NAN, 100.0] {
        let err = merge_from(
            None,
            &adapters,
            &[1.0, 1.0],
            &MergeOptions {
                server_learning_rate: eta,
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("server learning rate"), "{eta}: {err}");
    }
    let mut start = adapter(5, 1.0);
    start.config.r = 2 * R;
    let err = merge_from(
        Some(&start),
        &adapters,
        &[1.0, 1.0],
        &MergeOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("the round's start"), "{err}");
}

#[test]
fn combine_reproduces_any_signed_combination_of_updates_and_its_truncation_is_reported() {
    let a = adapter(1, 1.0);
    let b = adapter(2, 0.5);
    // A term of twice the rank, as an outer optimiser's momentum is kept.
    let (wide, _) = combine(&[(&a, 1.0), (&b, 1.0)], 2 * R).unwrap();
    assert_eq!(wide.config.r, 2 * R);
    let terms = [(&a, 0.7), (&b, -1.3), (&wide, 0.25)];
    let (full, err) = combine(&terms, 4 * R).unwrap();
    assert!(err < 1e-9, "rank 4r holds the whole combination: {err}");
    for m in MODULES {
        let want = ((delta(&a, m) * 0.95).unwrap() + (delta(&b, m) * -1.05).unwrap()).unwrap();
        let got = delta(&full, m);
        let off = fro(&(got - &want).unwrap()) / fro(&want);
        assert!(off < 1e-5, "{m}: {off}");
    }
    let head = full.tensors["head.weight"].to_dtype(DType::F64).unwrap();
    let head_of = |x: &Adapter| x.tensors["head.weight"].to_dtype(DType::F64).unwrap();
    let want_head = ((head_of(&a) * 0.95).unwrap() + (head_of(&b) * -1.05).unwrap()).unwrap();
    assert!(fro(&(head - &want_head).unwrap()) < 1e-5);

    let (cut, err) = combine(&terms, R).unwrap();
    assert_eq!(cut.config.r, R);
    assert!(err > 0.01, "rank r of a rank-2r sum drops something: {err}");
    let m = MODULES[0];
    let want = ((delta(&a, m) * 0.95).unwrap() + (delta(&b, m) * -1.05).unwrap()).unwrap();
    let off = fro(&(delta(&cut, m) - &want).unwrap()) / fro(&want);
    assert!(
        off <= err + 1e-6,
        "the reported error bounds the module's: {off} > {err}"
    );

    assert!(combine(&[], R).is_err());
    assert!(combine(&[(&a, f64::NAN)], R).is_err());
    assert!(combine(&[(&a, 1.0)], 0).is_err());
}
