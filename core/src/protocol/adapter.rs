//! Metadata stored beside every adapter (a PEFT folder: adapter_config.json +
//! adapter_model.safetensors), so an adapter found by CID says what it is and where it came from.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::ids::ContentId;
use super::job_spec::LoraSpec;

/// The adapter layout Shardwork produces: Hugging Face PEFT's.
pub const ADAPTER_FORMAT_PEFT: &str = "peft";
/// Name of a PEFT adapter's config file in its folder (and its bundle).
pub const PEFT_CONFIG_FILE: &str = "adapter_config.json";
/// Name of a PEFT adapter's weights file in its folder (and its bundle).
pub const PEFT_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// What PEFT prefixes every saved tensor name with.
pub const PEFT_TENSOR_PREFIX: &str = "base_model.model.";

/// What an adapter is and where it came from, stored beside it in its bundle (shardwork.json).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterMeta {
    /// The protocol version it was written with.
    pub version: u32,
    /// The adapter's layout; always `peft`, Hugging Face PEFT's.
    pub format: String,
    /// The base model it adapts.
    pub base_model_cid: ContentId,
    /// The LoRA configuration it was trained with.
    pub lora: LoraSpec,
    /// The job it was trained for.
    pub job_id: Uuid,
    /// The round it belongs to; rounds count from 1.
    pub round: u32,
    /// The shard it was trained on; absent for a round's merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_index: Option<u32>,
    /// For a merge: the adapters merged, in order, with their weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<(ContentId, f64)>,
    /// Training records it saw (weights the merge).
    pub samples: u64,
}
