//! The shared Ledger suite on the embedded (revm) adapter, and what only it does: keeping its
//! chain in a file.

use std::sync::Arc;

use alloy::primitives::U256;
use shardwork_contracts::ledger::embedded::EmbeddedLedger;
use shardwork_contracts::ledger::{
    DeployParams, ETH, JobKind, JobStatus, Ledger, LedgerError, NewJob,
};
use shardwork_contracts::testkit::ledger_suite as suite;

fn ledger() -> EmbeddedLedger {
    EmbeddedLedger::in_memory()
}

#[tokio::test]
async fn eth_lora_job_pays_contributor_and_treasury() {
    suite::eth_lora_job_pays_contributor_and_treasury(&ledger()).await;
}

#[tokio::test]
async fn erc20_federated_job_splits_stake_by_quality() {
    suite::erc20_federated_job_splits_stake_by_quality(&ledger()).await;
}

#[tokio::test]
async fn reverts_are_decoded_into_contract_errors() {
    suite::reverts_are_decoded_into_contract_errors(&ledger()).await;
}

#[tokio::test]
async fn cancel_and_refund_return_the_stake_to_the_requester() {
    suite::cancel_and_refund_return_the_stake_to_the_requester(&ledger()).await;
}

#[tokio::test]
async fn abort_refunds_the_whole_stake_at_once() {
    suite::abort_refunds_the_whole_stake_at_once(&ledger()).await;
}

#[tokio::test]
async fn abort_pays_the_completed_rounds_and_refunds_the_rest() {
    suite::abort_pays_the_completed_rounds_and_refunds_the_rest(&ledger()).await;
}

#[tokio::test]
async fn batched_payout_pays_the_weights_of_its_start() {
    suite::batched_payout_pays_the_weights_of_its_start(&ledger()).await;
}

/// The embedded chain runs Osaka with EIP-7825's cap, like anvil in the JSON-RPC suite: three
/// batches here (anvil's suite pays 10,000).
#[tokio::test]
async fn large_payout_is_batched_under_the_gas_cap() {
    let gas = suite::large_payout_is_batched_under_the_gas_cap(&ledger(), 1_200).await;
    assert_eq!(gas.transactions, 1 + 3, "{gas:?}");
}

#[tokio::test]
async fn block_hashes_name_the_mined_blocks() {
    suite::block_hashes_name_the_mined_blocks(&ledger()).await;
}

#[tokio::test]
async fn events_from_a_block_on_are_typed_and_ordered() {
    suite::events_from_a_block_on_are_typed_and_ordered(Arc::new(ledger())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_signer_sending_concurrently_never_reuses_a_nonce() {
    suite::one_signer_sending_concurrently_never_reuses_a_nonce(Arc::new(ledger())).await;
}

#[tokio::test]
async fn reopening_the_state_file_keeps_jobs_balances_and_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain/ledger.json");
    let ledger = EmbeddedLedger::open(&path).unwrap();
    let accounts = ledger.accounts();
    let (admin, requester) = (accounts[0], accounts[3]);
    let params = DeployParams {
        admin,
        validator: admin,
        fee_manager: admin,
        treasury: admin,
        fee_bps: 100,
    };
    let escrow = ledger.deploy_escrow(admin, &params).await.unwrap();
    let deadline = ledger.block_timestamp().await.unwrap() + 600;
    let job = NewJob {
        token: ETH,
        stake: U256::from(10u64).pow(U256::from(18u64)),
        spec_cid: "bafyspec".into(),
        deadline,
        kind: JobKind::Lora,
        max_fee_bps: 1_000,
    };
    let (job_id, _) = ledger.create_job(escrow, requester, &job).await.unwrap();
    let requester_balance = ledger.eth_balance(requester).await.unwrap();
    let (block, time) = (
        ledger.block_number().await.unwrap(),
        ledger.block_timestamp().await.unwrap(),
    );
    drop(ledger);

    let reopened = EmbeddedLedger::open(&path).unwrap();
    assert_eq!(reopened.block_number().await.unwrap(), block);
    assert_eq!(reopened.block_timestamp().await.unwrap(), time);
    assert_eq!(
        reopened.eth_balance(requester).await.unwrap(),
        requester_balance
    );
    assert_eq!(reopened.eth_balance(escrow).await.unwrap(), job.stake);
    let info = reopened.job(escrow, job_id).await.unwrap();
    assert_eq!(
        (info.status, info.requester, info.deadline),
        (JobStatus::Open, requester, deadline)
    );
    // Deployment's three RoleGranted, TreasuryChanged and FeeChanged, then JobCreated.
    assert_eq!(reopened.events(escrow, 0, None).await.unwrap().len(), 6);
    // Nonces survived too: the requester can go on transacting.
    reopened.cancel(escrow, requester, job_id).await.unwrap();
    let (second, _) = reopened.create_job(escrow, requester, &job).await.unwrap();
    assert_eq!(second, U256::from(2));
    assert!(reopened.block_number().await.unwrap() > block);
}

#[tokio::test]
async fn a_state_file_that_is_not_a_snapshot_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.json");
    std::fs::write(&path, b"{\"accounts\": 3}").unwrap();
    let error = EmbeddedLedger::open(&path).unwrap_err();
    assert!(
        matches!(error, LedgerError::StateCorrupt { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("ledger.json"),
        "the message names the file: {error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"accounts\": 3}");
}

#[tokio::test]
async fn every_transaction_mines_a_later_block() {
    let ledger = ledger();
    let admin = ledger.accounts()[0];
    let (b0, t0) = (
        ledger.block_number().await.unwrap(),
        ledger.block_timestamp().await.unwrap(),
    );
    let params = DeployParams {
        admin,
        validator: admin,
        fee_manager: admin,
        treasury: admin,
        fee_bps: 0,
    };
    ledger.deploy_escrow(admin, &params).await.unwrap();
    ledger.deploy_escrow(admin, &params).await.unwrap();
    assert_eq!(ledger.block_number().await.unwrap(), b0 + 2);
    assert!(ledger.block_timestamp().await.unwrap() >= t0 + 2);
    ledger.advance_time(86_400).await.unwrap();
    assert!(ledger.block_timestamp().await.unwrap() >= t0 + 2 + 86_400);
}
