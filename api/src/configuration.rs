//! The API's typed settings. The CLI loads them (defaults < file < `SHARDWORK_…` environment)
//! and hands them to [`crate::startup::build`]; this module only defines them, their defaults
//! and the checks that must pass before the server binds.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};
use shardwork_core::protocol::EthAddress;

/// A secret string: deserializes from plain text, never prints or serializes its value.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the code that must use it (never for logs).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "<unset>"
        } else {
            "<redacted>"
        })
    }
}

/// Serializes redacted so that printing the effective configuration never leaks the value.
impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() {
            "<unset>"
        } else {
            "<redacted>"
        })
    }
}

/// Settings of the HTTP API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Where the server listens.
    pub bind: SocketAddr,
    /// The authority Sign-In with Ethereum messages must name (EIP-4361 `domain`), as the
    /// wallet shows it to the user: the host (and port) the portal is served from.
    pub siwe_domain: String,
    /// The chain sign-in messages must name (EIP-4361 `Chain ID`); 31337 is anvil's.
    pub chain_id: u64,
    /// HMAC key of the access and refresh tokens (HS256). At least 32 bytes.
    pub jwt_secret: Secret,
    /// Master secret from which each job's held-out sealing key is derived, so that no key is
    /// ever written to the database or the content store. At least 32 bytes.
    pub sealing_secret: Secret,
    /// How long an access token is valid, in seconds.
    pub access_token_ttl_secs: u64,
    /// How long a refresh token is valid, in seconds; at least the access token's lifetime.
    pub refresh_token_ttl_secs: u64,
    /// How long a sign-in nonce stays spendable.
    pub nonce_ttl_secs: u64,
    /// Largest JSON request body.
    pub json_limit_bytes: usize,
    /// Largest dataset upload.
    pub upload_limit_bytes: usize,
    /// Bytes one identity may keep in the content store through `POST /v1/content` that no
    /// job names yet; an upload past it is refused (413). Fresh identities are cheap, so this
    /// bounds each one's share and [`Self::upload_ttl_secs`] bounds how long it is held.
    pub storage_quota_bytes: u64,
    /// How long an upload no job names is kept before it is unpinned and forgotten (and
    /// stops counting against its owner's quota).
    pub upload_ttl_secs: u64,
    /// Requests per minute per caller (token subject, or client IP when unauthenticated),
    /// counted across every replica on the database; 0 turns rate limiting off, this limit and
    /// the two per-address ones below. The configured `validator_addresses` have no
    /// per-caller budget (the deployment's own nodes poll for work); their client address's
    /// budget still applies.
    pub rate_limit_per_minute: u32,
    /// Requests per minute from one client address, whichever identities they are signed in
    /// as: a new identity costs two sign-in requests, so without this a caller holding many
    /// would have `rate_limit_per_minute` for each. Counted like the per-caller limit; 0 turns
    /// only this one off. Behind a proxy, list it in `trusted_proxies` or every client shares
    /// the proxy's address and so this budget.
    pub rate_limit_per_ip_per_minute: u32,
    /// Sign-in requests (`/v1/auth/nonce`, `/v1/auth/verify`) per minute from one client
    /// address: two make an identity, so this bounds how fast one address mints them. 0 turns
    /// only this one off.
    pub sign_in_per_ip_per_minute: u32,
    /// Open event streams (`/v1/jobs/{id}/events/stream`) one signed-in caller may hold on one
    /// replica; the next is refused with 429 until one closes. 0: no cap.
    pub max_event_streams_per_caller: u32,
    /// Open event streams from one client address, whichever identities hold them, on one
    /// replica. 0: no cap.
    pub max_event_streams_per_ip: u32,
    /// Load balancers or reverse proxies in front of the API, as addresses or networks
    /// (`"10.0.0.2"`, `"172.16.0.0/12"`): a request from one of these is keyed by the client
    /// address it wrote into `X-Forwarded-For` (the nearest entry not itself a trusted proxy).
    /// Empty by default: the header is then never read, since any client can send it.
    #[serde(deserialize_with = "addresses_or_networks")]
    pub trusted_proxies: Vec<IpNet>,
    /// Addresses granted the admin role at sign-in.
    pub admin_addresses: Vec<EthAddress>,
    /// Addresses granted the validator role at sign-in: the only holders of held-out keys.
    pub validator_addresses: Vec<EthAddress>,
    /// Price quoted per trainable adapter parameter per training record and epoch, in wei.
    pub price_wei_per_param_record: u64,
    /// How long a task lease lasts without a heartbeat; workers extend it with progress.
    pub lease_secs: u64,
    /// How long a validator's lease on a scoring, a proof replay or a merge lasts without a
    /// heartbeat: a validator killed mid-work loses its work to another after this long.
    pub validator_lease_secs: u64,
    /// Attempts per task (lease expiries and rejected adapters count) before it fails.
    pub task_max_attempts: i32,
    /// Largest training memory (MiB) a job may need while no worker has registered; once
    /// workers have, a job must fit the largest of them instead.
    pub max_job_memory_mb: u64,
    /// How often the outbox dispatcher and the reaper look for work.
    pub background_interval_ms: u64,
    /// Wake the outbox dispatcher and the chain follower as soon as this process has work for
    /// them, instead of leaving them to their polls. Off only where a test must stop the API
    /// between a state change and its effect.
    pub background_wakeups: bool,
    /// The requester portal's production build (`scripts/frontend build`), served at `/`.
    /// Relative paths are from the working directory.
    pub portal_dir: PathBuf,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            siwe_domain: "localhost:8080".into(),
            chain_id: 31337,
            jwt_secret: Secret::default(),
            sealing_secret: Secret::default(),
            access_token_ttl_secs: 15 * 60,
            refresh_token_ttl_secs: 7 * 24 * 3600,
            nonce_ttl_secs: 5 * 60,
            json_limit_bytes: 1 << 20,
            upload_limit_bytes: 256 << 20,
            storage_quota_bytes: 1 << 30,
            upload_ttl_secs: 24 * 3600,
            rate_limit_per_minute: 600,
            // Five callers' worth: room for a household or a small office behind one address
            // (or `shardwork up`'s validator and workers on loopback), and a hard ceiling for
            // one client minting identities.
            rate_limit_per_ip_per_minute: 3_000,
            sign_in_per_ip_per_minute: 60,
            max_event_streams_per_caller: 8,
            max_event_streams_per_ip: 32,
            trusted_proxies: Vec::new(),
            admin_addresses: Vec::new(),
            validator_addresses: Vec::new(),
            price_wei_per_param_record: 1_000,
            lease_secs: 300,
            validator_lease_secs: 60,
            task_max_attempts: 3,
            max_job_memory_mb: 65_536,
            background_interval_ms: 250,
            background_wakeups: true,
            portal_dir: PathBuf::from("frontend/dist"),
        }
    }
}

/// A setting that keeps the server from starting, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("api.{field}: {message}")]
pub struct ConfigError {
    /// The offending setting, as named in the `api` section.
    pub field: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

/// HS256 keys shorter than the hash output weaken the MAC (RFC 7518 §3.2).
pub const MIN_SECRET_BYTES: usize = 32;

/// Secrets that were published as examples (the first `compose.yaml` shipped them): whoever
/// read them could mint any token or open any sealed held-out set of a server using them.
const PUBLISHED_SECRETS: [&str; 2] = [
    "change-me-development-jwt-secret-0001",
    "change-me-development-sealing-secret-01",
];

/// `trusted_proxies`: each entry a network (`a.b.c.d/n`) or one address (its own /32 or /128).
fn addresses_or_networks<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<IpNet>, D::Error> {
    let entries = Vec::<String>::deserialize(deserializer)?;
    entries
        .iter()
        .map(|entry| {
            entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "{entry:?} is neither an IP address nor a network like 10.0.0.0/8"
                    ))
                })
        })
        .collect()
}

impl ApiConfig {
    /// Every problem that must be fixed before the server can start.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, field: &'static str, message: String| {
            if !ok {
                errors.push(ConfigError { field, message });
            }
        };
        for (field, secret) in [
            ("jwt_secret", &self.jwt_secret),
            ("sealing_secret", &self.sealing_secret),
        ] {
            let value = secret.expose();
            let message = if value.is_empty() {
                format!(
                    "is not set: configure a random secret of at least {MIN_SECRET_BYTES} bytes \
                     (`shardwork secrets` prints fresh ones)"
                )
            } else if PUBLISHED_SECRETS.contains(&value) {
                "is an example published with Shardwork, so anyone can use it: configure a \
                 random one (`shardwork secrets` prints fresh ones)"
                    .to_owned()
            } else {
                format!(
                    "must be at least {MIN_SECRET_BYTES} bytes, found {}",
                    value.len()
                )
            };
            check(
                value.len() >= MIN_SECRET_BYTES && !PUBLISHED_SECRETS.contains(&value),
                field,
                message,
            );
        }
        check(
            !self.siwe_domain.is_empty() && !self.siwe_domain.contains(char::is_whitespace),
            "siwe_domain",
            format!("{:?} is not a host[:port]", self.siwe_domain),
        );
        check(
            self.access_token_ttl_secs > 0,
            "access_token_ttl_secs",
            "must be above 0".into(),
        );
        check(
            self.refresh_token_ttl_secs >= self.access_token_ttl_secs,
            "refresh_token_ttl_secs",
            format!(
                "{} is shorter than access_token_ttl_secs {}",
                self.refresh_token_ttl_secs, self.access_token_ttl_secs
            ),
        );
        check(
            (5..=86_400).contains(&self.lease_secs),
            "lease_secs",
            format!("{} is outside 5..=86400", self.lease_secs),
        );
        check(
            (2..=3_600).contains(&self.validator_lease_secs),
            "validator_lease_secs",
            format!("{} is outside 2..=3600", self.validator_lease_secs),
        );
        check(
            (256..=16 << 20).contains(&self.max_job_memory_mb),
            "max_job_memory_mb",
            format!("{} is outside 256..=16777216 MiB", self.max_job_memory_mb),
        );
        check(
            (1..=100).contains(&self.task_max_attempts),
            "task_max_attempts",
            format!("{} is outside 1..=100", self.task_max_attempts),
        );
        check(
            (10..=60_000).contains(&self.background_interval_ms),
            "background_interval_ms",
            format!("{} is outside 10..=60000", self.background_interval_ms),
        );
        check(
            self.nonce_ttl_secs > 0,
            "nonce_ttl_secs",
            "must be above 0".into(),
        );
        check(
            self.json_limit_bytes >= 1024,
            "json_limit_bytes",
            "must be at least 1024".into(),
        );
        check(
            self.storage_quota_bytes >= self.json_limit_bytes as u64,
            "storage_quota_bytes",
            "must be at least json_limit_bytes".into(),
        );
        check(
            (60..=365 * 24 * 3600).contains(&self.upload_ttl_secs),
            "upload_ttl_secs",
            format!("{} is outside 60..=31536000 seconds", self.upload_ttl_secs),
        );
        check(
            self.upload_limit_bytes >= self.json_limit_bytes,
            "upload_limit_bytes",
            "must be at least json_limit_bytes".into(),
        );
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> ApiConfig {
        ApiConfig {
            jwt_secret: Secret::new("j".repeat(32)),
            sealing_secret: Secret::new("s".repeat(32)),
            ..ApiConfig::default()
        }
    }

    #[test]
    fn secrets_never_print() {
        let config = valid();
        let debug = format!("{config:?}");
        assert!(!debug.contains("jjjj"), "{debug}");
        let json = serde_json::to_string(&config).unwrap();
        assert!(
            !json.contains("jjjj") && json.contains("<redacted>"),
            "{json}"
        );
    }

    #[test]
    fn short_secrets_are_refused_by_name() {
        let config = ApiConfig {
            jwt_secret: Secret::new("j".repeat(31)),
            ..valid()
        };
        let errors = config.validate().unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "api.jwt_secret: must be at least 32 bytes, found 31"
        );
        assert!(valid().validate().is_ok());
    }

    #[test]
    fn unset_and_published_secrets_are_refused_saying_so() {
        let config = ApiConfig {
            jwt_secret: Secret::new("change-me-development-jwt-secret-0001"),
            sealing_secret: Secret::default(),
            ..valid()
        };
        let errors = config.validate().unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{text:?}");
        assert!(
            text[0].starts_with("api.jwt_secret: is an example published"),
            "{text:?}"
        );
        assert!(
            text[1].starts_with("api.sealing_secret: is not set"),
            "{text:?}"
        );
    }

    #[test]
    fn defaults_need_only_secrets() {
        let errors = ApiConfig::default().validate().unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["jwt_secret", "sealing_secret"]);
    }

    #[test]
    fn trusted_proxies_take_addresses_and_networks_and_name_a_bad_entry() {
        let config: ApiConfig =
            serde_json::from_str(r#"{"trusted_proxies": ["10.0.0.2", "172.16.0.0/12", "::1"]}"#)
                .unwrap();
        let shown: Vec<String> = config
            .trusted_proxies
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(shown, ["10.0.0.2/32", "172.16.0.0/12", "::1/128"]);
        let err = serde_json::from_str::<ApiConfig>(r#"{"trusted_proxies": ["10.0.0.0/33"]}"#)
            .unwrap_err();
        assert!(
            err.to_string().contains("\"10.0.0.0/33\" is neither"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<ApiConfig>(r#"{"jwt_secrte": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("jwt_secrte"), "{err}");
    }
}
