//! Issue 47, item 3: a job with `validation.bond_multiple` leases its tasks only to workers
//! whose bond in the escrow covers them, counting every task of theirs whose proof is not yet
//! decided; a failed proof slashes the bond to the requester on chain and the feed says so.

use alloy::primitives::U256;
use serde_json::json;
use shardwork_api::background::outbox::Dispatcher;
use shardwork_contracts::dev_keys::dev_signers;
use shardwork_contracts::ledger::ETH;

use crate::flow::{
    dataset, get, post_job, post_json, put, register_cpu_worker, started_job_with, step, submit,
    take_tasks,
};
use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

const BOND_MULTIPLE: u64 = 4;

async fn a_bonded_job_leases_only_what_the_bond_covers_and_a_forgery_slashes_it(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let chain = app.state.chain.clone().expect("chain");
    let requester = access_token(&service, &requester_key(), &[]).await;
    let mut bonded = spec();
    bonded["validation"] = json!({ "bond_multiple": BOND_MULTIPLE });
    // A rate under 1 / (1 + bond_multiple) is refused at posting, naming the floor.
    let mut too_low = bonded.clone();
    too_low["validation"]["proof_rate"] = json!(0.1);
    let refused = send(&service, post_job(&requester, &too_low, &dataset(40))).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(
        refused.text.contains("validation.proof_rate"),
        "{}",
        refused.text
    );
    let (_, job_id) = started_job_with(&app, &service, &mut dispatcher, &bonded).await;

    // Dev account 5 works: it holds ETH on the development chain to bond with.
    let worker_key = dev_signers()[5].clone();
    let worker_address = worker_key.address();
    let worker = access_token(&service, &worker_key, &["worker"]).await;
    let r = send(&service, register_cpu_worker(&worker)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let tasks = take_tasks(&app, 3).await;
    let claim =
        |task: uuid::Uuid| post_json(&worker, &format!("/v1/tasks/{task}/claim"), json!({}));
    // One task's pay is the stake over 3 shards x 2 rounds; its bond 4 times that.
    let task_bond =
        U256::from(BOND_MULTIPLE) * (U256::from(10u64).pow(U256::from(18)) / U256::from(6));

    let unbonded = send(&service, claim(tasks[0].task_id)).await;
    let problem = unbonded.problem(403, "forbidden");
    let detail = problem["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains(&format!("asks a bond of {task_bond}"))
            && detail.contains("active bond is 0"),
        "the refusal says what is needed: {detail}"
    );

    // A bond for exactly one task: the first claim passes, the second would need two.
    chain
        .ledger
        .bond(chain.escrow, worker_address, ETH, task_bond)
        .await
        .unwrap();
    let first = send(&service, claim(tasks[0].task_id)).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let second = send(&service, claim(tasks[1].task_id)).await;
    assert!(
        second.problem(403, "forbidden")["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("on top of {task_bond} backing")),
        "{}",
        second.text
    );

    // Handed in and accepted, its proof still pending: the bond still backs it.
    let token = first.body["lease_token"].as_str().unwrap().to_owned();
    let adapter = put(&app, "adapter").await;
    let metrics = put(&app, "{\"n\": 1}").await;
    let submitted = send(
        &service,
        submit(&worker, tasks[0].task_id, &token, &adapter, &metrics),
    )
    .await;
    assert_eq!(submitted.status, 201, "{}", submitted.text);
    let submission = submitted.body["id"].as_str().unwrap().to_owned();
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    let verdict = send(
        &service,
        post_json(
            &validator,
            &format!("/v1/validator/submissions/{submission}/verdict"),
            json!({"accepted": true, "quality": 0.8, "report": {}, "proof_due": true}),
        ),
    )
    .await;
    assert_eq!(verdict.status, 200, "{}", verdict.text);
    send(&service, claim(tasks[1].task_id))
        .await
        .problem(403, "forbidden");

    // The proof fails: the worker forfeits the job and the outbox slashes its bond to the
    // requester (dev account 2 funded the job on chain, so it is the escrow's requester).
    let failed = send(&service, post_json(&validator, &format!("/v1/validator/submissions/{submission}/proof"),
        json!({"passed": false, "reason": "stretch 2 does not end where it says", "stretches": []}))).await;
    assert_eq!(failed.status, 200, "{}", failed.text);
    let funder = shardwork_contracts::dev_keys::dev_addresses()[2];
    let credit_before = chain
        .ledger
        .withdrawable(chain.escrow, funder, ETH)
        .await
        .unwrap();
    step(&app, &mut dispatcher).await;
    step(&app, &mut dispatcher).await;
    let bond = chain
        .ledger
        .bond_of(chain.escrow, worker_address, ETH)
        .await
        .unwrap();
    assert_eq!(bond.active, U256::ZERO, "slashed");
    let credit_after = chain
        .ledger
        .withdrawable(chain.escrow, funder, ETH)
        .await
        .unwrap();
    assert_eq!(credit_after - credit_before, task_bond, "to the requester");
    let events = send(
        &service,
        get(&requester, &format!("/v1/jobs/{job_id}/events")),
    )
    .await;
    let slashed: Vec<_> = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "bond_slashed")
        .collect();
    assert_eq!(slashed.len(), 1, "{}", events.text);
    assert_eq!(slashed[0]["payload"]["amount_wei"], task_bond.to_string());
    assert_eq!(
        slashed[0]["payload"]["worker"],
        format!("{worker_address:#x}")
    );
    // A second dispatch pass slashes nothing more.
    step(&app, &mut dispatcher).await;
    assert_eq!(
        chain
            .ledger
            .withdrawable(chain.escrow, funder, ETH)
            .await
            .unwrap(),
        credit_after
    );
}

on_both_databases!(a_bonded_job_leases_only_what_the_bond_covers_and_a_forgery_slashes_it);
