//! `POST /v1/jobs`: post a job. Either `multipart/form-data` with a `spec` part (JSON) and a
//! `dataset` part (JSONL), or `application/json` `{"spec": …, "dataset_cid": "…"}` naming a
//! dataset already in the content store.
//!
//! The route decodes the body (within its limits), and the domain posts the job
//! ([`crate::domain::posting`]: validate everything, then store the content, then record the
//! job in one transaction); this module maps what the domain refuses to problems.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use chrono::Utc;
use futures::StreamExt;
use serde::Deserialize;
use shardwork_core::protocol::validation::decode_json;
use shardwork_core::protocol::{ContentId, JobSpec};
use shardwork_core::store::parse_cid;

use super::view::JobView;
use crate::domain::posting::{DatasetSource, Posting, PostingError};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody, ProblemKind};
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
) -> Result<(Bytes, DatasetSource), ApiError> {
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
                dataset = Some(DatasetSource::Uploaded(bytes));
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

async fn from_json(
    payload: web::Payload,
    state: &AppState,
) -> Result<(Bytes, DatasetSource), ApiError> {
    let body = read_capped(payload, state.config.json_limit_bytes, "").await?;
    let request: CreateFromCid =
        decode_json(&body).map_err(|e| ApiError::from_spec_errors(e, false, ""))?;
    let cid = parse_cid(&request.dataset_cid)
        .map_err(|e| ApiError::invalid("dataset_cid", e.to_string()))?;
    let spec = serde_json::to_vec(&request.spec)
        .map_err(|e| ApiError::internal("re-encoding the spec", e))?;
    Ok((Bytes::from(spec), DatasetSource::Stored(cid)))
}

/// The problem for a job the domain did not post.
fn posting_problem(err: PostingError) -> ApiError {
    let detail = err.to_string();
    match err {
        PostingError::Spec { errors, decoded } => {
            ApiError::from_spec_errors(errors, decoded, "spec")
        }
        PostingError::DatasetForbidden(message) => {
            ApiError::field(ProblemKind::Forbidden, "dataset_cid", message)
        }
        PostingError::AdapterForbidden(message) => {
            ApiError::field(ProblemKind::Forbidden, "base_model.adapter", message)
        }
        PostingError::DatasetMissing(cid) => {
            ApiError::invalid("dataset_cid", format!("{cid} is not in the content store"))
        }
        PostingError::DatasetTooLarge { limit } => too_large("dataset_cid", limit),
        PostingError::DatasetLines(errors) => ApiError {
            kind: ProblemKind::Validation,
            detail,
            errors,
        },
        PostingError::Stake(e) => e.into(),
        PostingError::Store(e) => ApiError::internal("content store", e),
        PostingError::Domain(e) => e.into(),
    }
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
        (status = 403, description = "`dataset_cid` (or the spec's `base_model.adapter`) names another requester's job dataset, a job's held-out set, an upload of another account that the caller has not uploaded too, or (the adapter) a sealed result of another requester's job", body = ProblemBody, content_type = PROBLEM_JSON),
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

    let posting = Posting {
        db: &state.db,
        store: state.store.as_ref(),
        chain: state.chain.as_ref(),
        sealing_secret: state.config.sealing_secret.expose(),
        upload_limit_bytes: state.config.upload_limit_bytes,
        max_job_memory_mb: state.config.max_job_memory_mb,
    };
    let job = posting
        .post(
            &caller.claims.sub.to_string(),
            &spec_bytes,
            dataset,
            Utc::now(),
        )
        .await
        .map_err(posting_problem)?;
    let job_id = job.id;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/v1/jobs/{job_id}")))
        .json(JobView::from(job)))
}
