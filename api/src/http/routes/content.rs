//! `/v1/content`: the content store through the API, for clients that cannot reach it directly
//! (workers of an embedded deployment, the portal). Uploads return the Kubo-compatible CID;
//! downloads are verified block by block on read.
//!
//! What a worker must never see is refused here as a second line: a job's held-out set goes to
//! validators only, and a job's dataset as uploaded (it contains the held-out records) to its
//! requester, validators and admins only. The first line is the store itself: both are stored
//! sealed, as is every adapter (decision 0027), so what this route serves of them is noise to
//! anyone without the key.

use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::http::header;
use actix_web::{HttpResponse, web};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::bundle::is_plain_file_name;
use shardwork_core::store::{StoreError, parse_cid};

use crate::domain::content;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::problem::{ApiError, ProblemKind};
use crate::state::AppState;

/// Where an upload was stored.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Uploaded {
    /// The content's Kubo-compatible CID: what to fetch it by.
    pub cid: String,
    /// The stored size in bytes.
    pub size: u64,
}

/// Stores the request body as one object, on the caller's storage quota.
///
/// What the caller uploads counts against its quota (`storage_quota_bytes`) until a job
/// names it (as its dataset, its model bundle or one of the bundle's files); what no job
/// names within `upload_ttl_secs` is unpinned and stops counting.
#[utoipa::path(
    post,
    path = "/v1/content",
    operation_id = "upload_content",
    tag = "content",
    extensions(("x-shardwork-role" = json!("requester"))),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored under its Kubo-compatible CID", body = Uploaded),
        (status = 400, description = "The body could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The body is empty", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 413, description = "The body exceeds the upload limit, or the caller's storage quota (`storage_quota_bytes`: bytes of its uploads no job names yet)", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The content store failed", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn upload(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    mut payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let owner = caller.claims.sub.to_string();
    let quota = state.config.storage_quota_bytes;
    let held = content::unreferenced_bytes(&state.db, &owner).await?;
    let over_quota = |size: u64| {
        ApiError::field(
            ProblemKind::PayloadTooLarge,
            "",
            format!(
                "{owner} holds {held} bytes of uploads no job names yet; {size} more would \
                 exceed its storage quota of {quota} bytes (storage_quota_bytes). Name them in \
                 a job or wait for them to expire"
            ),
        )
    };
    let limit = state.config.upload_limit_bytes;
    let room = quota.saturating_sub(held);
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::malformed("", format!("body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::field(
                ProblemKind::PayloadTooLarge,
                "",
                format!("exceeds the limit of {limit} bytes"),
            ));
        }
        // Refused as soon as the body outgrows the quota's room, not once it is all read.
        if (body.len() + chunk.len()) as u64 > room {
            return Err(over_quota((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    if body.is_empty() {
        return Err(ApiError::invalid(
            "",
            "the body is empty; send the bytes to store",
        ));
    }
    let size = body.len() as u64;
    let cid = state
        .store
        .put(body.freeze())
        .await
        .map_err(|e| ApiError::internal("content store", e))?;
    let now = chrono::Utc::now();
    let fresh = content::record_upload(&state.db, &owner, &cid, size, now).await?;
    // Concurrent uploads each passed the check above against the same `held`: the sum is
    // read again with this one counted, and the one that tips it over is withdrawn.
    if fresh {
        let total = content::unreferenced_bytes(&state.db, &owner).await?;
        if total > quota {
            content::withdraw_upload(&state.db, state.store.as_ref(), &owner, &cid).await?;
            return Err(over_quota(size));
        }
    }
    tracing::info!(%cid, size, uploader = %caller.claims.sub, "content uploaded");
    Ok(HttpResponse::Created().json(Uploaded {
        cid: cid.to_string(),
        size,
    }))
}

/// Options of a download.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DownloadQuery {
    /// Suggested file name for the download (`Content-Disposition`).
    pub filename: Option<String>,
}

/// Streams the object stored under a CID, verified against it as it is read.
///
/// A job's dataset as uploaded (its held-out records in the clear) is served only to its
/// requester, validators and admins; its sealed held-out set only to validators and admins.
#[utoipa::path(
    get,
    path = "/v1/content/{cid}",
    operation_id = "download_content",
    tag = "content",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("cid" = String, Path, description = "The content's CID"), DownloadQuery),
    responses(
        (status = 200, description = "The bytes, verified against the CID", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "A query parameter is malformed or unknown", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "A job's raw dataset or held-out set, and the caller is neither its requester nor a validator", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "Not in the content store", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`cid` is not a CID or `filename` is not a plain file name", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The content store failed", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn download(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    cid: web::Path<String>,
    query: web::Query<DownloadQuery>,
) -> Result<HttpResponse, ApiError> {
    let text = cid.into_inner();
    let cid = parse_cid(&text).map_err(|e| ApiError::invalid("cid", e.to_string()))?;
    let canonical = cid.to_string();
    crate::http::access::require_content_reader(&state.db, &caller.claims, &cid).await?;
    if let Some(name) = &query.filename
        && !is_plain_file_name(name)
    {
        return Err(ApiError::invalid(
            "filename",
            "one path segment of letters, digits, `.`, `-` and `_`",
        ));
    }
    let size = match state.store.stat(&cid).await {
        Ok(stat) => Some(stat.size),
        Err(StoreError::NotFound(_)) => {
            return Err(ApiError::not_found(format!(
                "{canonical} is not in the content store"
            )));
        }
        Err(_) => None,
    };
    let stream = state.store.get(&cid).await.map_err(|e| match e {
        StoreError::NotFound(_) => {
            ApiError::not_found(format!("{canonical} is not in the content store"))
        }
        other => ApiError::internal("content store", other),
    })?;
    let mut response = HttpResponse::Ok();
    response
        .content_type("application/octet-stream")
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
        .insert_header((header::ETAG, format!("\"{canonical}\"")));
    if let Some(name) = &query.filename {
        response.insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        ));
    }
    if let Some(size) = size {
        response.no_chunking(size);
    }
    Ok(response.streaming(stream.map(|chunk| chunk.map_err(std::io::Error::other))))
}
