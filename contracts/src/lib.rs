//! shardwork-contracts: the JobEscrow contract as Rust sees it.
//!
//! - [`artifacts`]: the compiled contract (ABI, bytecode, metadata, the exact standard-JSON
//!   input and compiler version), committed under `contracts/artifacts/` so building this crate
//!   needs no Solidity compiler. `tests/artifacts.rs` recompiles and fails when they drift.
//! - [`bindings`]: alloy `sol!` bindings generated from those artifacts.
//! - [`ledger`]: the Ledger port the API uses, with its two adapters: JSON-RPC through alloy
//!   ([`ledger::rpc`]) and an in-process revm chain ([`ledger::embedded`]).
//! - [`verify`]: what Etherscan asks for to verify a deployment, and deployment itself.
#![warn(missing_docs)]

pub mod artifacts;
pub mod bindings;
pub mod dev_keys;
pub mod ledger;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod verify;

pub use ledger::{Ledger, LedgerError};
