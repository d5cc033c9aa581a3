use actix_web::test::TestRequest;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::on_both_databases;

pub fn spec() -> Value {
    json!({
        "version": 1,
        "kind": "federated",
        "base_model": {
            "cid": crate::helpers::model_bundle("bert", false).0,
            "format": "safetensors", "architecture": "bert",
            "task": "sequence_classification", "num_labels": 2
        },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["query", "value"] },
        "training": { "epochs": 2, "learning_rate": 0.0005, "batch_size": 16, "max_seq_len": 64, "seed": 7 },
        "shards": 3, "rounds": 2, "held_out_fraction": 0.1,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(7)).to_rfc3339(),
        "stake": { "amount": "1000000000000000000" }
    })
}

fn quote(token: &str, body: Value) -> TestRequest {
    TestRequest::post()
        .uri("/v1/jobs/quote")
        .insert_header(bearer(token))
        .set_json(body)
}

async fn quote_prices_the_adapter_and_splits_the_dataset(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let reply = send(
        &service,
        quote(&token, json!({ "spec": spec(), "dataset_records": 1000 })),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let b = &reply.body;
    // 12 layers × {query, value} × 8 × (768 + 768): PEFT's count for bert-base.
    assert_eq!(b["adapter_params"], "294912");
    assert_eq!(b["adapter_bytes"], "1179648");
    assert_eq!(b["model_shape_source"], "bert-base-uncased");
    assert_eq!(
        (
            b["held_out_records"].as_u64(),
            b["training_records"].as_u64()
        ),
        (Some(100), Some(900))
    );
    assert_eq!(b["shard_records"], json!([300, 300, 300]));
    // 294912 params × 900 records × 2 epochs × 1000 wei.
    assert_eq!(b["price_wei"], "530841600000");
    assert_eq!(b["stake_covers_price"], true);

    let shape = json!({ "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4 });
    let reply = send(
        &service,
        quote(
            &token,
            json!({ "spec": spec(), "dataset_records": 10, "model": shape }),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["adapter_params"], (2 * 2 * 8 * 128).to_string());
    assert_eq!(reply.body["model_shape_source"], "request");
    assert_eq!(reply.body["shard_records"], json!([3, 3, 3]));
}

async fn quote_names_every_spec_problem_under_spec(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let mut bad = spec();
    bad["lora"]["r"] = 0.into();
    bad["shards"] = 0.into();
    let reply = send(
        &service,
        quote(&token, json!({ "spec": bad, "dataset_records": 100 })),
    )
    .await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["spec.lora.r", "spec.shards"]);

    let mut bad = spec();
    bad["training"]["epochz"] = 1.into();
    let reply = send(
        &service,
        quote(&token, json!({ "spec": bad, "dataset_records": 100 })),
    )
    .await;
    reply.problem(400, "malformed-request");
    assert_eq!(reply.paths(), ["spec.training.epochz"]);

    let mut bad = spec();
    bad["lora"]["target_modules"] = json!(["query", "q_proj"]);
    let reply = send(
        &service,
        quote(&token, json!({ "spec": bad, "dataset_records": 100 })),
    )
    .await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["spec.lora.target_modules[1]"]);

    let reply = send(
        &service,
        quote(&token, json!({ "spec": spec(), "dataset_records": 3 })),
    )
    .await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["dataset_records"]);

    let shape = json!({ "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 5 });
    let reply = send(
        &service,
        quote(
            &token,
            json!({ "spec": spec(), "dataset_records": 100, "model": shape }),
        ),
    )
    .await;
    reply.problem(422, "validation");
    assert_eq!(reply.paths(), ["model.num_attention_heads"]);
}

async fn quote_needs_a_signed_in_requester(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let reply = send(
        &service,
        TestRequest::post()
            .uri("/v1/jobs/quote")
            .set_json(json!({ "spec": spec(), "dataset_records": 100 })),
    )
    .await;
    reply.problem(401, "unauthenticated");
}

on_both_databases!(
    quote_prices_the_adapter_and_splits_the_dataset,
    quote_names_every_spec_problem_under_spec,
    quote_needs_a_signed_in_requester,
);
