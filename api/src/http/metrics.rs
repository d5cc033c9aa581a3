//! Prometheus metrics, written by hand: two families (request count and latency histogram)
//! do not justify the `prometheus` crate's build time.
//!
//! Requests are labelled by route *pattern* (`/v1/jobs/{id}`), never by the raw path, so label
//! cardinality is bounded by the routing table.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The API's request metrics: a count per method, route pattern and status, and a latency
/// histogram per method and route pattern.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<(String, String), Histogram>>,
}

impl Metrics {
    /// Counts one request to `route` (its pattern) and adds `elapsed` to its latency histogram.
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        drop(requests);
        let seconds = elapsed.as_secs_f64();
        let mut latency = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let h = latency
            .entry((method.to_owned(), route.to_owned()))
            .or_default();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP shardwork_http_requests_total HTTP requests served.\n");
        out.push_str("# TYPE shardwork_http_requests_total counter\n");
        for ((method, route, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "shardwork_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape(method),
                escape(route)
            );
        }
        out.push_str("# HELP shardwork_http_request_duration_seconds HTTP request latency.\n");
        out.push_str("# TYPE shardwork_http_request_duration_seconds histogram\n");
        for ((method, route), h) in self
            .latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let labels = format!("method=\"{}\",route=\"{}\"", escape(method), escape(route));
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "shardwork_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "shardwork_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "shardwork_http_request_duration_seconds_sum{{{labels}}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "shardwork_http_request_duration_seconds_count{{{labels}}} {}",
                h.count
            );
        }
        out
    }
}

/// Label values escape backslash, quote and newline (exposition format rules).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_counts_add_up() {
        let m = Metrics::default();
        m.observe("GET", "/v1/jobs/{id}", 200, Duration::from_millis(3));
        m.observe("GET", "/v1/jobs/{id}", 404, Duration::from_millis(300));
        let text = m.render();
        assert!(text.contains(
            "shardwork_http_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\",status=\"404\"} 1"
        ));
        assert!(
            text.contains("route=\"/v1/jobs/{id}\",le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("route=\"/v1/jobs/{id}\",le=\"0.5\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("_count{method=\"GET\",route=\"/v1/jobs/{id}\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}
