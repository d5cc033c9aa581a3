//! The shard manifest: how a job's dataset was cut, written to the content store at creation so
//! anyone can audit which records every shard held.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::PROTOCOL_VERSION;
use super::ids::ContentId;
use super::validation::SpecErrors;

/// One training shard.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardRef {
    /// Position among the job's shards, counted from 0.
    pub index: u32,
    /// The shard's records, as JSONL, in the content store.
    pub cid: ContentId,
    /// How many records it holds.
    pub records: u64,
    /// Size of its JSONL document, in bytes.
    pub bytes: u64,
}

/// The held-out set, sealed (authenticated encryption). The key is held by the API and given
/// only to the validator; it is never in the manifest or the content store.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldOutRef {
    /// The sealed held-out records in the content store.
    pub sealed_cid: ContentId,
    /// How many records it holds.
    pub records: u64,
}

/// How a job's dataset was cut: its sealed held-out set and its training shards, each by CID.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardManifest {
    /// The protocol version it was written with.
    pub version: u32,
    /// The job whose dataset this is.
    pub job_id: Uuid,
    /// The dataset as uploaded, before shuffling.
    pub dataset_cid: ContentId,
    /// The job spec document (job.json).
    pub job_spec_cid: ContentId,
    /// Seed of the shuffle and the cut (the spec's training seed).
    pub seed: u64,
    /// The held-out set the validator scores adapters on.
    pub held_out: HeldOutRef,
    /// The training shards, in index order.
    pub shards: Vec<ShardRef>,
}

impl ShardManifest {
    /// Records across held-out set and shards.
    pub fn total_records(&self) -> u64 {
        self.held_out.records + self.shards.iter().map(|s| s.records).sum::<u64>()
    }

    /// Shards are numbered 0..n in order, each non-empty.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut e = SpecErrors::default();
        e.check(self.version == PROTOCOL_VERSION, "version", || {
            format!("version {} is not supported", self.version)
        });
        e.check(!self.shards.is_empty(), "shards", || {
            "a manifest lists at least one shard".into()
        });
        for (i, shard) in self.shards.iter().enumerate() {
            e.check(
                shard.index as usize == i,
                &format!("shards[{i}].index"),
                || format!("expected index {i}, found {}", shard.index),
            );
            e.check(shard.records > 0, &format!("shards[{i}].records"), || {
                "a shard holds at least one record".into()
            });
        }
        e.check(self.held_out.records > 0, "held_out.records", || {
            "the held-out set holds at least one record".into()
        });
        e.into_result()
    }
}
