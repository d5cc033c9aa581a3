//! Helpers shared by this crate's integration tests.
#![allow(dead_code)] // each test binary uses part of it

pub mod compile;
