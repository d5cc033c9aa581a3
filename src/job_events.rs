//! How a job's events read to a person: one line each, shared by `shardwork demo` and
//! `shardwork job watch`.

use serde_json::Value;

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
