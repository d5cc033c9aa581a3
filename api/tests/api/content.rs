//! Content by content, not by spelling (issue 46, attack 4), and each identity's storage quota
//! (attack 6): the guards on a job's dataset and held-out set hold under every CID of the same
//! bytes, a job cannot name another account's private dataset, and uploads no job names count
//! against a quota and expire.

use actix_web::test::TestRequest;
use alloy::signers::local::PrivateKeySigner;
use cid::Cid;
use serde_json::{Value, json};
use shardwork_api::domain::content::expire_uploads;
use shardwork_core::store::parse_cid;

use crate::helpers::*;
use crate::jobs::{dataset, post_job};
use crate::on_both_databases;
use crate::quote::spec;

/// Every spelling of one content: CIDv0, CIDv1 (dag-pb), the same hash as `raw`, base58btc.
fn spellings(cid: &str) -> Vec<String> {
    let cid = parse_cid(cid).expect("a CID");
    let hash = *cid.hash();
    vec![
        Cid::new_v0(hash).expect("a sha2-256 CID").to_string(),
        Cid::new_v1(0x70, hash).to_string(),
        Cid::new_v1(0x55, hash).to_string(),
        Cid::new_v1(0x70, hash)
            .to_string_of_base(cid::multibase::Base::Base58Btc)
            .expect("base58"),
    ]
}

fn get(token: &str, uri: &str) -> TestRequest {
    TestRequest::get().uri(uri).insert_header(bearer(token))
}

fn upload(token: &str, bytes: Vec<u8>) -> TestRequest {
    TestRequest::post()
        .uri("/v1/content")
        .insert_header(bearer(token))
        .set_payload(bytes)
}

fn post_by_cid(token: &str, cid: &str) -> TestRequest {
    TestRequest::post()
        .uri("/v1/jobs")
        .insert_header(bearer(token))
        .set_json(json!({ "spec": spec(), "dataset_cid": cid }))
}

fn stranger_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x5a; 32].into()).unwrap()
}

/// A dataset over one 256 KiB chunk, so its root is a dag-pb node that both a CIDv0 and a
/// CIDv1 name (and the store serves under either); `salt` makes each one distinct.
fn big_dataset(salt: &str) -> Vec<u8> {
    (0..6000)
        .map(|i| {
            format!(
                "{{\"text\":\"{salt} review number {i}\",\"label\":{}}}\n",
                i % 2
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// The attack of issue 46: a dataset posted by its CIDv1 was refused to others in that form
/// and served in its CIDv0 form (and the other way round). Posted in either spelling, it is
/// now refused to a worker and to another requester under every spelling, and served to its
/// requester and a validator under every spelling; the job's held-out set likewise.
async fn a_jobs_dataset_is_guarded_under_every_spelling_of_its_cid(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let stranger = access_token(&service, &stranger_key(), &[]).await;
    let validator = access_token(&service, &validator_key(), &["validator"]).await;
    // Posted once by its CIDv0, once by its CIDv1.
    for (posted_as, salt) in [(0, "first"), (1, "second")] {
        let up = send(&service, upload(&requester, big_dataset(salt))).await;
        assert_eq!(up.status, 201, "{}", up.text);
        let names = spellings(up.body["cid"].as_str().unwrap());
        let reply = send(&service, post_by_cid(&requester, &names[posted_as])).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        let held_out = reply.body["held_out_cid"].as_str().unwrap().to_owned();
        for name in &names {
            for (who, token) in [("worker", &worker), ("stranger", &stranger)] {
                let refused = send(&service, get(token, &format!("/v1/content/{name}"))).await;
                refused.problem(403, "forbidden");
                assert!(
                    refused.body["detail"]
                        .as_str()
                        .unwrap()
                        .contains("job's dataset"),
                    "{who} {name}: {}",
                    refused.text
                );
            }
        }
        // The spellings a store keyed by (codec, hash) holds serve the bytes to the owner.
        for name in [&names[0], &names[1], &names[3]] {
            for token in [&requester, &validator] {
                let ok = send(&service, get(token, &format!("/v1/content/{name}"))).await;
                assert_eq!(ok.status, 200, "{name}: {}", ok.text);
                assert_eq!(ok.text.len(), big_dataset(salt).len());
            }
        }
        // The held-out set (one raw block): refused to its own requester in every spelling.
        let held_out_cid = parse_cid(&held_out).unwrap();
        for name in [
            held_out.clone(),
            Cid::new_v0(*held_out_cid.hash()).unwrap().to_string(),
            Cid::new_v1(0x70, *held_out_cid.hash()).to_string(),
        ] {
            send(&service, get(&requester, &format!("/v1/content/{name}")))
                .await
                .problem(403, "forbidden");
        }
    }
}

/// A job cannot name another requester's private dataset, in any spelling: not another
/// job's dataset, not its held-out set, not another account's upload. Uploading the same
/// bytes oneself (holding them already) lifts the refusal.
async fn a_job_cannot_name_another_accounts_dataset_in_any_spelling(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let owner = access_token(&service, &requester_key(), &[]).await;
    let stranger = access_token(&service, &stranger_key(), &[]).await;

    // Another job's dataset.
    let data = dataset(40);
    let up = send(&service, upload(&owner, data.clone())).await;
    assert_eq!(up.status, 201, "{}", up.text);
    let cid = up.body["cid"].as_str().unwrap().to_owned();
    let posted = send(&service, post_by_cid(&owner, &cid)).await;
    assert_eq!(posted.status, 201, "{}", posted.text);
    let mut names = spellings(&cid);
    names.push(cid.clone());
    for name in &names {
        let refused = send(&service, post_by_cid(&stranger, name)).await;
        refused.problem(403, "forbidden");
        assert_eq!(refused.paths(), ["dataset_cid"], "{name}");
    }
    // The owner may post another job over its own dataset.
    let again = send(&service, post_by_cid(&owner, &cid)).await;
    assert_eq!(again.status, 201, "{}", again.text);

    // Another job's sealed held-out set.
    let held_out = posted.body["held_out_cid"].as_str().unwrap();
    for name in spellings(held_out) {
        let refused = send(&service, post_by_cid(&stranger, &name)).await;
        refused.problem(403, "forbidden");
        assert_eq!(refused.paths(), ["dataset_cid"]);
    }

    // An upload of another account that no job names yet.
    let other = dataset(41);
    let up = send(&service, upload(&owner, other.clone())).await;
    let other_cid = up.body["cid"].as_str().unwrap().to_owned();
    for name in spellings(&other_cid) {
        let refused = send(&service, post_by_cid(&stranger, &name)).await;
        refused.problem(403, "forbidden");
        assert!(
            refused.body["detail"]
                .as_str()
                .unwrap()
                .contains("uploaded by another account"),
            "{}",
            refused.text
        );
    }
    // The stranger holding the same bytes uploads them too, and may then name them.
    let mine = send(&service, upload(&stranger, other)).await;
    assert_eq!(mine.body["cid"], other_cid.as_str());
    let ok = send(&service, post_by_cid(&stranger, &other_cid)).await;
    assert_eq!(ok.status, 201, "{}", ok.text);

    // A multipart post claims its (sealed) dataset as well: a stranger cannot name it.
    let multipart = send(&service, post_job(&owner, &spec(), &dataset(42))).await;
    assert_eq!(multipart.status, 201, "{}", multipart.text);
    let sealed = multipart.body["dataset_cid"].as_str().unwrap();
    send(&service, post_by_cid(&stranger, sealed))
        .await
        .problem(403, "forbidden");
}

fn quota_config() -> shardwork_api::ApiConfig {
    shardwork_api::ApiConfig {
        json_limit_bytes: 4096,
        upload_limit_bytes: 64 * 1024,
        storage_quota_bytes: 10_000,
        ..config()
    }
}

fn blob(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

async fn pinned(app: &TestApp, cid: &Value) -> bool {
    let cid = parse_cid(cid.as_str().unwrap()).unwrap();
    app.state.store.stat(&cid).await.expect("stat").pinned
}

/// Each identity holds at most `storage_quota_bytes` of uploads no job names: past it an
/// upload is refused with 413 naming the quota. The same bytes twice count once; a job naming
/// an upload frees its share; an upload no job names within `upload_ttl_secs` is unpinned and
/// stops counting, while one a job names stays.
async fn uploads_are_held_to_a_quota_per_identity_and_expire_unreferenced(backend: Backend) {
    let Some(app) = TestApp::with_config(backend, quota_config()).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let bob = access_token(&service, &stranger_key(), &[]).await;

    let first = send(&service, upload(&alice, blob(3000, 1))).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let same = send(&service, upload(&alice, blob(3000, 1))).await;
    assert_eq!(same.status, 201, "{}", same.text);
    // Had the same bytes counted twice, 6500 more would not fit (3000 + 3000 + 6500 > 10000).
    let second = send(&service, upload(&alice, blob(6500, 2))).await;
    assert_eq!(
        second.status, 201,
        "the same bytes count once: {}",
        second.text
    );
    let over = send(&service, upload(&alice, blob(1000, 3))).await;
    over.problem(413, "payload-too-large");
    let detail = over.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("storage_quota_bytes") && detail.contains("10000"),
        "{detail}"
    );
    // Past the limit of one request, the request limit answers first.
    send(&service, upload(&alice, blob(70 * 1024, 3)))
        .await
        .problem(413, "payload-too-large");
    // The quota is each identity's.
    let bobs = send(&service, upload(&bob, blob(6000, 2))).await;
    assert_eq!(bobs.status, 201, "{}", bobs.text);

    // A job naming a dataset Alice uploaded frees its share of her quota.
    let data = dataset(150);
    assert!((4000..10_000).contains(&data.len()), "{}", data.len());
    // Alice holds 9500: the dataset does not fit until her uploads expire or a job names them.
    let dataset_up = send(&service, upload(&alice, data.clone())).await;
    dataset_up.problem(413, "payload-too-large");
    let expired = expire_uploads(
        &app.db,
        app.state.store.as_ref(),
        chrono::Duration::hours(1),
        chrono::Utc::now(),
    )
    .await
    .expect("expiry");
    assert_eq!(expired, 0, "nothing is an hour old");

    // An hour on, every unreferenced upload expires: unpinned and no longer counted.
    let expired = expire_uploads(
        &app.db,
        app.state.store.as_ref(),
        chrono::Duration::hours(1),
        chrono::Utc::now() + chrono::Duration::hours(2),
    )
    .await
    .expect("expiry");
    assert_eq!(expired, 3, "Alice's two blobs and Bob's");
    assert!(!pinned(&app, &first.body["cid"]).await);
    assert!(!pinned(&app, &bobs.body["cid"]).await);

    let dataset_up = send(&service, upload(&alice, data.clone())).await;
    assert_eq!(dataset_up.status, 201, "{}", dataset_up.text);
    let cid = dataset_up.body["cid"].as_str().unwrap();
    let posted = send(&service, post_by_cid(&alice, cid)).await;
    assert_eq!(posted.status, 201, "{}", posted.text);
    // Named by a job: it no longer counts (6000 more fit, which beside it would not) and
    // never expires.
    let after = send(&service, upload(&alice, blob(6000, 5))).await;
    assert_eq!(after.status, 201, "{}", after.text);
    let expired = expire_uploads(
        &app.db,
        app.state.store.as_ref(),
        chrono::Duration::hours(1),
        chrono::Utc::now() + chrono::Duration::days(30),
    )
    .await
    .expect("expiry");
    assert_eq!(expired, 1, "only the unreferenced blob");
    assert!(pinned(&app, &dataset_up.body["cid"]).await);
    assert!(!pinned(&app, &after.body["cid"]).await);
}

/// An expired upload whose bytes another account still claims stays pinned for that claim.
async fn an_expired_upload_stays_pinned_while_another_claim_holds_it(backend: Backend) {
    let Some(app) = TestApp::with_config(backend, quota_config()).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let a = send(&service, upload(&alice, blob(2000, 9))).await;
    assert_eq!(a.status, 201, "{}", a.text);
    // Bob's copy, an hour and a half later: not yet expired when Alice's is.
    let now = chrono::Utc::now();
    let later = now + chrono::Duration::minutes(90);
    shardwork_api::domain::content::record_upload(
        &app.db,
        &address(&stranger_key()).to_string(),
        &parse_cid(a.body["cid"].as_str().unwrap()).unwrap(),
        2000,
        later,
    )
    .await
    .expect("Bob's claim");
    let expired = expire_uploads(
        &app.db,
        app.state.store.as_ref(),
        chrono::Duration::hours(1),
        now + chrono::Duration::minutes(100),
    )
    .await
    .expect("expiry");
    assert_eq!(expired, 1);
    assert!(pinned(&app, &a.body["cid"]).await, "Bob's claim holds it");
    // Once Bob's expires too, nothing holds it.
    let expired = expire_uploads(
        &app.db,
        app.state.store.as_ref(),
        chrono::Duration::hours(1),
        later + chrono::Duration::hours(2),
    )
    .await
    .expect("expiry");
    assert_eq!(expired, 1);
    assert!(!pinned(&app, &a.body["cid"]).await);
}

on_both_databases!(
    a_jobs_dataset_is_guarded_under_every_spelling_of_its_cid,
    a_job_cannot_name_another_accounts_dataset_in_any_spelling,
    uploads_are_held_to_a_quota_per_identity_and_expire_unreferenced,
    an_expired_upload_stays_pinned_while_another_claim_holds_it,
);
