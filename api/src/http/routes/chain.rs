//! `GET /v1/chain`: which chain and escrow this server follows (public), so a wallet can fund
//! a job's escrow with the terms in its `funding` field.

use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::chain::address_text;
use crate::http::problem::{ApiError, ProblemKind};
use crate::stake_tokens::StakeToken;
use crate::state::AppState;

/// The chain and escrow contract this server follows.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChainInfo {
    /// The chain's EIP-155 id, for the wallet.
    pub chain_id: u64,
    /// The escrow contract to call `createJob` on, lower-case 0x-hex.
    pub escrow_address: String,
    /// The account the API signs `markStarted` and payouts with.
    pub operator: String,
    /// Whether `POST /v1/jobs/{id}/dev-fund` works here (development mode).
    pub dev_funding: bool,
    /// The ERC-20 tokens a job may be staked in (the escrow's allow-list, read at most a few
    /// seconds ago), besides ETH which it always accepts.
    pub tokens: Vec<StakeToken>,
}

/// The chain and escrow contract this server follows.
///
/// A wallet funds a job by calling the escrow's `createJob` on this chain with the terms in
/// the job's `funding` field.
#[utoipa::path(
    get,
    path = "/v1/chain",
    operation_id = "chain_info",
    tag = "chain",
    extensions(("x-shardwork-role" = json!("public"))),
    responses(
        (status = 200, description = "The chain and escrow this server follows", body = ChainInfo),
        (status = 503, description = "No chain is configured, or it did not answer", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn info(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let chain = state.chain.as_ref().ok_or_else(|| {
        ApiError::new(
            ProblemKind::Unavailable,
            "this server follows no escrow contract (no chain configured)",
        )
    })?;
    let tokens = state.stake_tokens.allowed(chain).await.map_err(|e| {
        ApiError::new(
            ProblemKind::Unavailable,
            format!("reading the escrow's allow-listed tokens: {e}"),
        )
    })?;
    Ok(HttpResponse::Ok().json(ChainInfo {
        chain_id: chain.chain_id,
        escrow_address: address_text(chain.escrow),
        operator: address_text(chain.operator),
        dev_funding: chain.dev_funder.is_some(),
        tokens,
    }))
}
