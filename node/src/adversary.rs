//! Dishonest workers, as an attacker would build them, so the tests (and `shardwork demo
//! --adversary KIND`) can show the validator earns them nothing. No honest path calls this.
//!
//! * [`Behaviour::RandomNoise`]: trains, then submits Gaussian noise in the adapter's shapes.
//! * [`Behaviour::Replay`]: submits the round's starting adapter as its own work (the free-ride
//!   measured in issue 15: paid 19% of a job for nothing), with a whiff of noise so its CID is
//!   new; in round 1, where the start is the bare model, an adapter that changes nothing.
//! * [`Behaviour::Copycat`]: waits for another worker's `submitted` event of the same round
//!   (every signed-in address can read a job's events), fetches that adapter and submits it
//!   with a little noise added, so only the update's direction gives it away.
//! * [`Behaviour::Lazy`]: trains on the first tenth of its shard, a tenth of the steps, a real
//!   update in a sensible direction: only the validator's spot check (training the task again)
//!   tells it from honest work.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::Tensor;
use shardwork_client::{ApiClient, Lease};
use shardwork_core::protocol::JobEvent;
use shardwork_trainer::peft::Adapter;

use crate::NodeError;
use crate::content::{Blobs, fetch_bundle};

/// How a worker behaves. Anything but `Honest` exists to prove the validator catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Behaviour {
    /// Trains on the shard and submits what it trained.
    Honest,
    /// Trains nothing useful and submits Gaussian noise in the adapter's shape.
    #[value(name = "noise")]
    RandomNoise,
    /// Resubmits the round's starting adapter (round 1: an adapter that changes nothing).
    Replay,
    /// Resubmits another worker's adapter of the same round, lightly perturbed.
    Copycat,
    /// Trains on a tenth of its shard (a tenth of the steps) and submits that as the whole.
    Lazy,
}

impl Behaviour {
    /// Whether this worker must train to have something to submit.
    pub fn trains(self, round: u32) -> bool {
        match self {
            Behaviour::Honest | Behaviour::RandomNoise | Behaviour::Lazy => true,
            Behaviour::Replay => round == 1,
            Behaviour::Copycat => false,
        }
    }
}

/// How long a copycat waits for someone else's adapter before giving its task back.
const COPY_WAIT: Duration = Duration::from_secs(600);

fn trainer(e: candle_core::Error) -> NodeError {
    shardwork_trainer::Error::from(e).into()
}

/// `adapter` with every tensor mapped by `f`.
fn map_tensors(
    adapter: &Adapter,
    f: impl Fn(&str, &Tensor) -> candle_core::Result<Tensor>,
) -> Result<Adapter, NodeError> {
    let mut tensors = BTreeMap::new();
    for (name, t) in &adapter.tensors {
        tensors.insert(name.clone(), f(name, t).map_err(trainer)?);
    }
    Ok(Adapter {
        config: adapter.config.clone(),
        tensors,
    })
}

/// An adapter of the same shapes filled with standard normal noise.
pub fn noise_like(adapter: &Adapter) -> Result<Adapter, NodeError> {
    map_tensors(adapter, |_, t| {
        Tensor::randn(0f32, 1f32, t.dims(), t.device()).and_then(|n| n.to_dtype(t.dtype()))
    })
}

/// `adapter` plus Gaussian noise of `share` times each tensor's RMS value: a new file (and CID)
/// for nearly the same update.
pub fn perturbed(adapter: &Adapter, share: f64) -> Result<Adapter, NodeError> {
    map_tensors(adapter, |_, t| {
        let rms = t.sqr()?.mean_all()?.sqrt()?.to_scalar::<f32>()?;
        let noise = (Tensor::randn(0f32, 1f32, t.dims(), t.device())? * (share * f64::from(rms)))?;
        t + noise.to_dtype(t.dtype())?
    })
}

/// Round 1's replay: the trained adapter with every LoRA B zeroed, so `ΔW = B·A = 0`: the
/// bare model, which is where round 1 starts.
pub fn no_change(adapter: &Adapter) -> Result<Adapter, NodeError> {
    map_tensors(adapter, |name, t| {
        if name.contains("lora_B") {
            t.zeros_like()
        } else {
            Ok(t.clone())
        }
    })
}

/// Waits for another worker's submission in the lease's round and returns its adapter, fetched
/// into `dir` and perturbed.
pub async fn copy_another(
    api: &ApiClient,
    blobs: &dyn Blobs,
    lease: &Lease,
    me: &str,
    dir: &Path,
) -> Result<Adapter, NodeError> {
    let task = &lease.task;
    let started = Instant::now();
    let mut after = 0;
    loop {
        for e in api.events(task.job_id, after).await? {
            after = after.max(e.id);
            if let JobEvent::Submitted(s) = e.event
                && s.round == task.round
                && !s.worker.eq_ignore_ascii_case(me)
            {
                fetch_bundle(blobs, &s.adapter_cid, dir).await?;
                let original = Adapter::load(dir, &candle_core::Device::Cpu)?;
                return perturbed(&original, 0.02);
            }
        }
        if started.elapsed() > COPY_WAIT {
            return Err(NodeError::Content(format!(
                "copycat: nobody else submitted in round {} within {COPY_WAIT:?}",
                task.round
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The first tenth (at least one) of the JSONL records in `shard`, written back over it: what a
/// lazy worker trains on.
pub fn keep_a_tenth(shard: &Path) -> Result<(), NodeError> {
    let text = std::fs::read_to_string(shard).map_err(|e| NodeError::Io(e.to_string()))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let kept = lines.len().div_ceil(10).max(1).min(lines.len());
    let mut out = lines[..kept].join("\n");
    out.push('\n');
    std::fs::write(shard, out).map_err(|e| NodeError::Io(e.to_string()))
}
