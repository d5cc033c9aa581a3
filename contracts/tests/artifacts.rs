//! The committed artifacts are what the sources compile to with the pinned solc.
//!
//! After changing a .sol file: `SHARDWORK_UPDATE_ARTIFACTS=1 cargo nextest run -p
//! shardwork-contracts --test artifacts` rewrites contracts/artifacts/, then commit them.

mod support;

use shardwork_contracts::artifacts::{self, Artifact};
use shardwork_contracts::bindings::JobEscrow;

#[test]
fn committed_artifacts_equal_a_fresh_compile_of_the_sources() {
    let Some(solc) = support::compile::solc_or_skip("contracts artifacts drift") else {
        return;
    };
    let fresh = support::compile::compile_all(&solc);
    let dir = support::compile::artifacts_dir();
    if std::env::var("SHARDWORK_UPDATE_ARTIFACTS").is_ok_and(|v| v == "1") {
        for (name, contents) in &fresh {
            std::fs::write(dir.join(name), contents).unwrap();
        }
        eprintln!("rewrote {} files in {}", fresh.len(), dir.display());
        return;
    }
    let drifted: Vec<String> = fresh
        .iter()
        .filter_map(|(name, contents)| {
            let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            (committed != *contents).then(|| {
                let line = committed
                    .lines()
                    .zip(contents.lines())
                    .position(|(a, b)| a != b);
                format!(
                    "{name} (first difference at line {})",
                    line.map_or("end".into(), |l| (l + 1).to_string())
                )
            })
        })
        .collect();
    assert!(
        drifted.is_empty(),
        "contracts/artifacts drifted from the sources: {}.\nRegenerate with SHARDWORK_UPDATE_ARTIFACTS=1 \
         cargo nextest run -p shardwork-contracts --test artifacts, then commit contracts/artifacts.",
        drifted.join(", ")
    );
}

#[test]
fn bindings_carry_the_committed_bytecode() {
    let artifact = Artifact::job_escrow();
    assert_eq!(JobEscrow::BYTECODE, artifact.bytecode);
    assert_eq!(JobEscrow::DEPLOYED_BYTECODE, artifact.deployed_bytecode);
    assert!(
        artifact.bytecode.len() > artifact.deployed_bytecode.len(),
        "init code embeds the runtime code"
    );
}

#[test]
fn committed_input_is_the_one_the_bytecode_was_compiled_from() {
    // The metadata (whose hash ends the bytecode) lists every source's keccak256; the
    // standard-JSON input must carry exactly those sources with those contents.
    let artifact = Artifact::job_escrow();
    let metadata: serde_json::Value = serde_json::from_str(&artifact.metadata).unwrap();
    let input: serde_json::Value =
        serde_json::from_str(artifacts::JOB_ESCROW_STANDARD_JSON_INPUT).unwrap();
    let sources = metadata["sources"]
        .as_object()
        .expect("metadata lists sources");
    assert!(!sources.is_empty());
    for (name, entry) in sources {
        let content = input["sources"][name]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} is in the metadata but not in the committed input"));
        let hash = alloy::primitives::keccak256(content.as_bytes());
        assert_eq!(
            entry["keccak256"].as_str().unwrap(),
            hash.to_string(),
            "{name} differs from the compiled source"
        );
    }
    assert_eq!(
        metadata["compiler"]["version"].as_str().unwrap(),
        artifacts::solc_long_version()
    );
    assert!(artifacts::solc_long_version().starts_with("0.8.28+commit."));
}
