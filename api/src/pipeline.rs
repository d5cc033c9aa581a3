//! The dataset pipeline run when a job is posted: validate the JSONL, shuffle it by the spec's
//! seed, split off the held-out set, cut the shards. Pure functions over bytes; storing the
//! pieces is the caller's (see `routes::jobs::create`), so every check runs before anything is
//! written.
//!
//! Reproducibility: the shuffle uses ChaCha20 (`rand_chacha`, whose output stream is fixed by
//! its crate's stability promise, unlike `StdRng`) and a Fisher–Yates pass written here, so the
//! same dataset and seed give the same held-out set and shards on any machine and any version
//! of `rand`.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::Deserialize;
use shardwork_core::protocol::{FieldError, JobSpec, TrainingTask};

use crate::sizing::held_out_count;

/// Errors reported per dataset, at most this many: enough to show a pattern, not a flood.
pub const MAX_REPORTED_ERRORS: usize = 20;

/// A record as the classification trainer reads it (`worker::data::classify`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassifyRecord {
    text: String,
    label: Label,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Label {
    Int(u64),
    #[allow(dead_code)] // Read for its shape only: names are mapped to ids by the trainer.
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatMessage {
    #[allow(dead_code)]
    role: String,
    #[allow(dead_code)]
    content: String,
}

/// The causal-LM formats: plain text, prompt/completion, or a chat.
#[derive(Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum CausalRecord {
    Text {
        #[allow(dead_code)]
        text: String,
    },
    PromptCompletion {
        #[allow(dead_code)]
        prompt: String,
        #[allow(dead_code)]
        completion: String,
    },
    Chat {
        messages: Vec<ChatMessage>,
    },
}

/// The dataset's records (each a line without its newline), in upload order. Blank lines are
/// skipped, as the trainer skips them; every other line must be a record of the spec's task.
pub fn parse_records<'a>(data: &'a [u8], spec: &JobSpec) -> Result<Vec<&'a [u8]>, Vec<FieldError>> {
    let mut records = Vec::new();
    let mut errors = Vec::new();
    let mut fail = |line: usize, message: String| {
        if errors.len() < MAX_REPORTED_ERRORS {
            errors.push(FieldError {
                path: format!("dataset:{line}"),
                message: format!("line {line}: {message}"),
            });
        }
    };
    for (index, raw) in data.split(|b| *b == b'\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let checked = match spec.base_model.task {
            TrainingTask::SequenceClassification => serde_json::from_slice::<ClassifyRecord>(raw)
                .map_err(|e| format!("not a {{\"text\", \"label\"}} record: {e}"))
                .and_then(|r| check_classify(&r, spec.base_model.num_labels.unwrap_or(2))),
            TrainingTask::CausalLm => serde_json::from_slice::<CausalRecord>(raw)
                .map_err(|_| {
                    "not a causal-LM record: use {\"text\"}, {\"prompt\", \"completion\"} or \
                     {\"messages\": [{\"role\", \"content\"}]}"
                        .to_owned()
                })
                .and_then(|r| match r {
                    CausalRecord::Chat { messages } if messages.is_empty() => {
                        Err("`messages` is empty".to_owned())
                    }
                    _ => Ok(()),
                }),
        };
        match checked {
            Ok(()) => records.push(raw),
            Err(message) => fail(line, message),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if records.is_empty() {
        return Err(vec![FieldError {
            path: "dataset".into(),
            message: "the dataset holds no records".into(),
        }]);
    }
    Ok(records)
}

fn check_classify(record: &ClassifyRecord, num_labels: u32) -> Result<(), String> {
    if record.text.trim().is_empty() {
        return Err("`text` is empty".into());
    }
    match record.label {
        Label::Int(label) if label >= u64::from(num_labels) => Err(format!(
            "label {label} is outside 0..{num_labels} (num_labels)"
        )),
        _ => Ok(()),
    }
}

/// `0..n` permuted by ChaCha20 seeded with `seed` (Fisher–Yates, unbiased by rejection).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = uniform_below(&mut rng, (i + 1) as u64) as usize;
        order.swap(i, j);
    }
    order
}

/// A uniform integer in `0..bound` (bound ≥ 1) without modulo bias.
fn uniform_below(rng: &mut ChaCha20Rng, bound: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % bound;
        }
    }
}

/// The dataset cut for a job: held-out records and each shard's records, as JSONL bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub held_out: Vec<u8>,
    pub held_out_records: u64,
    pub shards: Vec<(Vec<u8>, u64)>,
}

/// Shuffles `records` by the spec's seed, takes the held-out set from the front, and cuts the
/// rest into the spec's shards (sizes differ by at most one).
pub fn split(records: &[&[u8]], spec: &JobSpec) -> Result<Split, FieldError> {
    let n = records.len() as u64;
    if n < 2 {
        return Err(FieldError {
            path: "dataset".into(),
            message: format!("{n} record cannot give both a held-out set and training data"),
        });
    }
    let held = held_out_count(n, spec.held_out_fraction);
    let sizes = spec.shard_sizes(n - held).map_err(|message| FieldError {
        path: "dataset".into(),
        message,
    })?;
    let order = permutation(records.len(), spec.training.seed);
    let jsonl = |indices: &[usize]| {
        let mut out = Vec::new();
        for &i in indices {
            out.extend_from_slice(records[i]);
            out.push(b'\n');
        }
        out
    };
    let (held_idx, mut rest) = order.split_at(held as usize);
    let mut shards = Vec::with_capacity(sizes.len());
    for size in sizes {
        let (shard, tail) = rest.split_at(size as usize);
        shards.push((jsonl(shard), size));
        rest = tail;
    }
    Ok(Split {
        held_out: jsonl(held_idx),
        held_out_records: held,
        shards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(task: &str, shards: u32) -> JobSpec {
        let (arch, labels) = if task == "causal_lm" {
            ("llama", None)
        } else {
            ("bert", Some(2))
        };
        let mut v = serde_json::json!({
            "version": 1, "kind": "federated",
            "base_model": { "cid": "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
                "format": "safetensors", "architecture": arch, "task": task },
            "lora": { "r": 4, "alpha": 8, "target_modules": ["query"] },
            "training": { "epochs": 1, "learning_rate": 0.001, "batch_size": 8, "max_seq_len": 64, "seed": 42 },
            "shards": shards, "rounds": 1, "held_out_fraction": 0.2,
            "deadline": "2099-01-01T00:00:00Z", "stake": { "amount": "1" }
        });
        if let Some(n) = labels {
            v["base_model"]["num_labels"] = n.into();
        }
        serde_json::from_value(v).unwrap()
    }

    fn dataset(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| format!("{{\"text\":\"review {i}\",\"label\":{}}}\n", i % 2))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn bad_lines_are_named_by_number_and_blank_lines_skipped() {
        let data = b"{\"text\":\"a\",\"label\":0}\n\n{\"text\":\"b\"}\n{\"text\":\"c\",\"label\":7}\nnot json\n";
        let errors = parse_records(data, &spec("sequence_classification", 1)).unwrap_err();
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["dataset:3", "dataset:4", "dataset:5"]);
        assert!(
            errors[1].message.contains("label 7 is outside 0..2"),
            "{}",
            errors[1].message
        );
    }

    #[test]
    fn causal_formats_are_all_accepted() {
        let data = b"{\"text\":\"t\"}\r\n{\"prompt\":\"p\",\"completion\":\"c\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
        assert_eq!(parse_records(data, &spec("causal_lm", 1)).unwrap().len(), 3);
        let errors = parse_records(b"{\"messages\":[]}\n{\"txt\":\"x\"}", &spec("causal_lm", 1))
            .unwrap_err();
        assert_eq!(errors.len(), 2);
    }

    #[test]
    fn error_report_is_capped() {
        let data = "x\n".repeat(100);
        let errors = parse_records(data.as_bytes(), &spec("causal_lm", 1)).unwrap_err();
        assert_eq!(errors.len(), MAX_REPORTED_ERRORS);
    }

    #[test]
    fn empty_dataset_is_refused() {
        let errors = parse_records(b"\n\n", &spec("causal_lm", 1)).unwrap_err();
        assert_eq!(errors[0].path, "dataset");
    }

    #[test]
    fn permutation_is_fixed_by_the_seed() {
        let p = permutation(10, 42);
        assert_eq!(p, permutation(10, 42));
        assert_ne!(p, permutation(10, 43));
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        // Pinned: a change here changes every published shard, so it must be deliberate.
        assert_eq!(permutation(8, 7), PINNED_8_7);
    }
    const PINNED_8_7: [usize; 8] = [0, 7, 3, 4, 6, 2, 5, 1];

    #[test]
    fn split_covers_every_record_once_and_is_reproducible() {
        let data = dataset(23);
        let spec = spec("sequence_classification", 3);
        let records = parse_records(&data, &spec).unwrap();
        let split_a = split(&records, &spec).unwrap();
        assert_eq!(split_a, split(&records, &spec).unwrap());
        assert_eq!(split_a.held_out_records, 5);
        let sizes: Vec<u64> = split_a.shards.iter().map(|s| s.1).collect();
        assert_eq!(sizes, [6, 6, 6]);
        let mut all: Vec<&[u8]> = split_a
            .held_out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        for (bytes, _) in &split_a.shards {
            all.extend(bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()));
        }
        all.sort();
        let mut expected = records.clone();
        expected.sort();
        assert_eq!(all, expected);
    }

    #[test]
    fn too_few_records_for_the_shards_is_a_dataset_error() {
        let data = dataset(4);
        let spec = spec("sequence_classification", 4);
        let records = parse_records(&data, &spec).unwrap();
        let err = split(&records, &spec).unwrap_err();
        assert!(
            err.message.contains("cannot fill 4 shards"),
            "{}",
            err.message
        );
    }
}
