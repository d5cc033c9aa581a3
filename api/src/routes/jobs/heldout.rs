//! `GET /v1/jobs/{id}/held-out-key`: the key that opens a job's sealed held-out set. The
//! validator role only: workers must never score themselves against it.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::find_job;
use crate::auth::Authenticated;
use crate::auth::extractor::ValidatorRole;
use crate::problem::ApiError;
use crate::sealing::held_out_key;
use crate::startup::AppState;

#[derive(Debug, Serialize, Deserialize)]
pub struct HeldOutKey {
    pub job_id: Uuid,
    pub sealed_cid: String,
    /// XChaCha20-Poly1305 key, 64 hex digits; the associated data is
    /// `shardwork held-out {job_id}`.
    pub key: String,
}

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
    }))
}
