//! Access and refresh tokens: HS256 JWTs naming the address (`sub`) and its roles.
//!
//! Refresh tokens are stateless: a refreshed pair does not revoke the old refresh token, which
//! stays valid until its own expiry. Roles are re-derived from configuration at every refresh,
//! so removing an address from `validator_addresses` takes effect within one access-token TTL.

use std::fmt;

use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::EthAddress;

/// What a token lets its holder do. A token holds one or more.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Posts, funds and cancels jobs. Every signed-in address has it.
    Requester,
    /// Registers, claims tasks and submits adapters.
    Worker,
    /// Reads held-out data and its key, and rules on submissions. Configured addresses only.
    Validator,
    /// Operates the marketplace. Configured addresses only.
    Admin,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Requester => "requester",
            Role::Worker => "worker",
            Role::Validator => "validator",
            Role::Admin => "admin",
        })
    }
}

/// Which of the pair a token is; each is accepted only where its kind is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// Short-lived; authorizes requests.
    Access,
    /// Long-lived; only buys a new pair (`POST /v1/auth/refresh`).
    Refresh,
}

/// The JWT claims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// The issuer, always `shardwork`.
    pub iss: String,
    /// The signed-in address, lowercase hex.
    pub sub: EthAddress,
    /// The roles the token grants.
    pub roles: Vec<Role>,
    /// Access or refresh.
    pub typ: TokenKind,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Expires at, Unix seconds.
    pub exp: i64,
    /// Unique per token, so two tokens issued in the same second differ.
    pub jti: String,
}

impl Claims {
    /// Whether the token grants `role`.
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// Whether the caller oversees a job of `requester`: it is that requester, a validator or
    /// an admin. Only they read what a job keeps for its requester (its result, its whole feed,
    /// its progress).
    pub fn oversees(&self, requester: &str) -> bool {
        self.has(Role::Validator)
            || self.has(Role::Admin)
            || requester.eq_ignore_ascii_case(&self.sub.to_string())
    }
}

const ISSUER: &str = "shardwork";

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token is past its `exp`.
    #[error("the token has expired; sign in again or refresh")]
    Expired,
    /// A token of the other kind (a refresh token where an access token is needed, or the reverse).
    #[error("the token is a {found:?} token where a {expected:?} token is needed")]
    WrongKind {
        /// The kind needed here.
        expected: TokenKind,
        /// The kind presented.
        found: TokenKind,
    },
    /// Not a token of ours: a bad signature, issuer, claim or encoding; the reason says which.
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

/// Signs and verifies the API's tokens with one HMAC key and the configured lifetimes.
pub struct TokenIssuer {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    access_ttl: i64,
    refresh_ttl: i64,
}

impl TokenIssuer {
    /// An issuer keyed by `secret`, with the two kinds' lifetimes in seconds.
    pub fn new(secret: &[u8], access_ttl_secs: u64, refresh_ttl_secs: u64) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        // Expiry is exact: our own clock issued the token, so no skew to allow for.
        validation.leeway = 0;
        TokenIssuer {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            access_ttl: i64::try_from(access_ttl_secs).unwrap_or(i64::MAX / 2),
            refresh_ttl: i64::try_from(refresh_ttl_secs).unwrap_or(i64::MAX / 2),
        }
    }

    /// The lifetime of a `kind` token, in seconds.
    pub fn ttl(&self, kind: TokenKind) -> i64 {
        match kind {
            TokenKind::Access => self.access_ttl,
            TokenKind::Refresh => self.refresh_ttl,
        }
    }

    /// Signs a token of `kind` for `address`, valid from `now` for the kind's TTL.
    pub fn issue(
        &self,
        address: EthAddress,
        roles: &[Role],
        kind: TokenKind,
        now: DateTime<Utc>,
    ) -> (String, Claims) {
        let iat = now.timestamp();
        let claims = Claims {
            iss: ISSUER.into(),
            sub: address,
            roles: roles.to_vec(),
            typ: kind,
            iat,
            exp: iat.saturating_add(self.ttl(kind)),
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing of serializable claims cannot fail");
        (token, claims)
    }

    /// Verifies signature, issuer, expiry and kind.
    pub fn verify(&self, token: &str, kind: TokenKind) -> Result<Claims, TokenError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|err| match err.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                _ => TokenError::Invalid(err.to_string()),
            })?;
        if data.claims.typ != kind {
            return Err(TokenError::WrongKind {
                expected: kind,
                found: data.claims.typ,
            });
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        TokenIssuer::new(&[7u8; 32], 60, 3600)
    }

    fn address() -> EthAddress {
        "0x00000000000000000000000000000000000000aa"
            .parse()
            .unwrap()
    }

    #[test]
    fn issued_token_verifies_with_its_roles() {
        let (token, claims) = issuer().issue(
            address(),
            &[Role::Requester, Role::Worker],
            TokenKind::Access,
            Utc::now(),
        );
        let back = issuer().verify(&token, TokenKind::Access).unwrap();
        assert_eq!(back, claims);
        assert!(back.has(Role::Worker) && !back.has(Role::Validator));
    }

    #[test]
    fn expired_token_is_refused_as_expired() {
        let past = Utc::now() - chrono::Duration::seconds(61);
        let (token, _) = issuer().issue(address(), &[Role::Requester], TokenKind::Access, past);
        assert_eq!(
            issuer().verify(&token, TokenKind::Access),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn refresh_token_is_not_an_access_token() {
        let (token, _) = issuer().issue(
            address(),
            &[Role::Requester],
            TokenKind::Refresh,
            Utc::now(),
        );
        assert!(matches!(
            issuer().verify(&token, TokenKind::Access),
            Err(TokenError::WrongKind { .. })
        ));
    }

    #[test]
    fn token_signed_with_another_secret_is_invalid() {
        let other = TokenIssuer::new(&[8u8; 32], 60, 3600);
        let (token, _) = other.issue(address(), &[Role::Admin], TokenKind::Access, Utc::now());
        assert!(matches!(
            issuer().verify(&token, TokenKind::Access),
            Err(TokenError::Invalid(_))
        ));
    }
}
