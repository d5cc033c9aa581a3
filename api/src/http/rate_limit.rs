//! The per-caller rate limit, and the paths it never applies to. Kept apart from the
//! middleware that applies it (`crate::http::telemetry`) because the state holds the limiter
//! and the OpenAPI description names the exempt paths.

use std::collections::HashMap;
use std::sync::Mutex;

/// Fixed one-minute windows per caller. Coarser than a token bucket (a burst of 2× the limit
/// can straddle a window edge) but one map entry per caller and no timers.
pub struct RateLimiter {
    per_minute: u32,
    windows: Mutex<HashMap<String, (i64, u32)>>,
}

/// Entries kept before stale windows are swept.
const SWEEP_AT: usize = 100_000;

impl RateLimiter {
    /// A limiter admitting `per_minute` requests per caller and minute; 0 admits everything.
    pub fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request by `key` at unix time `now_secs`; `Err(retry_after_secs)` when over.
    pub fn admit(&self, key: &str, now_secs: i64) -> Result<(), i64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let minute = now_secs.div_euclid(60);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() >= SWEEP_AT {
            windows.retain(|_, (m, _)| *m == minute);
        }
        let entry = windows.entry(key.to_owned()).or_insert((minute, 0));
        if entry.0 != minute {
            *entry = (minute, 0);
        }
        if entry.1 >= self.per_minute {
            return Err(60 - now_secs.rem_euclid(60));
        }
        entry.1 += 1;
        Ok(())
    }
}

/// Probes and scrapes are never rate limited: a limited probe would restart a healthy server.
pub fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_resets_with_the_next_minute() {
        let limiter = RateLimiter::new(2);
        assert!(limiter.admit("a", 120).is_ok());
        assert!(limiter.admit("a", 130).is_ok());
        assert_eq!(limiter.admit("a", 135), Err(45));
        assert!(limiter.admit("b", 135).is_ok(), "callers are counted apart");
        assert!(limiter.admit("a", 180).is_ok());
    }

    #[test]
    fn zero_means_unlimited() {
        let limiter = RateLimiter::new(0);
        for _ in 0..1000 {
            assert!(limiter.admit("a", 0).is_ok());
        }
    }
}
