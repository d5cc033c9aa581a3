//! shardwork-trainer: LoRA on candle models, the training loops, held-out evaluation and
//! scoring kernels, Hugging Face PEFT adapter files and federated merging.
//!
//! Pure computation on files and tensors: no HTTP, no chain, no async runtime, no database.
//! The marketplace's services (`shardwork-node`) and the CLI call it; `cargo tree -p
//! shardwork-trainer -e normal` shows what it links.
//!
//! * models: [`bert`] (BERT-family classification), [`llama`] (Llama-family causal LM, from
//!   [`gguf`] or safetensors, its frozen projections optionally kept [`quantized`]), [`lora`]
//!   layers, [`nn`] building blocks;
//! * data: [`data`] (classification JSONL and splits), [`train::sft_data`] (SFT records),
//!   [`text`] and [`tokenizer_gguf`] tokenizers, [`chat_template`];
//! * work: [`train`] loops with [`optim`], [`eval`] and [`inference`] (held-out scoring),
//!   [`generate`], [`merge`] of adapters, [`peft`] files, [`sample`] (a generated model and
//!   dataset for demos and tests);
//! * devices: [`gpu`] (a CUDA training process's memory pool and its peak).
//!
//! With the `experiments` feature: the fixed experiments, benchmarks and fixture finder the
//! tests, benches and the CLI's `bench` and `demo` use.
#![warn(missing_docs)]

pub mod amx;
#[cfg(feature = "experiments")]
pub mod baseline;
#[cfg(feature = "experiments")]
pub mod bench;
pub mod bert;
pub mod causal_model;
pub mod chat_template;
pub mod data;
pub mod error;
pub mod eval;
#[cfg(feature = "experiments")]
pub mod experiment;
#[cfg(feature = "experiments")]
pub mod fixtures;
pub mod fused;
pub mod generate;
pub mod gguf;
pub mod gpu;
pub mod guarded_tokenizer;
pub mod inference;
pub mod linalg;
pub mod llama;
pub mod lora;
pub mod merge;
pub mod nn;
pub mod optim;
pub mod panels;
pub mod peft;
pub mod process;
pub mod quantized;
pub mod safetensors_file;
pub mod sample;
pub mod text;
pub mod tokenizer_gguf;
pub mod train;

pub use error::{Error, Result};
