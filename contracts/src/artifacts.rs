//! The committed compiler output (`contracts/artifacts/`), embedded into the crate.
//!
//! Why committed rather than compiled by a build script: `cargo build` must work on a machine
//! without solc, and the bytecode that is deployed and verified on Etherscan must be exactly the
//! bytecode the tests ran. `tests/artifacts.rs` recompiles the sources with the pinned solc and
//! fails when these files drift; `SHARDWORK_UPDATE_ARTIFACTS=1` on that test rewrites them.

use std::collections::BTreeMap;

use alloy::primitives::Bytes;
use serde::Deserialize;

/// Name of the escrow contract in the sources and in the standard-JSON input.
pub const JOB_ESCROW_NAME: &str = "JobEscrow";
/// Source unit of the escrow contract, as it is named in the standard-JSON input.
pub const JOB_ESCROW_SOURCE: &str = "src/JobEscrow.sol";

/// ABI, bytecode, deployed bytecode (with immutable references) and metadata of JobEscrow.
pub const JOB_ESCROW_JSON: &str = include_str!("../artifacts/JobEscrow.json");
/// The same for the mintable test token (contracts/test/mocks/MockERC20.sol).
pub const MOCK_ERC20_JSON: &str = include_str!("../artifacts/MockERC20.json");
/// The exact standard-JSON input JobEscrow.json was compiled from: what Etherscan's
/// "Solidity (Standard-Json-Input)" verification takes.
pub const JOB_ESCROW_STANDARD_JSON_INPUT: &str = include_str!("../artifacts/JobEscrow.input.json");
/// The long compiler version, as Etherscan spells it (`v0.8.28+commit.7893614a`).
pub const SOLC_LONG_VERSION: &str = include_str!("../artifacts/solc-version.txt");

/// Where an immutable lives in the deployed bytecode (solc's `immutableReferences`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ByteRange {
    /// Offset of the immutable's first byte.
    pub start: usize,
    /// Number of bytes it occupies.
    pub length: usize,
}

/// One contract's compiled form, as stored in `contracts/artifacts/<Name>.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Creation code: what a deployment sends, followed by the constructor arguments.
    pub bytecode: Bytes,
    /// Runtime code as compiled, with zeros where the immutables go.
    pub deployed_bytecode: Bytes,
    /// Immutable id -> positions in the deployed bytecode the constructor fills in.
    pub immutable_references: BTreeMap<String, Vec<ByteRange>>,
    /// solc's metadata JSON, whose hash ends the bytecode.
    pub metadata: String,
}

/// The JSON is not a compiled contract: `bytecode`, `deployedBytecode` or `metadata` is
/// missing or malformed.
#[derive(Debug, thiserror::Error)]
#[error("artifact is not a compiled contract: {0}")]
pub struct ArtifactError(#[from] serde_json::Error);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawArtifact {
    bytecode: RawBytecode,
    deployed_bytecode: RawBytecode,
    metadata: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytecode {
    object: Bytes,
    #[serde(default)]
    immutable_references: BTreeMap<String, Vec<ByteRange>>,
}

impl Artifact {
    /// Reads an artifact from its JSON (the format of `contracts/artifacts/<Name>.json`).
    pub fn parse(json: &str) -> Result<Self, ArtifactError> {
        let raw: RawArtifact = serde_json::from_str(json)?;
        Ok(Self {
            bytecode: raw.bytecode.object,
            deployed_bytecode: raw.deployed_bytecode.object,
            immutable_references: raw.deployed_bytecode.immutable_references,
            metadata: raw.metadata,
        })
    }

    /// The committed JobEscrow artifact.
    pub fn job_escrow() -> Self {
        // The file is part of this crate and checked by tests/artifacts.rs; a parse failure
        // here is a broken build, not bad input.
        Self::parse(JOB_ESCROW_JSON)
            .expect("contracts/artifacts/JobEscrow.json is a compiled contract")
    }

    /// The deployed bytecode with every immutable taken from `onchain` (what the constructor
    /// wrote there), so it can be compared byte for byte with `eth_getCode`. Returns `None`
    /// when `onchain` is too short to hold the immutables.
    pub fn deployed_with_immutables_from(&self, onchain: &[u8]) -> Option<Vec<u8>> {
        let mut code = self.deployed_bytecode.to_vec();
        for range in self.immutable_references.values().flatten() {
            let end = range.start.checked_add(range.length)?;
            if end > code.len() || end > onchain.len() {
                return None;
            }
            code[range.start..end].copy_from_slice(&onchain[range.start..end]);
        }
        Some(code)
    }
}

/// The solc long version without surrounding whitespace.
pub fn solc_long_version() -> &'static str {
    SOLC_LONG_VERSION.trim()
}
