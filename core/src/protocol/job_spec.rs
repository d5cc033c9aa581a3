//! The job spec: what a requester asks for when posting a LoRA or federated fine-tuning job.
//!
//! A spec is parsed with [`JobSpec::parse`], which decodes and then checks every field against
//! the limits below, returning all problems at once with their paths.

use chrono::{DateTime, Duration, Utc};
#[cfg(feature = "orm")]
use sea_orm::sea_query::StringLen;
use serde::{Deserialize, Serialize};

use super::PROTOCOL_VERSION;
use super::ids::{ContentId, EthAddress, WeiAmount};
use super::records::RecordsFor;
use super::validation::{SpecErrors, decode_json};

/// LoRA rank bounds. Above 256 a LoRA stops being a small adapter.
pub const MAX_LORA_RANK: u32 = 256;
/// Most shards one job's dataset may be cut into.
pub const MAX_SHARDS: u32 = 1024;
/// Most federated rounds one job may run.
pub const MAX_ROUNDS: u32 = 100;
/// Most epochs (passes over its shard) one task may train.
pub const MAX_EPOCHS: u32 = 100;
/// Largest batch, in records.
pub const MAX_BATCH_SIZE: u32 = 4096;
/// Shortest `max_seq_len` a spec may ask for, in tokens.
pub const MIN_SEQ_LEN: u32 = 8;
/// Longest `max_seq_len` a spec may ask for, in tokens.
pub const MAX_SEQ_LEN: u32 = 32_768;
/// Held-out data is for scoring; more than half the dataset would starve training.
pub const MAX_HELD_OUT_FRACTION: f64 = 0.5;
/// Reputation is kept on chain in basis points (0 to 10,000).
pub const MAX_REPUTATION_BPS: u32 = 10_000;
/// A deadline further out than this ties a stake up for longer than any job needs.
pub const MAX_DEADLINE_DAYS: i64 = 365;

/// Single-contributor LoRA, or federated over shards and rounds.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "orm", derive(sea_orm::EnumIter, sea_orm::DeriveActiveEnum))]
#[cfg_attr(
    feature = "orm",
    sea_orm(rs_type = "String", db_type = "String(StringLen::None)")
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// One worker trains one adapter on the whole training set: one shard, one round.
    #[cfg_attr(feature = "orm", sea_orm(string_value = "lora"))]
    Lora,
    /// Workers train on shards; accepted adapters are merged each round.
    #[cfg_attr(feature = "orm", sea_orm(string_value = "federated"))]
    Federated,
}

impl JobKind {
    /// Both kinds.
    pub const ALL: [JobKind; 2] = [JobKind::Lora, JobKind::Federated];

    /// The name the spec, the API's JSON and its database use (`lora`, `federated`).
    pub const fn as_str(self) -> &'static str {
        match self {
            JobKind::Lora => "lora",
            JobKind::Federated => "federated",
        }
    }

    /// The byte the escrow contract's `JobKind` enum stores for this kind (`createJob`'s and
    /// `JobCreated`'s `kind`): one contributor paid by `completeJob`, or many by
    /// `completeFederatedJob`.
    pub const fn escrow_code(self) -> u8 {
        match self {
            JobKind::Lora => 0,
            JobKind::Federated => 1,
        }
    }

    /// The kind the escrow stores as `code`, if any.
    pub fn from_escrow_code(code: u8) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.escrow_code() == code)
    }
}

impl From<JobKind> for u8 {
    fn from(kind: JobKind) -> u8 {
        kind.escrow_code()
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the base model's weights are stored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFormat {
    /// A folder (UnixFS directory or tarball) with config.json, tokenizer.json, *.safetensors.
    Safetensors,
    /// A single GGUF file; dequantized for training.
    Gguf,
}

/// Model family, which decides the layer names LoRA targets.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// Llama-family decoders (Llama, Qwen2, SmolLM).
    Llama,
    /// BERT-family encoders (BERT, MiniLM).
    Bert,
}

/// What the adapter is trained to do.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainingTask {
    /// Supervised fine-tuning of a decoder on text, instructions or chats.
    CausalLm,
    /// Text classification with a trained head (`{"text","label"}` records).
    SequenceClassification,
}

/// The model the job adapts, and what the adapter learns to do with it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseModel {
    /// The model's bundle in the content store.
    pub cid: ContentId,
    /// How its weights are stored.
    pub format: ModelFormat,
    /// Its family (`llama` or `bert`).
    pub architecture: Architecture,
    /// What the adapter learns: `causal_lm` for llama, `sequence_classification` for bert.
    pub task: TrainingTask,
    /// Number of labels, for classification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 2, maximum = 1000))]
    pub num_labels: Option<u32>,
    /// A PEFT adapter bundle to continue from: round 1 trains from it and is judged against
    /// it. Either an earlier job's result (its `adapter_cid`, a job of the same requester) or
    /// an unsealed adapter bundle the requester may read. Its LoRA settings must be the job's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<ContentId>,
}

/// The classification head's module: a classification job always trains it whole and saves it
/// with its adapters, whether or not `lora.modules_to_save` names it.
pub const CLASSIFIER_HEAD: &str = "classifier";

/// LoRA hyper-parameters, named as Hugging Face PEFT names them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSpec {
    /// Rank of the LoRA update matrices.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 256))]
    pub r: u32,
    /// Scale of the LoRA update: it is multiplied by `alpha / r`.
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 4096))]
    pub alpha: f64,
    /// Dropout on the LoRA layers' input; 0 when omitted.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, exclusive_maximum = 1))]
    pub dropout: f64,
    /// The modules LoRA adapts, by name (e.g. `q_proj`, `v_proj`).
    #[cfg_attr(feature = "openapi", schema(min_items = 1))]
    pub target_modules: Vec<String>,
    /// Modules trained in full and shipped with the adapter (a classification head).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules_to_save: Vec<String>,
}

impl LoraSpec {
    /// The modules a job of `task` trains whole and saves with its adapters:
    /// `modules_to_save`, and for classification the head ([`CLASSIFIER_HEAD`]).
    pub fn saved_modules(&self, task: TrainingTask) -> Vec<String> {
        let mut saved = self.modules_to_save.clone();
        if task == TrainingTask::SequenceClassification
            && !saved.iter().any(|m| m == CLASSIFIER_HEAD)
        {
            saved.push(CLASSIFIER_HEAD.to_owned());
        }
        saved
    }
}

/// Padded tokens one forward/backward pass of causal-LM training holds at most: a micro-batch
/// (`batch_size` records) above it is run as several passes whose gradients add up to the
/// micro-batch's. The update is the same; the memory a node needs is bounded by this instead
/// of `batch_size × max_seq_len`. Part of the protocol because it fixes the passes (and so the
/// dropout masks) every honest worker computes, whatever its memory, and the API sizes jobs by it.
pub const SFT_TOKENS_PER_PASS: u32 = 256;

/// Bytes of packed copies of the frozen weights a node keeps through one training run, at
/// most: on a CPU with AMX the trainer packs each frozen weight into tiles (two copies the size
/// of the f32 weight) instead of repacking it on every product, up to this much; past it, it
/// packs per product. The API adds it to every job's memory estimate, so that a worker whose
/// CPU has AMX is never leased a task it cannot hold.
pub const TRAINING_PACKS_MAX_BYTES: u64 = 2 << 30;

/// How each task trains on its shard.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingArgs {
    /// Passes over the shard.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub epochs: u32,
    /// The optimizer's learning rate.
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 1))]
    pub learning_rate: f64,
    /// Records per forward and backward pass.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4096))]
    pub batch_size: u32,
    /// Longest sequence trained on, in tokens.
    #[cfg_attr(feature = "openapi", schema(minimum = 8, maximum = 32768))]
    pub max_seq_len: u32,
    /// Seeds the shuffle, the held-out split, the shard cut and the adapter's initialisation.
    pub seed: u64,
    /// Share of the steps over which the learning rate warms up; 0.06 when omitted.
    #[serde(default = "TrainingArgs::default_warmup_ratio")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 0.5, default = 0.06)
    )]
    pub warmup_ratio: f64,
    /// Batches accumulated per optimizer step; 1 when omitted.
    #[serde(default = "TrainingArgs::default_gradient_accumulation")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1024, default = 1))]
    pub gradient_accumulation: u32,
    /// What the learning-rate schedule (warmup, then cosine decay) spans; `task` when omitted.
    #[serde(default, skip_serializing_if = "LrSchedule::is_task")]
    pub schedule: LrSchedule,
    /// Present: the job is preference fine-tuning (DPO) of a causal LM on
    /// `{"prompt","chosen","rejected"}` records, against the job's starting point as the
    /// reference policy (the base model, or `base_model.adapter`: a DPO job after an SFT
    /// one continues from its result). Absent: supervised training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpo: Option<DpoArgs>,
}

/// How a DPO job weighs its preference pairs.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpoArgs {
    /// How far the policy may move from the reference: the scale of the implicit reward
    /// `beta · (log π(y|x) − log π_ref(y|x))`; 0.1 when omitted (TRL's default).
    #[serde(default = "DpoArgs::default_beta")]
    #[cfg_attr(
        feature = "openapi",
        schema(exclusive_minimum = 0, maximum = 5, default = 0.1)
    )]
    pub beta: f64,
    /// The loss on each pair's reward margin; `sigmoid` (DPO's) when omitted.
    #[serde(default)]
    pub loss: PreferenceLoss,
}

impl DpoArgs {
    fn default_beta() -> f64 {
        0.1
    }
}

impl Default for DpoArgs {
    fn default() -> Self {
        DpoArgs {
            beta: DpoArgs::default_beta(),
            loss: PreferenceLoss::default(),
        }
    }
}

/// The loss a DPO job puts on each pair's margin `h = (log π(y_w) − log π_ref(y_w)) −
/// (log π(y_l) − log π_ref(y_l))`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreferenceLoss {
    /// DPO: `−log σ(β h)`.
    #[default]
    Sigmoid,
    /// IPO: `(h − 1 / (2β))²`, with each answer's log-probability averaged over its tokens.
    Ipo,
}

/// What one warmup + cosine learning-rate schedule spans. Measured (DESIGN step 6): `job`
/// brings a job of many short rounds closer to one central run (six rounds of one epoch: 5.4%
/// above central against 11.4%) and does worse over two rounds, whose first round then stops
/// at half the peak rate.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// Every task warms up and decays to zero over its own steps.
    #[default]
    Task,
    /// One schedule over the whole job: round k of R trains the k-th of R stretches of it
    /// (the warmup in round 1, the decay reaching zero at the last round's end), as one central
    /// run over every round's steps would.
    Job,
}

impl LrSchedule {
    /// Whether this is the default, which a spec leaves out when serialised (so specs written
    /// before the field existed keep their bytes and CIDs).
    pub fn is_task(&self) -> bool {
        *self == LrSchedule::Task
    }
}

impl TrainingArgs {
    fn default_warmup_ratio() -> f64 {
        0.06
    }
    fn default_gradient_accumulation() -> u32 {
        1
    }
}

/// How the validator combines a round's accepted adapters.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Weighted (records × quality) sum of the updates `ΔW = B·A`, re-factored to rank r: what
    /// one adapter trained on every shard would approximate. Each update's norm is clipped to a
    /// multiple of the round's median first.
    #[default]
    Exact,
    /// Coordinate-wise mean of the updates after dropping the largest and smallest fifth (at
    /// least one of each) of every coordinate: robust to a minority of outliers, weights ignored.
    TrimmedMean,
    /// Coordinate-wise median of the updates: the most robust, weights ignored.
    Median,
}

/// How submissions are judged and merged; every field has a default.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationSpec {
    /// How much an adapter must improve the held-out metric over the round's starting adapter
    /// (the base model in round 1), in the metric's own units: points of accuracy (0.01 = one
    /// point) for classification, nats per learned token for causal-LM loss; negative, how much
    /// worse it may score. When omitted, the metric's default: 0.01 nats for loss; for accuracy,
    /// one held-out example better than the base model in round 1, and from round 2 no worse
    /// than the merged start by more than the held-out set's noise (one standard error of the
    /// start's accuracy, plus one example): one honest shard's update from a merged start can
    /// score a few examples below it while the merge of all of them gains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = -1, maximum = 1))]
    pub min_gain: Option<f64>,
    /// How each round's accepted adapters are merged; `exact` when omitted.
    #[serde(default)]
    pub aggregation: Aggregation,
    /// Share of the submissions whose proof of training is checked that have their whole run
    /// trained again, every stretch from the same start, shard and seed (the others have one
    /// stretch replayed), drawn from the submission's id, unknown to the worker until it has
    /// submitted. When omitted: 0.1 without a bond; 0 with one, whose catch bound rests on a
    /// single replayed stretch and where a whole run replayed would cost a task's training for
    /// nothing the bound needs (decisions/0044, amended 2026-12-07).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1))]
    pub spot_check: Option<f64>,
    /// The bond a worker must hold in the escrow, in the job's token, to be leased the job's
    /// tasks: this many times one task's pay (stake / (shards × rounds)) for each task it holds
    /// whose proof of training is not yet decided, across every bonded job in that token. A
    /// failed proof slashes that much of it to the requester. 0 (the default): no bond, and
    /// every scored submission's proof is checked. Docs: decisions/0044.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 20, default = 0))]
    pub bond_multiple: u32,
    /// Share of scored submissions whose proof of training is replayed, drawn from the
    /// submission's id. When omitted: 1 without a bond, and 1.25 / (1 + bond_multiple) with
    /// one; never below 1 / (1 + bond_multiple), under which skipping work pays a cheat more
    /// than it expects to lose (decisions/0044).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 1))]
    pub proof_rate: Option<f64>,
    /// How many completed rounds in a row may fail to improve on the best held-out metric so
    /// far before the job ends early: the completed rounds are paid, the stake of the rounds
    /// not run goes back to the requester, and the best round's merge is the result. 2 when
    /// omitted (one round below the best is within a held-out set's noise; two in a row is a
    /// trend); a value at or above `rounds - 1` never ends a job early. Docs: decisions/0047.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100, default = 2))]
    pub patience: Option<u32>,
    /// How many held-out examples each verdict scores. Every submission of a round is scored
    /// on the same sample of the held-out set (drawn from the job's seed, a different window of
    /// it each round) and compared with the round's start and the base model on those
    /// examples; each round's merge, the job's result, is scored on the whole set. When
    /// omitted: the held-out set over the shards, so that a round's verdicts together score
    /// about one held-out set whatever the shard count, and at least 8; the whole set when the
    /// spec sets `min_gain` (a bar in the metric's units is set for the whole set's noise). A
    /// value at or above the set's size scores the whole set. Docs: decisions/0052.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub verdict_examples: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Completed rounds in a row without a better held-out metric that end a job early when its
/// spec names no `validation.patience`.
pub const DEFAULT_PATIENCE: u32 = 2;

/// The fewest held-out examples a verdict scores when the spec names no
/// `validation.verdict_examples` (the whole set when it is smaller).
pub const MIN_VERDICT_EXAMPLES: usize = 8;

/// The share of checked proofs replayed whole in a job without a bond that names no
/// `validation.spot_check`.
pub const UNBONDED_SPOT_CHECK: f64 = 0.1;

/// The most a job may ask a worker to bond per task's pay.
pub const MAX_BOND_MULTIPLE: u32 = 20;

impl ValidationSpec {
    /// The share of checked proofs replayed whole: the spec's `spot_check`, or
    /// [`UNBONDED_SPOT_CHECK`] without a bond and none with one.
    pub fn spot_check(&self) -> f64 {
        self.spot_check.unwrap_or(if self.bond_multiple > 0 {
            0.0
        } else {
            UNBONDED_SPOT_CHECK
        })
    }

    /// The lowest proof rate at which skipping work does not pay: a cheat that skips a share
    /// `s` of a task's steps saves at most `s` of the task's pay `v`, and is caught with
    /// probability at least `rate × s` (a replayed stretch is one of
    /// [`super::submission::TRACE_SEGMENTS`] drawn uniformly, and
    /// a run missing a share `s` of its steps cannot end a share `s` of its stretches where
    /// they should), losing the job's pay (at least `v`) and `bond_multiple × v` of its bond:
    /// `s v < rate s (1 + bond_multiple) v` holds for every `s` once `rate ≥ 1 / (1 +
    /// bond_multiple)`.
    pub fn min_proof_rate(&self) -> f64 {
        1.0 / (1.0 + f64::from(self.bond_multiple))
    }

    /// The share of scored submissions whose proof is replayed: the spec's, or a quarter above
    /// [`Self::min_proof_rate`] (1 without a bond).
    pub fn proof_rate(&self) -> f64 {
        self.proof_rate
            .unwrap_or_else(|| (1.25 * self.min_proof_rate()).min(1.0))
    }

    /// The completed rounds in a row without a better held-out metric that end a job early:
    /// the spec's `patience`, or [`DEFAULT_PATIENCE`].
    pub fn patience(&self) -> u32 {
        self.patience.unwrap_or(DEFAULT_PATIENCE)
    }

    /// How many of a held-out set of `held_out` examples each verdict of a job of `shards`
    /// shards scores: the spec's `verdict_examples`; the whole set when the spec names its own
    /// `min_gain` and no sample (a bar set in the metric's units was set for the whole set's
    /// noise, and a sample's is larger); otherwise `held_out / shards` rounded up and at least
    /// [`MIN_VERDICT_EXAMPLES`]. Never more than the set.
    pub fn verdict_examples(&self, held_out: usize, shards: u32) -> usize {
        let wanted = match (self.verdict_examples, self.min_gain) {
            (Some(n), _) => n as usize,
            (None, Some(_)) => held_out,
            (None, None) => held_out
                .div_ceil(shards.max(1) as usize)
                .max(MIN_VERDICT_EXAMPLES),
        };
        wanted.min(held_out)
    }

    fn is_default(&self) -> bool {
        *self == ValidationSpec::default()
    }
}

/// The escrowed stake: an amount of ETH (no token) or of an allow-listed ERC-20.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stake {
    /// The amount, in the token's smallest unit (wei for ETH).
    pub amount: WeiAmount,
    /// ERC-20 contract; absent for ETH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<EthAddress>,
    /// The highest platform fee, in basis points, the requester accepts: the escrow refuses the
    /// funding (`FeeAboveMaximum`) if its fee was raised above it. Absent: the escrow's own
    /// ceiling, [`Stake::ESCROW_MAX_FEE_BPS`].
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1000))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fee_bps: Option<u16>,
}

impl Stake {
    /// The escrow contract's `MAX_FEE_BPS`: no fee is ever above 10 %.
    pub const ESCROW_MAX_FEE_BPS: u16 = 1_000;

    /// The `maxFeeBps` argument of `createJob` for this stake.
    pub fn max_fee_bps(&self) -> u16 {
        self.max_fee_bps.unwrap_or(Self::ESCROW_MAX_FEE_BPS)
    }
}

/// A fine-tuning job as the requester posts it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The protocol version; this server speaks 1.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1))]
    pub version: u32,
    /// One contributor (`lora`), or many over shards and rounds (`federated`).
    pub kind: JobKind,
    /// The model to adapt.
    pub base_model: BaseModel,
    /// The adapter's LoRA hyper-parameters.
    pub lora: LoraSpec,
    /// How each task trains.
    pub training: TrainingArgs,
    /// Shards the training records are cut into, one task each per round; 1 for a lora job.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1024))]
    pub shards: u32,
    /// Federated rounds, each merging the round's accepted adapters; 1 for a lora job.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub rounds: u32,
    /// Share of the dataset's records held out, sealed, for the validator to score adapters on.
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 0.5))]
    pub held_out_fraction: f64,
    /// Workers below this on-chain reputation (basis points) may not claim tasks.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 10000, default = 0))]
    pub min_reputation: u32,
    /// When the job must be finished; unfinished by then, its stake goes back to the requester.
    pub deadline: DateTime<Utc>,
    /// What the job pays its contributors, escrowed on chain.
    pub stake: Stake,
    /// How submissions are judged and merged (defaults when omitted).
    #[serde(default, skip_serializing_if = "ValidationSpec::is_default")]
    pub validation: ValidationSpec,
}

impl JobSpec {
    /// The records this job trains on: labelled texts, any causal-LM shape, or preference
    /// pairs for a DPO job.
    pub fn records_for(&self) -> RecordsFor {
        match (self.base_model.task, &self.training.dpo) {
            (TrainingTask::SequenceClassification, _) => RecordsFor::Classification {
                num_labels: self.base_model.num_labels,
            },
            (TrainingTask::CausalLm, None) => RecordsFor::Sft,
            (TrainingTask::CausalLm, Some(_)) => RecordsFor::Preference,
        }
    }

    /// Decodes and validates a spec; `now` anchors the deadline checks.
    pub fn parse(json: &[u8], now: DateTime<Utc>) -> Result<JobSpec, SpecErrors> {
        let spec: JobSpec = decode_json(json)?;
        spec.validate(now)?;
        Ok(spec)
    }

    /// Every problem with this spec, each with its field path.
    pub fn validate(&self, now: DateTime<Utc>) -> Result<(), SpecErrors> {
        let mut e = SpecErrors::default();
        e.check(self.version == PROTOCOL_VERSION, "version", || {
            format!(
                "version {} is not supported; this server speaks {PROTOCOL_VERSION}",
                self.version
            )
        });
        self.validate_model(&mut e);
        self.validate_lora(&mut e);
        self.validate_training(&mut e);
        self.validate_topology(&mut e);
        e.check(
            self.min_reputation <= MAX_REPUTATION_BPS,
            "min_reputation",
            || {
                format!(
                    "{} is above the maximum {MAX_REPUTATION_BPS} basis points",
                    self.min_reputation
                )
            },
        );
        e.check(self.deadline > now, "deadline", || {
            format!(
                "{} is not in the future (now is {})",
                self.deadline.to_rfc3339(),
                now.to_rfc3339()
            )
        });
        e.check(
            self.deadline <= now + Duration::days(MAX_DEADLINE_DAYS),
            "deadline",
            || {
                format!(
                    "{} is more than {MAX_DEADLINE_DAYS} days away",
                    self.deadline.to_rfc3339()
                )
            },
        );
        e.check(!self.stake.amount.is_zero(), "stake.amount", || {
            "a job needs a stake above 0 to pay its contributors".into()
        });
        e.check(
            self.stake.token != Some(EthAddress::ZERO),
            "stake.token",
            || "the zero address is not a token; omit `token` to stake ETH".into(),
        );
        e.check(
            self.stake.max_fee_bps.unwrap_or(0) <= Stake::ESCROW_MAX_FEE_BPS,
            "stake.max_fee_bps",
            || {
                format!(
                    "at most {} (the escrow never charges more than 10 %)",
                    Stake::ESCROW_MAX_FEE_BPS
                )
            },
        );
        e.into_result()
    }

    fn validate_model(&self, e: &mut SpecErrors) {
        let m = &self.base_model;
        let pair_ok = matches!(
            (m.architecture, m.task),
            (Architecture::Llama, TrainingTask::CausalLm)
                | (Architecture::Bert, TrainingTask::SequenceClassification)
        );
        e.check(pair_ok, "base_model.task", || {
            format!(
                "{:?} models are not trained for {:?}",
                m.architecture, m.task
            )
        });
        match (m.task, m.num_labels) {
            (TrainingTask::SequenceClassification, None) => {
                e.push("base_model.num_labels", "classification needs num_labels")
            }
            (TrainingTask::SequenceClassification, Some(n)) if !(2..=1000).contains(&n) => {
                e.push("base_model.num_labels", format!("{n} is outside 2..=1000"))
            }
            (TrainingTask::CausalLm, Some(_)) => e.push(
                "base_model.num_labels",
                "num_labels applies to classification only",
            ),
            _ => {}
        }
    }

    fn validate_lora(&self, e: &mut SpecErrors) {
        let l = &self.lora;
        e.check((1..=MAX_LORA_RANK).contains(&l.r), "lora.r", || {
            format!("{} is outside 1..={MAX_LORA_RANK}", l.r)
        });
        e.check(
            l.alpha.is_finite() && l.alpha > 0.0 && l.alpha <= 4096.0,
            "lora.alpha",
            || format!("{} is outside (0, 4096]", l.alpha),
        );
        e.check((0.0..1.0).contains(&l.dropout), "lora.dropout", || {
            format!("{} is outside [0, 1)", l.dropout)
        });
        e.check(!l.target_modules.is_empty(), "lora.target_modules", || {
            "name at least one module to adapt (e.g. q_proj, v_proj)".into()
        });
        for (field, names) in [
            ("target_modules", &l.target_modules),
            ("modules_to_save", &l.modules_to_save),
        ] {
            for (i, name) in names.iter().enumerate() {
                let ok = !name.is_empty()
                    && name.len() <= 128
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
                e.check(ok, &format!("lora.{field}[{i}]"), || {
                    format!("{name:?} is not a module name (letters, digits, '_' and '.')")
                });
                let first = names.iter().position(|n| n == name) == Some(i);
                e.check(first, &format!("lora.{field}[{i}]"), || {
                    format!("{name:?} is listed twice")
                });
            }
        }
    }

    fn validate_training(&self, e: &mut SpecErrors) {
        let t = &self.training;
        e.check(
            (1..=MAX_EPOCHS).contains(&t.epochs),
            "training.epochs",
            || format!("{} is outside 1..={MAX_EPOCHS}", t.epochs),
        );
        e.check(
            t.learning_rate.is_finite() && t.learning_rate > 0.0 && t.learning_rate <= 1.0,
            "training.learning_rate",
            || format!("{} is outside (0, 1]", t.learning_rate),
        );
        e.check(
            (1..=MAX_BATCH_SIZE).contains(&t.batch_size),
            "training.batch_size",
            || format!("{} is outside 1..={MAX_BATCH_SIZE}", t.batch_size),
        );
        e.check(
            (MIN_SEQ_LEN..=MAX_SEQ_LEN).contains(&t.max_seq_len),
            "training.max_seq_len",
            || format!("{} is outside {MIN_SEQ_LEN}..={MAX_SEQ_LEN}", t.max_seq_len),
        );
        e.check(
            (0.0..=0.5).contains(&t.warmup_ratio),
            "training.warmup_ratio",
            || format!("{} is outside [0, 0.5]", t.warmup_ratio),
        );
        e.check(
            (1..=1024).contains(&t.gradient_accumulation),
            "training.gradient_accumulation",
            || format!("{} is outside 1..=1024", t.gradient_accumulation),
        );
        if let Some(dpo) = &t.dpo {
            e.check(
                dpo.beta.is_finite() && dpo.beta > 0.0 && dpo.beta <= 5.0,
                "training.dpo.beta",
                || format!("{} is outside (0, 5]", dpo.beta),
            );
            e.check(
                self.base_model.task == TrainingTask::CausalLm,
                "training.dpo",
                || {
                    "preference training needs base_model.task causal_lm; a \
                     sequence_classification job has no answers to prefer"
                        .to_owned()
                },
            );
        }
    }

    fn validate_topology(&self, e: &mut SpecErrors) {
        e.check((1..=MAX_SHARDS).contains(&self.shards), "shards", || {
            format!("{} is outside 1..={MAX_SHARDS}", self.shards)
        });
        e.check((1..=MAX_ROUNDS).contains(&self.rounds), "rounds", || {
            format!("{} is outside 1..={MAX_ROUNDS}", self.rounds)
        });
        if self.kind == JobKind::Lora {
            e.check(self.shards == 1, "shards", || {
                format!(
                    "a lora job has exactly 1 shard, not {}; use kind federated to split",
                    self.shards
                )
            });
            e.check(self.rounds == 1, "rounds", || {
                format!("a lora job has exactly 1 round, not {}", self.rounds)
            });
        }
        if let Some(gain) = self.validation.min_gain {
            e.check(
                gain.is_finite() && (-1.0..=1.0).contains(&gain),
                "validation.min_gain",
                || format!("{gain} is outside [-1, 1]"),
            );
        }
        if let Some(spot) = self.validation.spot_check {
            e.check(
                spot.is_finite() && (0.0..=1.0).contains(&spot),
                "validation.spot_check",
                || format!("{spot} is outside [0, 1]"),
            );
        }
        let multiple = self.validation.bond_multiple;
        e.check(
            multiple <= MAX_BOND_MULTIPLE,
            "validation.bond_multiple",
            || format!("{multiple} is above {MAX_BOND_MULTIPLE}"),
        );
        if let Some(rate) = self.validation.proof_rate {
            let floor = self.validation.min_proof_rate();
            e.check(
                rate.is_finite() && rate > 0.0 && rate <= 1.0,
                "validation.proof_rate",
                || format!("{rate} is outside (0, 1]"),
            );
            e.check(rate.is_nan() || rate >= floor, "validation.proof_rate", || {
                format!(
                    "{rate} is below {floor:.4} = 1 / (1 + bond_multiple {multiple}): at a lower \
                     rate skipping work pays a cheat more than it expects to lose; raise the rate \
                     or validation.bond_multiple"
                )
            });
        }
        if let Some(patience) = self.validation.patience {
            e.check(
                (1..=MAX_ROUNDS).contains(&patience),
                "validation.patience",
                || format!("{patience} is outside 1..={MAX_ROUNDS}"),
            );
        }
        if let Some(n) = self.validation.verdict_examples {
            e.check(n >= 1, "validation.verdict_examples", || {
                format!("{n} is below 1: a verdict must score some held-out example")
            });
        }
        let f = self.held_out_fraction;
        e.check(
            f.is_finite() && f > 0.0 && f <= MAX_HELD_OUT_FRACTION,
            "held_out_fraction",
            || {
                format!(
                    "{f} is outside (0, {MAX_HELD_OUT_FRACTION}]: the validator needs held-out data"
                )
            },
        );
    }

    /// Number of training records each shard receives when `records` remain after the held-out
    /// split, or an explanation of why the dataset is too small for this spec.
    pub fn shard_sizes(&self, records: u64) -> Result<Vec<u64>, String> {
        let n = u64::from(self.shards);
        if records < n {
            return Err(format!("{records} training records cannot fill {n} shards"));
        }
        Ok((0..n)
            .map(|i| records / n + u64::from(i < records % n))
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn now() -> DateTime<Utc> {
        "2026-11-22T00:00:00Z".parse().unwrap()
    }

    pub(crate) fn valid_json() -> serde_json::Value {
        serde_json::json!({
            "version": 1,
            "kind": "federated",
            "base_model": {
                "cid": "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
                "format": "safetensors",
                "architecture": "bert",
                "task": "sequence_classification",
                "num_labels": 2
            },
            "lora": { "r": 8, "alpha": 16, "dropout": 0.05,
                      "target_modules": ["query", "value"], "modules_to_save": ["classifier"] },
            "training": { "epochs": 1, "learning_rate": 0.0005, "batch_size": 16,
                          "max_seq_len": 64, "seed": 7 },
            "shards": 3,
            "rounds": 2,
            "held_out_fraction": 0.1,
            "min_reputation": 0,
            "deadline": "2026-12-01T00:00:00Z",
            "stake": { "amount": "1000000000000000000" }
        })
    }

    fn parse(value: serde_json::Value) -> Result<JobSpec, SpecErrors> {
        JobSpec::parse(value.to_string().as_bytes(), now())
    }

    fn paths(errors: &SpecErrors) -> Vec<&str> {
        errors.errors().iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn valid_spec_parses_and_round_trips() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.training.gradient_accumulation, 1);
        let again = parse(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(spec, again);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let mut v = valid_json();
        v["lora"]["r"] = 0.into();
        v["lora"]["dropout"] = 1.0.into();
        v["training"]["learning_rate"] = 0.0.into();
        v["shards"] = 0.into();
        v["held_out_fraction"] = 0.9.into();
        v["deadline"] = "2020-01-01T00:00:00Z".into();
        v["stake"]["amount"] = "0".into();
        let errors = parse(v).unwrap_err();
        assert_eq!(
            paths(&errors),
            [
                "lora.r",
                "lora.dropout",
                "training.learning_rate",
                "shards",
                "held_out_fraction",
                "deadline",
                "stake.amount"
            ]
        );
        assert!(
            errors.to_string().contains("lora.r: 0 is outside 1..=256"),
            "{errors}"
        );
    }

    #[test]
    fn validation_defaults_when_omitted_and_is_checked_when_given() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.validation, ValidationSpec::default());
        assert_eq!(spec.validation.aggregation, Aggregation::Exact);
        // A spec without the section serialises without it: old job documents keep their CIDs.
        assert!(
            serde_json::to_value(&spec)
                .unwrap()
                .get("validation")
                .is_none()
        );
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "min_gain": 2.0, "spot_check": -0.5 });
        let errors = parse(v).unwrap_err();
        assert_eq!(
            paths(&errors),
            ["validation.min_gain", "validation.spot_check"]
        );
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "aggregation": "trimmed_mean", "min_gain": 0 });
        let spec = parse(v).unwrap();
        assert_eq!(spec.validation.aggregation, Aggregation::TrimmedMean);
        assert_eq!(spec.validation.spot_check(), 0.1);
        // A bonded job replays one stretch of each checked proof unless it asks for more.
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "bond_multiple": 4 });
        assert_eq!(parse(v).unwrap().validation.spot_check(), 0.0);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "bond_multiple": 4, "spot_check": 0.2 });
        assert_eq!(parse(v).unwrap().validation.spot_check(), 0.2);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "aggregation": "mode" });
        assert!(parse(v).is_err());
    }

    #[test]
    fn a_dpo_job_is_a_causal_lm_job_with_preference_settings() {
        let causal = |training_dpo: serde_json::Value| {
            let mut v = valid_json();
            v["base_model"]["architecture"] = "llama".into();
            v["base_model"]["task"] = "causal_lm".into();
            v["base_model"]["num_labels"] = serde_json::Value::Null;
            v["lora"] = serde_json::json!({ "r": 8, "alpha": 16, "target_modules": ["q_proj"] });
            v["training"]["dpo"] = training_dpo;
            v
        };
        let spec = parse(causal(serde_json::json!({}))).unwrap();
        assert_eq!(spec.records_for(), RecordsFor::Preference);
        let dpo = spec.training.dpo.unwrap();
        assert_eq!((dpo.beta, dpo.loss), (0.1, PreferenceLoss::Sigmoid));
        let spec = parse(causal(serde_json::json!({ "beta": 0.5, "loss": "ipo" }))).unwrap();
        assert_eq!(spec.training.dpo.unwrap().loss, PreferenceLoss::Ipo);
        let mut sft = causal(serde_json::Value::Null);
        sft["training"].as_object_mut().unwrap().remove("dpo");
        let sft = parse(sft).unwrap();
        assert_eq!(sft.records_for(), RecordsFor::Sft);
        assert!(
            serde_json::to_value(&sft).unwrap()["training"]
                .get("dpo")
                .is_none(),
            "an SFT spec writes no dpo field, so stored specs keep their bytes"
        );
        for beta in [0.0, 6.0] {
            let errors = parse(causal(serde_json::json!({ "beta": beta }))).unwrap_err();
            assert_eq!(paths(&errors), ["training.dpo.beta"], "{errors}");
        }
        let mut classify = valid_json();
        classify["training"]["dpo"] = serde_json::json!({});
        let errors = parse(classify).unwrap_err();
        assert_eq!(paths(&errors), ["training.dpo"], "{errors}");
        assert!(errors.to_string().contains("causal_lm"), "{errors}");
    }

    #[test]
    fn patience_defaults_to_two_rounds_and_is_bounded_by_the_rounds_limit() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.validation.patience(), DEFAULT_PATIENCE);
        let written = serde_json::to_value(&spec).unwrap();
        assert!(
            written
                .get("validation")
                .is_none_or(|v| v.get("patience").is_none()),
            "an omitted patience is not written, so stored specs keep their bytes"
        );
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "patience": 1 });
        assert_eq!(parse(v).unwrap().validation.patience(), 1);
        for patience in [0, MAX_ROUNDS + 1] {
            let mut v = valid_json();
            v["validation"] = serde_json::json!({ "patience": patience });
            let errors = parse(v).unwrap_err();
            assert_eq!(paths(&errors), ["validation.patience"], "{errors}");
            assert!(errors.to_string().contains("outside 1..=100"), "{errors}");
        }
    }

    #[test]
    fn a_verdict_scores_the_held_out_set_over_the_shards_unless_the_spec_says() {
        let spec = parse(valid_json()).unwrap();
        assert!(
            serde_json::to_value(&spec).unwrap()["validation"]
                .get("verdict_examples")
                .is_none(),
            "an omitted sample size is not written, so stored specs keep their bytes"
        );
        let v = &spec.validation;
        // The README's chat job: 24 held-out conversations, 3 shards.
        assert_eq!(v.verdict_examples(24, 3), MIN_VERDICT_EXAMPLES);
        // The verdicts of a round score about one set between them, whatever the shards.
        assert_eq!(v.verdict_examples(1800, 24), 75);
        assert_eq!(v.verdict_examples(1801, 24), 76);
        // Never fewer than the floor, never more than the set.
        assert_eq!(v.verdict_examples(100, 50), MIN_VERDICT_EXAMPLES);
        assert_eq!(v.verdict_examples(5, 3), 5);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "verdict_examples": 30 });
        let spec = parse(v).unwrap();
        assert_eq!(spec.validation.verdict_examples(24, 3), 24);
        assert_eq!(spec.validation.verdict_examples(100, 3), 30);
        // A job that names its own minimum gain is judged on the set it named it for, unless
        // it names a sample too.
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "min_gain": -0.05 });
        assert_eq!(parse(v).unwrap().validation.verdict_examples(240, 12), 240);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "min_gain": -0.05, "verdict_examples": 40 });
        assert_eq!(parse(v).unwrap().validation.verdict_examples(240, 12), 40);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "verdict_examples": 0 });
        let errors = parse(v).unwrap_err();
        assert_eq!(paths(&errors), ["validation.verdict_examples"], "{errors}");
        assert!(errors.to_string().contains("below 1"), "{errors}");
    }

    #[test]
    fn the_proof_rate_falls_with_the_bond_and_never_below_where_cheating_pays() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.validation.bond_multiple, 0);
        assert_eq!(spec.validation.proof_rate(), 1.0, "no bond: every proof");
        let written = serde_json::to_value(&spec).unwrap();
        assert!(
            written
                .get("validation")
                .is_none_or(|v| v.get("bond_multiple").is_none())
        );
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "bond_multiple": 4 });
        let spec = parse(v).unwrap();
        assert_eq!(spec.validation.min_proof_rate(), 0.2);
        assert!((spec.validation.proof_rate() - 0.25).abs() < 1e-12);
        let mut v = valid_json();
        v["validation"] = serde_json::json!({ "bond_multiple": 4, "proof_rate": 0.5 });
        assert_eq!(parse(v).unwrap().validation.proof_rate(), 0.5);
        for (body, path, says) in [
            (
                serde_json::json!({ "proof_rate": 0.5 }),
                "validation.proof_rate",
                "below 1.0000",
            ),
            (
                serde_json::json!({ "bond_multiple": 4, "proof_rate": 0.1 }),
                "validation.proof_rate",
                "below 0.2000",
            ),
            (
                serde_json::json!({ "bond_multiple": 4, "proof_rate": 0 }),
                "validation.proof_rate",
                "outside (0, 1]",
            ),
            (
                serde_json::json!({ "bond_multiple": 4, "proof_rate": 1.5 }),
                "validation.proof_rate",
                "outside (0, 1]",
            ),
            (
                serde_json::json!({ "bond_multiple": 21 }),
                "validation.bond_multiple",
                "above 20",
            ),
        ] {
            let mut v = valid_json();
            v["validation"] = body.clone();
            let errors = parse(v).unwrap_err();
            assert_eq!(
                paths(&errors).first().copied(),
                Some(path),
                "{body}: {errors}"
            );
            assert!(errors.to_string().contains(says), "{body}: {errors}");
        }
    }

    #[test]
    fn the_schedule_is_per_task_unless_the_job_asks_and_is_named_when_wrong() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.training.schedule, LrSchedule::Task);
        // Left out when it is the default: specs written before the field keep their CIDs.
        let written = serde_json::to_value(&spec).unwrap();
        assert!(written["training"].get("schedule").is_none(), "{written}");
        let mut v = valid_json();
        v["training"]["schedule"] = "job".into();
        let spec = parse(v).unwrap();
        assert_eq!(spec.training.schedule, LrSchedule::Job);
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["training"]["schedule"],
            "job"
        );
        let mut v = valid_json();
        v["training"]["schedule"] = "round".into();
        let errors = parse(v).unwrap_err();
        assert_eq!(paths(&errors), ["training.schedule"]);
        assert!(errors.to_string().contains("unknown variant"), "{errors}");
    }

    #[test]
    fn rank_bounds_are_inclusive() {
        for (r, ok) in [(1, true), (MAX_LORA_RANK, true), (MAX_LORA_RANK + 1, false)] {
            let mut v = valid_json();
            v["lora"]["r"] = r.into();
            assert_eq!(parse(v).is_ok(), ok, "r = {r}");
        }
    }

    #[test]
    fn lora_job_is_one_shard_one_round() {
        let mut v = valid_json();
        v["kind"] = "lora".into();
        assert_eq!(paths(&parse(v.clone()).unwrap_err()), ["shards", "rounds"]);
        v["shards"] = 1.into();
        v["rounds"] = 1.into();
        assert!(parse(v).is_ok());
    }

    #[test]
    fn module_names_are_checked_one_by_one() {
        let mut v = valid_json();
        v["lora"]["target_modules"] = serde_json::json!(["query", "val ue", "query"]);
        let errors = parse(v).unwrap_err();
        assert_eq!(
            paths(&errors),
            ["lora.target_modules[1]", "lora.target_modules[2]"]
        );
    }

    #[test]
    fn unknown_and_mistyped_fields_name_their_path() {
        let mut v = valid_json();
        v["training"]["epochz"] = 3.into();
        let errors = parse(v).unwrap_err();
        assert_eq!(paths(&errors), ["training.epochz"]);
        assert!(errors.to_string().contains("unknown field"), "{errors}");

        let mut v = valid_json();
        v["base_model"]["cid"] = "not-a-cid".into();
        let errors = parse(v).unwrap_err();
        assert_eq!(paths(&errors), ["base_model.cid"]);

        let mut v = valid_json();
        v["stake"]["token"] = "0x00".into();
        assert_eq!(paths(&parse(v).unwrap_err()), ["stake.token"]);

        let mut v = valid_json();
        v["stake"]["max_fee_bps"] = 1_001.into();
        assert_eq!(paths(&parse(v).unwrap_err()), ["stake.max_fee_bps"]);
        let mut v = valid_json();
        v["stake"]["max_fee_bps"] = 250.into();
        assert_eq!(parse(v).unwrap().stake.max_fee_bps(), 250);
    }

    #[test]
    fn model_and_task_must_fit() {
        let mut v = valid_json();
        v["base_model"]["architecture"] = "llama".into();
        let errors = parse(v).unwrap_err();
        assert_eq!(paths(&errors), ["base_model.task"]);
        let mut v = valid_json();
        v["base_model"]["num_labels"] = serde_json::Value::Null;
        assert_eq!(paths(&parse(v).unwrap_err()), ["base_model.num_labels"]);
    }

    /// The OpenAPI schema states the same bounds `validate` enforces (they are literals in the
    /// derive attributes, which cannot name the constants).
    #[cfg(feature = "openapi")]
    #[test]
    fn schema_bounds_are_the_validation_limits() {
        use utoipa::PartialSchema;
        let props = |schema| serde_json::to_value(schema).unwrap()["properties"].clone();
        let spec = props(JobSpec::schema());
        let lora = props(LoraSpec::schema());
        let training = props(TrainingArgs::schema());
        assert_eq!(spec["version"]["maximum"], PROTOCOL_VERSION);
        assert_eq!(spec["shards"]["maximum"], MAX_SHARDS);
        assert_eq!(spec["rounds"]["maximum"], MAX_ROUNDS);
        assert_eq!(spec["held_out_fraction"]["maximum"], MAX_HELD_OUT_FRACTION);
        assert_eq!(spec["min_reputation"]["maximum"], MAX_REPUTATION_BPS);
        assert_eq!(lora["r"]["maximum"], MAX_LORA_RANK);
        assert_eq!(training["epochs"]["maximum"], MAX_EPOCHS);
        assert_eq!(training["batch_size"]["maximum"], MAX_BATCH_SIZE);
        assert_eq!(training["max_seq_len"]["minimum"], MIN_SEQ_LEN);
        assert_eq!(training["max_seq_len"]["maximum"], MAX_SEQ_LEN);
    }

    #[test]
    fn shard_sizes_spread_the_remainder() {
        let spec = parse(valid_json()).unwrap();
        assert_eq!(spec.shard_sizes(10).unwrap(), [4, 3, 3]);
        assert!(
            spec.shard_sizes(2)
                .unwrap_err()
                .contains("cannot fill 3 shards")
        );
    }
}
