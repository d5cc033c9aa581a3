//! The adapter a job continues from (`base_model.adapter`, issue 48): round 1 trains from it
//! and is judged against it, so a requester can tune a model in several jobs (SFT, then more
//! data a month later) without starting over from the bare base model.
//!
//! Two kinds of adapter may be named, and nothing else:
//! * **a result of one of the requester's own completed jobs** (its `adapter_cid`): sealed to
//!   that job's last round, opened here with that job's key;
//! * **an unsealed PEFT bundle** the requester may read (its own upload, or content no account
//!   claimed), by the same claim rule as a dataset named by CID.
//!
//! Another requester's result is sealed, and its key is derived for its own job only: naming
//! it is refused. What is read is bounded by the job's model before a byte is held, and checked
//! as the nodes will load it (PEFT layout, the job's LoRA settings, f32 factors of rank `r`
//! whose widths fit the model's projections), so a start that could not train is refused at
//! posting, naming `base_model.adapter`. The files are then sealed again to the new job as
//! round 0's result ([`Sealed::start_of`] of round 1), the key its round-1 leases give out.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use shardwork_core::protocol::adapter::{
    PEFT_CONFIG_FILE as CONFIG_FILE, PEFT_TENSOR_PREFIX as PEFT_PREFIX,
    PEFT_WEIGHTS_FILE as WEIGHTS_FILE,
};
use shardwork_core::protocol::job_spec::CLASSIFIER_HEAD;
use shardwork_core::protocol::{Architecture, Bundle, JobSpec};
use shardwork_core::store::keys::Sealed;
use shardwork_core::store::{ContentStore, StoreError, content_key};
use uuid::Uuid;

use crate::domain::error::DomainError;
use crate::domain::flow::rounds;
use crate::domain::lifecycle::JobStatus;
use crate::domain::models::{ModelFacts, safetensors_header, safetensors_header_len};
use crate::domain::sealing::job_key;
use crate::domain::{content, sizing::ModelShape};
use crate::entities::job;

/// The spec field every refusal here names.
const FIELD: &str = "base_model.adapter";
/// The largest bundle document read.
const MAX_BUNDLE_BYTES: u64 = 1 << 20;
/// The largest `adapter_config.json` read.
const MAX_CONFIG_BYTES: u64 = 64 << 10;
/// Room for a safetensors header beside the tensors it describes.
const HEADER_ROOM: u64 = 1 << 20;

/// A starting adapter, read, opened and checked: its two PEFT files.
pub struct StartAdapter {
    config: Vec<u8>,
    weights: Vec<u8>,
}

fn refuse(message: impl Into<String>) -> DomainError {
    DomainError::invalid(FIELD, message)
}

fn store_failed(cid: &cid::Cid, err: StoreError) -> DomainError {
    match err {
        StoreError::NotFound(_) => refuse(format!("{cid} is not in the content store")),
        StoreError::TooLarge { .. } => refuse(format!(
            "{cid}: {err}; a LoRA adapter of this model and rank is smaller"
        )),
        other => DomainError::internal("reading the starting adapter", other),
    }
}

/// Reads and checks the adapter `spec.base_model.adapter` names for `requester`'s new job on
/// the model `model` describes; `None` when the job starts from the bare base model.
pub async fn read_start<C: ConnectionTrait>(
    db: &C,
    store: &dyn ContentStore,
    sealing_secret: &str,
    requester: &str,
    spec: &JobSpec,
    model: &ModelFacts,
) -> Result<Option<StartAdapter>, DomainError> {
    let Some(named) = &spec.base_model.adapter else {
        return Ok(None);
    };
    let cid = named.0;
    let own_result = own_result(db, requester, &cid).await?;
    // Anything but the requester's own result is read only once the requester may read it,
    // so a refusal says nothing of what someone else's private upload holds.
    if own_result.is_none() {
        content::check_claim(db, requester, &cid, "adapter").await?;
    }
    let bundle_bytes = store
        .get_bytes(&cid, MAX_BUNDLE_BYTES)
        .await
        .map_err(|e| store_failed(&cid, e))?;
    let bundle =
        Bundle::decode(&bundle_bytes).map_err(|e| refuse(format!("{cid} is not a bundle: {e}")))?;
    // Opens a sealed file of the requester's own result; an unsealed file is as stored.
    let opener = match (&own_result, bundle.sealed) {
        (Some(source), true) => Some(
            Sealed::RoundResult {
                round: rounds::result_round(db, source)
                    .await?
                    .map_or(source.rounds, |r| r.number) as u32,
            }
            .seal_for(source.id, &job_key(sealing_secret, source.id)),
        ),
        (None, true) => {
            return Err(DomainError::Forbidden(format!(
                "{cid} is sealed: a job may continue from a result of its requester's own \
                 completed job, or from an unsealed adapter bundle"
            )));
        }
        (_, false) => None,
    };
    let file_cid = |name: &str| {
        bundle.file(name).map(|c| c.0).ok_or_else(|| {
            refuse(format!(
                "the bundle {cid} has no {name}: not a PEFT adapter"
            ))
        })
    };
    let (config_cid, weights_cid) = (file_cid(CONFIG_FILE)?, file_cid(WEIGHTS_FILE)?);
    if opener.is_none() {
        for file in [&config_cid, &weights_cid] {
            content::check_claim(db, requester, file, "adapter").await?;
        }
    }
    let read = |file: cid::Cid, limit: u64| async move {
        store
            .get_bytes(&file, limit)
            .await
            .map_err(|e| store_failed(&file, e))
    };
    let open = |name: &str, bytes: Bytes| match &opener {
        Some(seal) => seal
            .open_file(name, &bytes)
            .map_err(|e| DomainError::internal("opening the earlier job's result", e)),
        None => Ok(bytes.to_vec()),
    };
    // Sealing adds a few bytes per file: the bounds leave room for them.
    let config = open(CONFIG_FILE, read(config_cid, MAX_CONFIG_BYTES + 64).await?)?;
    check_config(&config, spec)?;
    let limit = weights_limit(spec, &model.shape);
    let weights = open(WEIGHTS_FILE, read(weights_cid, limit + 64).await?)?;
    check_weights(&weights, spec, &model.shape)?;
    Ok(Some(StartAdapter { config, weights }))
}

/// The ended job of `requester` whose result is `cid` (compared by multihash, as every
/// content rule is), if there is one: a completed job, or one that ended early paying its
/// completed rounds (`refunded` with a result: decision 0047).
async fn own_result<C: ConnectionTrait>(
    db: &C,
    requester: &str,
    cid: &cid::Cid,
) -> Result<Option<job::Model>, DomainError> {
    let wanted = content_key(cid);
    let finished = job::Entity::find()
        .filter(job::Column::Requester.eq(requester))
        .filter(
            job::Column::Status
                .is_in([JobStatus::Completed.as_str(), JobStatus::Refunded.as_str()]),
        )
        .filter(job::Column::ResultAdapterCid.is_not_null())
        .all(db)
        .await?;
    Ok(finished.into_iter().find(|j| {
        j.result_adapter_cid
            .as_deref()
            .and_then(|c| shardwork_core::store::content_key_of(c).ok())
            .is_some_and(|k| k == wanted)
    }))
}

/// The most bytes a LoRA adapter of the job's settings on a model of `shape` can take: every
/// projection of every layer adapted at the widest width, the saved modules as square layers
/// of the hidden width plus a head, and a header.
fn weights_limit(spec: &JobSpec, shape: &ModelShape) -> u64 {
    let widest = shape.hidden_size.max(shape.intermediate_size);
    let r = u64::from(spec.lora.r);
    let lora = shape
        .num_hidden_layers
        .saturating_mul(8)
        .saturating_mul(r.saturating_mul(2 * widest))
        .saturating_mul(4);
    let saved = (spec.lora.saved_modules(spec.base_model.task).len() as u64)
        .saturating_mul(shape.hidden_size + 1)
        .saturating_mul(shape.hidden_size + 1_001)
        .saturating_mul(4);
    8 + HEADER_ROOM + lora.saturating_add(saved)
}

/// The adapter's PEFT configuration must be the job's LoRA settings: the job trains the same
/// factors further, and its adapters are saved with its own configuration.
fn check_config(bytes: &[u8], spec: &JobSpec) -> Result<(), DomainError> {
    let lora = &spec.lora;
    let config: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| refuse(format!("{CONFIG_FILE} is not valid JSON: {e}")))?;
    let text = |key: &str| config[key].as_str().unwrap_or_default().to_owned();
    if text("peft_type") != "LORA" {
        return Err(refuse(format!(
            "{CONFIG_FILE}: peft_type {:?} is not LORA",
            config["peft_type"]
        )));
    }
    for flag in ["use_dora", "use_rslora", "fan_in_fan_out"] {
        if config[flag].as_bool() == Some(true) {
            return Err(refuse(format!(
                "{CONFIG_FILE}: {flag} is not supported by the nodes"
            )));
        }
    }
    if !matches!(config["bias"].as_str(), None | Some("none")) {
        return Err(refuse(format!(
            "{CONFIG_FILE}: bias {:?} is not supported; only \"none\"",
            config["bias"]
        )));
    }
    if config["r"].as_u64() != Some(u64::from(lora.r)) {
        return Err(refuse(format!(
            "{CONFIG_FILE} has r {}; the job's lora.r is {}",
            config["r"], lora.r
        )));
    }
    let alpha = config["lora_alpha"].as_f64();
    if alpha.is_none_or(|a| (a - lora.alpha).abs() > 1e-9 * lora.alpha.abs().max(1.0)) {
        return Err(refuse(format!(
            "{CONFIG_FILE} has lora_alpha {}; the job's lora.alpha is {}",
            config["lora_alpha"], lora.alpha
        )));
    }
    let names = |key: &str| -> BTreeSet<String> {
        config[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let wanted: BTreeSet<String> = lora.target_modules.iter().cloned().collect();
    if names("target_modules") != wanted {
        return Err(refuse(format!(
            "{CONFIG_FILE} adapts {:?}; the job's lora.target_modules are {:?}",
            names("target_modules"),
            wanted
        )));
    }
    let saved: BTreeSet<String> = lora
        .saved_modules(spec.base_model.task)
        .into_iter()
        .collect();
    if names("modules_to_save") != saved {
        return Err(refuse(format!(
            "{CONFIG_FILE} saves {:?}; the job saves {:?} (lora.modules_to_save, and a \
             classification job's head)",
            names("modules_to_save"),
            saved
        )));
    }
    Ok(())
}

/// `(in, out)` widths of the projection at module path `path` of a model of `shape`, when it is
/// one the nodes adapt (longest known suffix first: BERT's `attention.output.dense` before
/// `output.dense`).
fn projection_widths(
    architecture: Architecture,
    path: &str,
    shape: &ModelShape,
) -> Option<(u64, u64)> {
    let (h, i) = (shape.hidden_size, shape.intermediate_size);
    let heads = shape.num_attention_heads.max(1);
    let kv = h / heads * shape.num_key_value_heads.unwrap_or(heads);
    let known: &[(&str, (u64, u64))] = match architecture {
        Architecture::Llama => &[
            ("q_proj", (h, h)),
            ("k_proj", (h, kv)),
            ("v_proj", (h, kv)),
            ("o_proj", (h, h)),
            ("gate_proj", (h, i)),
            ("up_proj", (h, i)),
            ("down_proj", (i, h)),
        ],
        Architecture::Bert => &[
            ("attention.self.query", (h, h)),
            ("attention.self.key", (h, h)),
            ("attention.self.value", (h, h)),
            ("attention.output.dense", (h, h)),
            ("intermediate.dense", (h, i)),
            ("pooler.dense", (h, h)),
            ("output.dense", (i, h)),
        ],
    };
    known
        .iter()
        .find(|(suffix, _)| path == *suffix || path.ends_with(&format!(".{suffix}")))
        .map(|(_, widths)| *widths)
}

/// Whether module path `path` is one `target` names by PEFT's suffix rule.
fn targets(path: &str, target: &str) -> bool {
    path == target || path.ends_with(&format!(".{target}"))
}

/// The weights must be a safetensors file of PEFT-named f32 tensors: for each adapted module a
/// `lora_A` of shape `(r, in)` and a `lora_B` of shape `(out, r)` whose widths are the model's,
/// and otherwise only the tensors of the job's saved modules.
fn check_weights(bytes: &[u8], spec: &JobSpec, shape: &ModelShape) -> Result<(), DomainError> {
    let bad = |message: String| refuse(format!("{WEIGHTS_FILE}: {message}"));
    let size = bytes.len() as u64;
    let header_len = safetensors_header_len(bytes, size, HEADER_ROOM).map_err(bad)?;
    let header =
        safetensors_header(bytes, header_len, size).map_err(|fault| match fault.tensor {
            Some(tensor) => bad(format!("{tensor}: {}", fault.message)),
            None => bad(fault.message),
        })?;
    let r = u64::from(spec.lora.r);
    let architecture = spec.base_model.architecture;
    let saved = spec.lora.saved_modules(spec.base_model.task);
    let mut saved_present = BTreeSet::new();
    let mut factors: BTreeMap<String, [bool; 2]> = BTreeMap::new();
    for (name, info) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        if info["dtype"].as_str() != Some("F32") {
            return Err(bad(format!(
                "{name} is {}; the nodes train f32 factors",
                info["dtype"]
            )));
        }
        let dims: Vec<u64> = info["shape"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
            .unwrap_or_default();
        let path = name
            .strip_prefix(PEFT_PREFIX)
            .ok_or_else(|| bad(format!("{name} does not start with {PEFT_PREFIX}")))?;
        let (module, factor) = match (
            path.strip_suffix(".lora_A.weight"),
            path.strip_suffix(".lora_B.weight"),
        ) {
            (Some(module), _) => (module, 0),
            (_, Some(module)) => (module, 1),
            _ => {
                if let Some(module) = saved.iter().find(|m| {
                    path.starts_with(&format!("{m}.")) || path.contains(&format!(".{m}."))
                }) {
                    if module == CLASSIFIER_HEAD {
                        check_head(name, path, &dims, spec, shape).map_err(bad)?;
                    }
                    saved_present.insert(module.clone());
                    continue;
                }
                return Err(bad(format!(
                    "{name} is neither a LoRA factor nor a tensor of lora.modules_to_save"
                )));
            }
        };
        if !spec.lora.target_modules.iter().any(|t| targets(module, t)) {
            return Err(bad(format!(
                "{name} adapts {module}, which lora.target_modules does not name"
            )));
        }
        let (width_in, width_out) =
            projection_widths(architecture, module, shape).ok_or_else(|| {
                bad(format!(
                    "{module} is not a projection of a {architecture:?} model"
                ))
            })?;
        let expected = if factor == 0 {
            [r, width_in]
        } else {
            [width_out, r]
        };
        if dims != expected {
            return Err(bad(format!(
                "{name} has shape {dims:?}; this model and lora.r = {r} need {expected:?}"
            )));
        }
        factors.entry(module.to_owned()).or_default()[factor] = true;
    }
    if let Some((module, _)) = factors.iter().find(|(_, pair)| !(pair[0] && pair[1])) {
        return Err(bad(format!("{module} has only one of lora_A and lora_B")));
    }
    if factors.is_empty() {
        return Err(bad("it holds no LoRA factors".into()));
    }
    if let Some(missing) = saved.iter().find(|m| !saved_present.contains(*m)) {
        return Err(bad(format!(
            "it holds no tensor of {missing}, which the job trains whole and saves"
        )));
    }
    Ok(())
}

/// The classification head is `num_labels` rows of the hidden width, and a bias per label.
fn check_head(
    name: &str,
    path: &str,
    dims: &[u64],
    spec: &JobSpec,
    shape: &ModelShape,
) -> Result<(), String> {
    let labels = u64::from(spec.base_model.num_labels.unwrap_or(0));
    let expected: &[u64] = if path.ends_with(".weight") {
        &[labels, shape.hidden_size]
    } else if path.ends_with(".bias") {
        &[labels]
    } else {
        return Err(format!("{name} is not the head's weight or bias"));
    };
    if dims != expected {
        return Err(format!(
            "{name} has shape {dims:?}; {labels} labels on this model need {expected:?}"
        ));
    }
    Ok(())
}

impl StartAdapter {
    /// Seals the adapter to job `job_id` as its round 0's result and stores it: the bundle's
    /// CID, round 1's start.
    pub async fn store_for(
        &self,
        store: &dyn ContentStore,
        sealing_secret: &str,
        job_id: Uuid,
    ) -> Result<cid::Cid, StoreError> {
        let seal = Sealed::start_of(1).seal_for(job_id, &job_key(sealing_secret, job_id));
        let mut bundle = Bundle::new("adapter");
        bundle.sealed = true;
        for (name, bytes) in [(CONFIG_FILE, &self.config), (WEIGHTS_FILE, &self.weights)] {
            let cid = store.put(Bytes::from(seal.seal_file(name, bytes))).await?;
            bundle
                .files
                .insert(name.to_owned(), shardwork_core::protocol::ContentId(cid));
        }
        let doc = serde_json::to_vec_pretty(&bundle).map_err(|e| {
            StoreError::Backend(format!("encoding the starting adapter's bundle: {e}"))
        })?;
        store.put(Bytes::from(doc)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwork_core::protocol::LoraSpec;

    fn shape() -> ModelShape {
        ModelShape {
            hidden_size: 8,
            intermediate_size: 16,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
        }
    }

    fn lora() -> LoraSpec {
        LoraSpec {
            r: 2,
            alpha: 4.0,
            dropout: 0.0,
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            modules_to_save: vec![],
        }
    }

    fn spec() -> JobSpec {
        serde_json::from_value(serde_json::json!({
            "version": 1, "kind": "federated",
            "base_model": { "cid": "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
                            "format": "safetensors", "architecture": "llama", "task": "causal_lm" },
            "lora": lora(),
            "training": { "epochs": 1, "learning_rate": 0.001, "batch_size": 4,
                          "max_seq_len": 32, "seed": 7 },
            "shards": 2, "rounds": 1, "held_out_fraction": 0.1,
            "deadline": "2027-01-01T00:00:00Z",
            "stake": { "amount": "1000" }
        }))
        .unwrap()
    }

    /// A safetensors file of zero-filled f32 tensors with these names and shapes.
    fn safetensors(tensors: &[(&str, Vec<u64>)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        let mut offset = 0u64;
        for (name, dims) in tensors {
            let bytes = dims.iter().product::<u64>() * 4;
            header.insert(
                (*name).to_owned(),
                serde_json::json!({"dtype": "F32", "shape": dims, "data_offsets": [offset, offset + bytes]}),
            );
            offset += bytes;
        }
        let text = serde_json::to_vec(&header).unwrap();
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend(text);
        out.resize(out.len() + offset as usize, 0);
        out
    }

    fn good() -> Vec<(&'static str, Vec<u64>)> {
        vec![
            (
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                vec![2, 8],
            ),
            (
                "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
                vec![8, 2],
            ),
            (
                "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight",
                vec![2, 8],
            ),
            // Grouped-query attention: v_proj is 8 / 4 heads x 2 kv heads = 4 wide.
            (
                "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight",
                vec![4, 2],
            ),
        ]
    }

    #[test]
    fn weights_of_the_jobs_rank_and_the_models_widths_pass() {
        check_weights(&safetensors(&good()), &spec(), &shape()).unwrap();
    }

    #[test]
    fn weights_that_would_not_load_are_refused_naming_what_is_wrong() {
        let message = |tensors: Vec<(&str, Vec<u64>)>| match check_weights(
            &safetensors(&tensors),
            &spec(),
            &shape(),
        )
        .unwrap_err()
        {
            DomainError::Invalid(errors) => {
                assert_eq!(errors[0].path, FIELD);
                errors[0].message.clone()
            }
            other => panic!("{other:?}"),
        };
        let mut wrong_rank = good();
        wrong_rank[0].1 = vec![4, 8];
        assert!(message(wrong_rank).contains("need [2, 8]"));
        let mut wrong_width = good();
        wrong_width[3].1 = vec![8, 2];
        assert!(message(wrong_width).contains("need [4, 2]"));
        let mut untargeted = good();
        untargeted[0].0 = "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight";
        assert!(message(untargeted).contains("does not name"));
        assert!(message(good()[..3].to_vec()).contains("only one of"));
        assert!(message(vec![]).contains("no LoRA factors"));
        let mut truncated = safetensors(&good());
        truncated.pop();
        assert!(
            match check_weights(&truncated, &spec(), &shape()).unwrap_err() {
                DomainError::Invalid(e) => e[0].message.contains("truncated"),
                _ => false,
            }
        );
    }

    #[test]
    fn a_config_other_than_the_jobs_lora_is_refused() {
        let config = |v: serde_json::Value| check_config(v.to_string().as_bytes(), &spec());
        let ok = serde_json::json!({"peft_type": "LORA", "r": 2, "lora_alpha": 4,
            "target_modules": ["v_proj", "q_proj"], "bias": "none"});
        config(ok.clone()).unwrap();
        for (key, value) in [
            ("r", serde_json::json!(4)),
            ("lora_alpha", serde_json::json!(8)),
            ("target_modules", serde_json::json!(["q_proj"])),
            ("use_dora", serde_json::json!(true)),
            ("peft_type", serde_json::json!("IA3")),
        ] {
            let mut v = ok.clone();
            v[key] = value;
            assert!(config(v).is_err(), "{key} passed");
        }
    }

    #[test]
    fn bert_widths_take_the_longest_suffix() {
        let s = shape();
        let w = |p| projection_widths(Architecture::Bert, p, &s);
        assert_eq!(
            w("bert.encoder.layer.0.attention.output.dense"),
            Some((8, 8))
        );
        assert_eq!(w("bert.encoder.layer.0.output.dense"), Some((16, 8)));
        assert_eq!(w("bert.encoder.layer.0.intermediate.dense"), Some((8, 16)));
        assert_eq!(w("bert.encoder.layer.0.attention.self.query"), Some((8, 8)));
    }
}
