//! SFT datasets: the causal-LM record shapes (defined once, in
//! [`shardwork_core::protocol::records`]) tokenized into examples that mark which tokens the
//! loss learns.
//!
//! - `{"text"}`: plain language modelling, every token learned.
//! - `{"prompt","completion"}`: the two concatenated; only the completion is learned.
//! - `{"instruction","input","output"}`: only the response is learned. With a chat template it
//!   becomes a user turn and an assistant turn; without one, the Alpaca prompt.
//! - `{"messages": [{"role", "content"}, ...]}`: laid out by the model's chat template; only
//!   assistant turns are learned.

use std::ops::Range;
use std::path::Path;

pub use shardwork_core::protocol::DatasetRecord;
use shardwork_core::protocol::{PreferencePrompt, RecordsFor};

use crate::chat_template::ChatMessage;
use crate::error::{Error, Result};
use crate::tokenizer_gguf::LmTokenizer;

/// Reads a JSONL file of causal-LM records; a bad line is an error naming the file, its 1-based
/// line number and the field at fault.
pub fn read_sft_jsonl(path: &Path) -> Result<Vec<DatasetRecord>> {
    let records = crate::data::jsonl::read_records(path, RecordsFor::Sft)?;
    Ok(records.into_iter().map(|(_, record)| record).collect())
}

/// A tokenized record: `ids[t + 1]` is predicted from `ids[..=t]` and counts in the loss when
/// `learn[t + 1]` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SftExample {
    /// Token ids of the record after truncation, special tokens included.
    pub ids: Vec<u32>,
    /// Per token: whether predicting it counts in the loss (`learn[0]` is never used).
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
    record: &DatasetRecord,
    max_len: usize,
) -> Result<Option<SftExample>> {
    let template_err = |e: crate::chat_template::ChatTemplateError| Error::Tokenizer(e.to_string());
    let eos_text = tok.tokenizer.id_to_token(tok.eos_token_id).ok_or_else(|| {
        Error::Tokenizer(format!("eos token id {} has no text", tok.eos_token_id))
    })?;
    // (text, byte ranges learned); an empty range list means "learn every token".
    let (text, spans): (String, Option<Vec<Range<usize>>>) = match (record, &tok.chat_template) {
        (DatasetRecord::Text(text), _) => (format!("{text}{eos_text}"), None),
        (DatasetRecord::PromptCompletion { prompt, completion }, _) => {
            let text = format!("{prompt}{completion}{eos_text}");
            // One span: the completion (and end marker) after the prompt.
            #[allow(clippy::single_range_in_vec_init)]
            let spans = vec![prompt.len()..text.len()];
            (text, Some(spans))
        }
        (DatasetRecord::Preference { .. }, _) => {
            return Err(Error::Invalid(
                "a preference record is for a DPO job: each answer is encoded by encode_answer"
                    .to_owned(),
            ));
        }
        (DatasetRecord::Labelled { .. }, _) => {
            return Err(Error::Invalid(
                "a {\"text\",\"label\"} record is for sequence classification, not SFT".to_owned(),
            ));
        }
        (DatasetRecord::Messages(messages), Some(template)) => {
            let (text, spans) = template
                .render_with_assistant_spans(messages)
                .map_err(template_err)?;
            (text, Some(spans))
        }
        (DatasetRecord::Messages(_), None) => {
            return Err(Error::Invalid(
                "dataset has {\"messages\"} records but the model has no chat template".to_owned(),
            ));
        }
        (
            DatasetRecord::Instruction {
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
            DatasetRecord::Instruction {
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
    tokenize(tok, &text, spans.as_deref(), max_len)
}

/// One answer of a preference pair after its prompt, tokenized like an SFT record whose only
/// learned tokens are the answer's (and its end marker): a text prompt followed by the answer
/// as written, or the prompt's turns and the answer as the next assistant turn through the
/// chat template (earlier assistant turns of the prompt are not learned). `None` when the
/// answer lies entirely past `max_len`.
pub fn encode_answer(
    tok: &LmTokenizer,
    prompt: &PreferencePrompt,
    answer: &str,
    max_len: usize,
) -> Result<Option<SftExample>> {
    let template_err = |e: crate::chat_template::ChatTemplateError| Error::Tokenizer(e.to_string());
    let (text, span) = match (prompt, &tok.chat_template) {
        (PreferencePrompt::Text(prompt), _) => {
            let eos_text = tok.tokenizer.id_to_token(tok.eos_token_id).ok_or_else(|| {
                Error::Tokenizer(format!("eos token id {} has no text", tok.eos_token_id))
            })?;
            let text = format!("{prompt}{answer}{eos_text}");
            let span = prompt.len()..text.len();
            (text, span)
        }
        (PreferencePrompt::Turns(turns), Some(template)) => {
            let mut messages = turns.clone();
            messages.push(ChatMessage::new("assistant", answer));
            let (text, spans) = template
                .render_with_assistant_spans(&messages)
                .map_err(template_err)?;
            let span = spans.last().cloned().ok_or_else(|| {
                Error::Tokenizer("the chat template laid out no assistant turn".to_owned())
            })?;
            (text, span)
        }
        (PreferencePrompt::Turns(_), None) => {
            return Err(Error::Invalid(
                "dataset has preference records of chat turns but the model has no chat template"
                    .to_owned(),
            ));
        }
    };
    tokenize(tok, &text, Some(std::slice::from_ref(&span)), max_len)
}

/// `text` tokenized and cut at `max_len` tokens, learning the tokens that start inside
/// `spans` (every token without spans); `None` when none is left to learn.
fn tokenize(
    tok: &LmTokenizer,
    text: &str,
    spans: Option<&[Range<usize>]>,
    max_len: usize,
) -> Result<Option<SftExample>> {
    let tok_err = |e: crate::tokenizer_gguf::TokenizerError| Error::Tokenizer(e.to_string());
    let (mut ids, offsets) = tok.encode_with_offsets(text).map_err(tok_err)?;
    let mut learn: Vec<bool> = match spans {
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
