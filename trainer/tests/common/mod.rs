//! Shared helpers for the trainer's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use shardwork_core::testkit::services::{record_skip, services_required};

/// The fixture at `found`, or a loud skip (a failure with `SHARDWORK_REQUIRE_SERVICES=1`) when
/// `scripts/install/python-fixtures` has not been run.
pub fn fixture(found: Option<PathBuf>, suite: &str, what: &str) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    let why = format!("{what} not found (run scripts/install/python-fixtures)");
    if services_required() {
        panic!("{suite}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
    }
    record_skip(suite, &why);
    None
}
