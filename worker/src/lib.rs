//! shardwork-worker: the trainer. LoRA on candle models, training loops, evaluation,
//! Hugging Face PEFT adapter files and federated merging.

pub mod error;
pub mod lora;

pub use error::{Error, Result};
