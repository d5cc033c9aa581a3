//! Adapter size and split arithmetic for quotes (and, later, the dataset pipeline).
//!
//! A LoRA on a linear layer `in → out` trains `r·(in + out)` parameters (A is r×in, B is
//! out×r). The layer shapes come from the model's `config.json` dimensions; the quote takes them
//! from the request when given and otherwise assumes one reference model per architecture
//! (named in the answer), since the spec names the architecture but not the size.

use serde::{Deserialize, Serialize};
use shardwork_core::protocol::job_spec::{SFT_TOKENS_PER_PASS, TRAINING_PACKS_MAX_BYTES};
use shardwork_core::protocol::{Architecture, JobSpec};

/// A linear layer's `(in_features, out_features)`.
type Linear = (u64, u64);

/// The `config.json` dimensions that decide layer shapes (Hugging Face names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// Width of the hidden states.
    #[schema(minimum = 1, maximum = 1048576)]
    pub hidden_size: u64,
    /// Width of the feed-forward (MLP) layer.
    #[schema(minimum = 1, maximum = 1048576)]
    pub intermediate_size: u64,
    /// Number of transformer layers.
    #[schema(minimum = 1, maximum = 1048576)]
    pub num_hidden_layers: u64,
    /// Must divide `hidden_size`.
    #[schema(minimum = 1, maximum = 1048576)]
    pub num_attention_heads: u64,
    /// Grouped-query attention (Llama); equal to `num_attention_heads` when absent. Must divide
    /// `num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1048576)]
    pub num_key_value_heads: Option<u64>,
}

impl ModelShape {
    /// The reference model assumed when a quote names no shape.
    pub fn reference(architecture: Architecture) -> (&'static str, ModelShape) {
        match architecture {
            Architecture::Bert => (
                "bert-base-uncased",
                ModelShape {
                    hidden_size: 768,
                    intermediate_size: 3072,
                    num_hidden_layers: 12,
                    num_attention_heads: 12,
                    num_key_value_heads: None,
                },
            ),
            Architecture::Llama => (
                "SmolLM2-135M",
                ModelShape {
                    hidden_size: 576,
                    intermediate_size: 1536,
                    num_hidden_layers: 30,
                    num_attention_heads: 9,
                    num_key_value_heads: Some(3),
                },
            ),
        }
    }

    /// Checks the dimensions are positive, bounded and consistent.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let fields = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads.unwrap_or(1)),
        ];
        for (name, value) in fields {
            // 2^20 is beyond any published model dimension; it keeps the products in u128 range.
            if !(1..=1 << 20).contains(&value) {
                return Err((name.into(), format!("{value} is outside 1..=1048576")));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err((
                "num_attention_heads".into(),
                format!(
                    "{} does not divide hidden_size {}",
                    self.num_attention_heads, self.hidden_size
                ),
            ));
        }
        if let Some(kv) = self.num_key_value_heads
            && !self.num_attention_heads.is_multiple_of(kv)
        {
            return Err((
                "num_key_value_heads".into(),
                format!(
                    "{kv} does not divide num_attention_heads {}",
                    self.num_attention_heads
                ),
            ));
        }
        Ok(())
    }

    /// `(in, out)` of each linear layer a module name matches, per transformer layer, plus the
    /// layers matched once per model; `None` for a name this architecture does not have.
    fn linears(
        &self,
        architecture: Architecture,
        module: &str,
    ) -> Option<(Vec<Linear>, Vec<Linear>)> {
        let h = self.hidden_size;
        let i = self.intermediate_size;
        let head_dim = h / self.num_attention_heads;
        let kv = self.num_key_value_heads.unwrap_or(self.num_attention_heads) * head_dim;
        let per_layer = match (architecture, module) {
            (Architecture::Llama, "q_proj") => vec![(h, h)],
            (Architecture::Llama, "k_proj" | "v_proj") => vec![(h, kv)],
            (Architecture::Llama, "o_proj") => vec![(h, h)],
            (Architecture::Llama, "gate_proj" | "up_proj") => vec![(h, i)],
            (Architecture::Llama, "down_proj") => vec![(i, h)],
            (Architecture::Bert, "query" | "key" | "value") => vec![(h, h)],
            // PEFT matches `dense` by suffix: attention output, intermediate and output, plus
            // the pooler once.
            (Architecture::Bert, "dense") => {
                return Some((vec![(h, h), (h, i), (i, h)], vec![(h, h)]));
            }
            _ => return None,
        };
        Some((per_layer, Vec::new()))
    }
}

/// The LoRA target module names an architecture has, as its Hugging Face model names them.
pub fn known_modules(architecture: Architecture) -> &'static [&'static str] {
    match architecture {
        Architecture::Llama => &[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        Architecture::Bert => &["query", "key", "value", "dense"],
    }
}

/// Trainable parameters of the adapter `spec` asks for on a model of `shape`, or the path and
/// reason of the first target module the architecture lacks.
pub fn adapter_params(spec: &JobSpec, shape: &ModelShape) -> Result<u128, (String, String)> {
    let arch = spec.base_model.architecture;
    let r = u128::from(spec.lora.r);
    let layers = u128::from(shape.num_hidden_layers);
    let mut total: u128 = 0;
    for (index, module) in spec.lora.target_modules.iter().enumerate() {
        let (per_layer, once) = shape.linears(arch, module).ok_or_else(|| {
            (
                format!("lora.target_modules[{index}]"),
                format!(
                    "{module:?} is not a {arch:?} module; known: {}",
                    known_modules(arch).join(", ")
                ),
            )
        })?;
        let lora = |(i, o): &(u64, u64)| r * (u128::from(*i) + u128::from(*o));
        total += layers * per_layer.iter().map(lora).sum::<u128>();
        total += once.iter().map(lora).sum::<u128>();
    }
    // A saved classification head is trained in full: weight and bias.
    if spec.lora.modules_to_save.iter().any(|m| m == "classifier") {
        let labels = u128::from(spec.base_model.num_labels.unwrap_or(2));
        total += labels * u128::from(shape.hidden_size) + labels;
    }
    Ok(total)
}

/// Memory a node needs to train the job `spec` on a model of `shape` with `vocab` tokens and
/// `parameters` weights, in MiB: the weights in f32 (GGUF weights are dequantized) and their
/// packed copies on a CPU with AMX (twice the weights, up to [`TRAINING_PACKS_MAX_BYTES`]; past
/// it, one MLP projection's pack at a time, made for each product), the
/// adapter with its gradient and both AdamW moments, the activations kept for the backward pass
/// of one training pass, a causal LM's logits with their log-softmax and gradient, and a fixed
/// allowance for the runtime. Deliberately generous: a worker refused a task it could have run
/// costs a little latency; one that runs out of memory costs a whole attempt.
///
/// A causal LM trains a micro-batch in passes of at most [`SFT_TOKENS_PER_PASS`] padded tokens
/// (at least one record each); a classifier in one pass. The activation figure per token and
/// layer is calibrated on SmolLM2-135M SFT (peak RSS 2.2 GB for 256-token passes), which keeps
/// about 40 hidden-widths and 12 MLP-widths per token and layer alive (candle has no fused
/// kernels).
pub fn training_memory_mb(spec: &JobSpec, shape: &ModelShape, vocab: u64, parameters: u128) -> u64 {
    const F32: u128 = 4;
    const RUNTIME: u128 = 512 << 20;
    let adapter = adapter_params(spec, shape).unwrap_or(0);
    // A preference record is two answers, and a pass holds both answers of a pair.
    let sequence = sequences_per_record(spec) * u128::from(spec.training.max_seq_len);
    let batch_tokens = u128::from(spec.training.batch_size) * sequence;
    let tokens = match spec.base_model.architecture {
        Architecture::Llama => batch_tokens.min(u128::from(SFT_TOKENS_PER_PASS).max(sequence)),
        Architecture::Bert => batch_tokens,
    };
    let h = u128::from(shape.hidden_size);
    let i = u128::from(shape.intermediate_size);
    let activations = tokens * u128::from(shape.num_hidden_layers) * (40 * h + 12 * i) * F32;
    let logits = match spec.base_model.architecture {
        Architecture::Llama => 3 * tokens * u128::from(vocab) * F32,
        Architecture::Bert => 0,
    };
    let all_packs = 2 * parameters * F32;
    let cap = u128::from(TRAINING_PACKS_MAX_BYTES);
    let packs = if all_packs <= cap {
        all_packs
    } else {
        cap + h * i * F32
    };
    let bytes = parameters * F32 + packs + adapter * 4 * F32 + activations + logits + RUNTIME;
    u64::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u64::MAX)
}

/// Training throughput, FLOP/s, below which a worker is not training a task so much as holding
/// it. Deliberately low: two AVX2 cores reach about 100 GFLOP/s on the frozen products and one
/// H200 several hundred TFLOP/s, so only a stalled or parked lease is this slow.
pub const SLOWEST_TRAINING_FLOPS: u128 = 5_000_000_000;

/// What a lease is allowed on top of its training time: fetching and loading the base model,
/// the shard and the round's start, and uploading the adapter.
pub const TASK_SETUP_SECS: u64 = 30 * 60;

/// The bound for jobs posted before it was estimated.
pub const DEFAULT_TASK_TIME_LIMIT_SECS: u64 = 24 * 60 * 60;

/// The longest a lease on one of the job's tasks may live, heartbeats included, seconds: the
/// job's largest shard trained at [`SLOWEST_TRAINING_FLOPS`] plus [`TASK_SETUP_SECS`]. A lease
/// is extended by heartbeats, so without a bound a worker could keep every task it claimed
/// until the deadline and starve the job. The work is counted as six FLOPs per parameter and
/// token (a full model's forward and backward; LoRA's frozen weights skip their own gradients,
/// so this over-counts), over every record padded to `max_seq_len`, `epochs` times.
pub fn task_time_limit_secs(spec: &JobSpec, parameters: u128, largest_shard_records: u64) -> u64 {
    let sequences = u128::from(largest_shard_records).saturating_mul(sequences_per_record(spec));
    let tokens = sequences
        .saturating_mul(u128::from(spec.training.max_seq_len))
        .saturating_mul(u128::from(spec.training.epochs));
    // A preference task first scores its shard under the reference policy: one forward pass
    // (two FLOPs per parameter and token) over every answer.
    let reference = match spec.training.dpo {
        Some(_) => sequences.saturating_mul(u128::from(spec.training.max_seq_len)),
        None => 0,
    };
    let training_secs = parameters
        .saturating_mul(6)
        .saturating_mul(tokens)
        .saturating_add(parameters.saturating_mul(2).saturating_mul(reference))
        / SLOWEST_TRAINING_FLOPS;
    u64::try_from(training_secs)
        .unwrap_or(u64::MAX)
        .saturating_add(TASK_SETUP_SECS)
}

/// Sequences a model runs per dataset record: both answers of a preference pair, else one.
fn sequences_per_record(spec: &JobSpec) -> u128 {
    if spec.training.dpo.is_some() { 2 } else { 1 }
}

/// How `records` split into held-out and training: the held-out set gets `ceil(f·n)` records
/// (at least one, so the validator always has data), training the rest.
pub fn held_out_count(records: u64, fraction: f64) -> u64 {
    let held = (records as f64 * fraction).ceil() as u64;
    held.clamp(1, records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bert_query_value_rank_8_matches_peft() {
        // PEFT reports 294,912 trainable LoRA parameters for bert-base with r=8 on query,value:
        // 12 layers × 2 modules × 8 × (768 + 768).
        let (_, shape) = ModelShape::reference(Architecture::Bert);
        let per = 8u128 * (768 + 768);
        assert_eq!(12 * 2 * per, 294_912);
        let spec = spec_with(Architecture::Bert, &["query", "value"], 8);
        assert_eq!(adapter_params(&spec, &shape).unwrap(), 294_912);
    }

    #[test]
    fn llama_grouped_query_attention_shrinks_k_and_v() {
        let (_, shape) = ModelShape::reference(Architecture::Llama);
        let spec = spec_with(Architecture::Llama, &["q_proj", "v_proj"], 8);
        // head_dim 64, 3 kv heads → v_proj is 576 → 192.
        assert_eq!(
            adapter_params(&spec, &shape).unwrap(),
            30 * 8 * ((576 + 576) + (576 + 192))
        );
    }

    #[test]
    fn unknown_module_is_named_by_index() {
        let (_, shape) = ModelShape::reference(Architecture::Bert);
        let spec = spec_with(Architecture::Bert, &["query", "q_proj"], 8);
        let (path, message) = adapter_params(&spec, &shape).unwrap_err();
        assert_eq!(path, "lora.target_modules[1]");
        assert!(message.contains("known: query"), "{message}");
    }

    #[test]
    fn held_out_is_at_least_one_and_never_all() {
        assert_eq!(held_out_count(100, 0.1), 10);
        assert_eq!(held_out_count(101, 0.1), 11);
        assert_eq!(held_out_count(3, 0.01), 1);
        assert_eq!(held_out_count(1, 0.5), 1);
    }

    #[test]
    fn a_task_gets_its_setup_and_its_work_at_the_slowest_rate() {
        let spec = spec_with(Architecture::Llama, &["q_proj", "v_proj"], 8);
        // SmolLM2-135M, 80 records of 64 tokens, one epoch: 6 × 135e6 × 5,120 FLOPs at 5 GFLOP/s.
        let secs = task_time_limit_secs(&spec, 135_000_000, 80);
        assert_eq!(
            secs,
            TASK_SETUP_SECS + 6 * 135_000_000 * 80 * 64 / 5_000_000_000
        );
        // Twice the records, twice the training time; absurd sizes saturate, never wrap.
        let twice = task_time_limit_secs(&spec, 135_000_000, 160);
        assert_eq!(twice - TASK_SETUP_SECS, 2 * (secs - TASK_SETUP_SECS));
        assert_eq!(task_time_limit_secs(&spec, u128::MAX, u64::MAX), u64::MAX);

        // A preference pair is two answers trained (6 FLOPs per parameter and token) and first
        // scored by the reference (2): 8/6 of twice the work, and twice the tokens in a pass.
        let mut dpo = spec.clone();
        dpo.training.dpo = Some(Default::default());
        let dpo_secs = task_time_limit_secs(&dpo, 135_000_000, 80);
        assert_eq!(
            dpo_secs - TASK_SETUP_SECS,
            (6 + 2) * 135_000_000 * 2 * 80 * 64 / 5_000_000_000
        );
        let (_, shape) = ModelShape::reference(Architecture::Llama);
        let memory = |s: &JobSpec| {
            let mut s = s.clone();
            s.training.max_seq_len = 256;
            training_memory_mb(&s, &shape, 49_152, 135_000_000)
        };
        // At 256 tokens an SFT pass holds one record, a preference pass both answers of one.
        assert!(
            memory(&dpo) > memory(&spec),
            "a pass holds both answers of a pair"
        );
    }

    #[test]
    fn inconsistent_shapes_are_refused() {
        let (_, mut shape) = ModelShape::reference(Architecture::Llama);
        shape.num_key_value_heads = Some(4);
        assert_eq!(shape.validate().unwrap_err().0, "num_key_value_heads");
        shape.num_key_value_heads = Some(3);
        shape.hidden_size = 0;
        assert_eq!(shape.validate().unwrap_err().0, "hidden_size");
    }

    fn spec_with(arch: Architecture, modules: &[&str], r: u32) -> JobSpec {
        let (model, task, labels) = match arch {
            Architecture::Bert => ("bert", "sequence_classification", Some(2)),
            Architecture::Llama => ("llama", "causal_lm", None),
        };
        let mut v = serde_json::json!({
            "version": 1, "kind": "lora",
            "base_model": { "cid": "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
                "format": "safetensors", "architecture": model, "task": task },
            "lora": { "r": r, "alpha": 16, "target_modules": modules },
            "training": { "epochs": 1, "learning_rate": 0.001, "batch_size": 8, "max_seq_len": 64, "seed": 1 },
            "shards": 1, "rounds": 1, "held_out_fraction": 0.1,
            "deadline": "2099-01-01T00:00:00Z", "stake": { "amount": "1" }
        });
        if let Some(n) = labels {
            v["base_model"]["num_labels"] = n.into();
        }
        serde_json::from_value(v).unwrap()
    }
}
