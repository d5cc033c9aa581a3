//! Sign-In with Ethereum: nonce, verify (→ tokens), refresh, and who-am-I.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::EthAddress;

use crate::domain::sign_in::{IssuedNonce, issue_nonce, spend_nonce};
use crate::domain::workers::is_registered;
use crate::http::auth::siwe::{SiweMessage, recover_signer};
use crate::http::auth::{AnyRole, Authenticated, Role, TokenKind};
use crate::http::extract::Json;
use crate::http::openapi::JsonTooLarge;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody};
use crate::state::AppState;

/// Clock skew tolerated on a message's `Issued At`.
const ISSUED_AT_SKEW_SECS: i64 = 300;

/// A fresh sign-in nonce and what the signed message must name.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NonceResponse {
    /// The value for the message's `Nonce`; spendable once.
    pub nonce: String,
    /// When the nonce stops being accepted.
    pub expires_at: DateTime<Utc>,
    /// What the message must name as `domain` and `Chain ID`.
    pub domain: String,
    /// The chain id the message must name as `Chain ID`.
    pub chain_id: u64,
}

/// Issues a single-use nonce for the next sign-in message.
///
/// Put the nonce, `domain` and `chain_id` into an EIP-4361 message, sign it with the wallet and
/// send it to `/v1/auth/verify` before `expires_at`.
#[utoipa::path(
    post,
    path = "/v1/auth/nonce",
    operation_id = "auth_nonce",
    tag = "auth",
    extensions(("x-shardwork-role" = json!("public"))),
    responses(
        (status = 201, description = "A fresh nonce", body = NonceResponse),
        (status = 500, description = "The nonce could not be stored", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn nonce(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ttl = Duration::seconds(state.config.nonce_ttl_secs as i64);
    let IssuedNonce { nonce, expires_at } = issue_nonce(&state.db, ttl, Utc::now()).await?;
    Ok(HttpResponse::Created().json(NonceResponse {
        nonce,
        expires_at,
        domain: state.config.siwe_domain.clone(),
        chain_id: state.config.chain_id,
    }))
}

/// A signed Sign-In with Ethereum message, and the roles asked for.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The EIP-4361 message exactly as signed.
    pub message: String,
    /// EIP-191 `personal_sign` signature, 65 bytes hex.
    pub signature: String,
    /// Roles asked for beyond `requester`: `worker` is granted on request; `validator` and
    /// `admin` only to configured addresses.
    #[serde(default)]
    pub roles: Vec<Role>,
}

/// A new access and refresh token pair, and what it grants.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenResponse {
    /// Always `Bearer`.
    pub token_type: String,
    /// Send as `Authorization: Bearer <access_token>`.
    pub access_token: String,
    /// Seconds the access token stays valid.
    pub expires_in: i64,
    /// Trade at `/v1/auth/refresh` for a new pair.
    pub refresh_token: String,
    /// Seconds the refresh token stays valid.
    pub refresh_expires_in: i64,
    /// The signed-in address the tokens name.
    pub address: EthAddress,
    /// The roles the tokens grant.
    pub roles: Vec<Role>,
}

/// Verifies a signed sign-in message, spends its nonce and returns tokens.
///
/// Every address gets `requester`; `worker` on request (or once registered); `validator` and
/// `admin` only for configured addresses, and asking for them otherwise is refused (403).
#[utoipa::path(
    post,
    path = "/v1/auth/verify",
    operation_id = "auth_verify",
    tag = "auth",
    extensions(("x-shardwork-role" = json!("public"))),
    request_body = VerifyRequest,
    responses(
        (status = 200, description = "Signed in", body = TokenResponse),
        (status = 400, description = "The body is not a JSON sign-in request", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 401, description = "The signature, domain, chain, time window or nonce does not hold", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 403, description = "A role was asked for that this address is not configured for", body = ProblemBody, content_type = PROBLEM_JSON),
        JsonTooLarge,
        (status = 422, description = "The message is not EIP-4361, or the signature is not 65 bytes of hex", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The nonce or worker record could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn verify(
    state: web::Data<AppState>,
    Json(body): Json<VerifyRequest>,
) -> Result<HttpResponse, ApiError> {
    let now = Utc::now();
    let message = SiweMessage::parse(&body.message).map_err(|e| {
        let path = if e.field == "message" {
            "message".to_owned()
        } else {
            format!("message.{}", e.field)
        };
        ApiError::invalid(path, e.message)
    })?;
    let signer = recover_signer(&body.message, &body.signature)
        .map_err(|e| ApiError::invalid("signature", e.message))?;
    if signer != message.address {
        return Err(ApiError::unauthenticated(format!(
            "the signature was made by {signer}, not by {}",
            message.address
        )));
    }
    let config = &state.config;
    if message.domain != config.siwe_domain {
        return Err(ApiError::unauthenticated(format!(
            "the message is for {:?}; this server is {:?}",
            message.domain, config.siwe_domain
        )));
    }
    if message.chain_id != config.chain_id {
        return Err(ApiError::unauthenticated(format!(
            "the message is for chain {}; this server is on chain {}",
            message.chain_id, config.chain_id
        )));
    }
    if message.issued_at > now + Duration::seconds(ISSUED_AT_SKEW_SECS) {
        return Err(ApiError::unauthenticated(
            "the message is issued in the future",
        ));
    }
    if message.expiration_time.is_some_and(|t| t <= now) {
        return Err(ApiError::unauthenticated("the message has expired"));
    }
    if message.not_before.is_some_and(|t| t > now) {
        return Err(ApiError::unauthenticated(
            "the message is not valid yet (Not Before)",
        ));
    }
    spend_nonce(&state.db, &message.nonce, now).await?;

    let registered = is_registered(&state.db, message.address).await?;
    let roles = grant_roles(config, message.address, &body.roles, registered)?;
    Ok(HttpResponse::Ok().json(tokens(&state, message.address, roles, now)))
}

/// Every address is a requester; `worker` on request or registration; `validator` and `admin`
/// only by configuration. Asking for a role one may not have is refused, not silently dropped.
pub fn grant_roles(
    config: &crate::configuration::ApiConfig,
    address: EthAddress,
    requested: &[Role],
    registered_worker: bool,
) -> Result<Vec<Role>, ApiError> {
    let mut roles = vec![Role::Requester];
    if registered_worker || requested.contains(&Role::Worker) {
        roles.push(Role::Worker);
    }
    for (role, list) in [
        (Role::Validator, &config.validator_addresses),
        (Role::Admin, &config.admin_addresses),
    ] {
        if list.contains(&address) {
            roles.push(role);
        } else if requested.contains(&role) {
            return Err(ApiError::forbidden(format!(
                "{address} is not configured as {role}"
            )));
        }
    }
    Ok(roles)
}

fn tokens(
    state: &AppState,
    address: EthAddress,
    roles: Vec<Role>,
    now: DateTime<Utc>,
) -> TokenResponse {
    let (access_token, _) = state.tokens.issue(address, &roles, TokenKind::Access, now);
    let (refresh_token, _) = state.tokens.issue(address, &roles, TokenKind::Refresh, now);
    TokenResponse {
        token_type: "Bearer".into(),
        access_token,
        expires_in: state.tokens.ttl(TokenKind::Access),
        refresh_token,
        refresh_expires_in: state.tokens.ttl(TokenKind::Refresh),
        address,
        roles,
    }
}

/// A refresh token to trade for a new pair.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshRequest {
    /// The refresh token from sign-in or an earlier refresh.
    pub refresh_token: String,
}

/// Trades a refresh token for a new pair; roles are re-derived from the configuration.
#[utoipa::path(
    post,
    path = "/v1/auth/refresh",
    operation_id = "auth_refresh",
    tag = "auth",
    extensions(("x-shardwork-role" = json!("public"))),
    request_body = RefreshRequest,
    responses(
        (status = 200, description = "A new token pair", body = TokenResponse),
        (status = 400, description = "The body is not a JSON refresh request", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 401, description = "The refresh token is invalid, expired or an access token", body = ProblemBody, content_type = PROBLEM_JSON),
        JsonTooLarge,
        (status = 500, description = "The worker record could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn refresh(
    state: web::Data<AppState>,
    Json(body): Json<RefreshRequest>,
) -> Result<HttpResponse, ApiError> {
    let claims = state
        .tokens
        .verify(&body.refresh_token, TokenKind::Refresh)
        .map_err(|e| ApiError::unauthenticated(e.to_string()))?;
    let registered = is_registered(&state.db, claims.sub).await?;
    let roles = grant_roles(
        &state.config,
        claims.sub,
        &[],
        registered || claims.has(Role::Worker),
    )?;
    Ok(HttpResponse::Ok().json(tokens(&state, claims.sub, roles, Utc::now())))
}

/// The caller as its access token states it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MeResponse {
    /// The signed-in address.
    pub address: EthAddress,
    /// The roles the token grants.
    pub roles: Vec<Role>,
    /// Unix time at which the access token expires.
    pub expires_at: i64,
}

/// The caller's identity as its token states it.
#[utoipa::path(
    get,
    path = "/v1/auth/me",
    operation_id = "auth_me",
    tag = "auth",
    extensions(("x-shardwork-role" = json!("requester"))),
    responses((status = 200, description = "The token's address, roles and expiry", body = MeResponse))
)]
pub async fn me(caller: Authenticated<AnyRole>) -> HttpResponse {
    HttpResponse::Ok().json(MeResponse {
        address: caller.claims.sub,
        roles: caller.claims.roles,
        expires_at: caller.claims.exp,
    })
}
