//! `GET /v1/jobs/{id}/result`: the final adapter of a completed job — its CID and each file of
//! the PEFT folder with a download link (`GET /v1/content/{cid}`), plus its held-out metric.

use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::{HttpResponse, web};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::Bundle;
use uuid::Uuid;

use crate::domain::jobs::find_job;
use crate::domain::lifecycle::JobStatus;
use crate::entities::round;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::problem::ApiError;
use crate::state::AppState;

/// Largest bundle document read (a few hundred bytes in practice).
const BUNDLE_LIMIT: u64 = 1 << 20;

/// One file of the final adapter.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResultFile {
    /// The file's name in the PEFT folder (`adapter` when the adapter is not a bundle).
    pub name: String,
    /// The file's CID in the content store.
    pub cid: String,
    /// Its download path on this API (`/v1/content/{cid}`, with the name as `filename`).
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
    /// The last round's merge summary: metric, base metric and their name.
    pub aggregate: Option<serde_json::Value>,
}

/// A completed job's final adapter: its CID, each file with a download link, and the last
/// round's merge summary.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/result",
    operation_id = "get_job_result",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The final adapter and its files", body = JobResult),
        (status = 400, description = "`id` is not a UUID", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job is not completed", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job or its adapter could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn result(
    state: web::Data<AppState>,
    _caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    let adapter = match (job.status, &job.result_adapter_cid) {
        (JobStatus::Completed, Some(cid)) => cid.clone(),
        _ => {
            return Err(ApiError::conflict(format!(
                "job {} is {}; it has a result once completed",
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
    let files = match Bundle::decode(&bytes) {
        Ok(bundle) => bundle
            .files
            .into_iter()
            .map(|(name, cid)| ResultFile {
                url: format!("/v1/content/{cid}?filename={name}"),
                name,
                cid: cid.to_string(),
            })
            .collect(),
        Err(_) => vec![ResultFile {
            name: "adapter".into(),
            url: format!("/v1/content/{adapter}"),
            cid: adapter.clone(),
        }],
    };
    let aggregate = round::Entity::find()
        .filter(round::Column::JobId.eq(job.id))
        .order_by_desc(round::Column::Number)
        .one(&state.db)
        .await?
        .and_then(|r| r.aggregate);
    Ok(HttpResponse::Ok().json(JobResult {
        job_id: job.id,
        adapter_cid: adapter,
        files,
        aggregate,
    }))
}
