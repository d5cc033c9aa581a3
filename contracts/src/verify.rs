//! Etherscan verification and deployment, for `shardwork contracts verify-input|deploy`.
//!
//! Etherscan's "Solidity (Standard-Json-Input)" form takes exactly three things: the
//! standard-JSON input, the compiler version, and the ABI-encoded constructor arguments. It
//! compiles the input and compares the result with the code at the address. The input committed
//! here is the one the committed bytecode was compiled from, so a deployment of that bytecode
//! always verifies (tests/etherscan.rs reproduces Etherscan's check against anvil).

use std::path::{Path, PathBuf};

use alloy::primitives::{Address, hex};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolConstructor;

use crate::artifacts::{self, JOB_ESCROW_NAME, JOB_ESCROW_SOURCE};
use crate::bindings::JobEscrow;
use crate::ledger::rpc::{RpcConfig, RpcLedger};
use crate::ledger::{DeployParams, Ledger, LedgerError};

/// Why writing the verification input or deploying failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The deployer key does not parse; the message never contains the key.
    #[error("private key: {0}")]
    PrivateKey(String),
    /// A verification file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Connecting to the node, deploying or reading the chain failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What Etherscan asks for, for one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationInput {
    /// `src/JobEscrow.sol:JobEscrow`, the "contract name" field.
    pub contract_name: String,
    /// `v0.8.28+commit.7893614a`.
    pub compiler_version: String,
    /// The standard-JSON input the committed bytecode was compiled from.
    pub standard_json_input: String,
    /// Hex without `0x`, as Etherscan's form wants it.
    pub constructor_arguments: String,
}

/// The verification input for a JobEscrow deployed with `params`.
pub fn verification_input(params: &DeployParams) -> VerificationInput {
    VerificationInput {
        contract_name: format!("{JOB_ESCROW_SOURCE}:{JOB_ESCROW_NAME}"),
        compiler_version: format!("v{}", artifacts::solc_long_version()),
        standard_json_input: artifacts::JOB_ESCROW_STANDARD_JSON_INPUT.to_owned(),
        constructor_arguments: hex::encode(constructor_arguments(params)),
    }
}

/// ABI-encoded constructor arguments of JobEscrow.
pub fn constructor_arguments(params: &DeployParams) -> Vec<u8> {
    JobEscrow::constructorCall {
        admin: params.admin,
        validator: params.validator,
        feeManager: params.fee_manager,
        treasury_: params.treasury,
        feeBps_: params.fee_bps,
    }
    .abi_encode()
}

/// Files written by [`write_verification_input`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationFiles {
    /// `JobEscrow.standard-input.json`: the standard-JSON input.
    pub standard_json_input: PathBuf,
    /// `compiler-version.txt`: the compiler version, `v`-prefixed.
    pub compiler_version: PathBuf,
    /// `constructor-arguments.txt`: the arguments, hex.
    pub constructor_arguments: PathBuf,
}

/// Writes `JobEscrow.standard-input.json`, `compiler-version.txt` and
/// `constructor-arguments.txt` into `dir` (created if missing).
pub fn write_verification_input(
    dir: &Path,
    params: &DeployParams,
) -> Result<VerificationFiles, VerifyError> {
    let input = verification_input(params);
    let write = |name: &str, contents: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, contents))
            .map_err(|source| VerifyError::Write {
                path: path.clone(),
                source,
            })?;
        Ok::<_, VerifyError>(path)
    };
    Ok(VerificationFiles {
        standard_json_input: write("JobEscrow.standard-input.json", &input.standard_json_input)?,
        compiler_version: write(
            "compiler-version.txt",
            &format!("{}\n", input.compiler_version),
        )?,
        constructor_arguments: write(
            "constructor-arguments.txt",
            &format!("{}\n", input.constructor_arguments),
        )?,
    })
}

/// Parses a hex private key (with or without `0x`) without echoing it in errors.
pub fn signer_from_hex(private_key: &str) -> Result<PrivateKeySigner, VerifyError> {
    private_key
        .trim()
        .parse()
        .map_err(|_| VerifyError::PrivateKey("not a 32-byte hex secp256k1 key".into()))
}

/// A finished deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// Chain it was deployed on.
    pub chain_id: u64,
    /// Address of the new JobEscrow.
    pub escrow: Address,
    /// The account that sent the deployment.
    pub deployer: Address,
    /// The chain's latest block right after the deployment was mined.
    pub block_number: u64,
    /// The constructor arguments it was deployed with.
    pub params: DeployParams,
    /// What Etherscan needs to verify it.
    pub verification: VerificationInput,
}

/// Deploys JobEscrow through `rpc_url`, signed by `private_key`. Roles and treasury default to
/// the deployer when `params` is `None` (fee `fee_bps_default`).
pub async fn deploy(
    rpc_url: &str,
    private_key: &str,
    params: Option<DeployParams>,
    fee_bps_default: u16,
) -> Result<Deployment, VerifyError> {
    let signer = signer_from_hex(private_key)?;
    let deployer = signer.address();
    let params = params.unwrap_or(DeployParams {
        admin: deployer,
        validator: deployer,
        fee_manager: deployer,
        treasury: deployer,
        fee_bps: fee_bps_default,
    });
    let ledger = RpcLedger::connect(RpcConfig::new(rpc_url), vec![signer]).await?;
    let escrow = ledger.deploy_escrow(deployer, &params).await?;
    Ok(Deployment {
        chain_id: ledger.chain_id().await?,
        escrow,
        deployer,
        block_number: ledger.block_number().await?,
        verification: verification_input(&params),
        params,
    })
}
