//! LoRA (Hu et al. 2021) on linear layers, initialised and named the way Hugging Face PEFT does
//! it, so an adapter trained here loads in PEFT unchanged.
//!
//! A targeted layer computes `y = x·Wᵀ + b + scale · dropout(x)·Aᵀ·Bᵀ` with `W`, `b` frozen,
//! `A: (r, in)` Kaiming-uniform(a=√5) and `B: (out, r)` zero, `scale = alpha / r`. Because `B`
//! starts at zero the adapted model starts exactly at the base model.
//!
//! Models build their layers through a [`LoraBuilder`], which decides per module name whether
//! a layer is frozen, LoRA-adapted, or fully trainable (`modules_to_save`), and records every
//! trainable tensor under its PEFT state-dict name in [`Trainables`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{Device, Tensor, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fused::dropout::DropoutDraw;
use crate::fused::linear::{LoraBranch, linear};
use crate::inference::{PackedLinear, ScoringKernel};

/// What to adapt and how. Field names follow PEFT's `LoraConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// LoRA rank: the inner dimension of `B·A`.
    pub r: usize,
    /// LoRA alpha; the update is scaled by `alpha / r`.
    pub alpha: f64,
    /// Dropout on the LoRA branch's input during training, in `[0, 1)`.
    pub dropout: f32,
    /// Module names (last path components, e.g. `query`, `q_proj`) or full module paths.
    pub target_modules: Vec<String>,
    /// Modules trained in full and saved whole, e.g. the classification head.
    pub modules_to_save: Vec<String>,
}

impl LoraConfig {
    /// Checks the ranges PEFT also rejects: a zero rank, a dropout outside `[0, 1)`, no targets.
    pub fn new(
        r: usize,
        alpha: f64,
        dropout: f32,
        target_modules: &[&str],
        modules_to_save: &[&str],
    ) -> Result<Self> {
        let cfg = Self {
            r,
            alpha,
            dropout,
            target_modules: target_modules.iter().map(|s| s.to_string()).collect(),
            modules_to_save: modules_to_save.iter().map(|s| s.to_string()).collect(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Rejects a zero rank, a dropout outside `[0, 1)`, a non-positive alpha and empty targets.
    pub fn validate(&self) -> Result<()> {
        if self.r == 0 {
            return Err(Error::Invalid("lora r: 0 is below the minimum 1".into()));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::Invalid(format!(
                "lora dropout: {} is outside [0, 1)",
                self.dropout
            )));
        }
        if !self.alpha.is_finite() || self.alpha <= 0.0 {
            return Err(Error::Invalid(format!(
                "lora alpha: {} must be a positive number",
                self.alpha
            )));
        }
        if self.target_modules.is_empty() {
            return Err(Error::Invalid(
                "lora target_modules: empty; name at least one module (e.g. query, value)".into(),
            ));
        }
        Ok(())
    }

    /// The factor PEFT applies to `B·A` (without rsLoRA).
    pub fn scale(&self) -> f64 {
        self.alpha / self.r as f64
    }

    /// PEFT's rule for a list of target names: the module path equals the name or ends with
    /// `.name`.
    pub fn is_target(&self, module_path: &str) -> bool {
        matches_any(&self.target_modules, module_path)
    }

    /// Whether `module_path` is trained in full and saved whole (same suffix rule as targets).
    pub fn is_module_to_save(&self, module_path: &str) -> bool {
        matches_any(&self.modules_to_save, module_path)
    }
}

fn matches_any(names: &[String], module_path: &str) -> bool {
    names.iter().any(|n| {
        module_path == n
            || module_path
                .strip_suffix(n.as_str())
                .is_some_and(|rest| rest.ends_with('.'))
    })
}

/// A seeded source of dropout masks shared by every layer of one model, so that a training run
/// is reproducible given its seed (candle's CPU device cannot be seeded). Each draw takes the
/// next stretch of one stream of positions; an element's mask value depends only on the seed
/// and its position ([`crate::fused::dropout`]).
#[derive(Clone)]
pub struct DropoutRng {
    /// Stream positions drawn so far, shared by every layer holding this generator.
    drawn: Arc<AtomicU64>,
    seed: u64,
}

impl DropoutRng {
    /// A generator for dropout masks seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            drawn: Arc::new(AtomicU64::new(0)),
            seed,
        }
    }

    /// Starts the mask stream over from the seed, for every layer sharing it: each training run
    /// of a model kept between runs (the validator's spot checks) draws the masks a freshly
    /// built model would, so the same task gives the same adapter wherever it is trained.
    pub fn restart(&self) {
        self.drawn.store(0, Ordering::Relaxed);
    }

    /// Stream positions drawn so far: kept with a training checkpoint, so a run resumed from it
    /// ([`DropoutRng::seek`]) draws the masks the uninterrupted run drew.
    pub fn position(&self) -> u64 {
        self.drawn.load(Ordering::Relaxed)
    }

    /// Moves the stream to `position`, for every layer sharing it.
    pub fn seek(&self, position: u64) {
        self.drawn.store(position, Ordering::Relaxed);
    }

    /// Inverted dropout: keeps each element with probability `1 - p` and scales it by
    /// `1 / (1 - p)` so the expectation is unchanged.
    pub fn apply(&self, x: &Tensor, p: f32) -> Result<Tensor> {
        match self.draw(x.elem_count(), p) {
            Some(draw) => Ok(draw.apply(x)?),
            None => Ok(x.clone()),
        }
    }

    /// The next `n` positions of the stream as one draw dropping with probability `p`, for a
    /// kernel that applies dropout inside a larger op; `None` when `p` drops nothing.
    pub fn draw(&self, n: usize, p: f32) -> Option<DropoutDraw> {
        if p <= 0.0 {
            return None;
        }
        let offset = self.drawn.fetch_add(n as u64, Ordering::Relaxed);
        Some(DropoutDraw::new(self.seed, offset, p))
    }
}

/// Every trainable tensor of a model, keyed by its PEFT state-dict name without the
/// `base_model.model.` prefix (e.g. `bert.encoder.layer.0.attention.self.query.lora_A.weight`,
/// `classifier.weight`). Ordered, so optimiser state and saved files are deterministic.
#[derive(Default, Clone)]
pub struct Trainables {
    vars: BTreeMap<String, Var>,
    /// The dropout masks' generators of the model these tensors belong to: the LoRA layers'
    /// (when built by a [`LoraBuilder`]) and any the model draws from itself (BERT's encoder).
    dropout: Vec<DropoutRng>,
}

impl Trainables {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model's dropout generators, in a fixed order (the LoRA layers' first).
    pub fn dropout_streams(&self) -> &[DropoutRng] {
        &self.dropout
    }

    /// Adds a generator the model draws masks from outside its LoRA layers, so checkpoints keep
    /// its position too.
    pub fn add_dropout_stream(&mut self, stream: DropoutRng) {
        self.dropout.push(stream);
    }

    /// Registers `var` under `name`; registering a name twice is an error.
    pub fn insert(&mut self, name: impl Into<String>, var: Var) -> Result<()> {
        let name = name.into();
        if self.vars.contains_key(&name) {
            return Err(Error::Invalid(format!(
                "trainable tensor {name} registered twice"
            )));
        }
        self.vars.insert(name, var);
        Ok(())
    }

    /// The tensor registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Var> {
        self.vars.get(name)
    }

    /// Every tensor with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Var)> {
        self.vars.iter()
    }

    /// Number of registered tensors.
    pub fn len(&self) -> usize {
        self.vars.len()
    }

    /// Whether no tensor is registered.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// Number of trainable scalars.
    pub fn parameter_count(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// A copy of every tensor's current value.
    pub fn snapshot(&self) -> Result<BTreeMap<String, Tensor>> {
        self.vars
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_detached_tensor().copy()?)))
            .collect()
    }

    /// Overwrites every registered tensor from `values` (e.g. a loaded adapter). Every name must
    /// be present with the same shape; extra names are an error too, so a mismatched adapter is
    /// never half-applied.
    pub fn load(&self, values: &BTreeMap<String, Tensor>) -> Result<()> {
        for name in values.keys() {
            if !self.vars.contains_key(name) {
                return Err(Error::Mismatch(format!(
                    "adapter has {name}, which this model does not train"
                )));
            }
        }
        for (name, var) in &self.vars {
            let value = values
                .get(name)
                .ok_or_else(|| Error::Mismatch(format!("adapter lacks {name}")))?;
            if value.dims() != var.dims() {
                return Err(Error::Mismatch(format!(
                    "{name}: adapter shape {:?}, model expects {:?}",
                    value.dims(),
                    var.dims()
                )));
            }
        }
        for (name, var) in &self.vars {
            let value = &values[name];
            var.set(&value.to_dtype(var.dtype())?.to_device(var.device())?)?;
        }
        Ok(())
    }
}

/// How a [`LoraLinear`] treats its weights.
enum Kind {
    /// Base weight only, no gradient.
    Frozen,
    /// Frozen base plus a trainable low-rank update.
    Lora {
        a: Var,
        b: Var,
        scale: f64,
        dropout: f32,
        rng: DropoutRng,
    },
    /// The whole layer trains (`modules_to_save`); `weight`/`bias` below are its variables.
    Full,
    /// Frozen, with weight and bias also packed for the AMX scoring kernel (a folded layer
    /// on a CPU that has AMX). Carries no gradient: scoring only.
    Packed(PackedLinear),
}

/// A linear layer `x·Wᵀ + b` that is frozen, LoRA-adapted, or fully trainable.
pub struct LoraLinear {
    name: String,
    weight: Tensor,
    bias: Option<Tensor>,
    kind: Kind,
}

impl LoraLinear {
    /// The module path, e.g. `bert.encoder.layer.0.attention.self.query`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this layer carries a trainable low-rank update.
    pub fn is_lora(&self) -> bool {
        matches!(self.kind, Kind::Lora { .. })
    }

    /// Input width (columns of the weight).
    pub fn in_features(&self) -> usize {
        self.weight.dims()[1]
    }

    /// Output width (rows of the weight).
    pub fn out_features(&self) -> usize {
        self.weight.dims()[0]
    }

    /// The base weight `(out, in)` (the trained weight for a `modules_to_save` layer).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The layer's bias, if it has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `x: (..., in) -> (..., out)`. Dropout on the LoRA branch applies only when `train`.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let Some((&in_dim, lead)) = dims.split_last() else {
            return Err(Error::Invalid(format!("{}: input is a scalar", self.name)));
        };
        if in_dim != self.in_features() {
            return Err(Error::Invalid(format!(
                "{}: input has {in_dim} features, layer expects {}",
                self.name,
                self.in_features()
            )));
        }
        let lora = |a: &Var, b: &Var, scale: f64, dropout: f32, rng: &DropoutRng| {
            // Scoring reads the factors detached: through a variable, candle would keep every
            // activation of the forward pass alive in the result's graph, for a backward that
            // never comes (a held-out batch then held as much memory as a training step).
            let (a, b, dropout) = if train {
                let draw = rng.draw(x.elem_count(), dropout);
                (a.as_tensor().clone(), b.as_tensor().clone(), draw)
            } else {
                (a.as_tensor().detach(), b.as_tensor().detach(), None)
            };
            let branch = LoraBranch {
                a: &a,
                b: &b,
                scale,
                dropout,
            };
            linear(x, &self.weight, self.bias.as_ref(), Some(branch))
        };
        let y = match &self.kind {
            Kind::Packed(_) if train => {
                return Err(Error::Invalid(format!(
                    "{}: a layer folded for scoring cannot train",
                    self.name
                )));
            }
            Kind::Packed(packed) => return packed.forward(x),
            Kind::Frozen => linear(x, &self.weight, self.bias.as_ref(), None)?,
            Kind::Lora {
                a,
                b,
                scale,
                dropout,
                rng,
            } => lora(a, b, *scale, *dropout, rng)?,
            // The head trains: its weight needs the ordinary matmul's gradient.
            Kind::Full => {
                let rows: usize = lead.iter().product();
                let mut y = x.reshape((rows, in_dim))?.matmul(&self.weight.t()?)?;
                if let Some(b) = &self.bias {
                    y = y.broadcast_add(b)?;
                }
                let mut out_dims = lead.to_vec();
                out_dims.push(self.out_features());
                y.reshape(out_dims)?
            }
        };
        Ok(y)
    }

    /// The packed form of a layer folded for the AMX kernel.
    pub fn packed(&self) -> Option<&PackedLinear> {
        match &self.kind {
            Kind::Packed(p) => Some(p),
            _ => None,
        }
    }

    /// This layer with its update folded in: frozen, weight `W + scale·B·A`, packed for
    /// `kernel`. Scoring an adapter this way costs what scoring the base model does (no
    /// low-rank branch per call).
    pub fn folded(&self, kernel: ScoringKernel) -> Result<LoraLinear> {
        let weight = self.merged_weight()?.detach();
        let bias = self.bias.as_ref().map(Tensor::detach);
        let kind = match kernel {
            // Layers narrower than one tile (a two-label head) gain nothing from packing.
            ScoringKernel::Amx if weight.dims()[0] >= 16 => {
                Kind::Packed(PackedLinear::new(&weight, bias.as_ref())?)
            }
            ScoringKernel::Amx | ScoringKernel::Portable => Kind::Frozen,
        };
        Ok(LoraLinear {
            name: self.name.clone(),
            weight,
            bias,
            kind,
        })
    }

    /// `W + scale·B·A`: the weight a merged (adapter-free) model uses for this layer.
    pub fn merged_weight(&self) -> Result<Tensor> {
        match &self.kind {
            Kind::Lora { a, b, scale, .. } => {
                Ok((&self.weight + b.as_tensor().matmul(a.as_tensor())?.affine(*scale, 0.0)?)?)
            }
            Kind::Frozen | Kind::Full | Kind::Packed(_) => Ok(self.weight.clone()),
        }
    }
}

/// Builds a model's linear layers under one [`LoraConfig`]: seeded initialisation of `A`, one
/// shared dropout RNG, and one registry of trainable tensors.
pub struct LoraBuilder {
    cfg: LoraConfig,
    init: StdRng,
    dropout: DropoutRng,
    trainables: Trainables,
}

impl LoraBuilder {
    /// `seed` fixes both the `A` initialisation and the dropout masks.
    pub fn new(cfg: LoraConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            init: StdRng::seed_from_u64(seed),
            // A different stream than `init`, so adding a layer does not shift every mask.
            dropout: DropoutRng::new(seed ^ 0x9e37_79b9_7f4a_7c15),
            trainables: Trainables::new(),
        })
    }

    /// The LoRA settings the builder applies.
    pub fn config(&self) -> &LoraConfig {
        &self.cfg
    }

    /// Wraps the linear layer at `module_path` with weight `(out, in)`: LoRA when the path is a
    /// target, fully trainable when it is a module to save, frozen otherwise.
    pub fn linear(
        &mut self,
        module_path: &str,
        weight: Tensor,
        bias: Option<Tensor>,
    ) -> Result<LoraLinear> {
        let (out_dim, in_dim) = weight.dims2().map_err(|_| {
            Error::Invalid(format!(
                "{module_path}: weight has shape {:?}, expected (out, in)",
                weight.dims()
            ))
        })?;
        if let Some(b) = &bias
            && b.dims() != [out_dim]
        {
            return Err(Error::Invalid(format!(
                "{module_path}: bias has shape {:?}, expected [{out_dim}]",
                b.dims()
            )));
        }
        if self.cfg.is_module_to_save(module_path) {
            return self.full(module_path, &weight, bias.as_ref());
        }
        let weight = weight.detach();
        let bias = bias.map(|b| b.detach());
        if !self.cfg.is_target(module_path) {
            return Ok(LoraLinear {
                name: module_path.to_string(),
                weight,
                bias,
                kind: Kind::Frozen,
            });
        }
        let r = self.cfg.r;
        // PEFT: nn.init.kaiming_uniform_(A, a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        let bound = 1.0 / (in_dim as f64).sqrt();
        let a_init: Vec<f32> = (0..r * in_dim)
            .map(|_| self.init.random_range(-bound..bound) as f32)
            .collect();
        let device = weight.device();
        let dtype = weight.dtype();
        let a = Var::from_tensor(&Tensor::from_vec(a_init, (r, in_dim), device)?.to_dtype(dtype)?)?;
        let b = Var::zeros((out_dim, r), dtype, device)?;
        self.trainables
            .insert(format!("{module_path}.lora_A.weight"), a.clone())?;
        self.trainables
            .insert(format!("{module_path}.lora_B.weight"), b.clone())?;
        Ok(LoraLinear {
            name: module_path.to_string(),
            weight,
            bias,
            kind: Kind::Lora {
                a,
                b,
                scale: self.cfg.scale(),
                dropout: self.cfg.dropout,
                rng: self.dropout.clone(),
            },
        })
    }

    /// Registers a trainable tensor that is not a linear layer (e.g. a saved embedding).
    pub fn trainable(&mut self, name: &str, init: &Tensor) -> Result<Var> {
        let v = Var::from_tensor(&init.copy()?)?;
        self.trainables.insert(name, v.clone())?;
        Ok(v)
    }

    /// A new fully trainable layer with no checkpoint weight (a fresh classification head),
    /// registered like a module to save. Initialised as transformers' `_init_weights` does a
    /// head the checkpoint lacks: weight ~ N(0, `std`²) (`std` is config.json's
    /// `initializer_range`), bias zero.
    pub fn new_head(
        &mut self,
        module_path: &str,
        out_dim: usize,
        in_dim: usize,
        std: f64,
        device: &Device,
    ) -> Result<LoraLinear> {
        // Box–Muller on the seeded generator: the same seed gives the same head everywhere.
        let w: Vec<f32> = (0..out_dim * in_dim)
            .map(|_| {
                let u1: f64 = self.init.random::<f64>().max(f64::MIN_POSITIVE);
                let u2: f64 = self.init.random();
                (std * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
            })
            .collect();
        let w = Tensor::from_vec(w, (out_dim, in_dim), device)?;
        let b = Tensor::zeros(out_dim, candle_core::DType::F32, device)?;
        self.full(module_path, &w, Some(&b))
    }

    fn full(
        &mut self,
        module_path: &str,
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<LoraLinear> {
        let w = Var::from_tensor(&weight.copy()?)?;
        self.trainables
            .insert(format!("{module_path}.weight"), w.clone())?;
        let b = match bias {
            Some(b) => {
                let v = Var::from_tensor(&b.copy()?)?;
                self.trainables
                    .insert(format!("{module_path}.bias"), v.clone())?;
                Some(v.as_tensor().clone())
            }
            None => None,
        };
        Ok(LoraLinear {
            name: module_path.to_string(),
            weight: w.as_tensor().clone(),
            bias: b,
            kind: Kind::Full,
        })
    }

    /// The trainable tensors registered so far.
    pub fn trainables(&self) -> &Trainables {
        &self.trainables
    }

    /// Ends building and hands over the registry the optimiser and the adapter writer use.
    pub fn finish(self) -> Trainables {
        let mut trainables = self.trainables;
        trainables.dropout.insert(0, self.dropout);
        trainables
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;

    fn cfg() -> LoraConfig {
        LoraConfig::new(4, 8.0, 0.0, &["query", "value"], &["classifier"]).unwrap()
    }

    #[test]
    fn target_matching_follows_peft_suffix_rule() {
        let c = cfg();
        assert!(c.is_target("bert.encoder.layer.0.attention.self.query"));
        assert!(c.is_target("query"));
        assert!(!c.is_target("bert.encoder.layer.0.attention.self.key"));
        // A suffix that is not a whole path component is not a match.
        assert!(!c.is_target("bert.encoder.layer.0.attention.self.subquery"));
        assert!(c.is_module_to_save("classifier"));
    }

    #[test]
    fn invalid_settings_are_rejected_with_their_value() {
        let e = LoraConfig::new(0, 8.0, 0.0, &["q"], &[]).unwrap_err();
        assert!(e.to_string().contains("r: 0"), "{e}");
        let e = LoraConfig::new(4, 8.0, 1.0, &["q"], &[]).unwrap_err();
        assert!(e.to_string().contains("dropout: 1"), "{e}");
        let e = LoraConfig::new(4, 8.0, 0.1, &[], &[]).unwrap_err();
        assert!(e.to_string().contains("target_modules"), "{e}");
    }

    #[test]
    fn fresh_adapter_reproduces_the_base_layer_and_a_is_kaiming_bounded() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (6, 16), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, 6, &dev).unwrap();
        let mut lb = LoraBuilder::new(cfg(), 7).unwrap();
        let layer = lb
            .linear("enc.query", w.clone(), Some(bias.clone()))
            .unwrap();
        let plain = lb.linear("enc.key", w.clone(), Some(bias)).unwrap();
        let x = Tensor::randn(0f32, 1.0, (2, 3, 16), &dev).unwrap();
        let y = layer.forward(&x, true).unwrap();
        let y0 = plain.forward(&x, true).unwrap();
        assert_eq!(y.dims(), &[2, 3, 6]);
        let diff: f32 = (y - y0)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert_eq!(diff, 0.0);
        let t = lb.finish();
        let a = t.get("enc.query.lora_A.weight").unwrap();
        assert_eq!(a.dims(), &[4, 16]);
        let amax: f32 = a.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
        assert!(amax <= 0.25 && amax > 0.1, "{amax}");
        assert!(t.get("enc.key.lora_A.weight").is_none());
    }

    #[test]
    fn same_seed_gives_same_initialisation_and_dropout() {
        let dev = Device::Cpu;
        let w = Tensor::ones((5, 8), DType::F32, &dev).unwrap();
        let make = |seed| {
            let c = LoraConfig::new(2, 4.0, 0.5, &["q"], &[]).unwrap();
            let mut lb = LoraBuilder::new(c, seed).unwrap();
            let l = lb.linear("q", w.clone(), None).unwrap();
            let t = lb.finish();
            // Make B non-zero so dropout on the LoRA branch shows in the output.
            t.get("q.lora_B.weight")
                .unwrap()
                .set(&Tensor::ones((5, 2), DType::F32, &dev).unwrap())
                .unwrap();
            let x = Tensor::ones((3, 8), DType::F32, &dev).unwrap();
            l.forward(&x, true).unwrap().to_vec2::<f32>().unwrap()
        };
        assert_eq!(make(1), make(1));
        assert_ne!(make(1), make(2));
    }

    #[test]
    fn wrong_input_width_is_an_error_not_a_panic() {
        let dev = Device::Cpu;
        let mut lb = LoraBuilder::new(cfg(), 0).unwrap();
        let l = lb
            .linear(
                "query",
                Tensor::zeros((3, 4), DType::F32, &dev).unwrap(),
                None,
            )
            .unwrap();
        let e = l
            .forward(&Tensor::zeros((2, 5), DType::F32, &dev).unwrap(), false)
            .unwrap_err();
        assert!(e.to_string().contains("5 features"), "{e}");
    }
}
