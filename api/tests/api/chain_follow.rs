//! Chain safety of the follower: an event is acted on only once it is `confirmations` deep,
//! and a reorg that replaces a block the follower already read is rewound (what the follower
//! did in the replaced blocks undone, the new history read in their place), or, when it is
//! older than every block the follower kept, stops the follower instead of letting it read on
//! from the middle of another history.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::U256;
use alloy::providers::Provider;
use alloy::signers::local::PrivateKeySigner;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Statement};
use serde_json::{Value, json};
use shardwork_api::background::error::BackgroundError;
use shardwork_api::background::follower::follow_once;
use shardwork_api::background::outbox::Dispatcher;
use shardwork_api::chain::address_text;
use shardwork_api::entities::{job_event, task, worker};
use shardwork_contracts::Ledger;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::ledger::{Contribution, ETH, FederatedCompletion, JobKind, NewJob};
use shardwork_contracts::testkit::anvil::Anvil;
use shardwork_core::protocol::TASK_QUEUE;
use shardwork_core::queue::QueueOptions;

use crate::flow::{dataset, get, post_job, post_json, register_cpu_worker};
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

/// The funding terms of a job awaiting funding, as the escrow's `createJob` takes them.
fn funding_terms(job: &Value) -> NewJob {
    let terms = &job["funding"];
    NewJob {
        token: ETH,
        stake: U256::from_str_radix(terms["stake_wei"].as_str().unwrap(), 10).unwrap(),
        spec_cid: terms["spec_cid"].as_str().unwrap().to_owned(),
        deadline: terms["deadline_unix"].as_u64().unwrap(),
        kind: JobKind::Federated,
        max_fee_bps: terms["max_fee_bps"].as_u64().unwrap() as u16,
    }
}

/// A reorg deeper than the confirmation depth replaces the blocks in which job A was funded,
/// started and paid. In the new history another requester's job B is funded first, so B has
/// the escrow id A had, and A is funded, started and paid under the next one. The follower
/// notices that the block below its cursor changed, undoes what it did above the last block
/// both histories share (A's completion, payout credits, start and funding), and reads the new
/// history: each job ends up under the escrow id the chain now gives it, and the worker paid in
/// both histories is credited once.
async fn a_reorg_is_rewound_and_the_new_history_read(backend: Backend) {
    let Some(anvil) = Anvil::start("api chain follower (anvil)") else {
        return;
    };
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let ledger = connect(&anvil).await;
    let dev = ledger.accounts();
    let chain = chain_with_escrow(ledger.clone(), Some(dev[3])).await;
    let escrow = chain.escrow;
    let rpc = |method: &'static str, params: Value| anvil_rpc(&ledger, method, params);
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let other = access_token(&service, &PrivateKeySigner::random(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    assert_eq!(
        send(&service, register_cpu_worker(&worker)).await.status,
        201
    );
    let mut jobs = Vec::new();
    for token in [&requester, &other] {
        let reply = send(&service, post_job(token, &spec(), &dataset(40))).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        jobs.push((
            reply.body["id"].as_str().unwrap().to_owned(),
            funding_terms(&reply.body),
        ));
    }
    let [(a, a_terms), (b, b_terms)] = <[_; 2]>::try_from(jobs).unwrap();
    // The follower reads up to here: its last kept block is one both histories share.
    follow_once(&app.db, &chain, 3).await.expect("follow");
    let snapshot = rpc("evm_snapshot", json!([])).await;
    // A ledger per history: each keeps its accounts' next nonces, which a revert takes back.
    let (funder, validator) = (dev[3], dev[1]);
    let fund_start_and_pay = |ledger: Arc<RpcLedger>, terms: NewJob| async move {
        let (id, _) = ledger.create_job(escrow, funder, &terms).await.unwrap();
        ledger.mark_started(escrow, validator, id).await.unwrap();
        ledger
            .complete_federated_job(
                escrow,
                validator,
                &FederatedCompletion {
                    job_id: id,
                    adapter_cid: "bafy-merged".into(),
                    manifest_cid: terms.spec_cid.clone(),
                    contributions: vec![Contribution {
                        contributor: worker_key().address(),
                        quality: 9_000,
                    }],
                },
            )
            .await
            .unwrap();
        id
    };
    let job = |id: String| {
        let service = &service;
        let requester = requester.clone();
        async move {
            send(service, get(&requester, &format!("/v1/jobs/{id}")))
                .await
                .body
        }
    };
    let standing = || async {
        let w = worker::Entity::find()
            .filter(worker::Column::Address.eq(address_text(worker_key().address())))
            .one(&app.db)
            .await
            .unwrap()
            .expect("the worker");
        (w.earnings_wei, w.reputation)
    };

    // The history that will be replaced: A funded as the escrow's first job, then paid.
    let old_id = fund_start_and_pay(connect(&anvil).await, a_terms.clone()).await;
    follow_once(&app.db, &chain, 3).await.expect("follow");
    assert_eq!(job(a.clone()).await["status"], "completed");
    assert_eq!(job(a.clone()).await["escrow_job_id"], old_id.to_string());
    let (earned, reputation) = standing().await;
    assert_ne!(earned, "0", "the worker was credited");
    assert!(reputation > 0);

    // The new history, one block longer: B takes A's escrow id, A is funded and paid after it.
    rpc("evm_revert", json!([snapshot])).await;
    let new_history = connect(&anvil).await;
    let (b_id, _) = new_history
        .create_job(escrow, dev[3], &b_terms)
        .await
        .unwrap();
    assert_eq!(b_id, old_id, "B now has the id A had");
    let new_id = fund_start_and_pay(new_history, a_terms).await;
    assert_ne!(new_id, old_id);
    for _ in 0..3 {
        follow_once(&app.db, &chain, 3)
            .await
            .expect("the follower rewinds and reads on");
    }
    let a_now = job(a.clone()).await;
    assert_eq!(a_now["status"], "completed", "{a_now}");
    assert_eq!(a_now["escrow_job_id"], new_id.to_string());
    let b_now = job(b.clone()).await;
    assert_eq!(b_now["status"], "open", "{b_now}");
    assert_eq!(b_now["escrow_job_id"], b_id.to_string());
    assert_eq!(
        standing().await,
        (earned, reputation),
        "credited once, not twice"
    );
    // A's feed says what was taken back, and keeps one payout: the new history's.
    let feed = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(uuid::Uuid::parse_str(&a).unwrap()))
        .all(&app.db)
        .await
        .unwrap();
    let count = |kind: &str| feed.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count("paid"), 1);
    assert_eq!(count("completed"), 1);
    assert_eq!(count("funded"), 1);
    assert_eq!(
        count("reorganised"),
        5,
        "the funding, start, payout start, payout batch and completion were taken back"
    );
    // Funded again, A went on where it stood: round 1 was not opened twice, its queued tasks
    // were published again, and its opening is due again so the new escrow job is started.
    assert_eq!(count("round_opened"), 1);
    assert_eq!(count("task_requeued"), 3, "one per queued task");
    let opening = feed.iter().find(|e| e.kind == "round_opened").unwrap();
    assert!(opening.needs_dispatch && opening.dispatched_at.is_none());
    let tasks = task::Entity::find()
        .filter(task::Column::JobId.eq(uuid::Uuid::parse_str(&a).unwrap()))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(tasks.len(), 3);
    assert!(tasks.iter().all(|t| t.releases == 1), "new publications");
    // The cursor moved on over the new history.
    let (next, _) = cursor(&app).await;
    assert_eq!(next as u64, ledger.block_number().await.unwrap() + 1);
}

/// A reorg older than every block the follower kept a hash of cannot be rewound: the follower
/// refuses to read on, pass after pass, and leaves its cursor where it was.
async fn a_reorg_below_every_kept_block_stops_the_follower(backend: Backend) {
    let Some(anvil) = Anvil::start("api chain follower (anvil)") else {
        return;
    };
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let ledger = connect(&anvil).await;
    let rpc = |method: &'static str, params: Value| anvil_rpc(&ledger, method, params);
    // Everything the follower will read, the escrow's deployment included, is replaced.
    let snapshot = rpc("evm_snapshot", json!([])).await;
    let chain = chain_with_escrow(ledger.clone(), None).await;
    let height = ledger.block_number().await.unwrap();
    follow_once(&app.db, &chain, 3).await.expect("follow");
    let (next, kept) = cursor(&app).await;
    assert_eq!(next as u64, height + 1);
    let read = format!("{:#x}", ledger.block_hash(height).await.unwrap().unwrap());
    assert_eq!(kept.as_deref(), Some(read.as_str()));
    // Nothing changed: the next pass finds the same block and reads on.
    follow_once(&app.db, &chain, 3).await.expect("follow");

    rpc("evm_revert", json!([snapshot])).await;
    for _ in 0..3 {
        rpc("evm_mine", json!([])).await;
    }
    for _ in 0..2 {
        match follow_once(&app.db, &chain, 3).await {
            Err(BackgroundError::Reorganised { block, seen, now }) => {
                assert_eq!(block, height);
                assert_eq!(seen, read);
                assert_ne!(now, read);
            }
            other => panic!("the follower read on over a reorg it cannot rewind: {other:?}"),
        }
    }
    assert_eq!(
        cursor(&app).await,
        (next, Some(read)),
        "the cursor stays put"
    );
}

/// One of anvil's own JSON-RPC methods (`evm_snapshot`, `evm_revert`, `evm_mine`).
async fn anvil_rpc(ledger: &RpcLedger, method: &'static str, params: Value) -> Value {
    ledger
        .provider()
        .raw_request::<_, Value>(method.into(), params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// A ledger on `anvil` with the development accounts' keys.
async fn connect(anvil: &Anvil) -> Arc<RpcLedger> {
    Arc::new(
        RpcLedger::connect(
            RpcConfig {
                poll_interval: Duration::from_millis(20),
                ..RpcConfig::new(anvil.url())
            },
            shardwork_contracts::dev_keys::dev_signers(),
        )
        .await
        .expect("connect to anvil"),
    )
}

/// The follower's cursor: the next block it reads and the hash of the one before.
async fn cursor(app: &TestApp) -> (i64, Option<String>) {
    let row = app
        .db
        .query_one_raw(Statement::from_string(
            app.db.get_database_backend(),
            "SELECT next_block, last_block_hash FROM chain_cursors",
        ))
        .await
        .unwrap()
        .expect("a cursor");
    (
        row.try_get("", "next_block").unwrap(),
        row.try_get("", "last_block_hash").unwrap(),
    )
}

on_both_databases!(
    a_funding_opens_the_job_only_once_confirmed,
    a_reorg_is_rewound_and_the_new_history_read,
    a_reorg_below_every_kept_block_stops_the_follower,
);
