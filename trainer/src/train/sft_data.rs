//! SFT datasets: the three JSONL record shapes and their tokenization into examples that mark
//! which tokens the loss learns.
//!
//! - `{"text": ...}`: plain language modelling, every token learned.
//! - `{"instruction": ..., "input": ..., "output": ...}`: only the response is learned. With a
//!   chat template it becomes a user turn and an assistant turn; without one, the Alpaca prompt.
//! - `{"messages": [{"role", "content"}, ...]}`: laid out by the model's chat template; only
//!   assistant turns are learned.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::chat_template::ChatMessage;
use crate::error::{Error, Result};
use crate::tokenizer_gguf::LmTokenizer;

/// One dataset record.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub enum SftRecord {
    Text(String),
    Instruction {
        instruction: String,
        input: String,
        output: String,
    },
    Messages(Vec<ChatMessage>),
}

const SHAPES: &str =
    r#"expected {"text"}, {"instruction","input","output"} or {"messages":[{"role","content"}]}"#;

impl TryFrom<Value> for SftRecord {
    type Error = String;

    fn try_from(value: Value) -> std::result::Result<Self, String> {
        Self::from_json(&value)
    }
}

impl SftRecord {
    /// Parses one JSON object; the error says which field is wrong.
    pub fn from_json(value: &Value) -> std::result::Result<Self, String> {
        let Value::Object(obj) = value else {
            return Err(format!("record is not a JSON object; {SHAPES}"));
        };
        let string = |key: &str| -> std::result::Result<Option<String>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("field {key:?} must be a string, found {other}")),
            }
        };
        if let Some(messages) = obj.get("messages") {
            let Value::Array(items) = messages else {
                return Err("field \"messages\" must be an array".to_owned());
            };
            let messages = items
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let role = m.get("role").and_then(Value::as_str);
                    let content = m.get("content").and_then(Value::as_str);
                    match (role, content) {
                        (Some(role), Some(content)) => Ok(ChatMessage::new(role, content)),
                        _ => Err(format!(
                            "messages[{i}] needs string fields \"role\" and \"content\""
                        )),
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            if !messages.iter().any(|m| m.role == "assistant") {
                return Err(
                    "messages has no assistant turn, so there is nothing to learn".to_owned(),
                );
            }
            return Ok(SftRecord::Messages(messages));
        }
        if let (Some(instruction), Some(output)) = (string("instruction")?, string("output")?) {
            if output.is_empty() {
                return Err("field \"output\" is empty, so there is nothing to learn".to_owned());
            }
            return Ok(SftRecord::Instruction {
                instruction,
                input: string("input")?.unwrap_or_default(),
                output,
            });
        }
        match string("text")? {
            Some(text) if !text.is_empty() => Ok(SftRecord::Text(text)),
            Some(_) => Err("field \"text\" is empty".to_owned()),
            None => Err(SHAPES.to_owned()),
        }
    }
}

/// Reads a JSONL file of SFT records; a bad line is an error naming the file and its 1-based
/// line number.
pub fn read_sft_jsonl(path: &Path) -> Result<Vec<SftRecord>> {
    let records: Vec<SftRecord> = crate::data::jsonl::read(path)?;
    if records.is_empty() {
        return Err(Error::Dataset {
            path: path.to_owned(),
            line: 0,
            detail: "no records".to_owned(),
        });
    }
    Ok(records)
}

/// A tokenized record: `ids[t + 1]` is predicted from `ids[..=t]` and counts in the loss when
/// `learn[t + 1]` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SftExample {
    pub ids: Vec<u32>,
    pub learn: Vec<bool>,
}

impl SftExample {
    /// Number of predictions that count in the loss.
    pub fn learned_tokens(&self) -> usize {
        self.learn.iter().skip(1).filter(|&&l| l).count()
    }
}

/// The Alpaca prompt, for instruction data on models without a chat template.
fn alpaca_prompt(instruction: &str, input: &str) -> String {
    if input.is_empty() {
        format!("### Instruction:\n{instruction}\n\n### Response:\n")
    } else {
        format!("### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
    }
}

/// Tokenizes `record`, truncated to `max_len` tokens. Returns `None` when truncation leaves
/// nothing to learn (the response lies entirely past `max_len`).
pub fn encode_record(
    tok: &LmTokenizer,
    record: &SftRecord,
    max_len: usize,
) -> Result<Option<SftExample>> {
    let tok_err = |e: crate::tokenizer_gguf::TokenizerError| Error::Tokenizer(e.to_string());
    let template_err = |e: crate::chat_template::ChatTemplateError| Error::Tokenizer(e.to_string());
    let eos_text = tok.tokenizer.id_to_token(tok.eos_token_id).ok_or_else(|| {
        Error::Tokenizer(format!("eos token id {} has no text", tok.eos_token_id))
    })?;
    // (text, byte ranges learned); an empty range list means "learn every token".
    let (text, spans): (String, Option<Vec<Range<usize>>>) = match (record, &tok.chat_template) {
        (SftRecord::Text(text), _) => (format!("{text}{eos_text}"), None),
        (SftRecord::Messages(messages), Some(template)) => {
            let (text, spans) = template
                .render_with_assistant_spans(messages)
                .map_err(template_err)?;
            (text, Some(spans))
        }
        (SftRecord::Messages(_), None) => {
            return Err(Error::Invalid(
                "dataset has {\"messages\"} records but the model has no chat template".to_owned(),
            ));
        }
        (
            SftRecord::Instruction {
                instruction,
                input,
                output,
            },
            Some(template),
        ) => {
            let user = if input.is_empty() {
                instruction.clone()
            } else {
                format!("{instruction}\n\n{input}")
            };
            let messages = [
                ChatMessage::new("user", &user),
                ChatMessage::new("assistant", output),
            ];
            let (text, spans) = template
                .render_with_assistant_spans(&messages)
                .map_err(template_err)?;
            (text, Some(spans))
        }
        (
            SftRecord::Instruction {
                instruction,
                input,
                output,
            },
            None,
        ) => {
            let prompt = alpaca_prompt(instruction, input);
            let start = prompt.len();
            let text = format!("{prompt}{output}{eos_text}");
            let end = text.len();
            // One span: the response (and end marker) after the prompt.
            #[allow(clippy::single_range_in_vec_init)]
            let spans = vec![start..end];
            (text, Some(spans))
        }
    };
    let (mut ids, offsets) = tok.encode_with_offsets(&text).map_err(tok_err)?;
    let mut learn: Vec<bool> = match &spans {
        None => offsets.iter().map(|&(s, e)| e > s).collect(),
        Some(spans) => offsets
            .iter()
            .map(|&(s, e)| e > s && spans.iter().any(|r| r.contains(&s)))
            .collect(),
    };
    ids.truncate(max_len);
    learn.truncate(max_len);
    let example = SftExample { ids, learn };
    Ok((example.learned_tokens() > 0).then_some(example))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn record_shapes_are_recognised() {
        assert_eq!(
            SftRecord::from_json(&json!({"text": "hello"})).unwrap(),
            SftRecord::Text("hello".into())
        );
        assert_eq!(
            SftRecord::from_json(&json!({"instruction": "Add", "input": "1+1", "output": "2"}))
                .unwrap(),
            SftRecord::Instruction {
                instruction: "Add".into(),
                input: "1+1".into(),
                output: "2".into()
            }
        );
        let m = SftRecord::from_json(&json!({"messages": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}
        ]}))
        .unwrap();
        assert!(matches!(m, SftRecord::Messages(ms) if ms.len() == 2));
    }

    #[test]
    fn records_without_anything_to_learn_are_rejected_with_the_reason() {
        let cases = [
            (
                json!({"messages": [{"role": "user", "content": "Hi"}]}),
                "no assistant turn",
            ),
            (json!({"messages": [{"role": "user"}]}), "messages[0]"),
            (
                json!({"instruction": "x", "output": ""}),
                "\"output\" is empty",
            ),
            (json!({"text": 5}), "\"text\" must be a string"),
            (json!({"prompt": "x"}), "expected {\"text\"}"),
            (json!([1, 2]), "not a JSON object"),
        ];
        for (value, expected) in cases {
            let err = SftRecord::from_json(&value).unwrap_err();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn malformed_line_error_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.jsonl");
        std::fs::write(
            &path,
            "{\"text\": \"ok\"}\n\n{\"text\": \"fine\"}\n{\"text\": oops}\n",
        )
        .unwrap();
        let err = read_sft_jsonl(&path).unwrap_err().to_string();
        assert!(err.contains("train.jsonl:4:"), "{err}");

        std::fs::write(&path, "{\"text\": \"ok\"}\n{\"prompt\": \"x\"}\n").unwrap();
        let err = read_sft_jsonl(&path).unwrap_err().to_string();
        assert!(
            err.contains("train.jsonl:2:") && err.contains("expected {\"text\"}"),
            "{err}"
        );
    }
}
