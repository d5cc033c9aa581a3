//! Test support shared by every crate's tests: finding the real servers, and the conformance
//! suites that each pair of adapters must pass.
//!
//! Compiled only for tests (`cfg(test)`) or with the `testkit` feature, so it never ships in a
//! release binary.

pub mod gguf;
#[cfg(feature = "queue")]
pub mod queue_suite;
pub mod services;
#[cfg(feature = "store")]
pub mod store_suite;
