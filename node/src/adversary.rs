//! Dishonest workers, as an attacker would build them, so the tests (and `shardwork demo
//! --adversary KIND`, `shardwork bench catch-rate`) can show the validator earns them nothing.
//!
//! They wrap the honest worker from outside, through its seams: a [`Behaviour`] is the
//! worker's [`Conduct`], which trains with the job's [`Work`] wrapped (`Cheating`: the shard
//! altered before training, the adapter or the proof of training after), hands in without
//! training ([`Conduct::hand_in`]: copies), or acts after the submission ([`Conduct::submitted`]:
//! an accomplice). The worker's own path names none of this, and the module compiles only
//! with the crate's `adversaries` feature, which the operators' binary (`shardwork-node`, the
//! node image) leaves off.
//!
//! * [`Behaviour::RandomNoise`]: trains, then submits Gaussian noise in the adapter's shapes.
//! * [`Behaviour::Replay`]: submits the round's starting adapter as its own work (the free-ride
//!   measured in issue 15: paid 19% of a job for nothing), with a whiff of noise so its CID is
//!   new; in round 1, where the start is the bare model, an adapter that changes nothing.
//! * [`Behaviour::Copycat`]: submits another worker's adapter of the same round with a little
//!   noise added, so only the update's direction gives it away. Adapters are sealed to the
//!   validator and no event names another worker's, so a copycat needs an accomplice:
//!   [`Behaviour::Accomplice`] trains honestly and hands what it trained over (in-process, through
//!   `share`), as one operator running two addresses would.
//! * [`Behaviour::MisShaped`]: trains, then submits an adapter whose every LoRA A has half the
//!   columns the model needs (issue 46: one such pending adapter made the honest submissions
//!   judged after it in the same pass fail as "could not be scored").
//! * [`Behaviour::SignFlip`]: trains honestly, then submits the opposite update (every LoRA B
//!   negated), pushing the merge back the way honest work moved it.
//! * [`Behaviour::LabelFlip`]: trains on its shard with the answers wrong: binary labels
//!   flipped, other labels and every completion, output or chat reply moved to the next record.
//! * [`Behaviour::Lazy`]: trains on the first tenth of its shard, a tenth of the steps, a real
//!   update in a sensible direction, and forges the proof of training a whole run would send
//!   (`stretched_trace`: its own short run's states and losses, relabelled to the steps the
//!   whole shard takes): only the validator's replay of a stretch tells it from honest work.
//! * [`Behaviour::SkipLast`]: earns trust with honest work in round 1, then from round 2 on
//!   trains every stretch of its run but the last (`skip_last_stretch`) and forges that one:
//!   an eighth of the work saved (one of [`TRACE_SEGMENTS`] stretches), an adapter that still
//!   beats the round's start, and a proof every honest stretch of which replays exactly.
//!   Caught only when the replay draws the forged stretch, which is why a caught forgery
//!   forfeits the whole job.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use shardwork_core::protocol::TaskMessage;
use shardwork_core::protocol::submission::TRACE_SEGMENTS;
use shardwork_trainer::optim::OptimState;
use shardwork_trainer::peft::{Adapter, AdapterConfig};
use shardwork_trainer::train::Progress;
use shardwork_trainer::train::trace::{Checkpoint, Span, TrainTrace, boundaries};
use shardwork_trainer::{Error, Result};
use uuid::Uuid;

use crate::NodeError;
use crate::work::{ExampleScores, HeldOut, Metric, Trained, Work};
use crate::worker::{Claimed, Conduct, Honest, TaskFiles, Training};

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
    /// Resubmits its accomplice's adapter of the same round, lightly perturbed.
    Copycat,
    /// Trains honestly and gives what it trained to a copycat of the same process (set beside
    /// a copycat, never chosen on its own).
    #[value(skip)]
    Accomplice,
    /// Trains on a tenth of its shard (a tenth of the steps) and submits that as the whole.
    Lazy,
    /// Trains, then submits an adapter whose LoRA A factors have half the columns they need.
    #[value(name = "mis-shaped")]
    MisShaped,
    /// Trains honestly and submits the opposite update.
    #[value(name = "sign-flip")]
    SignFlip,
    /// Trains on its shard with every answer wrong.
    #[value(name = "label-flip")]
    LabelFlip,
    /// Trains honestly in round 1; from round 2, every stretch of its run but the last, which
    /// it forges.
    #[value(name = "skip-last")]
    SkipLast,
}

impl Behaviour {
    /// Whether this worker must train to have something to submit.
    pub fn trains(self, round: u32) -> bool {
        match self {
            Behaviour::Honest
            | Behaviour::RandomNoise
            | Behaviour::MisShaped
            | Behaviour::Lazy
            | Behaviour::Accomplice
            | Behaviour::SignFlip
            | Behaviour::LabelFlip
            | Behaviour::SkipLast => true,
            Behaviour::Replay => round == 1,
            Behaviour::Copycat => false,
        }
    }

    /// Whether this worker forges the last stretch of its run in `round` instead of training
    /// it (`skip_last_stretch`): a `SkipLast` worker, after the honest round 1.
    pub fn skips_last_stretch(self, round: u32) -> bool {
        self == Behaviour::SkipLast && round > 1
    }

    /// The worker's conduct: an honest worker's own ([`Honest`]) for `Honest`, else this.
    pub fn conduct(self) -> Arc<dyn Conduct> {
        match self {
            Behaviour::Honest => Arc::new(Honest),
            cheat => Arc::new(cheat),
        }
    }
}

#[async_trait::async_trait]
impl Conduct for Behaviour {
    fn work(&self, work: Arc<dyn Work>) -> Arc<dyn Work> {
        match self {
            Behaviour::Honest | Behaviour::Accomplice | Behaviour::Copycat => work,
            &behaviour => Arc::new(Cheating {
                honest: work,
                behaviour,
            }),
        }
    }

    /// A worker that must train to have something to submit trains; the others hand in
    /// someone else's work: the round's start (a replay) or an accomplice's adapter (a
    /// copycat), with no proof of training, having loaded no model.
    async fn hand_in(&self, files: &TaskFiles, training: Training) -> Result<Claimed, NodeError> {
        if self.trains(files.task.round) {
            return training.await;
        }
        let adapter = match (self, &files.start) {
            (Behaviour::Replay, Some(start)) => {
                perturbed(&Adapter::load(start, &Device::Cpu)?, 1e-5)?
            }
            _ => copy_another(&files.task).await?,
        };
        adapter.save(&files.out)?;
        let records = std::fs::read_to_string(&files.shard)
            .map_err(|e| NodeError::Io(e.to_string()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        Ok(Claimed {
            records,
            steps: 1,
            final_loss: 0.0,
            tokens_per_sec: 0.0,
        })
    }

    /// An accomplice hands what it submitted to the copycats of this process: once submitted,
    /// so the copy is always the later of the two.
    fn submitted(&self, files: &TaskFiles) -> Result<(), NodeError> {
        if *self == Behaviour::Accomplice {
            let task = &files.task;
            share(
                task.job_id,
                task.round,
                &Adapter::load(&files.out, &Device::Cpu)?,
            );
        }
        Ok(())
    }
}

/// A job's work as a dishonest worker trains it: the honest work, with the shard altered
/// before, the run cut short, or the adapter or its proof of training altered after.
struct Cheating {
    honest: Arc<dyn Work>,
    behaviour: Behaviour,
}

impl Work for Cheating {
    fn metric(&self) -> Metric {
        self.honest.metric()
    }

    fn seed(&self) -> u64 {
        self.honest.seed()
    }

    fn adapter_config(&self) -> AdapterConfig {
        self.honest.adapter_config()
    }

    fn train(
        &self,
        start: Option<&Adapter>,
        shard: &Path,
        device: &Device,
        round: u32,
        span: Span,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Trained> {
        let honest = &*self.honest;
        if self.behaviour.skips_last_stretch(round) {
            return skip_last_stretch(honest, start, shard, device, round, progress);
        }
        // What the whole shard's run takes, which a lazy worker's forged proof claims.
        let asked_steps = match self.behaviour {
            Behaviour::Lazy => {
                let steps = honest.total_steps(shard)?;
                keep_a_tenth(shard)?;
                steps
            }
            Behaviour::LabelFlip => {
                flip_answers(shard)?;
                0
            }
            _ => 0,
        };
        let mut trained = honest.train(start, shard, device, round, span, progress)?;
        if self.behaviour == Behaviour::Lazy {
            trained.trace = stretched_trace(&trained, asked_steps);
        }
        trained.adapter = match self.behaviour {
            Behaviour::RandomNoise => noise_like(&trained.adapter)?,
            // Trains only in round 1, whose start is the bare model.
            Behaviour::Replay => no_change(&trained.adapter)?,
            Behaviour::SignFlip => sign_flipped(&trained.adapter)?,
            Behaviour::MisShaped => mis_shaped(&trained.adapter)?,
            _ => trained.adapter,
        };
        Ok(trained)
    }

    fn total_steps(&self, shard: &Path) -> Result<usize> {
        self.honest.total_steps(shard)
    }

    fn held_out(&self, path: &Path) -> Result<HeldOut> {
        self.honest.held_out(path)
    }

    fn score_examples(
        &self,
        adapter: Option<&Adapter>,
        held_out: &HeldOut,
        device: &Device,
    ) -> Result<ExampleScores> {
        self.honest.score_examples(adapter, held_out, device)
    }

    fn base_weight(&self, module: &str) -> Result<Option<Tensor>> {
        self.honest.base_weight(module)
    }
}

/// How long a copycat waits for its accomplice's adapter before giving its task back.
const COPY_WAIT: Duration = Duration::from_secs(600);

/// `adapter` with every tensor mapped by `f`.
fn map_tensors(
    adapter: &Adapter,
    f: impl Fn(&str, &Tensor) -> candle_core::Result<Tensor>,
) -> Result<Adapter> {
    let mut tensors = BTreeMap::new();
    for (name, t) in &adapter.tensors {
        tensors.insert(name.clone(), f(name, t)?);
    }
    Ok(Adapter {
        config: adapter.config.clone(),
        tensors,
    })
}

/// An adapter of the same shapes filled with standard normal noise.
fn noise_like(adapter: &Adapter) -> Result<Adapter> {
    map_tensors(adapter, |_, t| {
        Tensor::randn(0f32, 1f32, t.dims(), t.device()).and_then(|n| n.to_dtype(t.dtype()))
    })
}

/// `adapter` plus Gaussian noise of `share` times each tensor's RMS value: a new file (and CID)
/// for nearly the same update.
fn perturbed(adapter: &Adapter, share: f64) -> Result<Adapter> {
    map_tensors(adapter, |_, t| {
        let rms = t.sqr()?.mean_all()?.sqrt()?.to_scalar::<f32>()?;
        let noise = (Tensor::randn(0f32, 1f32, t.dims(), t.device())? * (share * f64::from(rms)))?;
        t + noise.to_dtype(t.dtype())?
    })
}

/// Round 1's replay: the trained adapter with every LoRA B zeroed, so `ΔW = B·A = 0`: the
/// bare model, which is where round 1 starts.
fn no_change(adapter: &Adapter) -> Result<Adapter> {
    map_tensors(adapter, |name, t| {
        if name.contains("lora_B") {
            t.zeros_like()
        } else {
            Ok(t.clone())
        }
    })
}

/// `adapter` with every LoRA A cut to the first half of its columns: a file that loads, in
/// the job's configuration, whose shapes fit no weight of the model.
fn mis_shaped(adapter: &Adapter) -> Result<Adapter> {
    map_tensors(adapter, |name, t| {
        if name.contains("lora_A") {
            t.narrow(1, 0, (t.dim(1)? / 2).max(1))?.contiguous()
        } else {
            Ok(t.clone())
        }
    })
}

/// The opposite update: every LoRA B negated, so `ΔW = B·A` changes sign.
fn sign_flipped(adapter: &Adapter) -> Result<Adapter> {
    map_tensors(adapter, |name, t| {
        if name.contains("lora_B") {
            t.neg()
        } else {
            Ok(t.clone())
        }
    })
}

/// What accomplices trained, by job and round, for the copycats of this process.
static SHARED: LazyLock<Mutex<BTreeMap<(Uuid, u32), Adapter>>> = LazyLock::new(Mutex::default);

/// An accomplice hands over what it trained (and submitted) for `job`'s round `round`.
fn share(job: Uuid, round: u32, adapter: &Adapter) {
    if let Ok(mut shared) = SHARED.lock() {
        shared
            .entry((job, round))
            .or_insert_with(|| adapter.clone());
    }
}

/// Waits for an accomplice's adapter of `task`'s round and returns it, perturbed.
async fn copy_another(task: &TaskMessage) -> Result<Adapter, NodeError> {
    let started = Instant::now();
    loop {
        let shared = SHARED
            .lock()
            .ok()
            .and_then(|s| s.get(&(task.job_id, task.round)).cloned());
        if let Some(original) = shared {
            return Ok(perturbed(&original, 0.02)?);
        }
        if started.elapsed() > COPY_WAIT {
            return Err(NodeError::Content(format!(
                "copycat: no accomplice trained round {} within {COPY_WAIT:?}",
                task.round
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A lazy worker's forged proof of training: the trace of a whole run of `asked_steps` steps,
/// made from its own short run (`trained`): each state it kept moved to the step a whole run
/// would keep it at (its last state, the adapter's values, standing in for any it lacks), and
/// its losses stretched over the asked steps. Every part is a real state of a real run; none
/// is where the asked run would be.
fn stretched_trace(trained: &Trained, asked_steps: usize) -> TrainTrace {
    let own = &trained.trace;
    let asked = boundaries(asked_steps, TRACE_SEGMENTS);
    let inner = &asked[1..asked.len() - 1];
    // A run too short to keep a state stands in its adapter, with zero moments.
    let adapter_state = || Checkpoint {
        state: OptimState {
            step: 0,
            values: trained.adapter.tensors.clone(),
            first_moments: zeros(&trained.adapter),
            second_moments: zeros(&trained.adapter),
        },
        dropout: vec![0],
    };
    let checkpoints = inner
        .iter()
        .enumerate()
        .map(|(j, &step)| {
            let mut c = own
                .checkpoints
                .get(j)
                .or(own.checkpoints.last())
                .cloned()
                .unwrap_or_else(adapter_state);
            c.state.step = step;
            c
        })
        .collect();
    let n = own.losses.len().max(1);
    let losses = (0..asked_steps)
        .map(|i| {
            own.losses
                .get(i * n / asked_steps.max(1))
                .copied()
                .unwrap_or(0.0)
        })
        .collect();
    TrainTrace {
        total_steps: asked_steps,
        first_step: 0,
        losses,
        checkpoints,
    }
}

/// A corner-cutter's run of the shard at `shard` from `start`: every stretch of the whole run
/// but the last trained as asked, each resumed from the end of the one before (what a whole
/// run computes, to the bit), and the last forged without a step of training: its end is the
/// stretch before's update carried on once more, its losses the stretch before's. The trace
/// is shaped as a whole run's and holds the true states at every boundary. A run of a single
/// stretch has no corner to cut and is trained whole.
fn skip_last_stretch(
    work: &dyn Work,
    start: Option<&Adapter>,
    shard: &Path,
    device: &Device,
    round: u32,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Trained> {
    let total = work.total_steps(shard)?;
    let bounds = boundaries(total, TRACE_SEGMENTS);
    let stretches = bounds.len() - 1;
    if stretches < 2 {
        let span = Span::Whole {
            segments: TRACE_SEGMENTS,
        };
        return work.train(start, shard, device, round, span, progress);
    }
    let mut losses = Vec::with_capacity(total);
    let mut kept: Vec<Checkpoint> = Vec::with_capacity(stretches - 1);
    let mut last: Option<(Trained, Checkpoint)> = None;
    for index in 0..stretches - 1 {
        let span = Span::Segment {
            index,
            segments: TRACE_SEGMENTS,
            from: kept.last().cloned().map(Box::new),
        };
        let trained = work.train(start, shard, device, round, span, progress)?;
        let [stretch_start, stretch_end] = &trained.trace.checkpoints[..] else {
            return Err(Error::Invalid(
                "a trained stretch kept no start and end".into(),
            ));
        };
        losses.extend_from_slice(&trained.trace.losses);
        kept.push(stretch_end.clone());
        let stretch_start = stretch_start.clone();
        last = Some((trained, stretch_start));
    }
    let Some((trained, stretch_start)) = last else {
        return Err(Error::Invalid("no stretch was trained".into()));
    };
    let previous = &trained.trace.losses;
    let forged_steps = bounds[stretches] - bounds[stretches - 1];
    losses.extend((0..forged_steps).map(|i| {
        previous
            .get(i % previous.len().max(1))
            .copied()
            .unwrap_or(0.0)
    }));
    // The end claimed for the forged stretch: where the one before ended, plus its update.
    let end = &kept[kept.len() - 1].state.values;
    let adapter = map_tensors(&trained.adapter, |name, t| {
        match (end.get(name), stretch_start.state.values.get(name)) {
            (Some(e), Some(s)) => (e + (e - s)?)?.to_dtype(t.dtype()),
            _ => Ok(t.clone()),
        }
    })?;
    Ok(Trained {
        adapter,
        records: trained.records,
        steps: total,
        final_loss: trained.final_loss,
        tokens_per_sec: trained.tokens_per_sec,
        trace: TrainTrace {
            total_steps: total,
            first_step: 0,
            losses,
            checkpoints: kept,
        },
    })
}

fn zeros(adapter: &Adapter) -> BTreeMap<String, Tensor> {
    adapter
        .tensors
        .iter()
        .filter_map(|(k, t)| Some((k.clone(), t.zeros_like().ok()?)))
        .collect()
}

/// The first tenth (at least one) of the JSONL records in `shard`, written back over it: what a
/// lazy worker trains on.
fn keep_a_tenth(shard: &Path) -> Result<()> {
    let text = read(shard)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let kept = lines.len().div_ceil(10).max(1).min(lines.len());
    let mut out = lines[..kept].join("\n");
    out.push('\n');
    write(shard, out)
}

/// Rewrites the JSONL records of `shard` with wrong answers: binary labels flipped, preference
/// pairs reversed, other labels and every `completion`, `output` and chat reply moved to the
/// next record (the last to the first).
fn flip_answers(shard: &Path) -> Result<()> {
    let text = read(shard)?;
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: serde_json::Value = serde_json::from_str(line).map_err(|e| Error::Dataset {
            path: shard.to_owned(),
            line: i + 1,
            detail: e.to_string(),
        })?;
        records.push(record);
    }
    let binary = records
        .iter()
        .all(|r| matches!(r.get("label").and_then(|l| l.as_u64()), Some(0 | 1)));
    let n = records.len();
    // Chat records: every assistant reply takes the place of the next one.
    let replies: Vec<serde_json::Value> = records
        .iter()
        .flat_map(|r| r.get("messages").and_then(|m| m.as_array()).cloned())
        .flatten()
        .filter(|m| m.get("role").and_then(|r| r.as_str()) == Some("assistant"))
        .filter_map(|m| m.get("content").cloned())
        .collect();
    let mut next_reply = (0..replies.len()).cycle().skip(1);
    for record in &mut records {
        let Some(messages) = record.get_mut("messages").and_then(|m| m.as_array_mut()) else {
            continue;
        };
        for message in messages {
            if message.get("role").and_then(|r| r.as_str()) == Some("assistant")
                && let (Some(object), Some(k)) = (message.as_object_mut(), next_reply.next())
            {
                object.insert("content".into(), replies[k].clone());
            }
        }
    }
    // Preference pairs: the preference reversed, rejected answer for chosen.
    for record in &mut records {
        if let Some(object) = record.as_object_mut()
            && let (Some(chosen), Some(rejected)) =
                (object.remove("chosen"), object.remove("rejected"))
        {
            object.insert("chosen".into(), rejected);
            object.insert("rejected".into(), chosen);
        }
    }
    for field in ["label", "completion", "output"] {
        let values: Vec<Option<serde_json::Value>> =
            records.iter().map(|r| r.get(field).cloned()).collect();
        for (i, record) in records.iter_mut().enumerate() {
            let Some(object) = record.as_object_mut() else {
                continue;
            };
            if !object.contains_key(field) {
                continue;
            }
            let wrong = if field == "label" && binary {
                values[i]
                    .as_ref()
                    .and_then(|v| v.as_u64())
                    .map(|l| serde_json::Value::from(1 - l))
            } else {
                values[(i + 1) % n].clone()
            };
            if let Some(wrong) = wrong {
                object.insert(field.to_owned(), wrong);
            }
        }
    }
    let mut out = String::new();
    for record in &records {
        out.push_str(&record.to_string());
        out.push('\n');
    }
    write(shard, out)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

fn write(path: &Path, text: String) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwork_trainer::lora::LoraConfig;
    use shardwork_trainer::peft::AdapterConfig;

    /// The forgery is well-formed, so only a replay can tell it: the states a whole run of the
    /// asked steps keeps, every step's loss, real states of the short run inside.
    #[test]
    fn a_lazy_workers_trace_has_the_shape_of_the_asked_run() {
        let dev = candle_core::Device::Cpu;
        let tensor = |v: f32| Tensor::new(&[v, v], &dev).unwrap();
        let values = |v: f32| -> BTreeMap<String, Tensor> {
            [("w.lora_A.weight".to_owned(), tensor(v))].into()
        };
        let lora = LoraConfig::new(1, 2.0, 0.0, &["w"], &[]).unwrap();
        let own_checkpoint = Checkpoint {
            state: OptimState {
                step: 1,
                values: values(0.5),
                first_moments: values(0.1),
                second_moments: values(0.01),
            },
            dropout: vec![42],
        };
        let trained = Trained {
            adapter: Adapter {
                config: AdapterConfig::from_lora(&lora, "CAUSAL_LM", None),
                tensors: values(1.0),
            },
            records: 3,
            steps: 2,
            final_loss: 1.0,
            tokens_per_sec: 1.0,
            trace: TrainTrace {
                total_steps: 2,
                first_step: 0,
                losses: vec![2.0, 1.0],
                checkpoints: vec![own_checkpoint],
            },
        };
        let forged = stretched_trace(&trained, 20);
        assert_eq!((forged.total_steps, forged.first_step), (20, 0));
        assert_eq!(forged.losses.len(), 20);
        assert_eq!((forged.losses[0], forged.losses[19]), (2.0, 1.0));
        let steps: Vec<usize> = forged.checkpoints.iter().map(|c| c.state.step).collect();
        // The inner boundaries of a 20-step run: where an honest one keeps its states.
        let bounds = boundaries(20, TRACE_SEGMENTS);
        assert_eq!(steps, bounds[1..bounds.len() - 1]);
        assert_eq!(steps.len(), TRACE_SEGMENTS - 1);
        // The short run kept one state; the others repeat it.
        assert!(forged.checkpoints.iter().all(|c| c.dropout == vec![42]));
    }

    #[test]
    fn flipped_answers_are_wrong_and_the_questions_stay() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path().join("shard.jsonl");
        std::fs::write(
            &shard,
            "{\"text\":\"good\",\"label\":1}\n{\"text\":\"bad\",\"label\":0}\n",
        )
        .unwrap();
        flip_answers(&shard).unwrap();
        assert_eq!(
            std::fs::read_to_string(&shard).unwrap(),
            "{\"label\":0,\"text\":\"good\"}\n{\"label\":1,\"text\":\"bad\"}\n"
        );
        std::fs::write(
            &shard,
            "{\"prompt\":\"a?\",\"completion\":\"A\"}\n{\"prompt\":\"b?\",\"completion\":\"B\"}\n",
        )
        .unwrap();
        flip_answers(&shard).unwrap();
        let text = std::fs::read_to_string(&shard).unwrap();
        assert!(
            text.contains("\"completion\":\"B\",\"prompt\":\"a?\""),
            "{text}"
        );
        assert!(
            text.contains("\"completion\":\"A\",\"prompt\":\"b?\""),
            "{text}"
        );
        std::fs::write(
            &shard,
            "{\"prompt\":\"2+2=\",\"chosen\":\"4\",\"rejected\":\"5\"}\n",
        )
        .unwrap();
        flip_answers(&shard).unwrap();
        assert_eq!(
            std::fs::read_to_string(&shard).unwrap(),
            "{\"chosen\":\"5\",\"prompt\":\"2+2=\",\"rejected\":\"4\"}\n",
            "the preference reversed"
        );
    }
}
