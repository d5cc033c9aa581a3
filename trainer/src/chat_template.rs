//! A model's own Jinja chat template: the one renderer, with its fuel and output bounds, lives
//! in `shardwork_core::chat_template` so the API's check at posting and the nodes' renders are
//! the same program on the same budget.

pub use shardwork_core::chat_template::{ChatTemplate, ChatTemplateError};
/// One turn of a conversation: the protocol's `{"messages"}` record turn.
pub use shardwork_core::protocol::ChatMessage;
