//! Sign-in nonces (Sign-In with Ethereum, EIP-4361): the server issues a random nonce, the
//! wallet signs a message quoting it, and the nonce is spent when the message is verified.
//! Each nonce is spendable once and before it expires, so a signed message captured on the way
//! cannot be replayed. Checking the message itself (signature, domain, chain, time window) is
//! the HTTP layer's (`crate::http::auth::siwe`); the nonces are kept here.

use chrono::{DateTime, Duration, Utc};
use rand::Rng;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

use crate::domain::error::DomainError;
use crate::entities::siwe_nonce;

/// Characters in a nonce: 24 alphanumerics are about 143 bits, beyond guessing, and within
/// EIP-4361's rule of at least 8 alphanumerics.
const NONCE_LEN: usize = 24;

/// A nonce just issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedNonce {
    /// The value a sign-in message must quote.
    pub nonce: String,
    /// When it stops being spendable.
    pub expires_at: DateTime<Utc>,
}

/// Issues a fresh nonce, spendable for `ttl` from `now`.
pub async fn issue_nonce<C: ConnectionTrait>(
    db: &C,
    ttl: Duration,
    now: DateTime<Utc>,
) -> Result<IssuedNonce, DomainError> {
    let nonce: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(NONCE_LEN)
        .map(char::from)
        .collect();
    let expires_at = now + ttl;
    // Expired nonces are useless; sweeping them here bounds the table without a timer.
    siwe_nonce::Entity::delete_many()
        .filter(siwe_nonce::Column::ExpiresAt.lt(now))
        .exec(db)
        .await?;
    siwe_nonce::Entity::insert(siwe_nonce::ActiveModel {
        nonce: Set(nonce.clone()),
        created_at: Set(now),
        expires_at: Set(expires_at),
        used_at: Set(None),
    })
    .exec(db)
    .await?;
    Ok(IssuedNonce { nonce, expires_at })
}

/// Why a nonce cannot be spent: the sign-in does not hold, and the caller asks for a new nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NonceRefused {
    /// No such nonce was issued (or it was swept long after expiring).
    #[error("the nonce was not issued by this server")]
    NotIssued,
    /// Issued, but its time is up.
    #[error("the nonce has expired; request a new one")]
    Expired,
    /// Spent by an earlier sign-in: this is a replay, or a race lost to one.
    #[error("the nonce has already been used")]
    AlreadyUsed,
}

/// Why [`spend_nonce`] failed: the nonce was refused, or the database failed.
#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    /// The nonce may not be spent.
    #[error(transparent)]
    Refused(#[from] NonceRefused),
    /// The nonce could not be read or written.
    #[error(transparent)]
    Failed(#[from] DomainError),
}

impl From<DbErr> for SpendError {
    fn from(err: DbErr) -> Self {
        SpendError::Failed(err.into())
    }
}

/// Marks `nonce` used at `now`; exactly one request can do so, even concurrently (the update
/// only touches a row not yet used, and only one of two racing updates finds it so).
pub async fn spend_nonce<C: ConnectionTrait>(
    db: &C,
    nonce: &str,
    now: DateTime<Utc>,
) -> Result<(), SpendError> {
    let row = siwe_nonce::Entity::find_by_id(nonce.to_owned())
        .one(db)
        .await?
        .ok_or(NonceRefused::NotIssued)?;
    if row.expires_at <= now {
        return Err(NonceRefused::Expired.into());
    }
    let spent = siwe_nonce::Entity::update_many()
        .col_expr(siwe_nonce::Column::UsedAt, Expr::value(now))
        .filter(siwe_nonce::Column::Nonce.eq(nonce))
        .filter(siwe_nonce::Column::UsedAt.is_null())
        .exec(db)
        .await?;
    if spent.rows_affected != 1 {
        return Err(NonceRefused::AlreadyUsed.into());
    }
    Ok(())
}
