//! A job's event feed: a paginated list, and the same events as Server-Sent Events.

use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use futures::{StreamExt, stream};
use serde::{Deserialize, Serialize};
pub use shardwork_core::protocol::EventView;
use uuid::Uuid;

use crate::domain::feed::{events_after, feed_page};
use crate::domain::jobs::find_job;
use crate::http::access::Audience;
use crate::http::auth::{AnyRole, Authenticated};
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody, ProblemKind};
use crate::http::rate_limit::request_client_ip;
use crate::state::AppState;

/// Events per page when `limit` is not given.
pub const DEFAULT_PAGE: u64 = 50;
/// The largest `limit` accepted.
pub const MAX_PAGE: u64 = 500;
/// How often an open stream looks for new events.
const POLL: Duration = Duration::from_millis(250);
/// The `Retry-After` of a stream refused for the caller's open streams.
const STREAM_RETRY_SECS: u32 = 5;

/// The query of a page of events.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    /// Only events with a larger id.
    pub after: Option<i64>,
    /// Events per page.
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<u64>,
}

/// A stream has no pages, so no `limit`: asking for one is refused rather than ignored.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Only events with a larger id.
    pub after: Option<i64>,
}

/// A page of a job's events.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventPage {
    /// The events, oldest first.
    pub events: Vec<EventView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<i64>,
}

/// A job's events, oldest first, paginated by event id.
///
/// The requester, validators and admins see every event; a worker that leased one of the job's
/// tasks sees the job's own events and its own tasks', not other workers' (a page may then hold
/// fewer than `limit`, and `next_after` still moves past what it left out); anyone else is
/// refused.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    operation_id = "list_job_events",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id"), EventQuery),
    responses(
        (status = 200, description = "A page of events", body = EventPage),
        (status = 400, description = "`id` or a query parameter is malformed or unknown", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "The caller is neither the job's requester, a validator, an admin, nor a worker that leased one of its tasks", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`limit` is out of range", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The events could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
    query: web::Query<EventQuery>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    let mut audience = Audience::of(&state.db, &caller.claims, &job).await?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(
            "query.limit",
            format!("{limit} is outside 1..={MAX_PAGE}"),
        ));
    }
    let page = feed_page(&state.db, job.id, query.after.unwrap_or(0), limit).await?;
    let events = page
        .events
        .into_iter()
        .filter(|view| audience.admits(&view.event))
        .collect();
    Ok(HttpResponse::Ok().json(EventPage {
        events,
        next_after: page.next_after,
    }))
}

/// One event of the job's stream as the client parses it. (In OpenAPI 3.1 the schema of a
/// `text/event-stream` response describes each event, not the whole stream.)
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // documents what `frame` writes
struct EventFrame {
    /// The event id, decimal; a reconnecting client sends the last one as `Last-Event-ID`.
    #[schema(pattern = "^[0-9]+$")]
    id: String,
    /// The event's kind, as in `EventView.kind`.
    event: String,
    /// The whole `EventView`, as JSON.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// One SSE frame; the event id lets a reconnecting client resume with `Last-Event-ID`.
fn frame(event: &EventView) -> String {
    let data = serde_json::to_string(event).unwrap_or_default();
    format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        event.id,
        event.event.kind()
    )
}

/// Streams the job's events as Server-Sent Events, to the same readers and with the same
/// events left out as the list.
///
/// Starts after `after` (or the `Last-Event-ID` header of a reconnecting client). Each frame is
/// `id: <event id>`, `event: <kind>`, `data: <EventView JSON>`. The stream ends once the job
/// is in a terminal status and every event has been sent.
///
/// A caller may hold `max_event_streams_per_caller` streams open at once, and one client
/// address `max_event_streams_per_ip` over all its identities; past either the stream is
/// refused with 429 naming the cap until one of them closes.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events/stream",
    operation_id = "stream_job_events",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(
        ("id" = Uuid, Path, description = "The job id"),
        StreamQuery,
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id; overrides `after`"),
    ),
    responses(
        (status = 200, description = "An event stream", body = EventFrame, content_type = "text/event-stream"),
        (status = 400, description = "`id`, `Last-Event-ID` or a query parameter is malformed or unknown", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "The caller is neither the job's requester, a validator, an admin, nor a worker that leased one of its tasks", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn stream(
    state: web::Data<AppState>,
    caller: Authenticated<AnyRole>,
    id: web::Path<Uuid>,
    query: web::Query<StreamQuery>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    let audience = Audience::of(&state.db, &caller.claims, &job).await?;
    let resume = match req.headers().get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .ok_or_else(|| ApiError::malformed("Last-Event-ID", "must be an event id"))?,
        ),
        None => None,
    };
    let after = resume.or(query.after).unwrap_or(0);
    // Taken last, once the caller may read the stream, so that a refused request holds none.
    let ip = request_client_ip(&req, &state.config.trusted_proxies);
    let slot = match state.streams.take(&caller.claims.sub.to_string(), ip) {
        Ok(slot) => slot,
        Err(detail) => {
            let mut response = ApiError::new(ProblemKind::RateLimited, detail).error_response();
            // A slot frees when one of the caller's streams closes, not at a known time: a
            // client retrying after a few seconds finds one if it closed any.
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(STREAM_RETRY_SECS),
            );
            return Ok(response);
        }
    };
    let db = state.db.clone();
    let job_id = job.id;
    let events = stream::unfold(
        (db, after, false, true, audience),
        move |(db, after, done, first, mut audience)| async move {
            if done {
                return None;
            }
            let mut after = after;
            let mut first = first;
            loop {
                if !first {
                    tokio::time::sleep(POLL).await;
                }
                first = false;
                // Status before events: a terminal status is committed with its event, so the
                // events read next include everything the job will ever have.
                let terminal = match find_job(&db, job_id).await {
                    Ok(job) => job.status.is_terminal(),
                    Err(err) => {
                        return Some((
                            Err(ApiError::from(err)),
                            (db, after, true, false, audience),
                        ));
                    }
                };
                let views = match events_after(&db, job_id, after, MAX_PAGE).await {
                    Ok(views) => views,
                    Err(err) => {
                        return Some((
                            Err(ApiError::from(err)),
                            (db, after, true, false, audience),
                        ));
                    }
                };
                let full = views.len() as u64 == MAX_PAGE;
                if let Some(last) = views.last() {
                    after = last.id;
                }
                let mut text = String::new();
                for view in views {
                    if audience.admits(&view.event) {
                        text.push_str(&frame(&view));
                    }
                }
                if !text.is_empty() {
                    // A full page may have more behind it: fetch again at once, and finish only
                    // after a short page of a terminal job.
                    let done = terminal && !full;
                    return Some((
                        Ok(web::Bytes::from(text)),
                        (db, after, done, full, audience),
                    ));
                }
                if full {
                    // A full page this reader sees none of: read on at once.
                    first = true;
                    continue;
                }
                if terminal {
                    return None;
                }
            }
        },
    );
    // The slot lives as long as the body: the server drops it when the stream ends or the
    // client goes away, and the drop gives the slot back.
    let events = events.map(move |item| {
        let _held = &slot;
        item
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .streaming(events))
}
