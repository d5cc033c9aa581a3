//! Dataset records: the one definition of every JSONL record shape a job's dataset may hold,
//! and the one parser of them.
//!
//! The API checks every line of a dataset with [`DatasetRecord::parse`] and
//! [`DatasetRecord::check_for`] when a job is posted; the trainer reads shards and held-out sets
//! with the same two calls. So a record the API accepts is a record the trainer can train on,
//! and a record the trainer would refuse is refused at posting, naming its line and field.
//!
//! | shape | JSON | trained as |
//! |---|---|---|
//! | [`DatasetRecord::Text`] | `{"text"}` | causal LM, every token learned |
//! | [`DatasetRecord::PromptCompletion`] | `{"prompt","completion"}` | causal LM, completion learned |
//! | [`DatasetRecord::Instruction`] | `{"instruction","input"?,"output"}` | causal LM, output learned |
//! | [`DatasetRecord::Messages`] | `{"messages":[{"role","content"}]}` | causal LM via the chat template, assistant turns learned |
//! | [`DatasetRecord::Labelled`] | `{"text","label"}` | sequence classification |
//! | [`DatasetRecord::Preference`] | `{"prompt","chosen","rejected"}`, or turn lists (below) | preference pairs (DPO) |
//!
//! Fields outside a record's shape are refused rather than ignored: a misspelt
//! `"complection"` would otherwise train on nothing the requester meant.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The shapes, as error messages list them.
pub const RECORD_SHAPES: &str = r#"expected {"text"}, {"prompt","completion"}, {"instruction","input","output"}, {"messages":[{"role","content"}]}, {"text","label"} or {"prompt","chosen","rejected"}"#;

/// The preference shapes, as error messages list them.
pub const PREFERENCE_SHAPES: &str = r#"a preference record is {"prompt","chosen","rejected"} with three strings, {"chosen":[turns],"rejected":[turns]} sharing every turn but the assistant's last, or {"prompt":[turns],"chosen":[one assistant turn],"rejected":[one assistant turn]}"#;

/// The records a job trains on, as its spec says ([`crate::protocol::JobSpec::records_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordsFor {
    /// `{"text","label"}`, integer labels below `num_labels`.
    Classification {
        /// The job's labels.
        num_labels: Option<u32>,
    },
    /// Any causal-LM shape: text, prompt/completion, instruction, messages.
    Sft,
    /// Preference pairs, for a DPO job.
    Preference,
}

/// The roles a chat turn may take.
pub const CHAT_ROLES: [&str; 3] = ["system", "user", "assistant"];

/// One turn of a chat record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What was said.
    pub content: String,
}

impl ChatMessage {
    /// A turn of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }
}

/// A classification label: an index into the job's labels, or a name the trainer maps to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Label {
    /// An index into the job's labels (`0..num_labels`).
    Int(u64),
    /// A label's name (`positive`).
    Name(String),
}

impl Label {
    /// The label as text (`3`, `positive`).
    pub fn name(&self) -> String {
        match self {
            Label::Int(i) => i.to_string(),
            Label::Name(s) => s.clone(),
        }
    }
}

/// The prompt a preference pair answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreferencePrompt {
    /// `"prompt": "…"`: plain text; each answer follows it as written (as a
    /// `{"prompt","completion"}` record's completion does).
    Text(String),
    /// The turns both answers follow, laid out by the model's chat template; each answer is
    /// the assistant turn after them.
    Turns(Vec<ChatMessage>),
}

/// One dataset record, of any shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetRecord {
    /// `{"text"}`: plain text, every token learned.
    Text(String),
    /// `{"prompt","completion"}`: only the completion is learned.
    PromptCompletion {
        /// What the model is given.
        prompt: String,
        /// What it learns to answer; never empty.
        completion: String,
    },
    /// `{"instruction","input"?,"output"}`: only the output is learned.
    Instruction {
        /// The task put to the model.
        instruction: String,
        /// Empty when the record has none.
        input: String,
        /// What it learns to answer; never empty.
        output: String,
    },
    /// `{"messages":[…]}`: a chat through the chat template; the assistant turns are learned.
    Messages(Vec<ChatMessage>),
    /// `{"text","label"}`: a text and its class, for sequence classification.
    Labelled {
        /// The text to classify.
        text: String,
        /// Its class.
        label: Label,
    },
    /// A prompt, the answer preferred and the answer rejected, for preference training (DPO).
    Preference {
        /// What both answers follow.
        prompt: PreferencePrompt,
        /// The preferred answer; never empty.
        chosen: String,
        /// The rejected answer; never empty, never the chosen one.
        rejected: String,
    },
}

/// Why a record was refused: the field at fault (a path such as `messages[1].role`; `None` for
/// the record as a whole) and a sentence that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The field at fault (`messages[1].role`); `None` for the record as a whole.
    pub field: Option<String>,
    /// A sentence that names the problem.
    pub message: String,
}

impl RecordError {
    fn record(message: impl Into<String>) -> Self {
        Self {
            field: None,
            message: message.into(),
        }
    }

    fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// Whether the message contains `needle` (for callers that match on the sentence).
    pub fn contains(&self, needle: &str) -> bool {
        self.message.contains(needle)
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RecordError {}

type Fields<'a> = &'a Map<String, Value>;

/// A string field: `Ok(None)` when absent or null.
fn optional_string(obj: Fields, key: &str) -> Result<Option<String>, RecordError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(RecordError::field(
            key,
            format!("field {key:?} must be a string, found {other}"),
        )),
    }
}

/// A string field the shape needs, non-empty where `nonempty`.
fn required_string(
    obj: Fields,
    key: &str,
    shape: &str,
    nonempty: Option<&str>,
) -> Result<String, RecordError> {
    match optional_string(obj, key)? {
        None => Err(RecordError::field(
            key,
            format!("missing field `{key}` of a {shape} record; {RECORD_SHAPES}"),
        )),
        Some(s) if s.trim().is_empty() && nonempty.is_some() => Err(RecordError::field(
            key,
            format!("field {key:?} is empty{}", nonempty.unwrap_or_default()),
        )),
        Some(s) => Ok(s),
    }
}

/// Refuses any field outside `allowed`.
fn only(obj: Fields, allowed: &[&str], shape: &str) -> Result<(), RecordError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(RecordError::field(
            key.as_str(),
            format!("field {key:?} is not part of a {shape} record"),
        )),
        None => Ok(()),
    }
}

const NOTHING_TO_LEARN: &str = ", so there is nothing to learn";

/// The chat turns of the list `value` at field `key`, each `{"role","content"}` with a known
/// role.
fn turns(value: &Value, key: &str) -> Result<Vec<ChatMessage>, RecordError> {
    let Value::Array(items) = value else {
        return Err(RecordError::field(
            key,
            format!("field {key:?} must be an array of turns"),
        ));
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let role = item.get("role").and_then(Value::as_str);
        let content = item.get("content").and_then(Value::as_str);
        let (Some(role), Some(content)) = (role, content) else {
            return Err(RecordError::field(
                format!("{key}[{i}]"),
                format!("{key}[{i}] needs string fields \"role\" and \"content\""),
            ));
        };
        if let Some(other) = item
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "role" && *k != "content"))
        {
            return Err(RecordError::field(
                format!("{key}[{i}].{other}"),
                format!("{key}[{i}] has field {other:?}; a turn is {{\"role\",\"content\"}}"),
            ));
        }
        if !CHAT_ROLES.contains(&role) {
            return Err(RecordError::field(
                format!("{key}[{i}].role"),
                format!("{key}[{i}].role {role:?} is not one of {CHAT_ROLES:?}"),
            ));
        }
        messages.push(ChatMessage::new(role, content));
    }
    Ok(messages)
}

/// Refuses an answer of a preference pair (at `path`) that is not an assistant's turn.
fn answer_turn(turn: &ChatMessage, path: &str) -> Result<(), RecordError> {
    if turn.role == "assistant" {
        return Ok(());
    }
    Err(RecordError::field(
        format!("{path}.role"),
        format!(
            "{path}.role is {:?}; the answers of a preference pair are assistant turns",
            turn.role
        ),
    ))
}

impl DatasetRecord {
    /// Parses one JSONL line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Self, RecordError> {
        let value: Value = serde_json::from_slice(line).map_err(|e| {
            // serde_json's own line is always 1 here; its column and message are what help.
            let text = e.to_string();
            let text = text.rfind(" at line ").map_or(&text[..], |i| &text[..i]);
            RecordError::record(format!("not JSON: {text} (column {})", e.column()))
        })?;
        Self::from_json(&value)
    }

    /// Reads one record from a JSON value; its shape is chosen by the fields it has.
    pub fn from_json(value: &Value) -> Result<Self, RecordError> {
        let Value::Object(obj) = value else {
            return Err(RecordError::record(format!(
                "record is not a JSON object; {RECORD_SHAPES}"
            )));
        };
        if obj.contains_key("chosen") || obj.contains_key("rejected") {
            let shape = r#"{"prompt","chosen","rejected"}"#;
            only(obj, &["prompt", "chosen", "rejected"], shape)?;
            return Self::preference(obj);
        }
        if obj.contains_key("messages") {
            only(obj, &["messages"], r#"{"messages"}"#)?;
            return Self::messages(&obj["messages"]);
        }
        if obj.contains_key("instruction") || obj.contains_key("output") {
            let shape = r#"{"instruction","input","output"}"#;
            only(obj, &["instruction", "input", "output"], shape)?;
            return Ok(DatasetRecord::Instruction {
                instruction: required_string(obj, "instruction", shape, None)?,
                input: optional_string(obj, "input")?.unwrap_or_default(),
                output: required_string(obj, "output", shape, Some(NOTHING_TO_LEARN))?,
            });
        }
        if obj.contains_key("prompt") || obj.contains_key("completion") {
            let shape = r#"{"prompt","completion"}"#;
            only(obj, &["prompt", "completion"], shape)?;
            return Ok(DatasetRecord::PromptCompletion {
                prompt: required_string(obj, "prompt", shape, None)?,
                completion: required_string(obj, "completion", shape, Some(NOTHING_TO_LEARN))?,
            });
        }
        if obj.contains_key("label") {
            let shape = r#"{"text","label"}"#;
            only(obj, &["text", "label"], shape)?;
            let text = required_string(obj, "text", shape, Some(""))?;
            let label = match &obj["label"] {
                Value::Number(n) => n.as_u64().map(Label::Int).ok_or_else(|| {
                    RecordError::field(
                        "label",
                        format!("label {n} is not a non-negative integer or a name"),
                    )
                })?,
                Value::String(s) if !s.trim().is_empty() => Label::Name(s.clone()),
                other => {
                    return Err(RecordError::field(
                        "label",
                        format!("label {other} is not a non-negative integer or a name"),
                    ));
                }
            };
            return Ok(DatasetRecord::Labelled { text, label });
        }
        if obj.contains_key("text") {
            only(obj, &["text"], r#"{"text"}"#)?;
            return Ok(DatasetRecord::Text(required_string(
                obj,
                "text",
                r#"{"text"}"#,
                Some(""),
            )?));
        }
        Err(RecordError::record(match obj.keys().next() {
            Some(key) => format!("field {key:?} is not part of any record shape; {RECORD_SHAPES}"),
            None => format!("the record is empty; {RECORD_SHAPES}"),
        }))
    }

    fn messages(value: &Value) -> Result<Self, RecordError> {
        let messages = turns(value, "messages")?;
        if !messages.iter().any(|m| m.role == "assistant") {
            return Err(RecordError::field(
                "messages",
                format!("messages has no assistant turn{NOTHING_TO_LEARN}"),
            ));
        }
        Ok(DatasetRecord::Messages(messages))
    }

    /// A preference record in one of its three forms ([`PREFERENCE_SHAPES`]).
    fn preference(obj: Fields) -> Result<Self, RecordError> {
        let side = |key: &str| match obj.get(key) {
            None | Some(Value::Null) => Err(RecordError::field(
                key,
                format!("missing field `{key}`; {PREFERENCE_SHAPES}"),
            )),
            Some(value) => Ok(value),
        };
        let (chosen, rejected) = (side("chosen")?, side("rejected")?);
        let (prompt, chosen, rejected) = match (obj.get("prompt"), chosen, rejected) {
            (Some(Value::String(prompt)), Value::String(c), Value::String(r)) => {
                (PreferencePrompt::Text(prompt.clone()), c.clone(), r.clone())
            }
            (None | Some(Value::Null), Value::Array(_), Value::Array(_)) => {
                let chosen = turns(chosen, "chosen")?;
                let rejected = turns(rejected, "rejected")?;
                let (Some((c, shared)), Some((r, theirs))) =
                    (chosen.split_last(), rejected.split_last())
                else {
                    return Err(RecordError::field(
                        "chosen",
                        format!("an answer list is empty; {PREFERENCE_SHAPES}"),
                    ));
                };
                if shared.len() != theirs.len() {
                    return Err(RecordError::field(
                        "rejected",
                        format!(
                            "rejected has {} turns and chosen {}; both share every turn but \
                             the last",
                            theirs.len() + 1,
                            shared.len() + 1
                        ),
                    ));
                }
                if let Some(i) = (0..shared.len()).find(|&i| shared[i] != theirs[i]) {
                    return Err(RecordError::field(
                        format!("rejected[{i}]"),
                        format!(
                            "rejected[{i}] differs from chosen[{i}]; both share every turn but \
                             the last"
                        ),
                    ));
                }
                answer_turn(c, &format!("chosen[{}]", shared.len()))?;
                answer_turn(r, &format!("rejected[{}]", shared.len()))?;
                if shared.is_empty() {
                    return Err(RecordError::field(
                        "chosen",
                        "chosen and rejected share no prompt turn, so the answers answer nothing",
                    ));
                }
                (
                    PreferencePrompt::Turns(shared.to_vec()),
                    c.content.clone(),
                    r.content.clone(),
                )
            }
            (Some(Value::Array(_)), Value::Array(_), Value::Array(_)) => {
                let prompt = turns(&obj["prompt"], "prompt")?;
                if prompt.is_empty() {
                    return Err(RecordError::field(
                        "prompt",
                        "field \"prompt\" has no turns",
                    ));
                }
                let one = |key: &str| -> Result<String, RecordError> {
                    let answer = turns(&obj[key], key)?;
                    let [last] = answer.as_slice() else {
                        return Err(RecordError::field(
                            key,
                            format!(
                                "{key} has {} turns; after a \"prompt\" list it is one \
                                 assistant turn",
                                answer.len()
                            ),
                        ));
                    };
                    answer_turn(last, &format!("{key}[0]"))?;
                    Ok(last.content.clone())
                };
                (
                    PreferencePrompt::Turns(prompt),
                    one("chosen")?,
                    one("rejected")?,
                )
            }
            _ => {
                return Err(RecordError::record(format!(
                    "\"prompt\", \"chosen\" and \"rejected\" mix strings and turn lists; \
                     {PREFERENCE_SHAPES}"
                )));
            }
        };
        for (key, answer) in [("chosen", &chosen), ("rejected", &rejected)] {
            if answer.trim().is_empty() {
                return Err(RecordError::field(
                    key,
                    format!("field {key:?} is empty{NOTHING_TO_LEARN}"),
                ));
            }
        }
        if chosen == rejected {
            return Err(RecordError::field(
                "rejected",
                "rejected is the same answer as chosen, so the pair prefers nothing",
            ));
        }
        Ok(DatasetRecord::Preference {
            prompt,
            chosen,
            rejected,
        })
    }

    /// The shape's name, as [`RECORD_SHAPES`] writes it.
    pub fn shape(&self) -> &'static str {
        match self {
            DatasetRecord::Text(_) => r#"{"text"}"#,
            DatasetRecord::PromptCompletion { .. } => r#"{"prompt","completion"}"#,
            DatasetRecord::Instruction { .. } => r#"{"instruction","input","output"}"#,
            DatasetRecord::Messages(_) => r#"{"messages"}"#,
            DatasetRecord::Labelled { .. } => r#"{"text","label"}"#,
            DatasetRecord::Preference { .. } => r#"{"prompt","chosen","rejected"}"#,
        }
    }

    /// Whether this record can be trained by a job that trains on `records` (integer
    /// classification labels must be below its `num_labels`).
    pub fn check_for(&self, records: RecordsFor) -> Result<(), RecordError> {
        match (records, self) {
            (RecordsFor::Classification { num_labels }, DatasetRecord::Labelled { label, .. }) => {
                match (label, num_labels) {
                    (Label::Int(label), Some(n)) if *label >= u64::from(n) => {
                        Err(RecordError::field(
                            "label",
                            format!("label {label} is outside 0..{n} (num_labels)"),
                        ))
                    }
                    _ => Ok(()),
                }
            }
            (RecordsFor::Classification { .. }, DatasetRecord::Text(_)) => Err(RecordError::field(
                "label",
                "missing field `label`: a sequence-classification record is {\"text\",\"label\"}",
            )),
            (RecordsFor::Classification { .. }, other) => Err(RecordError::record(format!(
                "a {} record is not for sequence-classification jobs, whose records are \
                 {{\"text\",\"label\"}}",
                other.shape()
            ))),
            (RecordsFor::Sft, DatasetRecord::Labelled { .. }) => Err(RecordError::field(
                "label",
                "field \"label\" belongs to sequence-classification records; a causal-LM job \
                 takes {\"text\"}, {\"prompt\",\"completion\"}, {\"instruction\",\"input\",\"output\"} \
                 or {\"messages\"}",
            )),
            (RecordsFor::Sft, DatasetRecord::Preference { .. }) => Err(RecordError::record(
                "a preference record is for a DPO job (a spec with `training.dpo`); a \
                     supervised causal-LM job takes {\"text\"}, {\"prompt\",\"completion\"}, \
                     {\"instruction\",\"input\",\"output\"} or {\"messages\"}",
            )),
            (RecordsFor::Sft, _) => Ok(()),
            (RecordsFor::Preference, DatasetRecord::Preference { .. }) => Ok(()),
            (RecordsFor::Preference, other) => Err(RecordError::record(format!(
                "a {} record is not a preference pair; {PREFERENCE_SHAPES}",
                other.shape()
            ))),
        }
    }

    /// Parses one line and checks it fits a job that trains on `records` (see
    /// [`Self::check_for`]).
    pub fn parse_for(line: &[u8], records: RecordsFor) -> Result<Self, RecordError> {
        let record = Self::parse(line)?;
        record.check_for(records)?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_shape_is_recognised() {
        assert_eq!(
            DatasetRecord::from_json(&json!({"text": "hello"})).unwrap(),
            DatasetRecord::Text("hello".into())
        );
        assert_eq!(
            DatasetRecord::from_json(&json!({"instruction": "Add", "input": "1+1", "output": "2"}))
                .unwrap(),
            DatasetRecord::Instruction {
                instruction: "Add".into(),
                input: "1+1".into(),
                output: "2".into()
            }
        );
        assert_eq!(
            DatasetRecord::from_json(&json!({"instruction": "Add", "output": "2"})).unwrap(),
            DatasetRecord::Instruction {
                instruction: "Add".into(),
                input: String::new(),
                output: "2".into()
            }
        );
        assert_eq!(
            DatasetRecord::from_json(&json!({"prompt": "2+2=", "completion": "4"})).unwrap(),
            DatasetRecord::PromptCompletion {
                prompt: "2+2=".into(),
                completion: "4".into()
            }
        );
        let m = DatasetRecord::from_json(&json!({"messages": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}
        ]}))
        .unwrap();
        assert!(matches!(m, DatasetRecord::Messages(ms) if ms.len() == 2));
        assert_eq!(
            DatasetRecord::parse(br#"{"text":"fine","label":"pos"}"#).unwrap(),
            DatasetRecord::Labelled {
                text: "fine".into(),
                label: Label::Name("pos".into())
            }
        );
        assert_eq!(
            DatasetRecord::parse(br#"{"text":"fine","label":1}"#).unwrap(),
            DatasetRecord::Labelled {
                text: "fine".into(),
                label: Label::Int(1)
            }
        );
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
            let err = DatasetRecord::from_json(&value).unwrap_err();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn an_error_names_the_field_at_fault() {
        let field = |line: &str| DatasetRecord::parse(line.as_bytes()).unwrap_err().field;
        assert_eq!(
            field(r#"{"prompt":"p","complection":"c"}"#).as_deref(),
            Some("complection")
        );
        assert_eq!(
            field(r#"{"messages":[{"role":"robot","content":"x"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            field(r#"{"prompt":"p","completion":""}"#).as_deref(),
            Some("completion")
        );
        assert_eq!(
            field(r#"{"text":"t","label":-1}"#).as_deref(),
            Some("label")
        );
        assert_eq!(field(r#"{"text":"#), None);
        assert!(
            DatasetRecord::parse(b"{\"text\": oops}")
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn a_record_must_fit_the_jobs_task() {
        let labelled = DatasetRecord::parse(br#"{"text":"a","label":7}"#).unwrap();
        let err = labelled
            .check_for(RecordsFor::Classification {
                num_labels: Some(2),
            })
            .unwrap_err();
        assert!(err.contains("label 7 is outside 0..2"), "{err}");
        assert!(
            labelled
                .check_for(RecordsFor::Classification {
                    num_labels: Some(8)
                })
                .is_ok()
        );
        assert_eq!(
            labelled
                .check_for(RecordsFor::Sft)
                .unwrap_err()
                .field
                .as_deref(),
            Some("label")
        );
        let text = DatasetRecord::parse(br#"{"text":"a"}"#).unwrap();
        assert!(text.check_for(RecordsFor::Sft).is_ok());
        assert!(
            text.check_for(RecordsFor::Classification {
                num_labels: Some(2)
            })
            .unwrap_err()
            .contains("missing field `label`")
        );
        let chat = DatasetRecord::parse(
            br#"{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}"#,
        )
        .unwrap();
        assert!(
            chat.check_for(RecordsFor::Classification {
                num_labels: Some(2)
            })
            .unwrap_err()
            .contains("not for sequence-classification jobs")
        );
    }

    #[test]
    fn preference_pairs_are_read_in_each_form_and_refused_naming_the_field() {
        let plain =
            DatasetRecord::parse(br#"{"prompt":"2+2=","chosen":"4","rejected":"5"}"#).unwrap();
        assert_eq!(
            plain,
            DatasetRecord::Preference {
                prompt: PreferencePrompt::Text("2+2=".into()),
                chosen: "4".into(),
                rejected: "5".into()
            }
        );
        let user = ChatMessage::new("user", "Hi");
        let implicit = DatasetRecord::from_json(&json!({
            "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
            "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go away."}]
        }))
        .unwrap();
        let expected = DatasetRecord::Preference {
            prompt: PreferencePrompt::Turns(vec![user.clone()]),
            chosen: "Hello!".into(),
            rejected: "Go away.".into(),
        };
        assert_eq!(implicit, expected);
        let explicit = DatasetRecord::from_json(&json!({
            "prompt": [{"role": "user", "content": "Hi"}],
            "chosen": [{"role": "assistant", "content": "Hello!"}],
            "rejected": [{"role": "assistant", "content": "Go away."}]
        }))
        .unwrap();
        assert_eq!(explicit, expected);
        assert!(plain.check_for(RecordsFor::Preference).is_ok());
        assert!(
            plain
                .check_for(RecordsFor::Sft)
                .unwrap_err()
                .contains("training.dpo")
        );
        assert!(
            DatasetRecord::parse(br#"{"text":"a"}"#)
                .unwrap()
                .check_for(RecordsFor::Preference)
                .unwrap_err()
                .contains("not a preference pair")
        );

        let field = |value: serde_json::Value| {
            let err = DatasetRecord::from_json(&value).unwrap_err();
            (err.field.clone(), err.message)
        };
        let turn = |role: &str, content: &str| json!({"role": role, "content": content});
        for (value, path, says) in [
            (
                json!({"prompt": "p", "chosen": "a"}),
                Some("rejected"),
                "missing field `rejected`",
            ),
            (
                json!({"prompt": "p", "chosen": "", "rejected": "b"}),
                Some("chosen"),
                "is empty",
            ),
            (
                json!({"prompt": "p", "chosen": "a", "rejected": "a"}),
                Some("rejected"),
                "prefers nothing",
            ),
            (
                json!({"prompt": "p", "chosen": "a", "rejected": "b", "score": 1}),
                Some("score"),
                "not part of",
            ),
            (
                json!({"prompt": "p", "chosen": [turn("assistant", "a")], "rejected": "b"}),
                None,
                "mix strings",
            ),
            (
                json!({"chosen": [turn("user", "q"), turn("assistant", "a")],
                       "rejected": [turn("user", "other"), turn("assistant", "b")]}),
                Some("rejected[0]"),
                "differs from chosen[0]",
            ),
            (
                json!({"chosen": [turn("user", "q"), turn("user", "a")],
                       "rejected": [turn("user", "q"), turn("assistant", "b")]}),
                Some("chosen[1].role"),
                "assistant turns",
            ),
            (
                json!({"chosen": [turn("assistant", "a")], "rejected": [turn("assistant", "b")]}),
                Some("chosen"),
                "share no prompt turn",
            ),
            (
                json!({"chosen": [turn("user", "q"), turn("robot", "a")],
                       "rejected": [turn("user", "q"), turn("assistant", "b")]}),
                Some("chosen[1].role"),
                "not one of",
            ),
            (
                json!({"prompt": [turn("user", "q")], "chosen": [turn("assistant", "a"), turn("assistant", "c")],
                       "rejected": [turn("assistant", "b")]}),
                Some("chosen"),
                "one assistant turn",
            ),
        ] {
            let (got_path, message) = field(value.clone());
            assert_eq!(got_path.as_deref(), path, "{value}: {message}");
            assert!(message.contains(says), "{value}: {message}");
        }
    }
}
