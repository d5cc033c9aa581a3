//! alloy bindings generated from the committed artifacts, so the Rust types can never disagree
//! with the bytecode that is deployed: both come from the same JSON file. No `#[sol(rpc)]`
//! contract instances: the Ledger encodes calls itself, so that alloy layer is not compiled.

#![allow(missing_docs, clippy::too_many_arguments)]

use alloy::sol;

sol!(
    #[derive(Debug, PartialEq, Eq)]
    JobEscrow,
    "artifacts/JobEscrow.json"
);

sol!(
    /// A plain mintable ERC-20 (contracts/test/mocks/MockERC20.sol) for tests and for the
    /// embedded ledger's ERC-20 jobs on a dev chain. Never deployed to a public network.
    #[derive(Debug, PartialEq, Eq)]
    MockERC20,
    "artifacts/MockERC20.json"
);
