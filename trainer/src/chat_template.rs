//! Rendering a model's own Jinja chat template (from `tokenizer.chat_template`) with minijinja,
//! configured as transformers configures Jinja2 (`trim_blocks`, `lstrip_blocks`), so a
//! conversation is laid out exactly as the model saw it in instruction tuning.

use std::ops::Range;

use minijinja::{Environment, ErrorKind, context};

const TEMPLATE_NAME: &str = "chat";

/// Why a chat template could not be used for a conversation.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source is not valid Jinja.
    #[error("chat template does not parse: {0}")]
    Parse(String),
    /// Rendering failed, e.g. the template called `raise_exception` on the conversation.
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// Rendering a prefix of the conversation is not a prefix of the full rendering; the count of
    /// messages in that prefix.
    #[error(
        "chat template is not incremental: rendering the first {0} messages is not a prefix of \
         rendering them all, so assistant turns cannot be located"
    )]
    NotIncremental(usize),
}

/// One turn of a conversation: the protocol's `{"messages"}` record turn.
pub use shardwork_core::protocol::ChatMessage;

/// A model's chat template, compiled once, with the BOS and EOS tokens it refers to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source` with transformers' Jinja settings; `bos_token` and `eos_token` are the
    /// values the template sees.
    pub fn new(
        source: &str,
        bos_token: String,
        eos_token: String,
    ) -> Result<Self, ChatTemplateError> {
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
    /// the header of an assistant turn for the model to complete.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(e.to_string()))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| ChatTemplateError::Render(e.to_string()))
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
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }

    #[test]
    fn template_syntax_error_is_reported_at_construction() {
        let err =
            ChatTemplate::new("{% for m in messages %}", String::new(), String::new()).unwrap_err();
        assert!(matches!(err, ChatTemplateError::Parse(_)), "{err}");
    }
}
