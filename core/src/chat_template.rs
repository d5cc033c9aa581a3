//! A model's own Jinja chat template, rendered with minijinja configured as transformers
//! configures Jinja2 (`trim_blocks`, `lstrip_blocks`), so a conversation is laid out exactly as
//! the model saw it in instruction tuning.
//!
//! Here, in core, because the template is untrusted input that the API test-renders at posting
//! and every node renders again for each record: one environment, with one budget, for both.
//! A template is a program: three nested `range(100000)` loops made a validator's scoring never
//! return. Every render runs on [`render_fuel`] (minijinja's count of executed instructions; a
//! template that exhausts it fails with [`ChatTemplateError::OutOfFuel`]) and may write at most
//! [`MAX_RENDERED_BYTES`]. Fuel bounds time rather than a wall clock, so a render's outcome is
//! the same on every machine, which the nodes' agreement on training data needs.

use std::ops::Range;

use minijinja::{Environment, ErrorKind, context};

use crate::protocol::ChatMessage;
use crate::protocol::model_files::limits::MAX_CHAT_TEMPLATE_BYTES;

const TEMPLATE_NAME: &str = "chat";

/// Fuel every render starts with, beside [`FUEL_PER_MESSAGE`] per message and
/// [`FUEL_PER_BYTE`] per byte of the messages' text. Published templates use a few hundred
/// instructions per message (SmolLM2's about 40; tool-use templates a few hundred).
pub const FUEL_BASE: u64 = 100_000;
/// Fuel added per message of the conversation rendered.
pub const FUEL_PER_MESSAGE: u64 = 10_000;
/// Fuel added per byte of the messages' content (templates that walk text character by
/// character).
pub const FUEL_PER_BYTE: u64 = 4;
/// Most bytes one render may write.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// The fuel a render of `messages` runs on.
pub fn render_fuel(messages: &[ChatMessage]) -> u64 {
    let bytes: u64 = messages
        .iter()
        .map(|m| (m.role.len() + m.content.len()) as u64)
        .sum();
    FUEL_BASE
        .saturating_add(FUEL_PER_MESSAGE.saturating_mul(messages.len() as u64))
        .saturating_add(FUEL_PER_BYTE.saturating_mul(bytes))
}

/// Why a chat template could not be used for a conversation.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source is not valid Jinja, or is longer than the limit.
    #[error("chat template does not parse: {0}")]
    Parse(String),
    /// Rendering failed, e.g. the template called `raise_exception` on the conversation.
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The template ran out of its fuel or wrote more than [`MAX_RENDERED_BYTES`]: it loops
    /// far longer than laying out a conversation takes.
    #[error("chat template ran past its budget: {0}")]
    OutOfFuel(String),
    /// Rendering a prefix of the conversation is not a prefix of the full rendering; the count of
    /// messages in that prefix.
    #[error(
        "chat template is not incremental: rendering the first {0} messages is not a prefix of \
         rendering them all, so assistant turns cannot be located"
    )]
    NotIncremental(usize),
}

/// A model's chat template, compiled once, with the BOS and EOS tokens it refers to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

/// A writer that refuses to grow past [`MAX_RENDERED_BYTES`].
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            return Err(std::io::Error::other(format!(
                "the rendering is longer than {MAX_RENDERED_BYTES} bytes"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ChatTemplate {
    /// Compiles `source` with transformers' Jinja settings; `bos_token` and `eos_token` are the
    /// values the template sees.
    pub fn new(
        source: &str,
        bos_token: String,
        eos_token: String,
    ) -> Result<Self, ChatTemplateError> {
        if source.len() as u64 > MAX_CHAT_TEMPLATE_BYTES {
            return Err(ChatTemplateError::Parse(format!(
                "{} bytes is longer than {MAX_CHAT_TEMPLATE_BYTES}",
                source.len()
            )));
        }
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        // Templates call this to reject conversations they cannot lay out (e.g. bad role order).
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatTemplateError::Parse(e.to_string()))?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// The conversation as the model's prompt text; with `add_generation_prompt` it ends with
    /// the header of an assistant turn for the model to complete. Runs on
    /// [`render_fuel`]`(messages)`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        // The fuel is the environment's; a clone is cheap (the compiled template is shared).
        let mut env = self.env.clone();
        env.set_fuel(Some(render_fuel(messages)));
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(e.to_string()))?;
        let mut out = Bounded(Vec::new());
        template
            .render_captured_to(
                context! {
                    messages => messages,
                    add_generation_prompt => add_generation_prompt,
                    bos_token => &self.bos_token,
                    eos_token => &self.eos_token,
                },
                &mut out,
            )
            .map_err(|e| match e.kind() {
                ErrorKind::OutOfFuel | ErrorKind::WriteFailure => {
                    ChatTemplateError::OutOfFuel(e.to_string())
                }
                _ => ChatTemplateError::Render(e.to_string()),
            })?;
        String::from_utf8(out.0).map_err(|e| ChatTemplateError::Render(e.to_string()))
    }

    /// Renders the whole conversation and returns the byte ranges written by assistant turns
    /// (their content and end-of-turn marker, not the role header), the part SFT learns.
    ///
    /// A turn's range is what rendering messages `..=i` adds after rendering messages `..i` with
    /// a generation prompt; this works for any template whose output grows by appending.
    pub fn render_with_assistant_spans(
        &self,
        messages: &[ChatMessage],
    ) -> Result<(String, Vec<Range<usize>>), ChatTemplateError> {
        let full = self.render(messages, false)?;
        let mut spans = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            if message.role != "assistant" {
                continue;
            }
            let prompt = self.render(&messages[..i], true)?;
            let through = self.render(&messages[..=i], false)?;
            if !through.starts_with(&prompt) || !full.starts_with(&through) {
                return Err(ChatTemplateError::NotIncremental(i + 1));
            }
            if through.len() > prompt.len() {
                spans.push(prompt.len()..through.len());
            }
        }
        Ok((full, spans))
    }

    /// What posting checks of a template before a job is written: that it lays out a short
    /// conversation (a user turn and an assistant's answer, with and without a generation
    /// prompt) within its budget, and incrementally, as every node will.
    pub fn check(&self) -> Result<(), ChatTemplateError> {
        let sample = [
            ChatMessage::new("user", "What is 2 + 2?"),
            ChatMessage::new("assistant", "4"),
        ];
        self.render(&sample[..1], true)?;
        self.render_with_assistant_spans(&sample)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template shipped in SmolLM2-135M-Instruct's tokenizer_config.json.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn template() -> ChatTemplate {
        ChatTemplate::new(SMOLLM2, String::new(), "<|im_end|>".to_owned()).unwrap()
    }

    #[test]
    fn smollm2_template_renders_chatml_with_default_system_prompt() {
        let text = template()
            .render(&[ChatMessage::new("user", "Hi")], true)
            .unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        template().check().unwrap();
    }

    #[test]
    fn assistant_spans_cover_only_assistant_content_and_end_marker() {
        let messages = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hello"),
            ChatMessage::new("assistant", "Hi there"),
            ChatMessage::new("user", "Bye"),
            ChatMessage::new("assistant", "Goodbye"),
        ];
        let (text, spans) = template().render_with_assistant_spans(&messages).unwrap();
        let learned: Vec<&str> = spans.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(learned, ["Hi there<|im_end|>\n", "Goodbye<|im_end|>\n"]);
    }

    #[test]
    fn raise_exception_in_template_is_a_render_error() {
        let t = ChatTemplate::new(
            "{{ raise_exception('roles must alternate') }}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let err = t.render(&[], false).unwrap_err();
        assert!(matches!(err, ChatTemplateError::Render(_)), "{err}");
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }

    #[test]
    fn template_syntax_error_is_reported_at_construction() {
        let err =
            ChatTemplate::new("{% for m in messages %}", String::new(), String::new()).unwrap_err();
        assert!(matches!(err, ChatTemplateError::Parse(_)), "{err}");
        let long = "x".repeat(MAX_CHAT_TEMPLATE_BYTES as usize + 1);
        let err = ChatTemplate::new(&long, String::new(), String::new()).unwrap_err();
        assert!(matches!(err, ChatTemplateError::Parse(_)), "{err}");
    }

    #[test]
    fn a_template_that_loops_for_ever_runs_out_of_fuel_at_once() {
        let nested = "{% for a in range(100000) %}{% for b in range(100000) %}\
                      {% for c in range(100000) %}{{ a }}{% endfor %}{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(nested, String::new(), String::new()).unwrap();
        let started = std::time::Instant::now();
        let err = t.check().unwrap_err();
        assert!(matches!(err, ChatTemplateError::OutOfFuel(_)), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Writing without end is stopped by the output bound before the fuel runs out.
        let wide = "{% for a in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}";
        let t = ChatTemplate::new(wide, String::new(), String::new()).unwrap();
        let err = t.render(&[], false).unwrap_err();
        assert!(matches!(err, ChatTemplateError::OutOfFuel(_)), "{err}");
    }
}
