//! The per-caller rate limit, shared by every API replica on the database, how a caller is
//! told apart, and the paths the limit never applies to. Kept apart from the middleware that
//! applies it (`crate::http::telemetry`) because the state holds the limiter and the OpenAPI
//! description names the exempt paths.
//!
//! Counting is per caller and fixed one-minute window, in the database's `rate_windows`, so
//! that N replicas behind a balancer admit a caller `per_minute` requests in all, not N times
//! that. A replica does not write a row per request: it claims the caller's budget in blocks
//! of about a sixteenth of the limit and spends each block from memory. The database never
//! grants more than the limit, so no caller gets more than `per_minute` a minute however its
//! requests are spread; the price is that a block one replica holds unspent is not available
//! to the others, so a caller spread over R replicas may be refused up to (R - 1) x (block - 1)
//! requests early. Why this shape: docs/decisions/0035-rate-limit-shared-by-replicas.md.
//!
//! Beside the caller's budget, [`RequestLimits`] counts each client address's requests over
//! every identity signed in from it, and its sign-ins: identities are free to mint, addresses
//! are not (docs/decisions/0039-limits-per-address.md).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value};

use crate::configuration::ApiConfig;

/// Fixed one-minute windows per caller, claimed from the database in blocks.
pub struct RateLimiter {
    per_minute: u32,
    block: u32,
    db: DatabaseConnection,
    windows: Mutex<HashMap<String, Window>>,
    /// The last minute whose older rows this replica deleted.
    swept_minute: AtomicI64,
}

/// This replica's part of one caller's current minute.
struct Window {
    minute: i64,
    /// Requests left in the blocks claimed this minute.
    held: u32,
    /// Requests claimed this minute in all (blocks granted by the database, or counted here
    /// while it did not answer).
    claimed: u32,
    /// The database granted nothing: the caller has used the whole limit this minute, on
    /// whichever replicas, so later requests are refused without asking again.
    exhausted: bool,
}

impl Window {
    fn new(minute: i64) -> Self {
        Window {
            minute,
            held: 0,
            claimed: 0,
            exhausted: false,
        }
    }
}

/// In-memory entries kept before stale windows are swept.
const SWEEP_AT: usize = 100_000;

/// Blocks are this fraction of the limit: small enough that little is stranded on a replica,
/// large enough that a busy caller costs one database write per this many requests.
const BLOCKS_PER_LIMIT: u32 = 16;

impl RateLimiter {
    /// A limiter admitting `per_minute` requests per caller and minute across every replica on
    /// `db` (migrated: it holds `rate_windows`); 0 admits everything.
    pub fn new(per_minute: u32, db: DatabaseConnection) -> Self {
        // Past a billion a minute the limit means nothing, and the shared count's arithmetic
        // (a 32-bit column, the limit plus one block) stays in range.
        let per_minute = per_minute.min(1 << 30);
        RateLimiter {
            per_minute,
            block: (per_minute / BLOCKS_PER_LIMIT).max(1),
            db,
            windows: Mutex::new(HashMap::new()),
            swept_minute: AtomicI64::new(i64::MIN),
        }
    }

    /// Counts one request by `key` at unix time `now_secs`; `Err(retry_after_secs)` when over.
    pub async fn admit(&self, key: &str, now_secs: i64) -> Result<(), i64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let minute = now_secs.div_euclid(60);
        let retry_after = 60 - now_secs.rem_euclid(60);
        match self.spend(key, minute) {
            Spend::Admitted => return Ok(()),
            Spend::Exhausted => return Err(retry_after),
            Spend::Empty => {}
        }
        self.sweep_before(minute).await;
        let granted = match claim(&self.db, key, minute, self.block, self.per_minute).await {
            Ok(granted) => Some(granted),
            Err(err) => {
                // The database is the shared count; without it each replica limits alone
                // (the budget left of what it claimed this minute) rather than refusing all.
                tracing::warn!(%err, "rate limit: the shared count did not answer; counting here");
                None
            }
        };
        let mut windows = self.lock();
        let window = windows
            .entry(key.to_owned())
            .or_insert_with(|| Window::new(minute));
        if window.minute != minute {
            *window = Window::new(minute);
        }
        let granted = granted.unwrap_or_else(|| {
            self.block
                .min(self.per_minute.saturating_sub(window.claimed))
        });
        window.claimed += granted;
        window.held += granted;
        if window.held == 0 {
            window.exhausted = true;
            return Err(retry_after);
        }
        window.held -= 1;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Window>> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one request from what this replica holds for `key` this minute.
    fn spend(&self, key: &str, minute: i64) -> Spend {
        let mut windows = self.lock();
        if windows.len() >= SWEEP_AT {
            windows.retain(|_, w| w.minute == minute);
        }
        let Some(window) = windows.get_mut(key) else {
            return Spend::Empty;
        };
        if window.minute != minute {
            *window = Window::new(minute);
        }
        if window.held > 0 {
            window.held -= 1;
            Spend::Admitted
        } else if window.exhausted {
            Spend::Exhausted
        } else {
            Spend::Empty
        }
    }

    /// Deletes the shared rows of minutes before the last, once a minute per replica.
    async fn sweep_before(&self, minute: i64) {
        if self.swept_minute.swap(minute, Ordering::Relaxed) >= minute {
            return;
        }
        let backend = self.db.get_database_backend();
        let sql = format!(
            "DELETE FROM rate_windows WHERE minute < {}",
            bind_param(backend, 1)
        );
        let statement = Statement::from_sql_and_values(backend, sql, [Value::from(minute - 1)]);
        if let Err(err) = self.db.execute_raw(statement).await {
            tracing::warn!(%err, "rate limit: old windows not swept");
        }
    }
}

enum Spend {
    Admitted,
    Exhausted,
    /// Nothing held: a block must be claimed.
    Empty,
}

/// Asks the shared count for up to `want` more requests of `caller` in `minute`, never letting
/// the minute's total pass `limit`; returns how many were granted (0 when the limit is used up).
/// One statement, so concurrent claims from any number of replicas serialise on the row.
async fn claim(
    db: &DatabaseConnection,
    caller: &str,
    minute: i64,
    want: u32,
    limit: u32,
) -> Result<u32, DbErr> {
    let backend = db.get_database_backend();
    let [caller_p, minute_p, want_p, limit_p] = [1, 2, 3, 4].map(|n| bind_param(backend, n));
    // In the update, `rate_windows.admitted` is the row before it; `granted` records what this
    // claim got so that RETURNING can say it.
    let sql = format!(
        "INSERT INTO rate_windows (caller, minute, admitted, granted) \
         VALUES ({caller_p}, {minute_p}, {want_p}, {want_p}) \
         ON CONFLICT (caller, minute) DO UPDATE SET \
         granted = CASE WHEN rate_windows.admitted >= {limit_p} THEN 0 \
           WHEN rate_windows.admitted + {want_p} > {limit_p} THEN {limit_p} - rate_windows.admitted \
           ELSE {want_p} END, \
         admitted = CASE WHEN rate_windows.admitted >= {limit_p} THEN rate_windows.admitted \
           WHEN rate_windows.admitted + {want_p} > {limit_p} THEN {limit_p} \
           ELSE rate_windows.admitted + {want_p} END \
         RETURNING granted"
    );
    let as_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let statement = Statement::from_sql_and_values(
        backend,
        sql,
        [
            Value::from(caller.to_owned()),
            Value::from(minute),
            Value::from(as_i32(want.min(limit))),
            Value::from(as_i32(limit)),
        ],
    );
    let row = db
        .query_one_raw(statement)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("rate_windows claim returned no row".into()))?;
    let granted: i32 = row.try_get("", "granted")?;
    Ok(u32::try_from(granted).unwrap_or(0))
}

/// The `n`th bind parameter in the backend's syntax.
fn bind_param(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => format!("?{n}"),
    }
}

/// A request refused by one of [`RequestLimits`]: when to retry, and which limit it passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Seconds until the minute whose budget was spent is over.
    pub retry_after: i64,
    /// The limit passed, for the problem's detail.
    pub detail: String,
}

/// Whose budget a request is counted against beside its client address's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// No valid token: the client address's own per-caller budget.
    Anonymous,
    /// The signed-in address.
    SignedIn(&'a str),
    /// A validator this deployment configures (`validator_addresses`): the operator's own node,
    /// not a stranger's traffic. Its idle polling (three listings every 300 ms) alone is the
    /// default per-caller budget, so metering it refused its verdicts and merges with 429 until
    /// the minute turned, holding the round up (issue 47). It still counts against its client
    /// address's budget.
    OwnValidator,
}

/// Every request budget a request is counted against, each shared by the replicas on the
/// database: its caller's (the signed-in address, or the client address when anonymous), its
/// client address's over every identity signed in from it, and, on the sign-in routes, the
/// client address's sign-ins. The per-address budgets are what many identities from one
/// address cannot multiply: minting an identity takes two sign-in requests, so a per-caller
/// limit alone admits as much as the client cares to sign in for.
pub struct RequestLimits {
    per_caller: RateLimiter,
    per_ip: RateLimiter,
    sign_in: RateLimiter,
}

impl RequestLimits {
    /// The limits of the configuration (`rate_limit_per_minute` 0 turns all three off), counted
    /// in `db`'s `rate_windows`.
    pub fn new(config: &ApiConfig, db: DatabaseConnection) -> Self {
        let on = |limit: u32| {
            if config.rate_limit_per_minute == 0 {
                0
            } else {
                limit
            }
        };
        RequestLimits {
            per_caller: RateLimiter::new(config.rate_limit_per_minute, db.clone()),
            per_ip: RateLimiter::new(on(config.rate_limit_per_ip_per_minute), db.clone()),
            sign_in: RateLimiter::new(on(config.sign_in_per_ip_per_minute), db),
        }
    }

    /// Counts one request at unix time `now_secs` by `caller` from `ip` (`None` when unknown),
    /// a `sign_in` (see [`sign_in_path`]) or not, against each budget in turn: the sign-in one
    /// (sign-ins only), the address's, the caller's (none for [`Caller::OwnValidator`]). A
    /// refused request is not counted against the budgets after the one that refused it.
    pub async fn admit(
        &self,
        caller: Caller<'_>,
        ip: Option<IpAddr>,
        sign_in: bool,
        now_secs: i64,
    ) -> Result<(), Refusal> {
        let ip = ip.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        if sign_in {
            self.sign_in
                .admit(&format!("sign-in:{ip}"), now_secs)
                .await
                .map_err(|retry_after| Refusal {
                    retry_after,
                    detail: format!(
                        "more than {} sign-in requests this minute from this address",
                        self.sign_in.per_minute
                    ),
                })?;
        }
        self.per_ip
            .admit(&format!("from:{ip}"), now_secs)
            .await
            .map_err(|retry_after| Refusal {
                retry_after,
                detail: format!(
                    "more than {} requests this minute from this address, over every identity \
                     signed in from it",
                    self.per_ip.per_minute
                ),
            })?;
        let key = match caller {
            Caller::SignedIn(address) => format!("addr:{address}"),
            Caller::Anonymous => format!("ip:{ip}"),
            Caller::OwnValidator => return Ok(()),
        };
        self.per_caller
            .admit(&key, now_secs)
            .await
            .map_err(|retry_after| Refusal {
                retry_after,
                detail: format!(
                    "more than {} requests this minute",
                    self.per_caller.per_minute
                ),
            })
    }
}

/// The routes that mint an identity's tokens from a signature, limited per client address so
/// that one client cannot sign in as many identities as it likes.
pub fn sign_in_path(path: &str) -> bool {
    matches!(path, "/v1/auth/nonce" | "/v1/auth/verify")
}

/// The address a request comes from: the peer's, unless the peer is one of the operator's
/// `trusted_proxies` (a load balancer), in which case the nearest address in
/// `X-Forwarded-For` that is not a trusted proxy. Entries left of that one are the client's
/// own word and never read, so a caller cannot pick its key by sending the header itself.
pub fn client_ip(
    peer: Option<IpAddr>,
    forwarded_for: Option<&str>,
    trusted_proxies: &[IpNet],
) -> Option<IpAddr> {
    let trusted = |ip: &IpAddr| trusted_proxies.iter().any(|net| net.contains(ip));
    let peer = peer?;
    if !trusted(&peer) {
        return Some(peer);
    }
    let Some(header) = forwarded_for else {
        return Some(peer);
    };
    let mut nearest = peer;
    for entry in header.rsplit(',') {
        match entry.trim().parse::<IpAddr>() {
            Ok(ip) if trusted(&ip) => nearest = ip,
            Ok(ip) => return Some(ip),
            // A hop the proxies did not write: stop at the last address they vouched for.
            Err(_) => return Some(nearest),
        }
    }
    Some(nearest)
}

/// The client address of `req`, as [`client_ip`] reads it from the peer and its
/// `X-Forwarded-For`.
pub fn request_client_ip(
    req: &actix_web::HttpRequest,
    trusted_proxies: &[IpNet],
) -> Option<IpAddr> {
    let forwarded_for = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok());
    client_ip(
        req.peer_addr().map(|a| a.ip()),
        forwarded_for,
        trusted_proxies,
    )
}

/// Probes and scrapes are never rate limited: a limited probe would restart a healthy server.
pub fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

#[cfg(test)]
mod tests {
    use sea_orm::Database;
    use shardwork_migrations::{Migrator, MigratorTrait};

    use super::*;

    /// A migrated SQLite database in a temporary file, so that several limiters (replicas)
    /// share it.
    async fn shared_db() -> (tempfile::TempDir, DatabaseConnection) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("api.db").display());
        let db = Database::connect(url).await.unwrap();
        Migrator::up(&db, None).await.unwrap();
        (dir, db)
    }

    #[tokio::test]
    async fn limit_resets_with_the_next_minute() {
        let (_dir, db) = shared_db().await;
        let limiter = RateLimiter::new(2, db);
        assert!(limiter.admit("a", 120).await.is_ok());
        assert!(limiter.admit("a", 130).await.is_ok());
        assert_eq!(limiter.admit("a", 135).await, Err(45));
        assert!(
            limiter.admit("b", 135).await.is_ok(),
            "callers are counted apart"
        );
        assert!(limiter.admit("a", 180).await.is_ok());
    }

    #[tokio::test]
    async fn zero_means_unlimited() {
        let (_dir, db) = shared_db().await;
        let limiter = RateLimiter::new(0, db);
        for _ in 0..1000 {
            assert!(limiter.admit("a", 0).await.is_ok());
        }
    }

    #[tokio::test]
    async fn replicas_on_one_database_share_each_callers_limit() {
        let (_dir, db) = shared_db().await;
        let limit = 160;
        let replicas: Vec<RateLimiter> = (0..3)
            .map(|_| RateLimiter::new(limit, db.clone()))
            .collect();
        let block = replicas[0].block;
        assert_eq!(block, 10);
        // One caller spread round-robin over three replicas, far past the limit.
        let mut admitted = 0;
        for i in 0..600 {
            if replicas[i % 3].admit("addr:0xabc", 600).await.is_ok() {
                admitted += 1;
            }
        }
        assert!(admitted <= limit, "{admitted} admitted over {limit}");
        assert!(
            admitted > limit - 2 * (block - 1),
            "{admitted} admitted: more stranded than two replicas' unspent blocks"
        );
        // Another caller is untouched, and the next minute starts afresh.
        assert!(replicas[1].admit("ip:10.0.0.1", 600).await.is_ok());
        assert!(replicas[2].admit("addr:0xabc", 660).await.is_ok());
    }

    #[tokio::test]
    async fn a_caller_at_the_limit_is_refused_without_asking_the_database_again() {
        let (_dir, db) = shared_db().await;
        let limiter = RateLimiter::new(1, db.clone());
        assert!(limiter.admit("a", 0).await.is_ok());
        assert!(limiter.admit("a", 1).await.is_err());
        db.close().await.unwrap();
        assert_eq!(limiter.admit("a", 2).await, Err(58), "refused from memory");
    }

    #[tokio::test]
    async fn without_the_database_each_replica_limits_alone() {
        let (_dir, db) = shared_db().await;
        let limiter = RateLimiter::new(32, db.clone());
        db.close().await.unwrap();
        let admitted = {
            let mut n = 0;
            for _ in 0..100 {
                if limiter.admit("a", 0).await.is_ok() {
                    n += 1;
                }
            }
            n
        };
        assert_eq!(admitted, 32);
    }

    #[tokio::test]
    async fn old_windows_are_swept() {
        let (_dir, db) = shared_db().await;
        let limiter = RateLimiter::new(5, db.clone());
        limiter.admit("a", 0).await.unwrap();
        limiter.admit("b", 60).await.unwrap();
        limiter.admit("c", 180).await.unwrap();
        let rows = db
            .query_all_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT minute FROM rate_windows ORDER BY minute",
            ))
            .await
            .unwrap();
        let minutes: Vec<i64> = rows
            .iter()
            .map(|r| r.try_get("", "minute").unwrap())
            .collect();
        assert_eq!(minutes, vec![3], "minutes before the last are gone");
    }

    #[test]
    fn a_forwarded_address_counts_only_behind_a_trusted_proxy() {
        let balancer: IpAddr = "10.0.0.2".parse().unwrap();
        let client: IpAddr = "203.0.113.7".parse().unwrap();
        let trusted = [IpNet::from(balancer)];
        // Straight from the client: its own header is ignored.
        assert_eq!(
            client_ip(Some(client), Some("198.51.100.1"), &trusted),
            Some(client)
        );
        // Through the balancer: the address the balancer saw, not what the client claimed.
        assert_eq!(
            client_ip(Some(balancer), Some("198.51.100.1, 203.0.113.7"), &trusted),
            Some(client)
        );
        // A chain of trusted proxies is walked from the right.
        let inner: IpAddr = "10.0.0.3".parse().unwrap();
        let network: IpNet = "10.0.0.0/24".parse().unwrap();
        assert_eq!(
            client_ip(Some(inner), Some("203.0.113.7, 10.0.0.2"), &[network]),
            Some(client)
        );
        // Garbage past the trusted hops stops at the last address vouched for.
        assert_eq!(
            client_ip(Some(balancer), Some("not-an-ip"), &trusted),
            Some(balancer)
        );
        assert_eq!(client_ip(Some(balancer), None, &trusted), Some(balancer));
        assert_eq!(client_ip(None, Some("203.0.113.7"), &trusted), None);
    }
}
