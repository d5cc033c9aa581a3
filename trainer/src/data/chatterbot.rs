//! The `chatterbot-corpus` conversations (YAML, PyPI) as `{"messages"}` chat records: every
//! conversation `[a, b, c, d, …]` becomes alternating user/assistant turns, a trailing
//! unanswered user line dropped. Real chat data for the SFT demo and tests, with no hub.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Every conversation of the `*.yml` files in `dir` (e.g. `chatterbot_corpus/data/english`),
/// files in name order, as `{"messages":[…]}` records.
pub fn conversations(dir: &Path) -> Result<Vec<Value>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?;
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| Error::Config {
            path: file.clone(),
            detail: format!("not YAML: {e}"),
        })?;
        let Some(list) = doc.get("conversations").and_then(|c| c.as_sequence()) else {
            continue;
        };
        for conversation in list {
            let Some(lines) = conversation.as_sequence() else {
                continue;
            };
            let lines: Vec<String> = lines
                .iter()
                .filter_map(|l| match l {
                    serde_yaml::Value::String(s) => Some(s.clone()),
                    serde_yaml::Value::Number(x) => Some(x.to_string()),
                    serde_yaml::Value::Bool(b) => Some(b.to_string()),
                    _ => None,
                })
                .collect();
            let turns = lines.len() / 2 * 2;
            if turns == 0 {
                continue;
            }
            let messages: Vec<Value> = lines[..turns]
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    let role = if i % 2 == 0 { "user" } else { "assistant" };
                    json!({ "role": role, "content": text })
                })
                .collect();
            out.push(json!({ "messages": messages }));
        }
    }
    Ok(out)
}
