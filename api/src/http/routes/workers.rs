//! Worker registration, heartbeat and profile. Every endpoint needs the worker role and acts
//! on the caller's own address only.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{EthAddress, WeiAmount};
use uuid::Uuid;

use crate::domain::workers::{self, Registration, SubmissionCounts, WorkerRecord};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::WorkerRole;
use crate::http::extract::Json;
use crate::http::openapi::JsonBodyRefused;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// The kind of processor a worker trains on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// An accelerator (GPU).
    Gpu,
}

/// What a worker can train on; tasks are matched against it at claim time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Whether the worker trains on the CPU or a GPU.
    pub device: Device,
    /// Host memory available to training, MiB.
    #[schema(minimum = 1, maximum = 1073741824)]
    pub memory_mb: u64,
    /// Accelerator memory, MiB; required with `device: gpu`, refused with `cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1073741824)]
    pub gpu_memory_mb: Option<u64>,
}

/// Host memory a worker may claim: 1 PiB in MiB, far above any machine, to catch unit mix-ups.
const MAX_MEMORY_MB: u64 = 1 << 30;

impl Capabilities {
    fn validate(&self) -> Result<(), ApiError> {
        if !(1..=MAX_MEMORY_MB).contains(&self.memory_mb) {
            return Err(ApiError::invalid(
                "capabilities.memory_mb",
                format!("{} is outside 1..={MAX_MEMORY_MB} MiB", self.memory_mb),
            ));
        }
        match (self.device, self.gpu_memory_mb) {
            (Device::Gpu, None) => Err(ApiError::invalid(
                "capabilities.gpu_memory_mb",
                "a gpu worker states its accelerator memory",
            )),
            (Device::Gpu, Some(m)) if !(1..=MAX_MEMORY_MB).contains(&m) => Err(ApiError::invalid(
                "capabilities.gpu_memory_mb",
                format!("{m} is outside 1..={MAX_MEMORY_MB} MiB"),
            )),
            (Device::Cpu, Some(_)) => Err(ApiError::invalid(
                "capabilities.gpu_memory_mb",
                "a cpu worker has no accelerator memory",
            )),
            _ => Ok(()),
        }
    }
}

/// A worker's registration: what it can train on.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// What the worker can train on; replaces any earlier statement.
    pub capabilities: Capabilities,
}

/// A registered worker as the API knows it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerProfile {
    /// The worker's id.
    pub id: Uuid,
    /// The worker's address.
    #[schema(value_type = EthAddress)]
    pub address: String,
    /// What the worker declared it can train on.
    #[schema(value_type = Capabilities)]
    pub capabilities: serde_json::Value,
    /// Reputation in basis points, as last mirrored from chain.
    #[schema(minimum = 0, maximum = 10000)]
    pub reputation: i64,
    /// Wei paid to the worker so far by jobs staked in ETH, as mirrored from the chain's
    /// payouts (payouts in an ERC-20 are not counted here: read the escrow's `withdrawable`).
    #[schema(value_type = WeiAmount)]
    pub earnings_wei: String,
    /// The worker's submissions by the validator's verdict.
    pub submissions: SubmissionTally,
    /// When the worker last sent a heartbeat; absent before the first.
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// When the worker first registered.
    pub registered_at: DateTime<Utc>,
}

/// A worker's submissions counted by verdict.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmissionTally {
    /// Accepted by the validator (these are what a payout pays for).
    pub accepted: u64,
    /// Rejected by the validator.
    pub rejected: u64,
    /// Not judged yet.
    pub pending: u64,
}

impl From<SubmissionCounts> for SubmissionTally {
    fn from(c: SubmissionCounts) -> Self {
        SubmissionTally {
            accepted: c.accepted,
            rejected: c.rejected,
            pending: c.pending,
        }
    }
}

/// `m`'s profile, with its submissions counted.
async fn profile(state: &AppState, m: WorkerRecord) -> Result<WorkerProfile, ApiError> {
    let submissions = workers::submission_counts(&state.db, m.id).await?.into();
    Ok(WorkerProfile {
        id: m.id,
        address: m.address,
        capabilities: m.capabilities,
        reputation: m.reputation,
        earnings_wei: m.earnings_wei,
        submissions,
        last_heartbeat_at: m.last_heartbeat_at,
        registered_at: m.created_at,
    })
}

/// Registers the caller, or updates its capabilities: 201 the first time, 200 after.
#[utoipa::path(
    post,
    path = "/v1/workers/register",
    operation_id = "register_worker",
    tag = "workers",
    extensions(("x-shardwork-role" = json!("worker"))),
    request_body = RegisterRequest,
    responses(
        (status = 200, description = "Capabilities updated", body = WorkerProfile),
        (status = 201, description = "Registered", body = WorkerProfile),
        JsonBodyRefused,
        (status = 409, description = "The same address registered concurrently; retry", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The capabilities break a rule", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The worker could not be read or written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn register(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
    Json(body): Json<RegisterRequest>,
) -> Result<HttpResponse, ApiError> {
    body.capabilities.validate()?;
    let address = caller.claims.sub.to_string();
    let capabilities = serde_json::to_value(&body.capabilities)
        .map_err(|e| ApiError::internal("encoding capabilities", e))?;
    let registration =
        workers::register_worker(&state.db, &address, capabilities, Utc::now()).await?;
    Ok(match registration {
        Registration::Updated(worker) => HttpResponse::Ok().json(profile(&state, worker).await?),
        Registration::Created(worker) => {
            HttpResponse::Created().json(profile(&state, worker).await?)
        }
    })
}

/// Records that the caller is alive.
#[utoipa::path(
    post,
    path = "/v1/workers/heartbeat",
    operation_id = "worker_heartbeat",
    tag = "workers",
    extensions(("x-shardwork-role" = json!("worker"))),
    responses(
        (status = 204, description = "Recorded"),
        (status = 404, description = "The caller is not registered", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The heartbeat could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn heartbeat(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
) -> Result<HttpResponse, ApiError> {
    workers::record_heartbeat(&state.db, &caller.claims.sub.to_string(), Utc::now()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The caller's own profile: reputation, earnings and submissions by verdict.
#[utoipa::path(
    get,
    path = "/v1/workers/me",
    operation_id = "get_worker_profile",
    tag = "workers",
    extensions(("x-shardwork-role" = json!("worker"))),
    responses(
        (status = 200, description = "The profile", body = WorkerProfile),
        (status = 404, description = "The caller is not registered", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The worker could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn me(
    state: web::Data<AppState>,
    caller: Authenticated<WorkerRole>,
) -> Result<HttpResponse, ApiError> {
    let worker = workers::registered_at(&state.db, &caller.claims.sub.to_string()).await?;
    Ok(HttpResponse::Ok().json(profile(&state, worker).await?))
}
