//! A node's liveness, for container health checks: while a node runs it rewrites a heartbeat
//! file in its work folder every [`BEAT`]; `shardwork-node health` reads it and calls the node
//! unhealthy once it is older than [`STALE`]. A training step runs on its own thread, so a long
//! task keeps beating; a node whose async loop is wedged (a deadlock, a blocked runtime) stops.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::NodeError;

/// The heartbeat's file name in the work folder.
pub const FILE: &str = "heartbeat";
/// How often a running node rewrites it.
pub const BEAT: Duration = Duration::from_secs(10);
/// Older than this (six missed beats), the node is unhealthy.
pub const STALE: Duration = Duration::from_secs(60);

/// Rewrites `work_dir`/[`FILE`] with the time every [`BEAT`] until the runtime stops. A failed
/// write is logged and retried on the next beat: the health check then reports the staleness.
pub fn beat(work_dir: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BEAT);
        loop {
            tick.tick().await;
            if let Err(e) = write_beat(&work_dir) {
                tracing::warn!("heartbeat not written: {e}");
            }
        }
    })
}

fn write_beat(work_dir: &Path) -> Result<(), NodeError> {
    let io = |e: std::io::Error| NodeError::Io(format!("{}: {e}", work_dir.display()));
    std::fs::create_dir_all(work_dir).map_err(io)?;
    let now = unix_seconds();
    // Written aside and renamed, so a health check never reads half a number.
    let partial = work_dir.join(format!("{FILE}.partial"));
    std::fs::write(&partial, now.to_string()).map_err(io)?;
    std::fs::rename(&partial, work_dir.join(FILE)).map_err(io)
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// How long ago the node in `work_dir` last beat, or why it is unhealthy.
pub fn check(work_dir: &Path) -> Result<Duration, NodeError> {
    let path = work_dir.join(FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        NodeError::Io(format!(
            "no heartbeat at {} ({e}): the node is not running in this work folder",
            path.display()
        ))
    })?;
    let at: u64 = text
        .trim()
        .parse()
        .map_err(|_| NodeError::Io(format!("{} holds no time: {text:?}", path.display())))?;
    let age = Duration::from_secs(unix_seconds().saturating_sub(at));
    if age > STALE {
        return Err(NodeError::Io(format!(
            "the last heartbeat is {} s old (unhealthy past {} s): the node's loop has stopped",
            age.as_secs(),
            STALE.as_secs()
        )));
    }
    Ok(age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fresh_and_stale_heartbeats() {
        let dir = tempfile::tempdir().unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no heartbeat"), "{err}");

        write_beat(dir.path()).unwrap();
        assert!(check(dir.path()).unwrap() <= Duration::from_secs(1));

        let old = unix_seconds() - STALE.as_secs() - 5;
        std::fs::write(dir.path().join(FILE), old.to_string()).unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("s old"), "{err}");

        std::fs::write(dir.path().join(FILE), "soon").unwrap();
        assert!(check(dir.path()).is_err());
    }

    #[tokio::test]
    async fn a_running_node_beats_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let beating = beat(dir.path().join("node"));
        let path = dir.path().join("node");
        for _ in 0..50 {
            if check(&path).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(check(&path).is_ok());
        beating.abort();
    }
}
