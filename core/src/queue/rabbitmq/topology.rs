//! Queue names and arguments: what the adapter declares on the broker for one logical queue.
//!
//! For a queue `q`:
//! * `q`: durable quorum queue. Rejected messages and messages returned more than
//!   `x-delivery-limit` times are dead-lettered through the default exchange to `q.dlq`.
//! * `q.dlq`: durable quorum queue, the dead-letter destination.
//! * `q.retry.<n>s`: one durable queue per retry delay in use, holding messages for `n` seconds
//!   (`x-message-ttl`) before dead-lettering them back to `q`. TTL queues need no plugin; since
//!   every message in one of them waits the same time, expiry at the head is exact. Delays are
//!   rounded up to whole seconds, so the number of such queues stays small.

use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

/// Our header counting deliveries in earlier lives of a message (before it was republished for
/// a delayed or plain requeue); the broker's `x-delivery-count` counts only the current life.
pub(super) const ATTEMPTS_HEADER: &str = "x-shardwork-attempts";
/// Set by quorum queues on redelivery: how many times this copy was returned to the queue.
pub(super) const BROKER_COUNT_HEADER: &str = "x-delivery-count";

pub(super) fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// Whole seconds, at least one: the retry queue a `delay` waits in.
pub(super) fn retry_seconds(delay: Duration) -> u64 {
    let secs = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    secs.max(1)
}

pub(super) fn retry_queue(queue: &str, seconds: u64) -> String {
    format!("{queue}.retry.{seconds}s")
}

fn long(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

fn key(name: &str) -> ShortString {
    ShortString::from(name)
}

pub(super) fn main_arguments(queue: &str, max_deliveries: u32) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(key("x-queue-type"), long("quorum"));
    args.insert(key("x-dead-letter-exchange"), long(""));
    args.insert(
        key("x-dead-letter-routing-key"),
        long(&dead_letter_queue(queue)),
    );
    // The consumer dead-letters a message on its (max_deliveries + 1)-th delivery itself, using
    // the exact count; the broker's limit is the backstop for a consumer that crashes before it
    // can look, and counts returns, so it allows max_deliveries returns after the first.
    let limit = i64::from(max_deliveries);
    args.insert(key("x-delivery-limit"), AMQPValue::LongLongInt(limit));
    args
}

pub(super) fn dead_letter_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(key("x-queue-type"), long("quorum"));
    args
}

pub(super) fn retry_arguments(queue: &str, seconds: u64) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(key("x-queue-type"), long("classic"));
    let ttl = i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    args.insert(key("x-message-ttl"), AMQPValue::LongLongInt(ttl));
    args.insert(key("x-dead-letter-exchange"), long(""));
    args.insert(key("x-dead-letter-routing-key"), long(queue));
    args
}

/// Reads an integer header whatever width the broker or publisher chose.
pub(super) fn header_count(headers: Option<&FieldTable>, name: &str) -> u32 {
    let value = headers.and_then(|h| h.inner().get(&key(name)));
    let n: i64 = match value {
        Some(AMQPValue::ShortShortInt(v)) => i64::from(*v),
        Some(AMQPValue::ShortShortUInt(v)) => i64::from(*v),
        Some(AMQPValue::ShortInt(v)) => i64::from(*v),
        Some(AMQPValue::ShortUInt(v)) => i64::from(*v),
        Some(AMQPValue::LongInt(v)) => i64::from(*v),
        Some(AMQPValue::LongUInt(v)) => i64::from(*v),
        Some(AMQPValue::LongLongInt(v)) => *v,
        _ => 0,
    };
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_to_whole_seconds_never_early() {
        assert_eq!(retry_seconds(Duration::ZERO), 1);
        assert_eq!(retry_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn counts_are_read_from_any_integer_width() {
        let mut headers = FieldTable::default();
        headers.insert(key("a"), AMQPValue::LongInt(3));
        headers.insert(key("b"), AMQPValue::LongLongInt(4));
        headers.insert(key("c"), AMQPValue::LongString(LongString::from("5")));
        assert_eq!(header_count(Some(&headers), "a"), 3);
        assert_eq!(header_count(Some(&headers), "b"), 4);
        assert_eq!(header_count(Some(&headers), "c"), 0, "not an integer");
        assert_eq!(header_count(None, "a"), 0);
    }
}
