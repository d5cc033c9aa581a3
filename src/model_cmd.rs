//! `shardwork model …`: put a base model folder into the content store as a bundle (its CID is
//! what a job spec's `base_model.cid` names), or write the generated sample model.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use shardwork_node::content::{StoreBlobs, put_bundle};

use crate::config::Config;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write the small generated BERT model (config.json, model.safetensors, tokenizer.json).
    Sample {
        dir: PathBuf,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Write the generated labelled reviews (JSONL) the sample model can learn from: its words
    /// are in the sample tokenizer's vocabulary, so a job on them can beat the base model.
    SampleData {
        out: PathBuf,
        #[arg(long, default_value_t = 900)]
        records: usize,
        #[arg(long, default_value_t = 11)]
        seed: u64,
    },
    /// Store every file of a model folder in the configured content store; prints the bundle
    /// CID to name in a job spec.
    Put { dir: PathBuf },
}

pub async fn run(config: Config, command: ModelCommand) -> anyhow::Result<()> {
    match command {
        ModelCommand::Sample { dir, seed } => {
            shardwork_trainer::sample::write_model(&dir, seed)?;
            println!("{}", dir.display());
        }
        ModelCommand::SampleData { out, records, seed } => {
            anyhow::ensure!(records >= 2, "--records must be at least 2");
            let jsonl = shardwork_trainer::sample::dataset(records, seed);
            std::fs::write(&out, jsonl).with_context(|| format!("writing {}", out.display()))?;
            println!("{}", out.display());
        }
        ModelCommand::Put { dir } => {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect();
            names.sort();
            anyhow::ensure!(!names.is_empty(), "{} holds no files", dir.display());
            let store = crate::infra::open_store(&config).await?;
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let cid = put_bundle(&StoreBlobs(store), "model", &dir, &refs, None).await?;
            println!("{cid}");
        }
    }
    Ok(())
}
