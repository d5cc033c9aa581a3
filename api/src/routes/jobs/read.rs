//! `GET /v1/jobs` (filtered, cursor-paginated) and `GET /v1/jobs/{id}`.

use actix_web::{HttpResponse, web};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::EthAddress;
use uuid::Uuid;

use super::{JobView, find_job};
use crate::auth::{AnyRole, Authenticated};
use crate::entities::job;
use crate::lifecycle::JobStatus;
use crate::problem::ApiError;
use crate::startup::AppState;

pub const DEFAULT_PAGE: u64 = 20;
pub const MAX_PAGE: u64 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub status: Option<String>,
    pub requester: Option<EthAddress>,
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<Uuid>,
}

/// Newest first. Ids are UUIDv7, so id order is creation order and the cursor is the last id
/// seen: stable under concurrent inserts, unlike an offset.
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
    let mut select = job::Entity::find();
    if let Some(status) = &query.status {
        let status = JobStatus::parse(status).ok_or_else(|| {
            ApiError::invalid(
                "query.status",
                format!(
                    "{status:?} is not a status; use one of {}",
                    JobStatus::ALL.map(JobStatus::as_str).join(", ")
                ),
            )
        })?;
        select = select.filter(job::Column::Status.eq(status.as_str()));
    }
    if let Some(requester) = query.requester {
        select = select.filter(job::Column::Requester.eq(requester.to_string()));
    }
    if let Some(cursor) = query.cursor {
        select = select.filter(job::Column::Id.lt(cursor));
    }
    let mut rows = select
        .order_by_desc(job::Column::Id)
        .limit(limit + 1)
        .all(&state.db)
        .await?;
    let next_cursor = if rows.len() as u64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|j| j.id)
    } else {
        None
    };
    Ok(HttpResponse::Ok().json(JobPage {
        jobs: rows.into_iter().map(JobView::from).collect(),
        next_cursor,
    }))
}

pub async fn get(
    state: web::Data<AppState>,
    _caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(JobView::from(job)))
}
