//! `shardwork`: the one binary of the Shardwork marketplace.
//!
//! `shardwork up` runs everything in one process on embedded defaults; the other subcommands run
//! one component each against real servers, or act for a requester.

mod bench;
mod cli;
mod config;
mod contracts_cmd;
mod demo;
mod demo_preference;
mod dev_secrets;
mod earnings_cmd;
mod health;
mod infra;
mod job_cmd;
mod job_events;
mod model_cmd;
mod nodes;
mod progress;
mod serve;
mod train_cmd;
mod up;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in main, before any thread starts (the runtime's included), so
    // every allocation follows the same settings and nothing reads the environment meanwhile.
    unsafe { shardwork_trainer::process::prepare_for_tensor_work() };
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            let code = runtime.block_on(run());
            // A stopped worker leaves its training thread behind (its task was given back):
            // do not wait for it, as dropping the runtime would.
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            code
        }
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(cli.json_logs, cli.command.default_log_filter());
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing(json: bool, default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("SHARDWORK_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
