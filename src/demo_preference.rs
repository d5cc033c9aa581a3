//! `shardwork demo --dpo`: after the chat SFT job, a preference (DPO) job that continues from
//! its result.
//!
//! The pairs are built as self-play fine-tuning (SPIN) builds them: for each conversation, the
//! corpus answer is chosen and the SFT adapter's own greedy answer to the same question is
//! rejected. A reader can accept that preference without a labeller: the corpus answer is the
//! human one the SFT job was already pulling towards, and what the SFT model says instead is
//! where it still falls short, so DPO pushes on exactly the gap SFT left. A question the
//! adapter already answers word for word gives no pair (it would prefer nothing).

use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use shardwork_client::ApiClient;
use shardwork_core::protocol::JobSpec;
use shardwork_node::work::causal_lm::CausalLmJob;
use shardwork_trainer::peft::Adapter;

use crate::demo::{CHAT_SEED, DemoArgs, DemoReport, SampleAnswer, run_job};

/// Tokens of each generated (rejected) answer: the corpus answers are a sentence or two, and
/// generation is the stage's longest step before its job (about a second an answer on 2 cores).
const ANSWER_TOKENS: usize = 32;

/// DPO's learning rate for the demo: the SFT job's, which on SmolLM2 with beta 0.1 moves the
/// held-out reward accuracy within the job's few steps.
const DPO_LEARNING_RATE: f64 = 2e-3;

/// Runs the preference job after the chat SFT job `sft` (posted with `sft_spec` on the chat
/// records `dataset`, of the GGUF model at `model`): builds the pairs, posts the job with
/// `base_model.adapter` naming the SFT result, follows it to its end, and answers one of its
/// held-out questions with the SFT adapter and with the DPO result.
pub(crate) async fn run(
    deployment: &crate::up::Deployment,
    requester: &Arc<ApiClient>,
    sft: &DemoReport,
    sft_spec: &Value,
    dataset: &str,
    model: &std::path::Path,
    args: &DemoArgs,
) -> anyhow::Result<DemoReport> {
    let sft_result = sft
        .adapter_cid
        .clone()
        .context("the SFT job completed without a result")?;
    let sft_dir = tempfile::tempdir()?;
    shardwork_node::content::fetch_result(requester, sft.job_id, sft_dir.path()).await?;
    let conversations: Vec<(String, String)> = dataset
        .lines()
        .filter_map(|line| {
            let record: Value = serde_json::from_str(line).ok()?;
            let turns = record["messages"].as_array()?;
            let question = turns.first()?["content"].as_str()?.to_owned();
            let answer = turns.get(1)?["content"].as_str()?.to_owned();
            Some((question, answer))
        })
        .collect();
    let spec: JobSpec = serde_json::from_value(sft_spec.clone())?;
    let model = model.to_owned();
    let adapter_dir = sft_dir.path().to_owned();
    let started = std::time::Instant::now();
    eprintln!(
        "preference  answering {} questions with the SFT adapter (the rejected answers)",
        conversations.len()
    );
    let (lm, pairs) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let device = crate::nodes::training_device();
        let lm = CausalLmJob::from_args(&spec.lora, spec.training, &model, &device)?;
        let adapter = Adapter::load(&adapter_dir, &device)?;
        let mut pairs = Vec::with_capacity(conversations.len());
        for (question, answer) in conversations {
            let own = lm.answer(Some(&adapter), &question, ANSWER_TOKENS)?;
            if own.trim().is_empty() || own.trim() == answer.trim() {
                continue;
            }
            pairs.push((question, answer, own));
        }
        Ok((lm, pairs))
    })
    .await??;
    eprintln!(
        "preference  {} pairs in {:.1} s",
        pairs.len(),
        started.elapsed().as_secs_f64()
    );
    let turns = |question: &str, answer: &str| {
        json!([{ "role": "user", "content": question },
               { "role": "assistant", "content": answer }])
    };
    let mut jsonl = String::new();
    for (question, chosen, rejected) in &pairs {
        jsonl.push_str(
            &json!({ "chosen": turns(question, chosen), "rejected": turns(question, rejected) })
                .to_string(),
        );
        jsonl.push('\n');
    }
    let mut spec = sft_spec.clone();
    spec["base_model"]["adapter"] = json!(sft_result);
    spec["training"]["dpo"] = json!({ "beta": 0.1 });
    spec["training"]["learning_rate"] = json!(DPO_LEARNING_RATE);
    spec["deadline"] = json!((chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339());
    let label = format!(
        "DPO of the SFT result on {} self-play pairs (corpus answer over the adapter's own)",
        pairs.len()
    );
    let mut report = run_job(deployment, requester, label, &spec, jsonl, args).await?;
    // The API holds out the first records of the seeded permutation: its first is a pair no
    // worker saw.
    let order = shardwork_core::protocol::shuffle::permutation(pairs.len(), CHAT_SEED);
    if let (Some(&first), Some(_)) = (order.first(), &report.adapter_cid) {
        let (question, chosen, rejected) = pairs[first].clone();
        let dpo_dir = tempfile::tempdir()?;
        shardwork_node::content::fetch_result(requester, report.job_id, dpo_dir.path()).await?;
        let dpo_path = dpo_dir.path().to_owned();
        let asked = question.clone();
        let after = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
            let dpo = Adapter::load(&dpo_path, &crate::nodes::training_device())?;
            Ok(lm.answer(Some(&dpo), &asked, ANSWER_TOKENS)?)
        })
        .await??;
        report.sample_answer = Some(SampleAnswer {
            question,
            reference: chosen,
            before: rejected,
            after,
        });
    }
    Ok(report)
}

/// The preference job's effect, as the README's demo prints it.
pub(crate) fn print_summary(sft: &DemoReport, dpo: &DemoReport) {
    let beside = |name: &str| {
        dpo.held_out
            .as_ref()
            .and_then(|h| h.get(name).copied().flatten())
            .unwrap_or(f64::NAN)
    };
    println!();
    println!(
        "SFT -> DPO: the DPO job continued from the SFT result {}",
        sft.adapter_cid.as_deref().unwrap_or("-")
    );
    println!(
        "held-out DPO loss {:.4} at the start (the SFT adapter is the reference: ln 2, every \
         reward margin 0) -> {:.4}; reward accuracy 0 -> {:.3}, mean reward margin {:.4}",
        dpo.start_metric.unwrap_or(f64::NAN),
        dpo.final_metric.unwrap_or(f64::NAN),
        beside("reward_accuracy"),
        beside("reward_margin"),
    );
    if let Some(a) = &dpo.sample_answer {
        println!("held-out question  {}", a.question);
        println!("  corpus answer    {}", a.reference);
        println!("  SFT adapter      {}", a.before.trim());
        println!("  DPO adapter      {}", a.after.trim());
    }
}
