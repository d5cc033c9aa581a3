//! Authentication: Sign-In with Ethereum (EIP-4361) proves control of an address, and the API
//! answers with short-lived HS256 access tokens and longer refresh tokens carrying roles.
//!
//! * [`siwe`]: parsing the EIP-4361 message and recovering its EIP-191 signer.
//! * [`tokens`]: issuing and verifying the JWTs.
//! * [`extractor`]: `Authenticated<R>`, by which every endpoint declares the role it needs.

pub mod extractor;
pub mod siwe;
pub mod tokens;

pub use extractor::{AnyRole, Authenticated, RoleMarker};
pub use tokens::{Claims, Role, TokenIssuer, TokenKind};
