//! `POST /v1/jobs/{id}/cancel`: the requester withdraws a job that is not funded yet.

use actix_web::{HttpResponse, web};
use chrono::Utc;
use uuid::Uuid;

use super::view::JobView;
use crate::domain::cancelling;
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::openapi::IdNotUuid;
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
        IdNotUuid,
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
    let job =
        cancelling::cancel_job(&state.db, id.into_inner(), caller.claims.sub, Utc::now()).await?;
    Ok(HttpResponse::Ok().json(JobView::from(job)))
}
