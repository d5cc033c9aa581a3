//! Chain safety of the follower: an event is acted on only once it is `confirmations` deep,
//! and a reorg that replaces a block the follower already read stops it instead of letting it
//! read on from the middle of another history.

use std::sync::Arc;
use std::time::Duration;

use alloy::providers::Provider;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};
use shardwork_api::background::error::BackgroundError;
use shardwork_api::background::follower::follow_once;
use shardwork_api::background::outbox::Dispatcher;
use shardwork_contracts::Ledger;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::ledger::{DeployParams, ETH, JobKind, NewJob};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::TASK_QUEUE;
use shardwork_core::queue::QueueOptions;

use crate::flow::{dataset, get, post_job, post_json};
use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

/// A funding two blocks from the top is not believed by a follower that waits for two
/// confirmations: the job stays awaiting funding until two more blocks are mined on top.
async fn a_funding_opens_the_job_only_once_confirmed(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    app.state
        .queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let mut chain = app.state.chain.clone().expect("chain");
    chain.confirmations = 2;
    let attempts = app.state.config.task_max_attempts;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let reply = send(&service, post_job(&requester, &spec(), &dataset(40))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = reply.body["id"].as_str().unwrap().to_owned();
    let funded = send(
        &service,
        post_json(
            &requester,
            &format!("/v1/jobs/{job_id}/dev-fund"),
            json!({}),
        ),
    )
    .await;
    assert_eq!(funded.status, 202, "{}", funded.text);
    // The outbox sends `createJob`; it is mined in the latest block.
    Dispatcher::default()
        .dispatch_once(&app.db, app.state.queue.as_ref(), Some(&chain))
        .await
        .expect("dispatch");
    let status = |reply: Reply| reply.body["status"].as_str().unwrap_or("").to_owned();
    let uri = format!("/v1/jobs/{job_id}");
    for blocks_on_top in 0..2 {
        follow_once(&app.db, &chain, attempts)
            .await
            .expect("follow");
        assert_eq!(
            status(send(&service, get(&requester, &uri)).await),
            "awaiting_funding",
            "acted on a funding {blocks_on_top} block(s) deep"
        );
        // A block on top (the embedded chain mines one per call).
        chain.ledger.advance_time(1).await.unwrap();
    }
    follow_once(&app.db, &chain, attempts)
        .await
        .expect("follow");
    assert_eq!(status(send(&service, get(&requester, &uri)).await), "open");
}

/// The follower reads a block, then anvil replaces it (a snapshot reverted, another block
/// mined at its height): the follower notices the hash it kept is not the chain's any more,
/// refuses to read on, pass after pass, and leaves its cursor where it was.
async fn a_reorg_below_the_cursor_stops_the_follower(backend: Backend) {
    let Some(anvil) = Anvil::start("api chain follower (anvil)") else {
        return;
    };
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let ledger = Arc::new(
        RpcLedger::connect(
            RpcConfig {
                poll_interval: Duration::from_millis(20),
                ..RpcConfig::new(anvil.url())
            },
            shardwork_contracts::dev_keys::dev_signers(),
        )
        .await
        .expect("connect to anvil"),
    );
    let dev = ledger.accounts();
    let escrow = ledger
        .deploy_escrow(
            dev[0],
            &DeployParams {
                admin: dev[0],
                validator: dev[1],
                fee_manager: dev[0],
                treasury: dev[0],
                fee_bps: 250,
            },
        )
        .await
        .expect("deploy the escrow");
    let chain = shardwork_api::chain::Chain {
        ledger: ledger.clone(),
        chain_id: 31337,
        escrow,
        operator: dev[1],
        dev_funder: None,
        poll_interval: Duration::from_millis(50),
        confirmations: 0,
        start_block: 0,
        payout_limits: Default::default(),
    };
    let rpc = |method: &'static str, params: Value| {
        let ledger = ledger.clone();
        async move {
            ledger
                .provider()
                .raw_request::<_, Value>(method.into(), params)
                .await
                .unwrap_or_else(|e| panic!("{method}: {e}"))
        }
    };
    let snapshot = rpc("evm_snapshot", json!([])).await;
    // An escrow job for no posted job (the follower reads and ignores it): a block to replace.
    let job = NewJob {
        token: ETH,
        stake: alloy::primitives::U256::from(1_000u64),
        spec_cid: "bafy-replaced".into(),
        deadline: ledger.block_timestamp().await.unwrap() + 3_600,
        kind: JobKind::Lora,
        max_fee_bps: 1_000,
    };
    ledger.create_job(escrow, dev[3], &job).await.unwrap();
    let height = ledger.block_number().await.unwrap();
    follow_once(&app.db, &chain, 3).await.expect("follow");
    let cursor = || async {
        let rows = app
            .db
            .query_one_raw(Statement::from_string(
                app.db.get_database_backend(),
                "SELECT next_block, last_block_hash FROM chain_cursors",
            ))
            .await
            .unwrap()
            .expect("a cursor");
        let next: i64 = rows.try_get("", "next_block").unwrap();
        let hash: Option<String> = rows.try_get("", "last_block_hash").unwrap();
        (next, hash)
    };
    let (next, kept) = cursor().await;
    assert_eq!(next as u64, height + 1);
    let read = format!("{:#x}", ledger.block_hash(height).await.unwrap().unwrap());
    assert_eq!(kept.as_deref(), Some(read.as_str()));
    // Nothing changed: the next pass finds the same block and reads on.
    follow_once(&app.db, &chain, 3).await.expect("follow");

    rpc("evm_revert", json!([snapshot])).await;
    rpc("evm_mine", json!([])).await;
    rpc("evm_mine", json!([])).await;
    for _ in 0..2 {
        match follow_once(&app.db, &chain, 3).await {
            Err(BackgroundError::Reorganised { block, seen, now }) => {
                assert_eq!(block, height);
                assert_eq!(seen, read);
                assert_ne!(now, read);
            }
            other => panic!("the follower read on over a reorg: {other:?}"),
        }
    }
    assert_eq!(cursor().await, (next, Some(read)), "the cursor stays put");
}

on_both_databases!(
    a_funding_opens_the_job_only_once_confirmed,
    a_reorg_below_the_cursor_stops_the_follower,
);
