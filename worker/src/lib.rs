//! shardwork-worker: the trainer. LoRA on candle models, training loops, evaluation,
//! Hugging Face PEFT adapter files and federated merging.

pub mod baseline;
pub mod bench;
pub mod bert;
pub mod chat_template;
pub mod data;
pub mod error;
pub mod eval;
pub mod experiment;
pub mod fixtures;
pub mod generate;
pub mod gguf;
pub mod inference;
pub mod linalg;
pub mod llama;
pub mod lora;
pub mod merge;
pub mod nn;
pub mod node;
pub mod optim;
pub mod peft;
pub mod safetensors_file;
pub mod text;
pub mod tokenizer_gguf;
pub mod train;

pub use error::{Error, Result};
