//! Following a job's events and how they read to a person, shared by `shardwork demo` and
//! `shardwork job watch`.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::Value;
use shardwork_client::ApiClient;
use uuid::Uuid;

/// Job states after which nothing more happens.
const FINAL_STATUSES: [&str; 3] = ["completed", "refunded", "cancelled"];

/// Follows job `id` until it reaches a final status, which it returns: `on_event` sees every
/// event once, in order (including those written as the job ended), and may stop the watch
/// with an error; `on_poll` sees the status after each poll. Gives up after `timeout`.
pub async fn follow(
    api: &ApiClient,
    id: Uuid,
    timeout: Duration,
    poll: Duration,
    on_event: &mut dyn FnMut(&Value) -> anyhow::Result<()>,
    on_poll: &mut dyn FnMut(&str),
) -> anyhow::Result<String> {
    let started = Instant::now();
    let mut after = 0;
    loop {
        // The status is read before the events, so the events of a job seen ended are all in.
        let job = api.job(id).await?;
        let status = job["status"].as_str().unwrap_or_default().to_owned();
        for event in api.events(id, after).await? {
            after = event["id"].as_i64().unwrap_or(after);
            on_event(&event)?;
        }
        on_poll(&status);
        if FINAL_STATUSES.contains(&status.as_str()) {
            return Ok(status);
        }
        if started.elapsed() > timeout {
            bail!("job {id} is still {status} after {} s", timeout.as_secs());
        }
        tokio::time::sleep(poll).await;
    }
}

/// A one-line description of a job event from `GET /v1/jobs/{id}/events`.
pub fn describe(event: &Value) -> String {
    let p = &event["payload"];
    match event["kind"].as_str().unwrap_or_default() {
        "funded" => "escrow funding seen on chain; the job is open".to_owned(),
        "round_opened" => format!("round {} opened: {} tasks queued", p["round"], p["tasks"]),
        "task_claimed" => format!(
            "round {} shard {} claimed by {}",
            p["round"],
            p["shard"],
            p["worker"].as_str().unwrap_or("?")
        ),
        "submitted" => format!(
            "round {} shard {} adapter submitted ({} samples)",
            p["round"], p["shard"], p["samples"]
        ),
        "verdict" => format!(
            "round {} verdict on {}: {}{}",
            p["round"],
            p["worker"].as_str().unwrap_or("?"),
            if p["accepted"].as_bool() == Some(true) {
                format!(
                    "accepted, quality {:.3}",
                    p["quality"].as_f64().unwrap_or(0.0)
                )
            } else {
                "REJECTED".into()
            },
            p["reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        "aggregated" => format!(
            "round {} merged: held-out {} {:.4} (base {:.4})",
            p["round"],
            p["metric_name"].as_str().unwrap_or("metric"),
            p["metric"].as_f64().unwrap_or(f64::NAN),
            p["base_metric"].as_f64().unwrap_or(f64::NAN)
        ),
        "task_requeued" => format!("task requeued: {}", p["reason"].as_str().unwrap_or("?")),
        "task_failed" => format!("task failed after {} attempts", p["attempts"]),
        "completed" => format!(
            "completed on chain (tx {})",
            p["tx_hash"].as_str().unwrap_or("?")
        ),
        other => other.to_owned(),
    }
}
