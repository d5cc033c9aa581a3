//! What posting checks of a job's base model, before anything is stored or funded: the bundle's
//! layout and files (a truncated safetensors file, a config naming an architecture the nodes do
//! not run, a tokenizer that does not parse), a chat template for chat records, and a training
//! memory some node can hold. Each refusal names the file or field, and writes no job.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::jobs::post_job;
use crate::on_both_databases;
use crate::quote::spec;

fn llm_spec(cid: &str) -> Value {
    let mut s = spec();
    s["base_model"] = json!({ "cid": cid, "format": "gguf", "architecture": "llama",
                              "task": "causal_lm" });
    s["lora"]["target_modules"] = json!(["q_proj", "v_proj"]);
    s["training"]["batch_size"] = json!(4);
    s
}

fn chats(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            format!(
                "{{\"messages\":[{{\"role\":\"user\",\"content\":\"question {i}\"}},\
                 {{\"role\":\"assistant\",\"content\":\"answer {i}\"}}]}}\n"
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// A model's files by name.
type Files = Vec<(&'static str, Vec<u8>)>;

async fn put_bundle(app: &TestApp, files: Vec<(&str, Vec<u8>)>) -> String {
    let (cid, blobs) = bundle_of(files);
    for blob in blobs {
        app.state.store.put(blob.into()).await.unwrap();
    }
    cid
}

fn bert_files() -> Vec<(&'static str, Vec<u8>)> {
    let (_, blobs) = model_bundle("bert", false);
    // model_bundle stores the files in name order: config.json, model.safetensors, tokenizer.json.
    vec![
        ("config.json", blobs[0].clone()),
        ("model.safetensors", blobs[1].clone()),
        ("tokenizer.json", blobs[2].clone()),
    ]
}

fn replace(
    files: &[(&'static str, Vec<u8>)],
    name: &str,
    bytes: Vec<u8>,
) -> Vec<(&'static str, Vec<u8>)> {
    files
        .iter()
        .map(|(n, b)| (*n, if *n == name { bytes.clone() } else { b.clone() }))
        .collect()
}

async fn jobs_of(
    service: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
    >,
    token: &str,
) -> usize {
    let reply = send(
        service,
        actix_web::test::TestRequest::get()
            .uri("/v1/jobs")
            .insert_header(bearer(token)),
    )
    .await;
    reply.body["jobs"].as_array().map_or(0, Vec::len)
}

async fn llm_jobs_are_checked_against_their_model(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let (with_template, _) = model_bundle("llama", true);
    let (without_template, _) = model_bundle("llama", false);

    let ok = send(
        &service,
        post_job(&token, &llm_spec(&with_template), &chats(30)),
    )
    .await;
    assert_eq!(ok.status, 201, "{}", ok.text);

    let refused = send(
        &service,
        post_job(&token, &llm_spec(&without_template), &chats(30)),
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(
        refused.body["errors"][0]["path"], "dataset:1",
        "{}",
        refused.text
    );
    assert!(refused.text.contains("chat template"), "{}", refused.text);
    // Instructions need no template.
    let instructions: Vec<u8> = (0..30)
        .map(|i| format!("{{\"instruction\":\"say {i}\",\"output\":\"{i}\"}}\n"))
        .collect::<String>()
        .into_bytes();
    let ok = send(
        &service,
        post_job(&token, &llm_spec(&without_template), &instructions),
    )
    .await;
    assert_eq!(ok.status, 201, "{}", ok.text);

    // A preference (DPO) job takes preference pairs only, each refused naming its line and
    // field; pairs of chat turns need a template, pairs of strings do not.
    let mut dpo = llm_spec(&without_template);
    dpo["training"]["dpo"] = json!({ "beta": 0.1 });
    let pair =
        |i: usize| format!("{{\"prompt\":\"say {i}\",\"chosen\":\"{i}\",\"rejected\":\"no\"}}\n");
    let pairs: String = (0..30).map(pair).collect();
    let ok = send(&service, post_job(&token, &dpo, pairs.as_bytes())).await;
    assert_eq!(ok.status, 201, "{}", ok.text);
    for (line, path, says) in [
        (
            "{\"prompt\":\"p\",\"chosen\":\"a\"}",
            "dataset:3",
            "missing field `rejected`",
        ),
        (
            "{\"prompt\":\"p\",\"chosen\":\"a\",\"rejected\":\"a\"}",
            "dataset:3",
            "prefers nothing",
        ),
        ("{\"text\":\"plain\"}", "dataset:3", "not a preference pair"),
        (
            "{\"chosen\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}],\
              \"rejected\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
            "dataset:3",
            "no chat template",
        ),
    ] {
        let data = format!("{}{}\n{}", pair(0) + &pair(1), line, pairs);
        let refused = send(&service, post_job(&token, &dpo, data.as_bytes())).await;
        assert_eq!(refused.status, 422, "{line}: {}", refused.text);
        assert_eq!(refused.body["errors"][0]["path"], path, "{}", refused.text);
        assert!(refused.text.contains(says), "{line}: {}", refused.text);
    }
    // SFT records are not pairs, and pairs are not SFT records.
    let refused = send(&service, post_job(&token, &dpo, &instructions)).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    let refused = send(
        &service,
        post_job(&token, &llm_spec(&without_template), pairs.as_bytes()),
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("training.dpo"), "{}", refused.text);

    // A job no node can hold: refused naming the model, and no job is written. The largest
    // registered worker has 700 MiB; this tiny model at 32,768-token passes needs about 780.
    let worker = access_token(&service, &worker_key(), &["worker"]).await;
    let registered = send(
        &service,
        actix_web::test::TestRequest::post()
            .uri("/v1/workers/register")
            .insert_header(bearer(&worker))
            .set_json(json!({ "capabilities": { "device": "cpu", "memory_mb": 700 } })),
    )
    .await;
    assert!(registered.status < 300, "{}", registered.text);
    let before = jobs_of(&service, &token).await;
    let mut huge = llm_spec(&with_template);
    huge["training"]["batch_size"] = json!(4096);
    huge["training"]["max_seq_len"] = json!(32768);
    let refused = send(&service, post_job(&token, &huge, &chats(30))).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(
        refused.body["errors"][0]["path"], "base_model.cid",
        "{}",
        refused.text
    );
    assert!(refused.text.contains("MiB"), "{}", refused.text);
    assert_eq!(jobs_of(&service, &token).await, before);

    // The spec says GGUF, the bundle is a Hugging Face folder.
    let (bert, _) = model_bundle("bert", false);
    let refused = send(&service, post_job(&token, &llm_spec(&bert), &chats(30))).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains(".gguf"), "{}", refused.text);
}

async fn broken_model_files_are_refused_naming_the_file(backend: Backend) {
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let good = bert_files();
    let data = crate::jobs::dataset(40);
    let cases: Vec<(Files, &str)> = vec![
        {
            let weights = &good[1].1;
            (
                replace(
                    &good,
                    "model.safetensors",
                    weights[..weights.len() - 2].to_vec(),
                ),
                "model.safetensors",
            )
        },
        (
            replace(
                &good,
                "config.json",
                br#"{"model_type":"gpt_neox","hidden_size":32}"#.to_vec(),
            ),
            "config.json",
        ),
        (
            replace(&good, "tokenizer.json", b"{\"model\": [1, 2".to_vec()),
            "tokenizer.json",
        ),
        (good[..2].to_vec(), "tokenizer.json"),
    ];
    let before = jobs_of(&service, &token).await;
    for (files, named) in cases {
        let cid = put_bundle(&app, files).await;
        let mut s = spec();
        s["base_model"]["cid"] = json!(cid);
        let reply = send(&service, post_job(&token, &s, &data)).await;
        assert_eq!(reply.status, 422, "{named}: {}", reply.text);
        assert_eq!(
            reply.body["errors"][0]["path"], "base_model.cid",
            "{}",
            reply.text
        );
        assert!(reply.text.contains(named), "{named}: {}", reply.text);
    }
    // A CID that is no model at all, or not in the store.
    let mut s = spec();
    s["base_model"]["cid"] = json!("bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku");
    let reply = send(&service, post_job(&token, &s, &data)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(
        reply.text.contains("not in the content store"),
        "{}",
        reply.text
    );
    assert_eq!(jobs_of(&service, &token).await, before);
}

/// Issue 46, attack 2: a GGUF declaring a context of 300,000,000 positions made every node that
/// loaded it abort (a 38 GB RoPE table), and a chat template of three nested `range(100000)`
/// loops made scoring never return. Both, and the other declarations a file can poison, are
/// refused at posting with the declaration named, and no job is written.
async fn poisoned_models_are_refused_at_posting_naming_the_field(backend: Backend) {
    use shardwork_core::testkit::gguf::{MetaValue, TinyGguf};
    let Some(app) = TestApp::start(backend).await else {
        return;
    };
    let service = app.service().await;
    let token = access_token(&service, &requester_key(), &[]).await;
    let nested = "{% for a in range(100000) %}{% for b in range(100000) %}\
                  {% for c in range(100000) %}{{ a }}{% endfor %}{% endfor %}{% endfor %}";
    let mut short_embedding = TinyGguf::llama(true);
    short_embedding.tensors[0].shape = vec![31, 16];
    short_embedding.tensors[0].data.truncate(31 * 16);
    let mut cut = TinyGguf::llama(true);
    let last = cut.tensors.len() - 1;
    cut.tensors[last].data.truncate(3);
    let cases: Vec<(TinyGguf, &str, &str)> = vec![
        (
            TinyGguf::llama(true).set("llama.context_length", MetaValue::U32(300_000_000)),
            "base_model.llama.context_length",
            "300000000",
        ),
        (
            TinyGguf::llama(true).set("tokenizer.chat_template", MetaValue::Str(nested.into())),
            "base_model.tokenizer.chat_template",
            "budget",
        ),
        (
            TinyGguf::llama(true).set("llama.attention.head_count", MetaValue::U64(1 << 40)),
            "base_model.llama.attention.head_count",
            "outside",
        ),
        (
            short_embedding,
            "base_model.tensors.token_embd.weight",
            "shape",
        ),
        (cut, "base_model.tensors.output_norm.weight", "truncated"),
    ];
    let before = jobs_of(&service, &token).await;
    for (file, field, says) in cases {
        let cid = put_bundle(&app, vec![("model.gguf", file.bytes())]).await;
        let started = std::time::Instant::now();
        let reply = send(&service, post_job(&token, &llm_spec(&cid), &chats(30))).await;
        assert_eq!(reply.status, 422, "{field}: {}", reply.text);
        assert_eq!(reply.body["errors"][0]["path"], field, "{}", reply.text);
        assert!(reply.text.contains(says), "{field}: {}", reply.text);
        assert!(
            started.elapsed().as_secs() < 10,
            "{field} took {:?}",
            started.elapsed()
        );
    }
    // Attack 8: one file listed under many names multiplies what every node writes.
    let bytes = TinyGguf::llama(true).bytes();
    let cid = put_bundle(
        &app,
        vec![("model.gguf", bytes.clone()), ("copy.bin", bytes)],
    )
    .await;
    let reply = send(&service, post_job(&token, &llm_spec(&cid), &chats(30))).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(reply.text.contains("same content"), "{}", reply.text);
    assert_eq!(jobs_of(&service, &token).await, before);
}

on_both_databases!(
    llm_jobs_are_checked_against_their_model,
    broken_model_files_are_refused_naming_the_file,
    poisoned_models_are_refused_at_posting_naming_the_field,
);
