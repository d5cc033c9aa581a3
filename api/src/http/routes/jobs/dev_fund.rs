//! `POST /v1/jobs/{id}/dev-fund`: development mode only — the server escrows the stake from its
//! development account on the requester's behalf, so a job runs without a wallet. The job opens
//! the same way as any other: when the chain follower sees the escrow's `JobCreated`. The job
//! is shown as `dev_funded`, and a refund goes to the development account.

use crate::http::openapi::IdNotUuid;
use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::{HttpResponse, web};
use alloy::primitives::{Address, U256};
use serde::{Deserialize, Serialize};
use shardwork_contracts::ledger::{JobKind, NewJob};
use uuid::Uuid;

use super::view::FundingTerms;
use crate::domain::jobs::find_job;
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::problem::{ApiError, ProblemKind};
use crate::state::AppState;

/// The escrow transaction that funded the job.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DevFundResponse {
    /// The job's id in the escrow contract.
    pub escrow_job_id: String,
    /// The `createJob` transaction's hash.
    pub tx_hash: String,
    /// The development account the stake came from.
    pub funded_by: String,
}

/// Funds a job from the server's development account (development mode only).
///
/// The escrow is called with the job's `funding` terms; the job opens, as any other, once the
/// chain follower sees the escrow's `JobCreated`. It is shown as `dev_funded`, and a refund
/// goes to the development account.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/dev-fund",
    operation_id = "dev_fund_job",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 202, description = "Escrow funded from the development account; the job opens when the chain follower sees it", body = DevFundResponse),
        IdNotUuid,
        (status = 403, description = "The caller did not post this job", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 404, description = "No job has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "Development funding is off, the job is not awaiting funding, or the escrow refused", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The job could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 503, description = "The chain did not answer", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn dev_fund(
    state: web::Data<AppState>,
    caller: Authenticated<RequesterRole>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find_job(&state.db, id.into_inner()).await?;
    if job.requester.to_ascii_lowercase() != caller.claims.sub.to_string() {
        return Err(ApiError::forbidden(format!(
            "job {} belongs to {}; only its requester funds it",
            job.id, job.requester
        )));
    }
    let (chain, funder) = match state
        .chain
        .as_ref()
        .and_then(|c| c.dev_funder.map(|f| (c, f)))
    {
        Some(pair) => pair,
        None => {
            return Err(ApiError::new(
                ProblemKind::Conflict,
                "development funding is off on this server; fund the escrow from your wallet \
                 with the job's `funding` terms",
            ));
        }
    };
    let terms = FundingTerms::of(&job).ok_or_else(|| {
        ApiError::conflict(format!(
            "job {} is {}, not awaiting funding",
            job.id, job.status
        ))
    })?;
    let bad = |e: String| ApiError::internal("development funding terms", e);
    let new_job = NewJob {
        token: terms
            .token
            .parse::<Address>()
            .map_err(|e| bad(e.to_string()))?,
        stake: U256::from_str_radix(&terms.stake_wei, 10).map_err(|e| bad(e.to_string()))?,
        spec_cid: terms.spec_cid,
        deadline: terms.deadline_unix.max(0) as u64,
        kind: if terms.kind == 0 {
            JobKind::Lora
        } else {
            JobKind::Federated
        },
        max_fee_bps: terms.max_fee_bps,
    };
    let (escrow_job_id, outcome) = chain
        .ledger
        .create_job(chain.escrow, funder, &new_job)
        .await
        .map_err(|e| match e.escrow_error() {
            Some(reason) => ApiError::conflict(format!("the escrow refused the job: {reason:?}")),
            None => ApiError::new(ProblemKind::Unavailable, format!("the chain: {e}")),
        })?;
    tracing::info!(job = %job.id, %escrow_job_id, "development funding sent");
    Ok(HttpResponse::Accepted().json(DevFundResponse {
        escrow_job_id: escrow_job_id.to_string(),
        tx_hash: format!("{:#x}", outcome.tx_hash),
        funded_by: format!("{funder:#x}"),
    }))
}
