//! `GET /v1/jobs/{id}/held-out-key`: the key that opens a job's sealed held-out set. The
//! validator role only: workers must never score themselves against it.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::ContentId;
use uuid::Uuid;

use crate::domain::jobs::find_job;
use crate::domain::sealing::{held_out_key, job_key};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::ValidatorRole;
use crate::http::openapi::IdNotUuid;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// A job's sealed held-out set and the key that opens it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeldOutKey {
    /// The job the set belongs to.
    pub job_id: Uuid,
    /// The sealed held-out set in the content store.
    #[schema(value_type = ContentId)]
    pub sealed_cid: String,
    /// XChaCha20-Poly1305 key, 64 hex digits; the associated data is
    /// `shardwork held-out {job_id}`.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub key: String,
    /// The root of the job's adapter keys, 64 hex digits: every submission and merged adapter
    /// of the job opens with a child of it (`shardwork_core::store::keys`).
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub job_key: String,
    /// The adapter the job continues from (`base_model.adapter`), sealed to this job as round
    /// 0's result: round 1's start, and a preference job's reference policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ContentId>)]
    pub start_adapter_cid: Option<String>,
}

/// The key that opens the job's sealed held-out set, and the root of its adapter keys.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/held-out-key",
    operation_id = "get_held_out_key",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The sealed set's CID and its key", body = HeldOutKey),
        IdNotUuid,
        (status = 404, description = "No job has this id, or it has no held-out set", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn held_out(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    let sealed_cid = job
        .heldout_cid
        .ok_or_else(|| ApiError::not_found(format!("job {} has no held-out set", job.id)))?;
    tracing::info!(job = %job.id, validator = %caller.claims.sub, "held-out key released");
    Ok(HttpResponse::Ok().json(HeldOutKey {
        job_id: job.id,
        sealed_cid,
        key: held_out_key(state.config.sealing_secret.expose(), job.id).to_hex(),
        job_key: job_key(state.config.sealing_secret.expose(), job.id).to_hex(),
        start_adapter_cid: job.start_adapter_cid,
    }))
}
