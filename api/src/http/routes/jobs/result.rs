//! `GET /v1/jobs/{id}/result`: the final adapter of a completed job (the merge of its round with
//! the best held-out metric, decision 0046) — its CID and each file of the PEFT folder with a
//! download link, plus its held-out metric; and
//! `GET /v1/jobs/{id}/result/files/{name}`, each file opened. Both for the job's requester,
//! validators and admins only: the adapter is sealed on the content store (to its round's key,
//! `shardwork_core::store::keys`), and this server opens it for them.

use crate::http::openapi::IdNotUuid;
use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::http::header;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::Bundle;
use shardwork_core::protocol::node::Aggregate;
use shardwork_core::store::keys::Sealed;
use uuid::Uuid;

use crate::domain::flow::rounds::{result_round, round_aggregate};
use crate::domain::jobs::{JobRecord, find_job};
use crate::domain::lifecycle::JobStatus;
use crate::domain::sealing::job_key;
use crate::http::access::require_overseer;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::problem::ApiError;
use crate::state::AppState;

/// Largest bundle document read (a few hundred bytes in practice).
const BUNDLE_LIMIT: u64 = 1 << 20;
/// Largest adapter file served (a rank-64 LoRA of an 8B model is a few hundred MB).
const FILE_LIMIT: u64 = 4 << 30;

/// One file of the final adapter.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResultFile {
    /// The file's name in the PEFT folder.
    pub name: String,
    /// The CID of the file as stored: sealed, so it reads as noise to anyone without the key.
    pub cid: String,
    /// Its download path on this API (`/v1/jobs/{id}/result/files/{name}`), which opens it.
    pub url: String,
}

/// A completed job's final adapter.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobResult {
    /// The job's id.
    pub job_id: Uuid,
    /// The final merged adapter (its bundle) in the content store.
    pub adapter_cid: String,
    /// Each file of the adapter, with a download link.
    pub files: Vec<ResultFile>,
    /// The merge summary of the round the adapter came from (the round with the best held-out
    /// metric): metric, base metric and their name.
    pub aggregate: Option<Aggregate>,
}

/// A completed job's final adapter: its CID, each file with a download link, and the merge
/// summary of the round it came from (the best round's, which need not be the last).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/result",
    operation_id = "get_job_result",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The final adapter and its files", body = JobResult),
        IdNotUuid,
        (status = 403, description = "The caller is neither the job's requester, a validator nor an admin", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job has no result: it is not completed, and did not end early paying a completed round", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job or its adapter could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn result(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    require_overseer(&caller.claims, &job, "the result")?;
    let (adapter, bundle) = final_bundle(&state, &job).await?;
    let files = bundle
        .files
        .into_iter()
        .map(|(name, cid)| ResultFile {
            url: format!("/v1/jobs/{}/result/files/{name}", job.id),
            cid: cid.to_string(),
            name,
        })
        .collect();
    let aggregate = result_round(&state.db, &job)
        .await?
        .as_ref()
        .and_then(round_aggregate);
    Ok(HttpResponse::Ok().json(JobResult {
        job_id: job.id,
        adapter_cid: adapter,
        files,
        aggregate,
    }))
}

/// The completed job's final adapter: its CID and its bundle, which must be sealed.
async fn final_bundle(state: &AppState, job: &JobRecord) -> Result<(String, Bundle), ApiError> {
    // A job that ended early after paying its completed rounds (`refunded`: patience, or a
    // shard out of attempts) handed over their best merge on chain, as a completion does.
    let adapter = match (job.status, &job.result_adapter_cid) {
        (JobStatus::Completed | JobStatus::Refunded, Some(cid)) => cid.clone(),
        _ => {
            return Err(ApiError::conflict(format!(
                "job {} is {} without a result; a job has one once completed, or once it ended \
                 early paying a completed round",
                job.id, job.status
            )));
        }
    };
    let cid = shardwork_core::store::parse_cid(&adapter)
        .map_err(|e| ApiError::internal("result adapter cid", e))?;
    let bytes = state
        .store
        .get_bytes(&cid, BUNDLE_LIMIT)
        .await
        .map_err(|e| ApiError::internal("reading the result adapter", e))?;
    let bundle = Bundle::decode(&bytes)
        .map_err(|e| ApiError::internal("reading the result adapter's bundle", e))?;
    if !bundle.sealed {
        return Err(ApiError::internal(
            "reading the result adapter",
            format!("{adapter} is not sealed"),
        ));
    }
    Ok((adapter, bundle))
}

/// One file of a completed job's final adapter, opened.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/result/files/{name}",
    operation_id = "get_job_result_file",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(
        ("id" = Uuid, Path, description = "The job id"),
        ("name" = String, Path, description = "The file's name in the adapter folder"),
    ),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        IdNotUuid,
        (status = 403, description = "The caller is neither the job's requester, a validator nor an admin", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id, or its adapter has no such file", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job has no result: it is not completed, and did not end early paying a completed round", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The adapter could not be read or opened", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn file(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    path: web::Path<(Uuid, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    let job = find_job(&state.db, id).await?;
    require_overseer(&caller.claims, &job, "the result")?;
    let (adapter, bundle) = final_bundle(&state, &job).await?;
    let file_cid = bundle.file(&name).ok_or_else(|| {
        ApiError::not_found(format!("the adapter {adapter} has no file {name:?}"))
    })?;
    let sealed = state
        .store
        .get_bytes(&file_cid.0, FILE_LIMIT)
        .await
        .map_err(|e| ApiError::internal("reading the result adapter", e))?;
    // Sealed to the round that made it: the best one, which need not be the last.
    let round = result_round(&state.db, &job)
        .await?
        .map_or(job.rounds, |r| r.number);
    let opened = Sealed::RoundResult {
        round: round as u32,
    }
    .seal_for(
        job.id,
        &job_key(state.config.sealing_secret.expose(), job.id),
    )
    .open_file(&name, &sealed)
    .map_err(|e| ApiError::internal("opening the result adapter", e))?;
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header((header::CACHE_CONTROL, "private, no-store"))
        .body(opened))
}
