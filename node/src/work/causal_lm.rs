//! A job's causal-LM supervised fine-tuning as the services do it: load the Llama-family model
//! the spec names (a GGUF file or a Hugging Face folder in the job's verified model bundle),
//! attach LoRA, start from the round's adapter, train on a shard's records through the model's
//! chat template, and score by held-out loss per learned token (lower is better).
//!
//! One model is loaded per job and kept with its LoRA layers attached; an adapter is scored or
//! trained from by loading its values into those layers, and the base model is the same layers
//! with `B = 0` (the initial values, kept aside). The model is behind a mutex: LoRA variables
//! are shared state, so two scorings of one job never interleave.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};

use candle_core::{Device, Tensor};
use shardwork_core::protocol::ChatMessage;
use shardwork_core::protocol::job_spec::{LoraSpec, TrainingArgs};
use shardwork_core::protocol::{JobSpec, TrainingTask};
use shardwork_trainer::causal_model::CausalModel;
use shardwork_trainer::generate::{GenerateOptions, Sampling, generate};
use shardwork_trainer::llama::Llama;
use shardwork_trainer::lora::{LoraConfig, Trainables};
use shardwork_trainer::optim::OptimConfig;
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::tokenizer_gguf::LmTokenizer;
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::sft::{self, LmEval, SftConfig};
use shardwork_trainer::train::sft_data::{SftExample, read_sft_jsonl};
use shardwork_trainer::train::trace::{Span, TrainTrace};
use shardwork_trainer::{Error, Result};

use super::{DefaultGain, Direction, HeldOut, Metric, RoundOf, Trained, Work};

/// Examples per held-out scoring batch (no gradients).
const EVAL_BATCH: usize = 16;

/// Held-out loss per learned token: the quality of an adapter is the share of the way from the
/// base model's loss to 0 it went, and a verdict asks the loss to fall by the minimum gain.
pub const LOSS: Metric = Metric {
    name: "loss",
    direction: Direction::LowerIsBetter,
    best: 0.0,
    // A continuous metric: an honest round moves it by tenths of a nat (the demo's rounds:
    // 2.70 → 2.11 → 1.94); a replay with noise on it does not move it down at all.
    default_min_gain: DefaultGain::Fixed(0.01),
};

/// The decoder with LoRA attached, and the LoRA values of a fresh adapter.
struct Attached {
    model: Llama,
    trainables: Trainables,
    fresh: BTreeMap<String, Tensor>,
}

/// The model, tokenizer and settings of a causal-LM job.
pub struct CausalLmJob {
    training: TrainingArgs,
    lora: LoraConfig,
    tokenizer: LmTokenizer,
    /// `base_model_name_or_path` of the adapters (the GGUF file or folder name).
    model_name: String,
    attached: Mutex<Attached>,
    /// The frozen base weights by Hugging Face name, built once for the norm rule.
    frozen: OnceLock<BTreeMap<String, Tensor>>,
}

impl CausalLmJob {
    /// Loads the base model in `model_dir` (a verified bundle: one `.gguf` file, or a Hugging
    /// Face folder) for the job `spec`.
    pub fn load(spec: JobSpec, model_dir: &Path, device: &Device) -> Result<CausalLmJob> {
        if spec.base_model.task != TrainingTask::CausalLm {
            return Err(Error::Invalid(format!(
                "a causal-LM job was asked to run a {:?} spec",
                spec.base_model.task
            )));
        }
        Self::from_args(&spec.lora, spec.training, model_dir, device)
    }

    /// The same from LoRA and training arguments alone (`shardwork train`, no job spec).
    pub fn from_args(
        lora: &LoraSpec,
        training: TrainingArgs,
        model_path: &Path,
        device: &Device,
    ) -> Result<CausalLmJob> {
        let targets: Vec<&str> = lora.target_modules.iter().map(String::as_str).collect();
        let to_save: Vec<&str> = lora.modules_to_save.iter().map(String::as_str).collect();
        let lora = LoraConfig::new(
            lora.r as usize,
            lora.alpha,
            lora.dropout as f32,
            &targets,
            &to_save,
        )?;
        let CausalModel {
            mut model,
            tokenizer,
            files,
        } = CausalModel::load(model_path, device)?;
        // Every node seeds the LoRA initialisation from the job, so round 1 starts identically.
        let trainables = sft::attach_lora(&mut model, &lora, training.seed)?;
        let fresh = trainables.snapshot()?;
        let model_name = files.name();
        Ok(CausalLmJob {
            training,
            lora,
            tokenizer,
            model_name,
            attached: Mutex::new(Attached {
                model,
                trainables,
                fresh,
            }),
            frozen: OnceLock::new(),
        })
    }

    /// The model's tokenizer (chat template included).
    pub fn tokenizer(&self) -> &LmTokenizer {
        &self.tokenizer
    }

    fn lock(&self) -> Result<MutexGuard<'_, Attached>> {
        self.attached
            .lock()
            .map_err(|_| Error::Invalid("a scoring of this job panicked earlier".into()))
    }

    /// Reads and encodes the JSONL file at `path`: records through the chat template, cut at
    /// the spec's `max_seq_len`, those with nothing left to learn dropped.
    pub fn examples(&self, path: &Path) -> Result<Vec<SftExample>> {
        let records = read_sft_jsonl(path)?;
        let examples = sft::encode_dataset(
            &self.tokenizer,
            &records,
            self.training.max_seq_len as usize,
        )?;
        if examples.is_empty() {
            return Err(Error::Invalid(format!(
                "{}: no record has a token to learn within max_seq_len {}",
                path.display(),
                self.training.max_seq_len
            )));
        }
        Ok(examples)
    }

    /// Optimiser steps for `records` training records under the spec's epochs and batch.
    pub fn total_steps(&self, records: usize) -> usize {
        let t = &self.training;
        let batch = t.batch_size.max(1) as usize;
        let accum = t.gradient_accumulation.max(1) as usize;
        (records.div_ceil(batch) * t.epochs.max(1) as usize)
            .div_ceil(accum)
            .max(1)
    }

    /// Trains from `start` (the fresh adapter without one) on `examples`, as round `round` of
    /// its job's schedule, or as a schedule of its own (`None`: one run on everything).
    pub fn train_examples(
        &self,
        start: Option<&Adapter>,
        examples: &[SftExample],
        round: Option<RoundOf>,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(Adapter, sft::SftReport, TrainTrace)> {
        let attached = self.lock()?;
        load_values(&attached, start)?;
        let t = &self.training;
        let total_steps = self.total_steps(examples.len());
        // A run of its own is the one round of a one-round job: the same rates as no window.
        let round = round.unwrap_or(RoundOf {
            round: 1,
            rounds: 1,
        });
        let (window, warmup_steps) = round.window(total_steps, t.warmup_ratio);
        let cfg = SftConfig {
            lora: self.lora.clone(),
            optim: OptimConfig {
                lr: t.learning_rate,
                warmup_steps,
                total_steps,
                window: Some(window),
                grad_accum: t.gradient_accumulation.max(1) as usize,
                max_grad_norm: Some(1.0),
                ..OptimConfig::default()
            },
            batch_size: t.batch_size.max(1) as usize,
            max_seq_len: t.max_seq_len as usize,
            seed: t.seed,
        };
        let (report, trace) = sft::train_span(
            &attached.model,
            &attached.trainables,
            examples,
            &cfg,
            self.tokenizer.eos_token_id,
            span,
            progress,
        )?;
        let adapter = Adapter::from_trainables(self.adapter_config(), &attached.trainables)?;
        Ok((adapter, report, trace))
    }

    /// Held-out loss and perplexity of the model at `adapter` (the base model without one).
    pub fn evaluate(&self, adapter: Option<&Adapter>, examples: &[SftExample]) -> Result<LmEval> {
        let attached = self.lock()?;
        load_values(&attached, adapter)?;
        sft::evaluate(
            &attached.model,
            examples,
            EVAL_BATCH,
            self.tokenizer.eos_token_id,
        )
    }

    /// The model's greedy answer, at `adapter` (the base without one), to `question` asked as
    /// a user turn through the chat template (as plain text without one), at most `max_tokens`.
    pub fn answer(
        &self,
        adapter: Option<&Adapter>,
        question: &str,
        max_tokens: usize,
    ) -> Result<String> {
        let prompt = match &self.tokenizer.chat_template {
            Some(template) => template
                .render(
                    &[ChatMessage {
                        role: "user".into(),
                        content: question.into(),
                    }],
                    true,
                )
                .map_err(|e| Error::Tokenizer(e.to_string()))?,
            None => question.to_owned(),
        };
        let ids = self
            .tokenizer
            .encode(&prompt)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let attached = self.lock()?;
        load_values(&attached, adapter)?;
        let new = generate(
            &attached.model,
            &ids,
            &GenerateOptions {
                max_new_tokens: max_tokens,
                sampling: Sampling::Greedy,
                stop_tokens: vec![self.tokenizer.eos_token_id],
            },
        )
        .map_err(|e| Error::Invalid(format!("generating an answer: {e}")))?;
        self.tokenizer
            .decode(&new)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The PEFT configuration this job's adapters are saved with.
    pub fn adapter_config(&self) -> AdapterConfig {
        AdapterConfig::from_lora(&self.lora, "CAUSAL_LM", Some(&self.model_name))
    }
}

/// Puts `adapter`'s values (the fresh ones without it) into the attached LoRA layers.
fn load_values(attached: &Attached, adapter: Option<&Adapter>) -> Result<()> {
    match adapter {
        Some(adapter) => attached.trainables.load(&adapter.tensors),
        None => attached.trainables.load(&attached.fresh),
    }
}

impl Work for CausalLmJob {
    fn metric(&self) -> Metric {
        LOSS
    }

    fn seed(&self) -> u64 {
        self.training.seed
    }

    fn adapter_config(&self) -> AdapterConfig {
        CausalLmJob::adapter_config(self)
    }

    fn train(
        &self,
        start: Option<&Adapter>,
        shard: &Path,
        _device: &Device,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Trained> {
        let examples = self.examples(shard)?;
        let (adapter, report, trace) =
            self.train_examples(start, &examples, None, span, progress)?;
        Ok(Trained {
            adapter,
            records: examples.len(),
            steps: report.steps,
            final_loss: report.final_loss,
            tokens_per_sec: report.tokens_per_sec,
            trace,
        })
    }

    fn total_steps(&self, shard: &Path) -> Result<usize> {
        Ok(CausalLmJob::total_steps(self, self.examples(shard)?.len()))
    }

    fn held_out(&self, path: &Path) -> Result<HeldOut> {
        Ok(HeldOut::new(self.examples(path)?))
    }

    fn score(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        _device: &Device,
    ) -> Result<f64> {
        let examples: &Vec<SftExample> = held_out.get()?;
        Ok(self.evaluate(adapter, examples)?.loss)
    }

    fn base_weight(&self, module: &str) -> Result<Option<Tensor>> {
        let frozen = match self.frozen.get() {
            Some(frozen) => frozen,
            None => {
                let built = self
                    .lock()?
                    .model
                    .base_tensors()
                    .map_err(|e| Error::Invalid(e.to_string()))?
                    .into_iter()
                    .collect();
                self.frozen.get_or_init(|| built)
            }
        };
        Ok(frozen.get(&format!("{module}.weight")).cloned())
    }
}
