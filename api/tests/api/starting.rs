//! A job that continues from an adapter (`base_model.adapter`, issue 48): posted from the
//! requester's own result or an unsealed PEFT bundle, refused naming the field for anything
//! else, and its round-1 tasks start from the adapter sealed again to the new job.

use bytes::Bytes;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait};
use serde_json::{Value, json};
use shardwork_api::background::outbox::Dispatcher;
use shardwork_api::domain::sealing::job_key;
use shardwork_api::entities::job;
use shardwork_core::protocol::{Bundle, ContentId};
use shardwork_core::store::keys::Sealed;

use crate::flow::{
    dataset, get, post_job, post_json, register_cpu_worker, started_job_with, take_tasks,
};
use crate::helpers::*;
use crate::on_both_databases;
use crate::quote::spec;

/// `adapter_config.json` for the test spec's LoRA (`r` as given).
fn adapter_config(r: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "peft_type": "LORA", "task_type": "SEQ_CLS", "r": r, "lora_alpha": 16,
        "lora_dropout": 0.05, "target_modules": ["value", "query"], "bias": "none",
        "modules_to_save": ["classifier"]
    }))
    .unwrap()
}

/// PEFT weights of rank 8 on the test BERT (hidden 32, 2 layers, 2 labels): `query` and
/// `value` of every layer and the classification head, every value `fill`.
fn adapter_weights(fill: f32) -> Vec<u8> {
    let mut tensors: Vec<(String, Vec<u64>)> = Vec::new();
    for layer in 0..2 {
        for module in ["query", "value"] {
            for (factor, shape) in [("lora_A", vec![8u64, 32]), ("lora_B", vec![32, 8])] {
                tensors.push((
                    format!(
                        "base_model.model.bert.encoder.layer.{layer}.attention.self.{module}.{factor}.weight"
                    ),
                    shape,
                ));
            }
        }
    }
    tensors.push(("base_model.model.classifier.weight".into(), vec![2, 32]));
    tensors.push(("base_model.model.classifier.bias".into(), vec![2]));
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * 4;
        header.insert(
            name,
            json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let text = serde_json::to_vec(&header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    for _ in 0..offset / 4 {
        out.extend_from_slice(&fill.to_le_bytes());
    }
    out
}

/// The files of a PEFT adapter folder: name and bytes.
type AdapterFiles = Vec<(&'static str, Vec<u8>)>;

/// Stores a PEFT bundle of `files`, sealed with `seal` when given; its CID.
async fn put_adapter(
    app: &TestApp,
    files: &[(&str, Vec<u8>)],
    seal: Option<&shardwork_core::store::keys::BundleSeal>,
) -> String {
    let mut bundle = Bundle::new("adapter");
    bundle.sealed = seal.is_some();
    for (name, bytes) in files {
        let stored = match seal {
            Some(seal) => seal.seal_file(name, bytes),
            None => bytes.clone(),
        };
        let cid = app.state.store.put(Bytes::from(stored)).await.unwrap();
        bundle.files.insert((*name).to_owned(), ContentId(cid));
    }
    let doc = serde_json::to_vec(&bundle).unwrap();
    app.state
        .store
        .put(Bytes::from(doc))
        .await
        .unwrap()
        .to_string()
}

fn continuing(adapter: &str) -> Value {
    let mut s = spec();
    s["base_model"]["adapter"] = json!(adapter);
    s
}

/// The files of the bundle at `cid`, opened with `seal`.
async fn opened(
    app: &TestApp,
    cid: &str,
    seal: &shardwork_core::store::keys::BundleSeal,
) -> Vec<(String, Vec<u8>)> {
    let doc = app
        .state
        .store
        .get_bytes(&cid.parse().unwrap(), 1 << 20)
        .await
        .unwrap();
    let bundle = Bundle::decode(&doc).unwrap();
    assert!(bundle.sealed, "the start is sealed to the job");
    let mut out = Vec::new();
    for (name, file) in &bundle.files {
        let sealed = app.state.store.get_bytes(&file.0, 1 << 30).await.unwrap();
        out.push((name.clone(), seal.open_file(name, &sealed).unwrap()));
    }
    out
}

async fn a_job_continues_from_its_requesters_result_and_round_1_starts_there(backend: Backend) {
    let Some(app) = TestApp::with_chain(backend).await else {
        return;
    };
    let service = app.service().await;
    let mut dispatcher = Dispatcher::default();
    let requester = access_token(&service, &requester_key(), &[]).await;
    let secret = app.state.config.sealing_secret.expose().to_owned();

    // An earlier job of the requester, completed with a result sealed to its last round (the
    // way the validator seals it).
    let earlier = send(&service, post_job(&requester, &spec(), &dataset(40))).await;
    assert_eq!(earlier.status, 201, "{}", earlier.text);
    let earlier_id: uuid::Uuid = earlier.body["id"].as_str().unwrap().parse().unwrap();
    let files = vec![
        ("adapter_config.json", adapter_config(8)),
        ("adapter_model.safetensors", adapter_weights(0.25)),
    ];
    let result_seal =
        Sealed::RoundResult { round: 2 }.seal_for(earlier_id, &job_key(&secret, earlier_id));
    let result = put_adapter(&app, &files, Some(&result_seal)).await;
    let row = job::Entity::find_by_id(earlier_id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let mut row: job::ActiveModel = row.into();
    row.status = Set(shardwork_api::domain::lifecycle::JobStatus::Completed);
    row.result_adapter_cid = Set(Some(result.clone()));
    row.update(&app.db).await.unwrap();

    // Another account cannot continue from it: the result is sealed to its requester's job.
    let stranger = access_token(&service, &worker_key(), &[]).await;
    let refused = send(
        &service,
        post_job(&stranger, &continuing(&result), &dataset(40)),
    )
    .await;
    let problem = refused.problem(403, "forbidden");
    assert!(
        problem["detail"].as_str().unwrap().contains("sealed"),
        "{problem}"
    );
    assert_eq!(refused.paths(), ["base_model.adapter"]);

    // Its requester can: funded, the job records the start sealed to itself.
    let (_, job_id) = started_job_with(&app, &service, &mut dispatcher, &continuing(&result)).await;
    let job_id: uuid::Uuid = job_id.parse().unwrap();
    let shown = send(&service, get(&requester, &format!("/v1/jobs/{job_id}"))).await;
    let start = shown.body["start_adapter_cid"]
        .as_str()
        .expect("a start")
        .to_owned();
    assert_ne!(start, result, "sealed again to the new job");
    let start_seal = Sealed::start_of(1).seal_for(job_id, &job_key(&secret, job_id));
    let mut expected: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(n, b)| ((*n).to_owned(), b.clone()))
        .collect();
    expected.sort();
    assert_eq!(opened(&app, &start, &start_seal).await, expected);

    // Round 1's tasks start from it, and a lease gives the key that opens it.
    let tasks = take_tasks(&app, 3).await;
    assert!(
        tasks.iter().all(|t| t.round == 1
            && t.previous_adapter_cid.as_ref().map(ToString::to_string) == Some(start.clone())),
        "{tasks:?}"
    );
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let registered = send(&service, register_cpu_worker(&worker)).await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    let claim = send(
        &service,
        post_json(
            &worker,
            &format!("/v1/tasks/{}/claim", tasks[0].task_id),
            json!({}),
        ),
    )
    .await;
    assert_eq!(claim.status, 200, "{}", claim.text);
    let key: shardwork_core::store::seal::SealingKey = claim.body["keys"]["start"]
        .as_str()
        .expect("a start key")
        .parse()
        .unwrap();
    let worker_seal = Sealed::start_of(1).seal_with(job_id, key);
    assert_eq!(opened(&app, &start, &worker_seal).await, expected);
}

async fn a_start_that_could_not_train_is_refused_naming_the_field(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let requester = access_token(&service, &requester_key(), &[]).await;
    let field_error = |reply: &Reply, needle: &str| {
        let problem = reply.problem(422, "validation");
        let errors = problem["errors"].as_array().unwrap();
        assert_eq!(errors[0]["path"], "base_model.adapter", "{problem}");
        assert!(
            errors[0]["message"].as_str().unwrap().contains(needle),
            "{needle}: {problem}"
        );
    };

    // An unsealed bundle of the job's settings is a start anyone who may read it can use.
    let good = put_adapter(
        &app,
        &[
            ("adapter_config.json", adapter_config(8)),
            ("adapter_model.safetensors", adapter_weights(0.5)),
        ],
        None,
    )
    .await;
    let reply = send(
        &service,
        post_job(&requester, &continuing(&good), &dataset(40)),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);

    // Each start that could not train is refused naming the field, and nothing is recorded.
    let mut short = adapter_weights(0.5);
    short.truncate(short.len() - 4);
    let refused: [(AdapterFiles, &str); 3] = [
        (
            vec![
                ("adapter_config.json", adapter_config(4)),
                ("adapter_model.safetensors", adapter_weights(0.5)),
            ],
            "lora.r is 8",
        ),
        (
            vec![
                ("adapter_config.json", adapter_config(8)),
                ("adapter_model.safetensors", short),
            ],
            "truncated",
        ),
        (
            vec![("adapter_model.safetensors", adapter_weights(0.5))],
            "adapter_config.json",
        ),
    ];
    for (files, needle) in refused {
        let cid = put_adapter(&app, &files, None).await;
        let reply = send(
            &service,
            post_job(&requester, &continuing(&cid), &dataset(40)),
        )
        .await;
        field_error(&reply, needle);
    }
    let missing = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";
    let reply = send(
        &service,
        post_job(&requester, &continuing(missing), &dataset(40)),
    )
    .await;
    field_error(&reply, "not in the content store");

    // Only the first post was recorded.
    let listed = send(&service, get(&requester, "/v1/jobs")).await;
    assert_eq!(
        listed.body["jobs"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.text
    );
}

on_both_databases!(
    a_job_continues_from_its_requesters_result_and_round_1_starts_there,
    a_start_that_could_not_train_is_refused_naming_the_field,
);
