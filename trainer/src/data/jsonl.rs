//! JSONL reading: one JSON object per line, blank lines skipped, and every failure reported as
//! `file:line: what is wrong`.

use std::io::BufRead;
use std::path::Path;

use serde::de::DeserializeOwned;
use shardwork_core::protocol::{DatasetRecord, RecordsFor};

use crate::error::{Error, Result};

/// The dataset records of `path` that a job training on `records` reads, each with its 1-based line,
/// read with the protocol's one record parser (the one the API checks datasets with at posting).
/// A bad line is an error naming the file, the line and the field at fault.
pub fn read_records(path: &Path, records: RecordsFor) -> Result<Vec<(usize, DatasetRecord)>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let out = each_line(std::io::BufReader::new(file), path, |line| {
        DatasetRecord::parse_for(line.as_bytes(), records).map_err(|e| e.message)
    })?;
    if out.is_empty() {
        return Err(Error::Dataset {
            path: path.to_path_buf(),
            line: 0,
            detail: "no records".to_owned(),
        });
    }
    Ok(out)
}

/// Parses every non-blank line of `path` as a `T`.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    parse(std::io::BufReader::new(file), path)
}

/// Like [`read`], from any reader; `path` only names the source in errors.
pub fn parse<T: DeserializeOwned>(reader: impl BufRead, path: &Path) -> Result<Vec<T>> {
    let records = each_line(reader, path, |line| {
        // serde_json's own line is always 1 here; its column and message are what help.
        serde_json::from_str(line)
            .map_err(|e| format!("{} (column {})", strip_position(&e), e.column()))
    })?;
    Ok(records.into_iter().map(|(_, record)| record).collect())
}

/// `read` applied to every non-blank line with its 1-based number; the first failure is an
/// error naming the file and the line.
fn each_line<T>(
    reader: impl BufRead,
    path: &Path,
    mut read: impl FnMut(&str) -> std::result::Result<T, String>,
) -> Result<Vec<(usize, T)>> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let failed = |detail: String| Error::Dataset {
            path: path.to_path_buf(),
            line: line_no,
            detail,
        };
        let line = line.map_err(|e| failed(format!("unreadable: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push((line_no, read(&line).map_err(failed)?));
    }
    Ok(out)
}

fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Rec {
        #[allow(dead_code)]
        text: String,
    }

    #[test]
    fn malformed_line_is_reported_with_file_and_line_number() {
        let input = "{\"text\": \"ok\"}\n\n{\"text\": \"also ok\"}\n{\"text\": 3}\n";
        let err = parse::<Rec>(input.as_bytes(), Path::new("train.jsonl")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("train.jsonl:4: "), "{msg}");
        assert!(msg.contains("invalid type"), "{msg}");
    }

    #[test]
    fn truncated_json_is_an_error_not_a_panic() {
        let err = parse::<Rec>("{\"text\": \"o".as_bytes(), Path::new("d.jsonl")).unwrap_err();
        assert!(err.to_string().starts_with("d.jsonl:1: "), "{err}");
    }

    #[test]
    fn blank_lines_are_skipped() {
        let recs = parse::<Rec>("\n{\"text\":\"a\"}\n  \n".as_bytes(), Path::new("x")).unwrap();
        assert_eq!(recs.len(), 1);
    }
}
