//! `shardwork contracts …`: deploying JobEscrow and producing what Etherscan asks for to verify it.

use std::path::PathBuf;

use alloy::primitives::Address;
use anyhow::Context;
use clap::{Args, Subcommand};
use shardwork_contracts::ledger::DeployParams;
use shardwork_contracts::verify;

#[derive(Debug, Subcommand)]
pub enum ContractsCommand {
    /// Write the standard-JSON input, compiler version and ABI-encoded constructor arguments
    /// Etherscan asks for, for a deployment made with these constructor parameters.
    VerifyInput {
        /// Folder to write into (created if missing).
        #[arg(long, default_value = "etherscan")]
        out: PathBuf,
        #[command(flatten)]
        roles: Roles,
    },
    /// Deploy JobEscrow and print its address and the verification files.
    Deploy {
        /// JSON-RPC endpoint of the chain.
        #[arg(long)]
        rpc_url: String,
        /// Hex private key of the deployer. Prefer the environment variable to the command line.
        #[arg(long, env = "SHARDWORK_DEPLOYER_KEY", hide_env_values = true)]
        private_key: String,
        /// Roles and treasury default to the deployer when none is given.
        #[command(flatten)]
        roles: OptionalRoles,
        /// Where to write the Etherscan verification files for this deployment.
        #[arg(long, default_value = "etherscan")]
        verification_out: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct Roles {
    #[arg(long)]
    admin: Address,
    #[arg(long)]
    validator: Address,
    #[arg(long)]
    fee_manager: Address,
    #[arg(long)]
    treasury: Address,
    /// Platform fee in basis points (at most 1,000).
    #[arg(long)]
    fee_bps: u16,
}

#[derive(Debug, Args)]
pub struct OptionalRoles {
    #[arg(long, requires_all = ["validator", "fee_manager", "treasury"])]
    admin: Option<Address>,
    #[arg(long)]
    validator: Option<Address>,
    #[arg(long)]
    fee_manager: Option<Address>,
    #[arg(long)]
    treasury: Option<Address>,
    /// Platform fee in basis points (at most 1,000).
    #[arg(long, default_value_t = 250)]
    fee_bps: u16,
}

pub async fn run(command: ContractsCommand) -> anyhow::Result<()> {
    match command {
        ContractsCommand::VerifyInput { out, roles } => {
            let params = DeployParams {
                admin: roles.admin,
                validator: roles.validator,
                fee_manager: roles.fee_manager,
                treasury: roles.treasury,
                fee_bps: roles.fee_bps,
            };
            let files = verify::write_verification_input(&out, &params)?;
            print_files(&files);
        }
        ContractsCommand::Deploy {
            rpc_url,
            private_key,
            roles,
            verification_out,
        } => {
            let params = match (
                roles.admin,
                roles.validator,
                roles.fee_manager,
                roles.treasury,
            ) {
                (Some(admin), Some(validator), Some(fee_manager), Some(treasury)) => {
                    Some(DeployParams {
                        admin,
                        validator,
                        fee_manager,
                        treasury,
                        fee_bps: roles.fee_bps,
                    })
                }
                _ => None,
            };
            let deployment = verify::deploy(&rpc_url, &private_key, params, roles.fee_bps)
                .await
                .context("deploying JobEscrow")?;
            println!("chain id      {}", deployment.chain_id);
            println!("JobEscrow     {}", deployment.escrow);
            println!("deployer      {}", deployment.deployer);
            println!("block         {}", deployment.block_number);
            let files = verify::write_verification_input(&verification_out, &deployment.params)?;
            print_files(&files);
        }
    }
    Ok(())
}

fn print_files(files: &verify::VerificationFiles) {
    println!(
        "standard-JSON input     {}",
        files.standard_json_input.display()
    );
    println!(
        "compiler version        {}",
        files.compiler_version.display()
    );
    println!(
        "constructor arguments   {}",
        files.constructor_arguments.display()
    );
}
