//! Test support for this crate's tests and for crates that test against a ledger (the API):
//! an anvil the test starts, and the suite every Ledger adapter must pass.

pub mod anvil;
pub mod ledger_suite;
