//! The dataset pipeline run when a job is posted: validate the JSONL, shuffle it by the spec's
//! seed, split off the held-out set, cut the shards. Pure functions over bytes; storing the
//! pieces is the caller's (see `crate::http::routes::jobs::create`), so every check runs before anything is
//! written.
//!
//! Records are parsed by the protocol's one parser ([`DatasetRecord`]), the one the trainer reads
//! shards with, and shuffled by the protocol's one shuffle ([`shuffle::permutation`]), so the
//! same dataset and seed give the same held-out set and shards on any machine.

use shardwork_core::protocol::{DatasetRecord, FieldError, JobSpec, PreferencePrompt, shuffle};

use crate::domain::sizing::held_out_count;

/// Errors reported per dataset, at most this many: enough to show a pattern, not a flood.
pub const MAX_REPORTED_ERRORS: usize = 20;

/// The dataset's records (each a line without its newline), in upload order. Blank lines are
/// skipped, as the trainer skips them; every other line must be a record of the spec's task,
/// and a `messages` record needs a model with a chat template (`has_chat_template`): without
/// one the trainer could not lay the conversation out.
pub fn parse_records<'a>(
    data: &'a [u8],
    spec: &JobSpec,
    has_chat_template: bool,
) -> Result<Vec<&'a [u8]>, Vec<FieldError>> {
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
        let checked = DatasetRecord::parse_for(raw, spec.records_for())
            .map_err(|e| match e.field {
                Some(field) if !e.message.contains(&field) => format!("{field}: {}", e.message),
                _ => e.message,
            })
            .and_then(|record| match record {
                DatasetRecord::Messages(_) if !has_chat_template => Err(
                    "field \"messages\": the base model has no chat template to lay a \
                         conversation out with; use {\"prompt\",\"completion\"} or \
                         {\"instruction\",\"output\"} records, or a model whose tokenizer has \
                         one"
                    .to_owned(),
                ),
                DatasetRecord::Preference {
                    prompt: PreferencePrompt::Turns(_),
                    ..
                } if !has_chat_template => Err(
                    "fields \"chosen\" and \"rejected\" are turn lists, but the base model has \
                         no chat template to lay a conversation out with; use \
                         {\"prompt\",\"chosen\",\"rejected\"} strings, or a model whose tokenizer \
                         has one"
                        .to_owned(),
                ),
                _ => Ok(()),
            });
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

/// The dataset cut for a job: held-out records and each shard's records, as JSONL bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The held-out records, JSONL, before sealing.
    pub held_out: Vec<u8>,
    /// How many records the held-out set holds.
    pub held_out_records: u64,
    /// Each shard's JSONL bytes and record count, in shard order.
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
    let order = shuffle::permutation(records.len(), spec.training.seed);
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
        let errors = parse_records(data, &spec("sequence_classification", 1), false).unwrap_err();
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
        let data = b"{\"text\":\"t\"}\r\n{\"prompt\":\"p\",\"completion\":\"c\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]}\n{\"instruction\":\"i\",\"input\":\"x\",\"output\":\"o\"}";
        assert_eq!(
            parse_records(data, &spec("causal_lm", 1), true)
                .unwrap()
                .len(),
            4
        );
        let errors = parse_records(
            b"{\"messages\":[]}\n{\"txt\":\"x\"}",
            &spec("causal_lm", 1),
            true,
        )
        .unwrap_err();
        assert_eq!(errors.len(), 2);
    }

    #[test]
    fn chats_need_a_chat_template() {
        let data = b"{\"text\":\"t\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]}\n";
        let errors = parse_records(data, &spec("causal_lm", 1), false).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "dataset:2");
        assert!(
            errors[0].message.contains("no chat template"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn error_report_is_capped() {
        let data = "x\n".repeat(100);
        let errors = parse_records(data.as_bytes(), &spec("causal_lm", 1), true).unwrap_err();
        assert_eq!(errors.len(), MAX_REPORTED_ERRORS);
    }

    #[test]
    fn empty_dataset_is_refused() {
        let errors = parse_records(b"\n\n", &spec("causal_lm", 1), true).unwrap_err();
        assert_eq!(errors[0].path, "dataset");
    }

    #[test]
    fn split_covers_every_record_once_and_is_reproducible() {
        let data = dataset(23);
        let spec = spec("sequence_classification", 3);
        let records = parse_records(&data, &spec, false).unwrap();
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
        let records = parse_records(&data, &spec, false).unwrap();
        let err = split(&records, &spec).unwrap_err();
        assert!(
            err.message.contains("cannot fill 4 shards"),
            "{}",
            err.message
        );
    }
}
