//! Etherscan's check, reproduced: deploy to anvil, compile the verification input we hand out
//! with the pinned solc, and require the runtime code to equal `eth_getCode` byte for byte.

mod support;

use alloy::primitives::{Address, hex};
use shardwork_contracts::dev_keys::DEV_PRIVATE_KEYS;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::ledger::{DeployParams, Ledger};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_contracts::verify;

const SUITE: &str = "contracts Etherscan reproduction (anvil + solc)";

#[tokio::test]
async fn deployed_runtime_code_equals_a_compile_of_the_verification_input() {
    let Some(solc) = support::compile::solc_or_skip(SUITE) else {
        return;
    };
    let Some(anvil) = Anvil::start(SUITE) else {
        return;
    };
    let params = DeployParams {
        admin: Address::repeat_byte(0x0a),
        validator: Address::repeat_byte(0x0b),
        fee_manager: Address::repeat_byte(0x0c),
        treasury: Address::repeat_byte(0x0d),
        fee_bps: 300,
    };
    let deployment = verify::deploy(anvil.url(), DEV_PRIVATE_KEYS[0], Some(params.clone()), 0)
        .await
        .unwrap();
    assert_eq!(deployment.chain_id, 31337);

    // What a user uploads to Etherscan, read back from the files the CLI writes.
    let dir = tempfile::tempdir().unwrap();
    let files = verify::write_verification_input(dir.path(), &params).unwrap();
    let input: serde_json::Value =
        serde_json::from_str(&support::compile::read(&files.standard_json_input)).unwrap();
    let compiler_version = support::compile::read(&files.compiler_version);
    let constructor_arguments = support::compile::read(&files.constructor_arguments);

    // The compiler Etherscan would pick is the one we compile with.
    let solc_version = solc.version.to_string();
    assert!(
        compiler_version.trim().starts_with(&format!(
            "v{}",
            solc_version.split(".Linux").next().unwrap()
        )),
        "compiler-version.txt says {compiler_version}, solc is {solc_version}"
    );
    let output = support::compile::compile(&solc, &input);
    let (source, name) = deployment
        .verification
        .contract_name
        .split_once(':')
        .unwrap();
    let compiled = &output["contracts"][source][name]["evm"];
    let runtime = hex::decode(compiled["deployedBytecode"]["object"].as_str().unwrap()).unwrap();
    let creation = hex::decode(compiled["bytecode"]["object"].as_str().unwrap()).unwrap();

    // Reading code needs no key: a read-only ledger.
    let ledger = RpcLedger::connect(RpcConfig::new(anvil.url()), vec![])
        .await
        .unwrap();
    let onchain = ledger.code_at(deployment.escrow).await.unwrap();

    // Immutables are written by the constructor, so Etherscan takes them from the chain; the
    // rest must match exactly. JobEscrow has none, making this a byte-for-byte comparison.
    let immutables = compiled["deployedBytecode"]["immutableReferences"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        immutables.is_empty(),
        "JobEscrow gained immutables; the comparison below fills them from chain"
    );
    let mut expected = runtime.clone();
    for range in immutables
        .values()
        .flat_map(|r| r.as_array().cloned().unwrap_or_default())
    {
        let (start, length) = (
            range["start"].as_u64().unwrap() as usize,
            range["length"].as_u64().unwrap() as usize,
        );
        expected[start..start + length].copy_from_slice(&onchain[start..start + length]);
    }
    assert_eq!(onchain.len(), expected.len(), "runtime code length differs");
    assert!(
        onchain.as_ref() == expected.as_slice(),
        "eth_getCode differs from the compiled runtime code"
    );

    // The creation code Etherscan rebuilds is the compiled init code followed by the arguments
    // we hand out; it must be exactly what was deployed.
    let args = hex::decode(constructor_arguments.trim()).unwrap();
    assert_eq!(args, verify::constructor_arguments(&params));
    assert_eq!(
        creation,
        shardwork_contracts::bindings::JobEscrow::BYTECODE.to_vec(),
        "committed init code drifted"
    );
}
