//! Command-line surface: parsing and dispatch only; each subcommand's work lives in its module.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "shardwork",
    version,
    about = "An open marketplace for LoRA and federated fine-tuning"
)]
pub struct Cli {
    /// Configuration file (TOML). Without it, ./shardwork.toml is read when present.
    #[arg(long, global = true, env = "SHARDWORK_CONFIG")]
    pub config: Option<PathBuf>,

    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    pub json_logs: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the marketplace in one process on embedded defaults (no servers needed).
    Up,
    /// Run the API server on the configured adapters (secrets must be configured).
    Serve,
    /// Print the effective configuration (secrets redacted) and exit.
    Config,
    /// Deploy the escrow contract, or write its Etherscan verification input.
    #[command(subcommand)]
    Contracts(crate::contracts_cmd::ContractsCommand),
    /// Run a benchmark; each prints its baseline measured in the same run.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Up => crate::up::run(config).await,
        Command::Serve => crate::serve::run(config).await,
        Command::Bench(command) => crate::bench::run(command).await,
        Command::Contracts(command) => crate::contracts_cmd::run(command).await,
        Command::Config => {
            print!("{}", config.redacted_toml());
            Ok(())
        }
    }
}
