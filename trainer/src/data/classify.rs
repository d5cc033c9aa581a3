//! Text classification data: JSONL records `{"text": ..., "label": ...}` where a label is a
//! string or a non-negative integer.

use std::collections::BTreeSet;
use std::path::Path;

pub use shardwork_core::protocol::Label;
use shardwork_core::protocol::{DatasetRecord, RecordsFor};

use crate::error::{Error, Result};

/// Texts with label ids `0..label_names.len()`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassificationSet {
    /// The texts, one per example.
    pub texts: Vec<String>,
    /// Label id of each text, an index into `label_names`.
    pub labels: Vec<u32>,
    /// Label name of each id, in id order.
    pub label_names: Vec<String>,
}

impl ClassificationSet {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether the set has no examples.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Number of distinct labels.
    pub fn num_labels(&self) -> usize {
        self.label_names.len()
    }

    /// Reads a JSONL file. Label ids are assigned in sorted order (numerically when every
    /// label is an integer), or taken from `label_names` when given, so a held-out file maps
    /// the same way as its training file; a label not in `label_names` is an error naming
    /// its line.
    pub fn from_jsonl(path: &Path, label_names: Option<&[String]>) -> Result<Self> {
        let mut texts = Vec::new();
        let mut raw = Vec::new();
        let mut lines = Vec::new();
        let records =
            super::jsonl::read_records(path, RecordsFor::Classification { num_labels: None })?;
        for (line_no, record) in records {
            let DatasetRecord::Labelled { text, label } = record else {
                return Err(Error::Dataset {
                    path: path.to_path_buf(),
                    line: line_no,
                    detail: format!("a {} record is not a classification record", record.shape()),
                });
            };
            texts.push(text);
            raw.push(label);
            lines.push(line_no);
        }
        let names: Vec<String> = match label_names {
            Some(n) => n.to_vec(),
            None => sorted_names(&raw),
        };
        let mut labels = Vec::with_capacity(raw.len());
        for (label, line) in raw.iter().zip(lines) {
            let name = label.name();
            let id = names
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| Error::Dataset {
                    path: path.to_path_buf(),
                    line,
                    detail: format!("label {name:?} is not one of {names:?}"),
                })?;
            labels.push(id as u32);
        }
        Ok(Self {
            texts,
            labels,
            label_names: names,
        })
    }

    /// The records at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> Self {
        Self {
            texts: indices.iter().map(|&i| self.texts[i].clone()).collect(),
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
            label_names: self.label_names.clone(),
        }
    }

    /// Writes the set as JSONL with string labels (how a job's dataset is uploaded).
    pub fn write_jsonl(&self, path: &Path) -> Result<()> {
        let mut out = String::new();
        for (t, l) in self.texts.iter().zip(&self.labels) {
            let rec = serde_json::json!({"text": t, "label": self.label_names[*l as usize]});
            out.push_str(&rec.to_string());
            out.push('\n');
        }
        std::fs::write(path, out).map_err(|e| Error::io(path, e))
    }
}

fn sorted_names(raw: &[Label]) -> Vec<String> {
    let ints: Option<BTreeSet<u64>> = raw
        .iter()
        .map(|l| match l {
            Label::Int(i) => Some(*i),
            Label::Name(_) => None,
        })
        .collect();
    match ints {
        Some(ints) => ints.into_iter().map(|i| i.to_string()).collect(),
        None => raw
            .iter()
            .map(Label::name)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), content).unwrap();
        f
    }

    #[test]
    fn labels_get_stable_ids_and_held_out_files_reuse_them() {
        let f = write("{\"text\":\"a\",\"label\":\"pos\"}\n{\"text\":\"b\",\"label\":\"neg\"}\n");
        let set = ClassificationSet::from_jsonl(f.path(), None).unwrap();
        assert_eq!(set.label_names, vec!["neg", "pos"]);
        assert_eq!(set.labels, vec![1, 0]);
        let g = write("{\"text\":\"c\",\"label\":\"pos\"}\n\n{\"text\":\"d\",\"label\":\"meh\"}\n");
        let err = ClassificationSet::from_jsonl(g.path(), Some(&set.label_names)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(":3: label \"meh\""), "{msg}");
    }

    #[test]
    fn integer_labels_sort_numerically() {
        let f = write("{\"text\":\"a\",\"label\":10}\n{\"text\":\"b\",\"label\":2}\n");
        let set = ClassificationSet::from_jsonl(f.path(), None).unwrap();
        assert_eq!(set.label_names, vec!["2", "10"]);
    }

    #[test]
    fn record_without_label_names_its_line() {
        let f = write("{\"text\":\"a\",\"label\":1}\n{\"text\":\"b\"}\n");
        let msg = ClassificationSet::from_jsonl(f.path(), None)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(":2: missing field `label`"), "{msg}");
    }
}
