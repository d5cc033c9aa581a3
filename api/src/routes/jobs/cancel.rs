//! `POST /v1/jobs/{id}/cancel`: the requester withdraws a job that is not funded yet.

use actix_web::{HttpResponse, web};
use chrono::Utc;
use sea_orm::TransactionTrait;
use serde_json::json;
use uuid::Uuid;

use super::{JobView, find_job};
use crate::auth::Authenticated;
use crate::auth::extractor::RequesterRole;
use crate::lifecycle::{self, Transition};
use crate::problem::ApiError;
use crate::startup::AppState;

pub async fn cancel(
    state: web::Data<AppState>,
    caller: Authenticated<RequesterRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let txn = state.db.begin().await?;
    let job = find_job(&txn, id).await?;
    if job.requester != caller.claims.sub.to_string() {
        return Err(ApiError::forbidden(format!(
            "job {id} belongs to {}; only its requester may cancel it",
            job.requester
        )));
    }
    let now = Utc::now();
    lifecycle::apply(
        &txn,
        &job,
        Transition::Cancel,
        json!({ "by": caller.claims.sub }),
        now,
    )
    .await?;
    let job = find_job(&txn, id).await?;
    txn.commit().await?;
    Ok(HttpResponse::Ok().json(JobView::from(job)))
}
