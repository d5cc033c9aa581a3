//! ERC-20 stakes through HTTP, on the in-memory EVM: `GET /v1/chain` lists the tokens the
//! escrow accepts with their symbol and decimals; a quote or a post naming any other token is
//! refused at `spec.stake.token` and writes nothing; a job staked in a listed token is funded
//! (development funding approves and deposits the token) and opens.

use actix_web::test::TestRequest;
use alloy::primitives::{Address, U256};
use serde_json::{Value, json};
use shardwork_api::background::outbox::Dispatcher;
use shardwork_contracts::dev_keys::dev_addresses;

use crate::flow::{dataset, get, post_job, post_json, step};
use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

fn staked_in(token: Address) -> Value {
    let mut spec = spec();
    spec["stake"] = json!({ "amount": "250000000000000000000", "token": format!("{token:#x}") });
    spec
}

async fn jobs_staked_in_a_listed_token_are_taken_and_others_refused(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let chain = app.state.chain.clone().expect("chain");
    let ledger = chain.ledger.clone();
    let admin = dev_addresses()[0];
    let listed = ledger
        .deploy_test_token(admin, "Test Dollar", "tUSD")
        .await
        .unwrap();
    let delisted = ledger
        .deploy_test_token(admin, "Old Dollar", "oUSD")
        .await
        .unwrap();
    let never = ledger
        .deploy_test_token(admin, "Stranger", "STR")
        .await
        .unwrap();
    for (token, allowed) in [(listed, true), (delisted, true), (delisted, false)] {
        ledger
            .set_token_allowed(chain.escrow, admin, token, allowed)
            .await
            .unwrap();
    }
    let funder = chain.dev_funder.unwrap();
    let stake = U256::from(250u64) * U256::from(10u64).pow(U256::from(18u64));
    ledger
        .mint_test_token(listed, admin, funder, stake)
        .await
        .unwrap();

    // The allow-list as the portal reads it: the listed token with what a wallet shows.
    let info = send(&service, TestRequest::get().uri("/v1/chain")).await;
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(
        info.body["tokens"],
        json!([{ "address": format!("{listed:#x}"), "symbol": "tUSD",
                 "name": "Test Dollar", "decimals": 18 }]),
        "{}",
        info.text
    );

    let requester = access_token(&service, &requester_key(), &[]).await;
    // A quote in a listed token prices the job but cannot compare a token stake with wei.
    let quoted = send(
        &service,
        post_json(
            &requester,
            "/v1/jobs/quote",
            json!({ "spec": staked_in(listed), "dataset_records": 40 }),
        ),
    )
    .await;
    assert_eq!(quoted.status, 200, "{}", quoted.text);
    assert!(
        quoted.body["stake_covers_price"].is_null(),
        "{}",
        quoted.text
    );
    for token in [delisted, never] {
        let body = json!({ "spec": staked_in(token), "dataset_records": 40 });
        let refused = send(&service, post_json(&requester, "/v1/jobs/quote", body)).await;
        refused.problem(422, "validation");
        assert_eq!(refused.paths(), ["spec.stake.token"], "{}", refused.text);
        assert!(
            refused.body["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("{token:#x}")),
            "{}",
            refused.text
        );
        let refused = send(
            &service,
            post_job(&requester, &staked_in(token), &dataset(40)),
        )
        .await;
        refused.problem(422, "validation");
        assert_eq!(refused.paths(), ["spec.stake.token"], "{}", refused.text);
    }
    let mine = send(&service, get(&requester, "/v1/jobs")).await;
    assert_eq!(
        mine.body["jobs"].as_array().map(Vec::len),
        Some(0),
        "a refused post wrote nothing: {}",
        mine.text
    );

    // Posted in the listed token: the funding terms name it, and funding deposits it.
    let posted = send(
        &service,
        post_job(&requester, &staked_in(listed), &dataset(40)),
    )
    .await;
    assert_eq!(posted.status, 201, "{}", posted.text);
    assert_eq!(posted.body["funding"]["token"], format!("{listed:#x}"));
    let job_id = posted.body["id"].as_str().unwrap().to_owned();
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
    step(&app, &mut Dispatcher::default()).await;
    let job = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(job.body["status"], "open", "{}", job.text);
    assert_eq!(
        ledger.token_balance(listed, chain.escrow).await.unwrap(),
        stake
    );
}

on_both_databases!(jobs_staked_in_a_listed_token_are_taken_and_others_refused);
