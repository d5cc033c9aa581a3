//! `GET /v1/jobs` (filtered, cursor-paginated) and `GET /v1/jobs/{id}`.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::EthAddress;
use uuid::Uuid;

use super::view::JobView;
use crate::domain::jobs::{self, JobFilter, job_not_found};
use crate::domain::lifecycle::JobStatus;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::openapi::IdNotUuid;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// Jobs per page when `limit` is not given.
pub const DEFAULT_PAGE: u64 = 20;
/// The largest `limit` accepted.
pub const MAX_PAGE: u64 = 100;

/// The filters and page of a job listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this status.
    #[param(value_type = Option<JobStatus>)]
    pub status: Option<String>,
    /// Only jobs posted by this address.
    pub requester: Option<EthAddress>,
    /// Jobs per page.
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// A page of jobs.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<Uuid>,
}

/// Lists jobs, newest first, filtered and cursor-paginated.
///
/// Ids are UUIDv7, so id order is creation order and the cursor is the last id
/// seen: stable under concurrent inserts, unlike an offset.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    operation_id = "list_jobs",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = 400, description = "A query parameter is malformed or unknown", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`limit` or `status` is out of range", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The jobs could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    _caller: Authenticated<AnyRole>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(
            "query.limit",
            format!("{limit} is outside 1..={MAX_PAGE}"),
        ));
    }
    let status = match &query.status {
        Some(status) => Some(JobStatus::parse(status).ok_or_else(|| {
            ApiError::invalid(
                "query.status",
                format!(
                    "{status:?} is not a status; use one of {}",
                    JobStatus::ALL.map(JobStatus::as_str).join(", ")
                ),
            )
        })?),
        None => None,
    };
    let filter = JobFilter {
        status,
        requester: query.requester,
        before: query.cursor,
    };
    let page = jobs::list_jobs(&state.db, &filter, limit).await?;
    Ok(HttpResponse::Ok().json(JobPage {
        jobs: page.jobs.into_iter().map(JobView::from).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// One job.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    operation_id = "get_job",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job", body = JobView),
        IdNotUuid,
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    _caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let job = state
        .job_reads
        .get(id)
        .await
        .map_err(|e| ApiError::internal("database access", e))?
        .ok_or_else(|| job_not_found(id))?;
    Ok(HttpResponse::Ok().json(JobView::from(job)))
}
