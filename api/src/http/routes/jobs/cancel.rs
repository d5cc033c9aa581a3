//! `POST /v1/jobs/{id}/cancel`: the requester withdraws a job that is not funded yet.

use actix_web::{HttpResponse, web};
use chrono::Utc;
use sea_orm::TransactionTrait;
use shardwork_core::protocol::{JobEvent, events};
use uuid::Uuid;

use super::view::JobView;
use crate::domain::jobs::find_job;
use crate::domain::lifecycle::{self, Transition};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// Cancels a job that is not funded yet.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    operation_id = "cancel_job",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job, now cancelled", body = JobView),
        (status = 400, description = "`id` is not a UUID", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "The job belongs to another requester", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job's status does not allow cancelling, or it changed concurrently", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job could not be read or written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
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
        |change| {
            JobEvent::Cancelled(events::Cancelled {
                from: change.from,
                to: change.to,
                by: Some(caller.claims.sub.to_string()),
                reason: None,
                tx_hash: None,
                stake_wei: None,
            })
        },
        now,
    )
    .await?;
    let job = find_job(&txn, id).await?;
    txn.commit().await?;
    Ok(HttpResponse::Ok().json(JobView::from(job)))
}
