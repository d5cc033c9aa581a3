//! Publisher-side deduplication for the RabbitMQ adapter.
//!
//! RabbitMQ has no publish deduplication of its own (without plugins), so a key published twice
//! is normally delivered twice. This window remembers the keys one [`super::RabbitQueue`] handle
//! has published in the last `ttl` and drops repeats. It does not cover other processes, a
//! restart, or keys older than the window; consumers must still treat deliveries as
//! at-least-once, which the API's state machine does.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Bound on remembered keys, so a long burst cannot grow memory without limit.
const CAPACITY: usize = 200_000;

pub(super) struct DedupeWindow {
    ttl: Duration,
    seen: HashMap<(String, String), Instant>,
    order: VecDeque<((String, String), Instant)>,
}

impl DedupeWindow {
    pub(super) fn new(ttl: Duration) -> Self {
        DedupeWindow {
            ttl,
            seen: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Records `(queue, key)`; false if it was already recorded within the window.
    pub(super) fn insert(&mut self, queue: &str, key: &str, now: Instant) -> bool {
        self.expire(now);
        if self.ttl.is_zero() {
            return true;
        }
        let entry = (queue.to_owned(), key.to_owned());
        if self.seen.contains_key(&entry) {
            return false;
        }
        self.seen.insert(entry.clone(), now);
        self.order.push_back((entry, now));
        true
    }

    /// Forgets a key whose publish failed, so a retry is not mistaken for a repeat.
    pub(super) fn forget(&mut self, queue: &str, key: &str) {
        self.seen.remove(&(queue.to_owned(), key.to_owned()));
    }

    fn expire(&mut self, now: Instant) {
        while let Some((entry, at)) = self.order.front() {
            let expired = now.duration_since(*at) >= self.ttl || self.order.len() > CAPACITY;
            if !expired {
                break;
            }
            // Only remove the map entry this queue slot created (not a later re-insert).
            if self.seen.get(entry) == Some(at) {
                self.seen.remove(entry);
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_within_window_is_dropped_and_allowed_after_it() {
        let mut window = DedupeWindow::new(Duration::from_secs(10));
        let start = Instant::now();
        assert!(window.insert("q", "k", start));
        assert!(!window.insert("q", "k", start + Duration::from_secs(9)));
        assert!(window.insert("other", "k", start), "keys are per queue");
        assert!(window.insert("q", "k", start + Duration::from_secs(10)));
    }

    #[test]
    fn forgotten_key_can_be_published_again() {
        let mut window = DedupeWindow::new(Duration::from_secs(10));
        let now = Instant::now();
        assert!(window.insert("q", "k", now));
        window.forget("q", "k");
        assert!(window.insert("q", "k", now));
    }

    #[test]
    fn zero_window_never_drops() {
        let mut window = DedupeWindow::new(Duration::ZERO);
        let now = Instant::now();
        assert!(window.insert("q", "k", now));
        assert!(window.insert("q", "k", now));
    }
}
