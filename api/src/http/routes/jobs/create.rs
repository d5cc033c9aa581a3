//! `POST /v1/jobs`: post a job. Either `multipart/form-data` with a `spec` part (JSON) and a
//! `dataset` part (JSONL), or `application/json` `{"spec": …, "dataset_cid": "…"}` naming a
//! dataset already in the content store.
//!
//! Order of work, so bad input never half-writes: decode and validate the spec, the dataset and
//! the split first; then write the content (the sealed dataset, job.json, shards, the sealed
//! held-out set, the manifest) to the store; then the job, its shards and its `created` event in
//! one database transaction. A failure between the two leaves only unreferenced blobs.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use chrono::Utc;
use futures::StreamExt;
use sea_orm::{ActiveValue::Set, EntityTrait, TransactionTrait};
use serde::Deserialize;
use shardwork_core::protocol::bundle::Bundle;
use shardwork_core::protocol::validation::decode_json;
use shardwork_core::protocol::{
    ContentId, HeldOutRef, JobEvent, JobSpec, PROTOCOL_VERSION, ShardManifest, ShardRef, events,
};
use shardwork_core::store::{ContentStore, StoreError, parse_cid, seal};
use uuid::Uuid;

use super::view::JobView;
use crate::domain::capacity;
use crate::domain::content;
use crate::domain::error::DomainError;
use crate::domain::jobs::find_job;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::domain::models;
use crate::domain::pipeline;
use crate::domain::sealing;
use crate::domain::sizing;
use crate::entities::{job, shard};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody, ProblemKind};
use crate::stake_tokens;
use crate::state::AppState;

/// `application/json` body: a spec and a dataset already in the content store.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateJobFromCid)]
#[serde(deny_unknown_fields)]
struct CreateFromCid {
    #[schema(value_type = JobSpec)]
    spec: serde_json::Value,
    /// The dataset (JSONL), stored before.
    #[schema(value_type = ContentId)]
    dataset_cid: String,
}

/// `multipart/form-data` body: the spec and the dataset uploaded together.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // documents the parts the handler reads from the stream
struct CreateJobUpload {
    /// The job spec as JSON (part `Content-Type: application/json`).
    spec: JobSpec,
    /// The dataset, JSONL: one record per line.
    #[schema(value_type = String, format = Binary, content_media_type = "application/x-ndjson")]
    dataset: Vec<u8>,
}

enum Dataset {
    Uploaded(Bytes),
    Stored(cid::Cid),
}

fn too_large(part: &str, limit: usize) -> ApiError {
    ApiError::field(
        ProblemKind::PayloadTooLarge,
        part,
        format!("exceeds the limit of {limit} bytes"),
    )
}

async fn read_capped<S, E>(mut stream: S, limit: usize, part: &str) -> Result<Bytes, ApiError>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut out = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::malformed(part, format!("could not be read: {e}")))?;
        if out.len() + chunk.len() > limit {
            return Err(too_large(part, limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// The spec bytes and dataset of a multipart request.
async fn from_multipart(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<(Bytes, Dataset), ApiError> {
    let mut multipart = actix_multipart::Multipart::new(req.headers(), payload);
    let (mut spec, mut dataset) = (None, None);
    while let Some(field) = multipart.next().await {
        let field = field.map_err(|e| ApiError::malformed("", format!("multipart body: {e}")))?;
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "spec" if spec.is_none() => {
                spec = Some(read_capped(field, state.config.json_limit_bytes, "spec").await?);
            }
            "dataset" if dataset.is_none() => {
                let bytes = read_capped(field, state.config.upload_limit_bytes, "dataset").await?;
                dataset = Some(Dataset::Uploaded(bytes));
            }
            "spec" | "dataset" => {
                return Err(ApiError::malformed(name, "sent twice"));
            }
            other => {
                return Err(ApiError::malformed(
                    other,
                    "unknown part; send `spec` (JSON) and `dataset` (JSONL)",
                ));
            }
        }
    }
    let spec = spec.ok_or_else(|| ApiError::malformed("spec", "the `spec` part is missing"))?;
    let dataset =
        dataset.ok_or_else(|| ApiError::malformed("dataset", "the `dataset` part is missing"))?;
    Ok((spec, dataset))
}

async fn from_json(payload: web::Payload, state: &AppState) -> Result<(Bytes, Dataset), ApiError> {
    let body = read_capped(payload, state.config.json_limit_bytes, "").await?;
    let request: CreateFromCid =
        decode_json(&body).map_err(|e| ApiError::from_spec_errors(e, false, ""))?;
    let cid = parse_cid(&request.dataset_cid)
        .map_err(|e| ApiError::invalid("dataset_cid", e.to_string()))?;
    let spec = serde_json::to_vec(&request.spec)
        .map_err(|e| ApiError::internal("re-encoding the spec", e))?;
    Ok((Bytes::from(spec), Dataset::Stored(cid)))
}

/// The content a job names besides its dataset: the model bundle and each of its files. An
/// upload among them is in use from now on (it no longer expires or counts against its
/// uploader's quota).
async fn named_content(store: &dyn ContentStore, spec: &JobSpec) -> Vec<cid::Cid> {
    let bundle_cid = spec.base_model.cid.0;
    let mut named = vec![bundle_cid];
    // The bundle was read and checked by `models::inspect` a moment ago.
    if let Ok(doc) = store.get_bytes(&bundle_cid, 1 << 20).await
        && let Ok(bundle) = Bundle::decode(&doc)
    {
        named.extend(bundle.files.values().map(|c| c.0));
    }
    named
}

fn store_error(err: StoreError) -> ApiError {
    ApiError::internal("content store", err)
}

/// Posts a job: validates the spec and the dataset, stores the dataset, its shards and the
/// sealed held-out set, and records the job awaiting funding.
///
/// Nothing is written unless everything is valid.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    operation_id = "create_job",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    request_body(
        description = "The spec with an uploaded dataset, or with the CID of one already stored",
        content(
            (CreateJobUpload = "multipart/form-data"),
            (CreateFromCid = "application/json"),
        ),
    ),
    responses(
        (status = 201, description = "Posted; awaiting funding", body = JobView,
            headers(("Location" = String, description = "The job's URL, `/v1/jobs/{id}`"))),
        (status = 400, description = "Neither multipart nor JSON, a part is missing, unknown or repeated, or the spec does not decode", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "`dataset_cid` names another requester's job dataset, a job's held-out set, or an upload of another account that the caller has not uploaded too", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 413, description = "The spec or the dataset exceeds its limit", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The spec, the dataset or its split breaks a rule, or the stake's token is not one the escrow accepts; every field or line at fault is in `errors`", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The content store or the database failed", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 503, description = "The chain did not answer whether the stake's token is accepted", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn create(
    state: web::Data<AppState>,
    caller: Authenticated<RequesterRole>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (spec_bytes, dataset) = if content_type.starts_with("multipart/form-data") {
        from_multipart(&req, payload, &state).await?
    } else if content_type.starts_with("application/json") {
        from_json(payload, &state).await?
    } else {
        return Err(ApiError::malformed(
            "",
            "send multipart/form-data (spec + dataset) or application/json (spec + dataset_cid)",
        ));
    };

    // 1. Everything is checked before anything is written.
    let now = Utc::now();
    let spec = JobSpec::parse(&spec_bytes, now).map_err(|errors| {
        let decoded = serde_json::from_slice::<JobSpec>(&spec_bytes).is_ok();
        ApiError::from_spec_errors(errors, decoded, "spec")
    })?;
    let (data, dataset_cid) = match dataset {
        Dataset::Uploaded(bytes) => (bytes, None),
        Dataset::Stored(cid) => {
            // Someone else's private dataset is refused before a byte of it is read.
            content::check_dataset_claim(&state.db, &caller.claims.sub.to_string(), &cid)
                .await
                .map_err(|e| match e {
                    DomainError::Forbidden(message) => {
                        ApiError::field(ProblemKind::Forbidden, "dataset_cid", message)
                    }
                    other => other.into(),
                })?;
            let limit = state.config.upload_limit_bytes as u64;
            let bytes = state
                .store
                .get_bytes(&cid, limit)
                .await
                .map_err(|e| match e {
                    StoreError::NotFound(_) => ApiError::invalid(
                        "dataset_cid",
                        format!("{cid} is not in the content store"),
                    ),
                    StoreError::TooLarge { .. } => too_large("dataset_cid", limit as usize),
                    other => store_error(other),
                })?;
            (bytes, Some(cid))
        }
    };
    stake_tokens::check_stake(state.chain.as_ref(), &spec.stake).await?;
    let model = models::inspect(state.store.as_ref(), &spec).await?;
    let memory_mb =
        sizing::training_memory_mb(&spec, &model.shape, model.vocab_size, model.parameters);
    capacity::check_fits(&state.db, memory_mb, state.config.max_job_memory_mb).await?;
    let records =
        pipeline::parse_records(&data, &spec, model.has_chat_template).map_err(|errors| {
            ApiError {
                kind: ProblemKind::Validation,
                detail: format!(
                    "the dataset has {} bad line(s); the first: {}",
                    errors.len(),
                    errors[0].message
                ),
                errors,
            }
        })?;
    let split =
        pipeline::split(&records, &spec).map_err(|e| ApiError::invalid(e.path, e.message))?;

    // 2. Content, addressed by CID.
    let job_id = Uuid::now_v7();
    let store = &state.store;
    // An uploaded dataset holds the held-out records: it is kept sealed under a key no
    // endpoint gives out, so a public store shows it to no one. (A dataset named by CID was
    // stored by the requester, as public as they made it.)
    let dataset_cid = match dataset_cid {
        Some(cid) => cid,
        None => {
            let sealed = seal::seal(
                &sealing::dataset_key(state.config.sealing_secret.expose(), job_id),
                &data,
                &sealing::dataset_associated_data(job_id),
            );
            store.put(Bytes::from(sealed)).await.map_err(store_error)?
        }
    };
    let spec_json =
        serde_json::to_vec_pretty(&spec).map_err(|e| ApiError::internal("encoding job.json", e))?;
    let spec_cid = store
        .put(Bytes::from(spec_json))
        .await
        .map_err(store_error)?;
    let mut shard_refs = Vec::with_capacity(split.shards.len());
    for (index, (bytes, records)) in split.shards.into_iter().enumerate() {
        let size = bytes.len() as u64;
        let cid = store.put(Bytes::from(bytes)).await.map_err(store_error)?;
        shard_refs.push(ShardRef {
            index: index as u32,
            cid: ContentId(cid),
            records,
            bytes: size,
        });
    }
    let key = sealing::held_out_key(state.config.sealing_secret.expose(), job_id);
    let sealed = seal::seal(&key, &split.held_out, &sealing::associated_data(job_id));
    let sealed_cid = store.put(Bytes::from(sealed)).await.map_err(store_error)?;
    let manifest = ShardManifest {
        version: PROTOCOL_VERSION,
        job_id,
        dataset_cid: ContentId(dataset_cid),
        job_spec_cid: ContentId(spec_cid),
        seed: spec.training.seed,
        held_out: HeldOutRef {
            sealed_cid: ContentId(sealed_cid),
            records: split.held_out_records,
        },
        shards: shard_refs,
    };
    manifest
        .validate()
        .map_err(|e| ApiError::internal("building the shard manifest", e))?;
    let manifest_json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| ApiError::internal("encoding the manifest", e))?;
    let manifest_cid = store
        .put(Bytes::from(manifest_json))
        .await
        .map_err(store_error)?;

    let largest_shard = manifest.shards.iter().map(|s| s.records).max().unwrap_or(0);
    let task_time_limit_secs = sizing::task_time_limit_secs(&spec, model.parameters, largest_shard);

    // 3. The record: job, shards and its first event, all or nothing.
    let spec_value =
        serde_json::to_value(&spec).map_err(|e| ApiError::internal("encoding the spec", e))?;
    let named = named_content(state.store.as_ref(), &spec).await;
    let txn = state.db.begin().await?;
    job::Entity::insert(job::ActiveModel {
        id: Set(job_id),
        requester: Set(caller.claims.sub.to_string()),
        kind: Set(spec.kind),
        status: Set(JobStatus::AwaitingFunding),
        spec: Set(spec_value),
        spec_cid: Set(Some(spec_cid.to_string())),
        dataset_cid: Set(Some(dataset_cid.to_string())),
        manifest_cid: Set(Some(manifest_cid.to_string())),
        heldout_cid: Set(Some(sealed_cid.to_string())),
        result_adapter_cid: Set(None),
        escrow_job_id: Set(None),
        escrow_address: Set(None),
        stake_wei: Set(spec.stake.amount.to_string()),
        shards: Set(spec.shards as i32),
        rounds: Set(spec.rounds as i32),
        current_round: Set(0),
        deadline: Set(spec.deadline),
        dev_funded: Set(false),
        memory_mb: Set(Some(i64::try_from(memory_mb).unwrap_or(i64::MAX))),
        task_time_limit_secs: Set(Some(
            i64::try_from(task_time_limit_secs).unwrap_or(i64::MAX),
        )),
        version: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .exec(&txn)
    .await?;
    let shard_rows: Vec<shard::ActiveModel> = manifest
        .shards
        .iter()
        .map(|s| shard::ActiveModel {
            id: Set(Uuid::now_v7()),
            job_id: Set(job_id),
            index: Set(s.index as i32),
            cid: Set(s.cid.to_string()),
            sample_count: Set(s.records as i64),
            size_bytes: Set(s.bytes as i64),
        })
        .collect();
    shard::Entity::insert_many(shard_rows).exec(&txn).await?;
    record_event(
        &txn,
        job_id,
        &JobEvent::Created(events::Created {
            to: JobStatus::AwaitingFunding,
            manifest_cid: manifest_cid.to_string(),
            spec_cid: spec_cid.to_string(),
            dataset_cid: dataset_cid.to_string(),
            held_out_records: manifest.held_out.records,
            shard_records: manifest.shards.iter().map(|s| s.records).collect(),
        }),
        false,
        now,
    )
    .await?;
    content::claim_job_content(
        &txn,
        job_id,
        &caller.claims.sub.to_string(),
        &dataset_cid,
        &sealed_cid,
        &named,
        now,
    )
    .await?;
    let job = find_job(&txn, job_id).await?;
    txn.commit().await?;
    tracing::info!(job = %job_id, requester = %caller.claims.sub, %manifest_cid, "job posted");
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/v1/jobs/{job_id}")))
        .json(JobView::from(job)))
}
