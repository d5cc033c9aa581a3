//! Adapters on disk in Hugging Face PEFT's layout: `adapter_config.json` beside
//! `adapter_model.safetensors`, tensors named as `get_peft_model_state_dict` names them:
//! `base_model.model.<module>.lora_A.weight` / `.lora_B.weight` (adapter name removed), and for
//! `modules_to_save` the wrapped module's own tensors, `base_model.model.<module>.weight`.
//! `PeftModel.from_pretrained` loads such a directory unchanged.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lora::{LoraConfig, Trainables};

/// Name of the adapter's config file in an adapter directory.
pub const CONFIG_FILE: &str = shardwork_core::protocol::adapter::PEFT_CONFIG_FILE;
/// Name of the adapter's weights file in an adapter directory.
pub const WEIGHTS_FILE: &str = shardwork_core::protocol::adapter::PEFT_WEIGHTS_FILE;
/// What PEFT prefixes every saved tensor name with.
pub const PREFIX: &str = shardwork_core::protocol::adapter::PEFT_TENSOR_PREFIX;

/// The subset of PEFT's `LoraConfig` this trainer reads and writes. Unknown fields in a file
/// written by PEFT are ignored; settings we cannot reproduce (DoRA, rsLoRA, fan-in-fan-out)
/// are rejected rather than silently mis-applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterConfig {
    /// The PEFT method; only `LORA` is supported.
    pub peft_type: String,
    /// `SEQ_CLS` or `CAUSAL_LM`.
    pub task_type: Option<String>,
    /// The model the adapter was trained on (a Hub id or a path), if known.
    pub base_model_name_or_path: Option<String>,
    /// LoRA rank.
    pub r: usize,
    /// LoRA alpha; the update is scaled by `lora_alpha / r`.
    pub lora_alpha: f64,
    /// Dropout on the LoRA branch's input during training.
    #[serde(default)]
    pub lora_dropout: f32,
    /// Module names or paths the LoRA layers wrap (PEFT's suffix rule).
    pub target_modules: Vec<String>,
    /// Modules trained in full and saved whole, e.g. `classifier`.
    #[serde(default)]
    pub modules_to_save: Option<Vec<String>>,
    /// Which biases train; only `none` is supported.
    #[serde(default = "bias_none")]
    pub bias: String,
    /// Whether weights are stored `(in, out)`; only `false` is supported.
    #[serde(default)]
    pub fan_in_fan_out: bool,
    /// Whether PEFT loads the adapter frozen, for inference.
    #[serde(default = "yes")]
    pub inference_mode: bool,
    /// Whether PEFT initialised the LoRA factors its default way (A random, B zero).
    #[serde(default = "yes")]
    pub init_lora_weights: bool,
    /// Whether the update is scaled by `alpha / √r` (rsLoRA); not supported.
    #[serde(default)]
    pub use_rslora: bool,
    /// Whether the adapter is DoRA (weight-decomposed LoRA); not supported.
    #[serde(default)]
    pub use_dora: bool,
}

fn bias_none() -> String {
    "none".into()
}

fn yes() -> bool {
    true
}

impl AdapterConfig {
    /// The PEFT config for a [`LoraConfig`], with PEFT's defaults for what it does not set.
    pub fn from_lora(cfg: &LoraConfig, task_type: &str, base_model: Option<&str>) -> Self {
        Self {
            peft_type: "LORA".into(),
            task_type: Some(task_type.into()),
            base_model_name_or_path: base_model.map(str::to_owned),
            r: cfg.r,
            lora_alpha: cfg.alpha,
            lora_dropout: cfg.dropout,
            target_modules: cfg.target_modules.clone(),
            modules_to_save: (!cfg.modules_to_save.is_empty()).then(|| cfg.modules_to_save.clone()),
            bias: bias_none(),
            fan_in_fan_out: false,
            inference_mode: true,
            init_lora_weights: true,
            use_rslora: false,
            use_dora: false,
        }
    }

    /// The [`LoraConfig`] this file describes, validated.
    pub fn lora_config(&self) -> Result<LoraConfig> {
        let cfg = LoraConfig {
            r: self.r,
            alpha: self.lora_alpha,
            dropout: self.lora_dropout,
            target_modules: self.target_modules.clone(),
            modules_to_save: self.modules_to_save.clone().unwrap_or_default(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn check_supported(&self, path: &Path) -> Result<()> {
        let unsupported = |what: &str| Error::Config {
            path: path.to_path_buf(),
            detail: format!("{what} is not supported by this trainer"),
        };
        if self.peft_type != "LORA" {
            return Err(unsupported(&format!("peft_type {:?}", self.peft_type)));
        }
        if self.use_dora {
            return Err(unsupported("use_dora: true"));
        }
        if self.use_rslora {
            return Err(unsupported("use_rslora: true"));
        }
        if self.fan_in_fan_out {
            return Err(unsupported("fan_in_fan_out: true"));
        }
        if self.bias != "none" {
            return Err(unsupported(&format!("bias {:?}", self.bias)));
        }
        self.lora_config().map_err(|e| Error::Config {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        Ok(())
    }

    /// PEFT writes `lora_alpha` as an integer; keep it one when it is whole so the file
    /// round-trips byte-for-byte through PEFT's own config class.
    fn to_json(&self) -> Result<String> {
        let mut v = serde_json::to_value(self).map_err(|e| Error::Invalid(e.to_string()))?;
        if self.lora_alpha.fract() == 0.0 && self.lora_alpha.abs() < 1e15 {
            v["lora_alpha"] = serde_json::json!(self.lora_alpha as i64);
        }
        // f32 → JSON would print 0.1 as 0.10000000149011612.
        v["lora_dropout"] = serde_json::json!((self.lora_dropout as f64 * 1e6).round() / 1e6);
        serde_json::to_string_pretty(&v).map_err(|e| Error::Invalid(e.to_string()))
    }
}

/// An adapter in memory: its config and its tensors, named without [`PREFIX`].
#[derive(Debug, Clone)]
pub struct Adapter {
    /// The adapter's PEFT config.
    pub config: AdapterConfig,
    /// LoRA factors and saved-module tensors, named without [`PREFIX`].
    pub tensors: BTreeMap<String, Tensor>,
}

/// One LoRA-adapted module's factors.
#[derive(Debug, Clone)]
pub struct LoraPair {
    /// `(r, in)`
    pub a: Tensor,
    /// `(out, r)`
    pub b: Tensor,
}

impl Adapter {
    /// The current values of a model's trainables.
    pub fn from_trainables(config: AdapterConfig, trainables: &Trainables) -> Result<Self> {
        Ok(Self {
            config,
            tensors: trainables.snapshot()?,
        })
    }

    /// LoRA factors by module path. A module with only one of A/B is an error.
    pub fn lora_pairs(&self) -> Result<BTreeMap<String, LoraPair>> {
        let mut out = BTreeMap::new();
        for (name, a) in &self.tensors {
            if let Some(module) = name.strip_suffix(".lora_A.weight") {
                let b_name = format!("{module}.lora_B.weight");
                let b = self
                    .tensors
                    .get(&b_name)
                    .ok_or_else(|| Error::Mismatch(format!("{name} has no {b_name}")))?;
                out.insert(
                    module.to_string(),
                    LoraPair {
                        a: a.clone(),
                        b: b.clone(),
                    },
                );
            } else if let Some(module) = name.strip_suffix(".lora_B.weight")
                && !self
                    .tensors
                    .contains_key(&format!("{module}.lora_A.weight"))
            {
                return Err(Error::Mismatch(format!("{name} has no lora_A")));
            }
        }
        Ok(out)
    }

    /// Tensors that are not LoRA factors: the `modules_to_save` weights.
    pub fn saved_modules(&self) -> BTreeMap<String, Tensor> {
        self.tensors
            .iter()
            .filter(|(k, _)| !k.contains(".lora_A.") && !k.contains(".lora_B."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Writes `adapter_config.json` and `adapter_model.safetensors` into `dir` (created if
    /// missing). Tensors are written as F32, which PEFT loads into any dtype.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let config_path = dir.join(CONFIG_FILE);
        std::fs::write(&config_path, self.config.to_json()?)
            .map_err(|e| Error::io(&config_path, e))?;
        let mut named = std::collections::HashMap::new();
        for (k, v) in &self.tensors {
            named.insert(
                format!("{PREFIX}{k}"),
                v.to_dtype(candle_core::DType::F32)?.contiguous()?,
            );
        }
        let weights_path = dir.join(WEIGHTS_FILE);
        candle_core::safetensors::save(&named, &weights_path).map_err(|e| Error::Safetensors {
            path: weights_path.clone(),
            detail: e.to_string(),
        })?;
        Ok(())
    }

    /// Reads a PEFT adapter directory. Errors name the file and what is wrong in it.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config_path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let config: AdapterConfig = serde_json::from_str(&text).map_err(|e| Error::Config {
            path: config_path.clone(),
            detail: e.to_string(),
        })?;
        config.check_supported(&config_path)?;
        let weights_path = dir.join(WEIGHTS_FILE);
        let raw = crate::safetensors_file::load(&weights_path, device)?;
        let mut tensors = BTreeMap::new();
        for (k, v) in raw {
            let name = k.strip_prefix(PREFIX).ok_or_else(|| Error::Safetensors {
                path: weights_path.clone(),
                detail: format!("tensor {k} does not start with {PREFIX}"),
            })?;
            tensors.insert(name.to_string(), v);
        }
        let adapter = Self { config, tensors };
        let pairs = adapter.lora_pairs().map_err(|e| Error::Safetensors {
            path: weights_path.clone(),
            detail: e.to_string(),
        })?;
        let r = adapter.config.r;
        for (module, p) in &pairs {
            let (ar, _) = p.a.dims2()?;
            let (_, br) = p.b.dims2()?;
            if ar != r || br != r {
                return Err(Error::Safetensors {
                    path: weights_path.clone(),
                    detail: format!("{module}: lora_A rank {ar}, lora_B rank {br}, config r {r}"),
                });
            }
        }
        Ok(adapter)
    }
}
