use actix_web::test::TestRequest;
use bytes::Bytes;
use serde_json::{Value, json};
use shardwork_api::domain::sealing;
use shardwork_core::protocol::ShardManifest;
use shardwork_core::store::seal;

use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

/// A `multipart/form-data` body from `(name, bytes)` parts.
fn multipart(parts: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "shardwork-test-boundary-7d3f";
    let mut body = Vec::new();
    for (name, bytes) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub(crate) fn dataset(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("{{\"text\":\"review number {i}\",\"label\":{}}}\n", i % 2))
        .collect::<String>()
        .into_bytes()
}

pub(crate) fn post_job(token: &str, spec: &Value, data: &[u8]) -> TestRequest {
    let spec_bytes = spec.to_string().into_bytes();
    let (content_type, body) = multipart(&[("spec", &spec_bytes), ("dataset", data)]);
    TestRequest::post()
        .uri("/v1/jobs")
        .insert_header(bearer(token))
        .insert_header(("content-type", content_type))
        .set_payload(body)
}

fn get(token: &str, uri: &str) -> TestRequest {
    TestRequest::get().uri(uri).insert_header(bearer(token))
}

async fn fetch(app: &TestApp, cid: &str) -> Bytes {
    let cid = cid.parse().expect("cid");
    app.state
        .store
        .get_bytes(&cid, 1 << 30)
        .await
        .expect("in the store")
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn posted_job_is_cut_sealed_and_recorded(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let data = dataset(40);
    let reply = send(&service, post_job(&token, &spec(), &data)).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job = &reply.body;
    let id = job["id"].as_str().unwrap();
    assert_eq!(reply.header("location"), format!("/v1/jobs/{id}"));
    assert_eq!(job["status"], "awaiting_funding");
    assert_eq!(job["requester"], address(&requester_key()).to_string());

    // The uploaded bytes (sealed: they hold the held-out records), job.json and the manifest
    // are all in the store by CID.
    let job_id: uuid::Uuid = id.parse().unwrap();
    let stored = fetch(&app, job["dataset_cid"].as_str().unwrap()).await;
    assert!(
        !String::from_utf8_lossy(&stored).contains("review"),
        "stored in the clear"
    );
    assert_eq!(
        seal::open(
            &sealing::dataset_key(app.state.config.sealing_secret.expose(), job_id),
            &stored,
            &sealing::dataset_associated_data(job_id),
        )
        .unwrap(),
        data
    );
    let stored_spec: Value =
        serde_json::from_slice(&fetch(&app, job["spec_cid"].as_str().unwrap()).await).unwrap();
    assert_eq!(stored_spec["training"]["seed"], 7);
    let manifest: ShardManifest =
        serde_json::from_slice(&fetch(&app, job["manifest_cid"].as_str().unwrap()).await).unwrap();
    assert_eq!(manifest.job_id.to_string(), id);
    assert_eq!(manifest.held_out.records, 4);
    assert_eq!(
        manifest
            .shards
            .iter()
            .map(|s| s.records)
            .collect::<Vec<_>>(),
        [12, 12, 12]
    );
    assert_eq!(
        manifest.held_out.sealed_cid.to_string(),
        job["held_out_cid"].as_str().unwrap()
    );

    // Every record lands exactly once across held-out set and shards.
    let mut all = Vec::new();
    for shard in &manifest.shards {
        let shard_lines = lines(&fetch(&app, &shard.cid.to_string()).await);
        assert_eq!(shard_lines.len() as u64, shard.records);
        all.extend(shard_lines);
    }
    let sealed = fetch(&app, &manifest.held_out.sealed_cid.to_string()).await;
    assert!(
        !String::from_utf8_lossy(&sealed).contains("review number"),
        "held-out data is sealed"
    );
    let key = sealing::held_out_key(app.state.config.sealing_secret.expose(), manifest.job_id);
    let held = seal::open(&key, &sealed, &sealing::associated_data(manifest.job_id)).unwrap();
    all.extend(lines(&held));
    all.sort();
    let mut expected = lines(&data);
    expected.sort();
    assert_eq!(all, expected);

    let events = send(&service, get(&token, &format!("/v1/jobs/{id}/events"))).await;
    assert_eq!(events.status, 200, "{}", events.text);
    assert_eq!(events.body["events"][0]["kind"], "created");
    assert_eq!(
        events.body["events"][0]["payload"]["manifest_cid"],
        job["manifest_cid"]
    );
}

async fn same_dataset_and_seed_give_the_same_shards(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let manifest = |job: Value| {
        let app = &app;
        async move {
            serde_json::from_slice::<ShardManifest>(
                &fetch(app, job["manifest_cid"].as_str().unwrap()).await,
            )
            .unwrap()
        }
    };
    let a = manifest(
        send(&service, post_job(&token, &spec(), &dataset(30)))
            .await
            .body,
    )
    .await;
    let b = manifest(
        send(&service, post_job(&token, &spec(), &dataset(30)))
            .await
            .body,
    )
    .await;
    assert_ne!(a.job_id, b.job_id);
    assert_eq!(a.shards, b.shards);
    let mut reseeded = spec();
    reseeded["training"]["seed"] = 8.into();
    let c = manifest(
        send(&service, post_job(&token, &reseeded, &dataset(30)))
            .await
            .body,
    )
    .await;
    assert_ne!(a.shards, c.shards, "another seed shuffles differently");
}

async fn job_can_name_a_dataset_already_in_the_store(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let cid = app.state.store.put(Bytes::from(dataset(20))).await.unwrap();
    let by_cid = |cid: String| {
        TestRequest::post()
            .uri("/v1/jobs")
            .insert_header(bearer(&token))
            .set_json(json!({ "spec": spec(), "dataset_cid": cid }))
    };
    let reply = send(&service, by_cid(cid.to_string())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.body["dataset_cid"], cid.to_string());

    let absent = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";
    let reply = send(&service, by_cid(absent.into())).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["dataset_cid"]);
    let reply = send(&service, by_cid("not-a-cid".into())).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["dataset_cid"]);
}

async fn bad_posts_name_the_fault_and_write_nothing(backend: Backend) {
    let config = shardwork_api::ApiConfig {
        json_limit_bytes: 4096,
        upload_limit_bytes: 8192,
        ..config()
    };
    let Some(app) = TestApp::with_config(backend, config).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;

    let mut data = dataset(20);
    data.extend_from_slice(b"{\"text\":\"x\",\"label\":9}\nnot json\n");
    let reply = send(&service, post_job(&token, &spec(), &data)).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["dataset:21", "dataset:22"]);

    let mut bad = spec();
    bad["lora"]["r"] = 0.into();
    let reply = send(&service, post_job(&token, &bad, &dataset(20))).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["spec.lora.r"]);

    let reply = send(&service, post_job(&token, &spec(), &dataset(3))).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["dataset"]);

    let reply = send(&service, post_job(&token, &spec(), &dataset(400))).await;
    reply.problem(413, "payload-too-large");
    assert_eq!(reply.paths(), ["dataset"]);

    let (content_type, body) = multipart(&[("spec", spec().to_string().as_bytes())]);
    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/jobs")
            .insert_header(bearer(&token))
            .insert_header(("content-type", content_type))
            .set_payload(body),
    )
    .await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["dataset"]);

    let (content_type, body) = multipart(&[("spec", b"{}"), ("extra", b"x")]);
    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/jobs")
            .insert_header(bearer(&token))
            .insert_header(("content-type", content_type))
            .set_payload(body),
    )
    .await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["extra"]);

    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/jobs")
            .insert_header(bearer(&token))
            .set_payload("x"),
    )
    .await;
    reply.problem(400, "malformed-request");

    let listed = send(&service, get(&token, "/v1/jobs")).await;
    assert_eq!(
        listed.body["jobs"],
        json!([]),
        "no failed post left a job behind"
    );
}

async fn jobs_list_filters_and_pages_newest_first(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let bob = access_token(&service, &worker_key(), &[]).await;
    let mut ids = Vec::new();
    for token in [&alice, &alice, &bob] {
        let reply = send(&service, post_job(token, &spec(), &dataset(10))).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        ids.push(reply.body["id"].as_str().unwrap().to_owned());
    }
    let page = send(&service, get(&alice, "/v1/jobs?limit=2")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let first: Vec<_> = page.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].clone())
        .collect();
    assert_eq!(first, [json!(ids[2]), json!(ids[1])]);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let page = send(
        &service,
        get(&alice, &format!("/v1/jobs?limit=2&cursor={cursor}")),
    )
    .await;
    assert_eq!(page.body["jobs"][0]["id"], json!(ids[0]));
    assert!(page.body["next_cursor"].is_null());

    let bobs = send(
        &service,
        get(
            &alice,
            &format!("/v1/jobs?requester={}", address(&worker_key())),
        ),
    )
    .await;
    assert_eq!(bobs.body["jobs"].as_array().unwrap().len(), 1);
    let cancelled = send(&service, get(&alice, "/v1/jobs?status=cancelled")).await;
    assert_eq!(cancelled.body["jobs"], json!([]));

    let reply = send(&service, get(&alice, "/v1/jobs?status=running")).await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["query.status"]);
    send(&service, get(&alice, "/v1/jobs?limit=0"))
        .await
        .problem(422, "validation");
    let reply = send(&service, get(&alice, "/v1/jobs?limit=lots")).await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["query"]);
    send(&service, get(&alice, "/v1/jobs?requester=0x12"))
        .await
        .problem(400, "malformed-request");

    let one = send(&service, get(&bob, &format!("/v1/jobs/{}", ids[0]))).await;
    assert_eq!(one.body["id"], json!(ids[0]));
    send(
        &service,
        get(&bob, "/v1/jobs/0190f5c2-0000-7000-8000-000000000000"),
    )
    .await
    .problem(404, "not-found");
    let reply = send(&service, get(&bob, "/v1/jobs/not-a-uuid")).await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["path"]);
    send(&service, TestRequest::get().uri("/v1/jobs"))
        .await
        .problem(401, "unauthenticated");
}

async fn only_the_requester_cancels_and_only_once(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let mallory = access_token(&service, &worker_key(), &["worker"]).await;
    let job = send(&service, post_job(&alice, &spec(), &dataset(10)))
        .await
        .body;
    let id = job["id"].as_str().unwrap();
    let cancel = |token: &str| {
        TestRequest::post()
            .uri(&format!("/v1/jobs/{id}/cancel"))
            .insert_header(bearer(token))
    };
    send(&service, cancel(&mallory))
        .await
        .problem(403, "forbidden");
    let reply = send(&service, cancel(&alice)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "cancelled");
    send(&service, cancel(&alice))
        .await
        .problem(409, "conflict");

    let events = send(
        &service,
        get(&alice, &format!("/v1/jobs/{id}/events?limit=1")),
    )
    .await;
    assert_eq!(events.body["events"][0]["kind"], "created");
    let after = events.body["next_after"].as_i64().unwrap();
    let events = send(
        &service,
        get(&alice, &format!("/v1/jobs/{id}/events?after={after}")),
    )
    .await;
    assert_eq!(events.body["events"][0]["kind"], "cancelled");
    assert_eq!(
        events.body["events"][0]["payload"]["from"],
        "awaiting_funding"
    );
    assert!(events.body["next_after"].is_null());

    // The stream replays the whole history of a finished job, then ends.
    let stream = send(
        &service,
        get(&alice, &format!("/v1/jobs/{id}/events/stream")),
    )
    .await;
    assert_eq!(stream.status, 200);
    assert_eq!(stream.content_type, "text/event-stream");
    let kinds: Vec<_> = stream
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds, ["created", "cancelled"], "{}", stream.text);
    let resumed = send(
        &service,
        get(&alice, &format!("/v1/jobs/{id}/events/stream"))
            .insert_header(("Last-Event-ID", after.to_string())),
    )
    .await;
    let kinds: Vec<_> = resumed
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds, ["cancelled"]);
}

async fn held_out_key_reaches_the_validator_and_no_worker(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let validator = access_token(&service, &validator_key(), &[]).await;
    let job = send(&service, post_job(&requester, &spec(), &dataset(30)))
        .await
        .body;
    let id = job["id"].as_str().unwrap().to_owned();
    let key_uri = format!("/v1/jobs/{id}/held-out-key");

    let reply = send(&service, get(&validator, &key_uri)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let key_hex = reply.body["key"].as_str().unwrap().to_owned();
    let key: shardwork_core::store::seal::SealingKey = key_hex.parse().unwrap();
    let sealed = fetch(&app, reply.body["sealed_cid"].as_str().unwrap()).await;
    let job_id = id.parse().unwrap();
    let held_out = lines(&seal::open(&key, &sealed, &sealing::associated_data(job_id)).unwrap());
    assert_eq!(held_out.len(), 3);

    send(&service, get(&worker, &key_uri))
        .await
        .problem(403, "forbidden");
    send(&service, get(&requester, &key_uri))
        .await
        .problem(403, "forbidden");
    send(&service, TestRequest::get().uri(&key_uri))
        .await
        .problem(401, "unauthenticated");

    // Every endpoint a worker can call, tried: none shows the key or a held-out record.
    send(&service, post_job(&worker, &spec(), &dataset(10))).await;
    send(
        &service,
        TestRequest::post()
            .uri("/v1/workers/register")
            .insert_header(bearer(&worker))
            .set_json(json!({ "capabilities": { "device": "cpu", "memory_mb": 1024 } })),
    )
    .await;
    send(
        &service,
        TestRequest::post()
            .uri(&format!("/v1/jobs/{id}/cancel"))
            .insert_header(bearer(&requester)),
    )
    .await;
    let mut seen = String::new();
    for uri in [
        "/v1/jobs".to_owned(),
        format!("/v1/jobs/{id}"),
        format!("/v1/jobs/{id}/events"),
        format!("/v1/jobs/{id}/events/stream"),
        key_uri.clone(),
        "/v1/workers/me".into(),
        "/v1/auth/me".into(),
    ] {
        let reply = send(&service, get(&worker, &uri)).await;
        assert!(reply.status < 500, "{uri}: {}", reply.text);
        seen.push_str(&reply.text);
    }
    assert!(!seen.contains(&key_hex), "a worker saw the held-out key");
    for record in &held_out {
        let text: Value = serde_json::from_str(record).unwrap();
        assert!(
            !seen.contains(text["text"].as_str().unwrap()),
            "a worker saw held-out {record}"
        );
    }
}

/// `GET /v1/jobs/{id}` coalesces concurrent reads into shared queries: under a burst every reader
/// still gets its own job (or its own 404), and a read after a write sees the write.
async fn concurrent_job_reads_each_get_their_own_fresh_job(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let alice = access_token(&service, &requester_key(), &[]).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        let job = send(&service, post_job(&alice, &spec(), &dataset(10))).await;
        assert_eq!(job.status, 201, "{}", job.text);
        ids.push(job.body["id"].as_str().unwrap().to_owned());
    }
    let missing = "0190f5c2-0000-7000-8000-000000000000".to_owned();
    let asked: Vec<String> = (0..60)
        .map(|i| {
            if i % 7 == 3 {
                missing.clone()
            } else {
                ids[i % ids.len()].clone()
            }
        })
        .collect();
    let replies = futures::future::join_all(
        asked
            .iter()
            .map(|id| send(&service, get(&alice, &format!("/v1/jobs/{id}")))),
    )
    .await;
    for (id, reply) in asked.iter().zip(&replies) {
        if *id == missing {
            reply.problem(404, "not-found");
            assert!(reply.text.contains(&missing), "{}", reply.text);
        } else {
            assert_eq!(reply.status, 200, "{}", reply.text);
            assert_eq!(reply.body["id"], json!(id));
            assert_eq!(reply.body["status"], "awaiting_funding");
        }
    }

    let cancelled = send(
        &service,
        TestRequest::post()
            .uri(&format!("/v1/jobs/{}/cancel", ids[1]))
            .insert_header(bearer(&alice)),
    )
    .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    let replies = futures::future::join_all(
        ids.iter()
            .cycle()
            .take(20)
            .map(|id| send(&service, get(&alice, &format!("/v1/jobs/{id}")))),
    )
    .await;
    for (id, reply) in ids.iter().cycle().zip(&replies) {
        let expected = if *id == ids[1] {
            "cancelled"
        } else {
            "awaiting_funding"
        };
        assert_eq!(reply.body["status"], expected, "job {id}");
    }
}

on_both_databases!(
    concurrent_job_reads_each_get_their_own_fresh_job,
    posted_job_is_cut_sealed_and_recorded,
    same_dataset_and_seed_give_the_same_shards,
    job_can_name_a_dataset_already_in_the_store,
    bad_posts_name_the_fault_and_write_nothing,
    jobs_list_filters_and_pages_newest_first,
    only_the_requester_cancels_and_only_once,
    held_out_key_reaches_the_validator_and_no_worker,
);
