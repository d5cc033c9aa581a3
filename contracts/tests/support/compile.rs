//! Recompiling contracts/ with foundry-compilers and the pinned solc (the solcjs wrapper
//! `.tools/bin/solc` from scripts/install/npm-tools).
//!
//! foundry-compilers resolves the import graph and remappings and writes the standard-JSON
//! input (what `forge verify-contract` sends to Etherscan); the wrapper compiles it. That input
//! is committed beside the artifacts, so the committed bytecode is by construction what
//! Etherscan gets when it compiles the committed input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use foundry_compilers::artifacts::output_selection::OutputSelection;
use foundry_compilers::artifacts::remappings::Remapping;
use foundry_compilers::artifacts::{
    BytecodeHash, EvmVersion, Optimizer, Settings, SettingsMetadata, StandardJsonCompilerInput,
};
use foundry_compilers::compilers::solc::{Solc, SolcCompiler, SolcLanguage, SolcSettings};
use foundry_compilers::{ConfigurableArtifacts, ProjectBuilder, ProjectPathsConfig};
use serde_json::{Value, json};
use shardwork_core::testkit::services::{record_skip, services_required};

/// contracts/
pub fn contracts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pinned solc wrapper, or `None` after a loud skip (a panic under
/// `SHARDWORK_REQUIRE_SERVICES=1`, where CI must have installed it).
pub fn solc_or_skip(suite: &str) -> Option<Solc> {
    let wrapper = contracts_dir().join("../.tools/bin/solc");
    let node_modules = contracts_dir().join("node_modules/@openzeppelin/contracts");
    if !wrapper.is_file() || !node_modules.is_dir() {
        let why = "solc wrapper or OpenZeppelin not installed (run scripts/install/npm-tools)";
        if services_required() {
            panic!("{suite}: {why}, and SHARDWORK_REQUIRE_SERVICES=1");
        }
        record_skip(suite, why);
        return None;
    }
    Some(
        Solc::new(&wrapper)
            .unwrap_or_else(|e| panic!("{suite}: {} --version: {e}", wrapper.display())),
    )
}

/// foundry.toml's `[profile.default]`: the compiler settings and remappings are read from it,
/// so these artifacts are exactly what `forge build` produces (remappings are part of the
/// metadata, hence of the metadata hash that ends the bytecode).
struct ForgeProfile {
    settings: Settings,
    remappings: Vec<Remapping>,
    libs: Vec<PathBuf>,
}

fn forge_profile(root: &Path) -> ForgeProfile {
    let text = read(&root.join("foundry.toml"));
    let config: toml::Table = toml::from_str(&text).expect("foundry.toml is TOML");
    let profile = &config["profile"]["default"];
    let get = |key: &str| {
        profile
            .get(key)
            .unwrap_or_else(|| panic!("foundry.toml [profile.default] lacks {key}"))
    };
    let strings = |key: &str| -> Vec<String> {
        get(key)
            .as_array()
            .expect("an array")
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect()
    };
    let remappings = strings("remappings")
        .iter()
        .map(|r| {
            let mut remapping =
                Remapping::from_str(r).unwrap_or_else(|e| panic!("remapping {r}: {e}"));
            remapping.path = root.join(&remapping.path).to_string_lossy().into_owned();
            remapping
        })
        .collect();
    let bytecode_hash = match get("bytecode_hash").as_str() {
        Some("ipfs") => BytecodeHash::Ipfs,
        Some("none") => BytecodeHash::None,
        Some("bzzr1") => BytecodeHash::Bzzr1,
        other => panic!("bytecode_hash {other:?} is not handled here"),
    };
    let settings = Settings {
        optimizer: Optimizer {
            enabled: get("optimizer").as_bool(),
            runs: get("optimizer_runs").as_integer().map(|r| r as usize),
            details: None,
        },
        evm_version: Some(
            EvmVersion::from_str(get("evm_version").as_str().expect("a string"))
                .expect("known EVM version"),
        ),
        metadata: Some(SettingsMetadata {
            use_literal_content: None,
            bytecode_hash: Some(bytecode_hash),
            cbor_metadata: None,
        }),
        output_selection: serde_json::from_value::<OutputSelection>(json!({
            "*": {"*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object",
                        "evm.deployedBytecode.immutableReferences", "metadata"]}
        }))
        .expect("a valid output selection"),
        ..Settings::default()
    };
    ForgeProfile {
        settings,
        remappings,
        libs: strings("libs").iter().map(|l| root.join(l)).collect(),
    }
}

/// The standard-JSON input for `source` (relative to contracts/, e.g. `src/JobEscrow.sol`).
pub fn standard_json_input(solc: &Solc, source: &str) -> StandardJsonCompilerInput {
    let root = contracts_dir();
    let profile = forge_profile(&root);
    let paths = ProjectPathsConfig::builder()
        .root(&root)
        .sources(root.join("src"))
        .tests(root.join("test"))
        .libs(profile.libs)
        .remappings(profile.remappings)
        .build_with_root::<SolcLanguage>(&root);
    let project = ProjectBuilder::<SolcCompiler, ConfigurableArtifacts>::new(
        ConfigurableArtifacts::default(),
    )
    .paths(paths)
    .settings(SolcSettings {
        settings: profile.settings,
        ..Default::default()
    })
    .build(SolcCompiler::Specific(solc.clone()))
    .expect("a foundry-compilers project for contracts/");
    project
        .standard_json_input(&root.join(source))
        .unwrap_or_else(|e| panic!("standard-JSON input for {source}: {e}"))
}

/// Compiles a standard-JSON input with the wrapper; panics with solc's messages on errors.
pub fn compile(solc: &Solc, input: &Value) -> Value {
    let raw = solc
        .compile_output(input)
        .expect("solc --standard-json runs");
    let output: Value = serde_json::from_slice(&raw).expect("solc writes JSON");
    let errors: Vec<&str> = output["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["severity"] == "error")
        .map(|e| e["formattedMessage"].as_str().unwrap_or("?"))
        .collect();
    assert!(errors.is_empty(), "solc failed:\n{}", errors.join("\n"));
    output
}

/// The artifact file for `name` in `source` of a compiler output, in the committed format.
pub fn artifact(output: &Value, source: &str, name: &str) -> String {
    let contract = &output["contracts"][source][name];
    assert!(
        contract.is_object(),
        "{source}:{name} is not in the compiler output"
    );
    let hex = |v: &Value| format!("0x{}", v.as_str().expect("bytecode is a hex string"));
    let artifact = json!({
        "contractName": name,
        "sourceName": source,
        "abi": contract["abi"],
        "bytecode": { "object": hex(&contract["evm"]["bytecode"]["object"]) },
        "deployedBytecode": {
            "object": hex(&contract["evm"]["deployedBytecode"]["object"]),
            "immutableReferences": contract["evm"]["deployedBytecode"]["immutableReferences"].clone(),
        },
        "metadata": contract["metadata"],
    });
    pretty(&artifact)
}

pub fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("JSON serializes");
    text.push('\n');
    text
}

/// Every committed artifact file, freshly compiled: file name -> contents.
pub fn compile_all(solc: &Solc) -> BTreeMap<&'static str, String> {
    let escrow_input = serde_json::to_value(standard_json_input(solc, "src/JobEscrow.sol"))
        .expect("input serializes");
    let escrow_output = compile(solc, &escrow_input);
    let token_input = serde_json::to_value(standard_json_input(solc, "test/mocks/MockERC20.sol"))
        .expect("input serializes");
    let token_output = compile(solc, &token_input);
    let version = solc
        .version
        .to_string()
        .replace(".gcc", "")
        .replace(".Linux", "");
    BTreeMap::from([
        (
            "JobEscrow.json",
            artifact(&escrow_output, "src/JobEscrow.sol", "JobEscrow"),
        ),
        ("JobEscrow.input.json", pretty(&escrow_input)),
        (
            "MockERC20.json",
            artifact(&token_output, "test/mocks/MockERC20.sol", "MockERC20"),
        ),
        ("solc-version.txt", format!("{version}\n")),
    ])
}

pub fn artifacts_dir() -> PathBuf {
    contracts_dir().join("artifacts")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
