//! `Authenticated<R>`: the extractor by which a handler declares the role it needs. A missing,
//! malformed or expired token is 401; a valid token without the role is 403.

use std::future::{Ready, ready};
use std::marker::PhantomData;

use actix_web::{FromRequest, HttpMessage, HttpRequest, dev::Payload, http::header, web};

use super::tokens::{Claims, Role, TokenError, TokenIssuer, TokenKind};
use crate::http::problem::ApiError;

/// A role requirement at the type level.
pub trait RoleMarker {
    /// `None` accepts any signed-in caller.
    const ROLE: Option<Role>;
}

macro_rules! role_marker {
    ($name:ident, $role:expr) => {
        /// A [`RoleMarker`] for [`Authenticated`]: the role its name says (any, for `AnyRole`).
        #[derive(Debug)]
        pub struct $name;
        impl RoleMarker for $name {
            const ROLE: Option<Role> = $role;
        }
    };
}
role_marker!(AnyRole, None);
role_marker!(RequesterRole, Some(Role::Requester));
role_marker!(WorkerRole, Some(Role::Worker));
role_marker!(ValidatorRole, Some(Role::Validator));
role_marker!(AdminRole, Some(Role::Admin));

/// A caller holding a valid access token with role `R`.
#[derive(Debug)]
pub struct Authenticated<R: RoleMarker> {
    /// The claims of the caller's verified access token.
    pub claims: Claims,
    _role: PhantomData<R>,
}

/// The outcome of checking the request's bearer token, computed once per request (by the
/// rate limiter, which keys on the caller) and reused by the extractor.
#[derive(Debug, Clone)]
pub(crate) struct BearerCheck(pub Option<Result<Claims, TokenError>>);

pub(crate) fn check_bearer(req: &HttpRequest, issuer: &TokenIssuer) -> BearerCheck {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return BearerCheck(None);
    };
    let token = value.to_str().ok().and_then(|v| {
        v.strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
    });
    BearerCheck(Some(match token {
        Some(token) => issuer.verify(token.trim(), TokenKind::Access),
        None => Err(TokenError::Invalid(
            "the Authorization header must be `Bearer <token>`".into(),
        )),
    }))
}

fn authenticate<R: RoleMarker>(req: &HttpRequest) -> Result<Authenticated<R>, ApiError> {
    let cached = req.extensions().get::<BearerCheck>().cloned();
    let check = match cached {
        Some(check) => check,
        None => {
            let issuer = req
                .app_data::<web::Data<TokenIssuer>>()
                .ok_or_else(|| ApiError::internal("authentication", "no TokenIssuer registered"))?;
            check_bearer(req, issuer)
        }
    };
    let claims = match check.0 {
        None => {
            return Err(ApiError::unauthenticated(
                "this endpoint needs `Authorization: Bearer <access token>`; sign in at /v1/auth/verify",
            ));
        }
        Some(Err(err)) => return Err(ApiError::unauthenticated(err.to_string())),
        Some(Ok(claims)) => claims,
    };
    if let Some(role) = R::ROLE
        && !claims.has(role)
    {
        return Err(ApiError::forbidden(format!(
            "this endpoint needs the {role} role; {} holds {}",
            claims.sub,
            claims
                .roles
                .iter()
                .map(Role::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(Authenticated {
        claims,
        _role: PhantomData,
    })
}

impl<R: RoleMarker> FromRequest for Authenticated<R> {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req))
    }
}
