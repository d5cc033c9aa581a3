//! Sign-In with Ethereum: the EIP-4361 message lives in the protocol crate (workers and the
//! portal build the same message the API checks).

pub use shardwork_core::protocol::siwe::*;
