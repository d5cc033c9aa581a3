//! What a worker registers: its device and the memory it can train in, measured at start.
//!
//! Host memory is what the kernel says is available now (`MemAvailable`), capped by the
//! container's cgroup limit when there is one: a worker in a 4 GiB container on a 64 GiB host
//! has 4 GiB, and one beside a busy process has what that process leaves. An operator may
//! register less (`--memory-mb`) to keep room for other work; never more than was measured.

use candle_core::Device;
use serde_json::{Value, json};

use crate::NodeError;

/// Host memory available to training, MiB: `MemAvailable` capped by the cgroup's limit.
pub fn host_memory_mb() -> Result<u64, NodeError> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| NodeError::Io(format!("/proc/meminfo: {e}")))?;
    let available_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .ok_or_else(|| NodeError::Io("/proc/meminfo has no MemAvailable line".into()))?;
    let mut mb = available_kb / 1024;
    if let Some(limit) = cgroup_limit_bytes() {
        let used = cgroup_usage_bytes().unwrap_or(0);
        mb = mb.min(limit.saturating_sub(used) >> 20);
    }
    Ok(mb)
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// cgroup v2's `memory.max`, or v1's `memory.limit_in_bytes`; `None` when unlimited ("max",
/// or v1's page-rounded i64::MAX).
fn cgroup_limit_bytes() -> Option<u64> {
    read_number("/sys/fs/cgroup/memory.max")
        .or_else(|| read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .filter(|limit| *limit < 1 << 60)
}

fn cgroup_usage_bytes() -> Option<u64> {
    read_number("/sys/fs/cgroup/memory.current")
        .or_else(|| read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes"))
}

/// Accelerator memory, MiB: `SHARDWORK_GPU_MEMORY_MB`, else the first GPU's total as
/// `nvidia-smi` reports it.
fn gpu_memory_mb() -> Result<u64, NodeError> {
    if let Ok(value) = std::env::var("SHARDWORK_GPU_MEMORY_MB") {
        return value.trim().parse().map_err(|_| {
            NodeError::Io(format!(
                "SHARDWORK_GPU_MEMORY_MB={value:?} is not a number of MiB"
            ))
        });
    }
    let output = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=memory.total", "--format=csv,noheader,nounits"])
        .output()
        .map_err(|e| {
            NodeError::Io(format!(
                "measuring GPU memory with nvidia-smi: {e}; set SHARDWORK_GPU_MEMORY_MB"
            ))
        })?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| {
            NodeError::Io("nvidia-smi printed no memory.total; set SHARDWORK_GPU_MEMORY_MB".into())
        })
}

/// The capabilities a worker on `device` registers; `limit_mb` caps the measured memory.
pub fn measure(device: &Device, limit_mb: Option<u64>) -> Result<Value, NodeError> {
    let cap = |measured: u64| {
        limit_mb
            .map_or(measured, |limit| limit.min(measured))
            .max(1)
    };
    let host = cap(host_memory_mb()?);
    Ok(if device.is_cuda() {
        json!({ "device": "gpu", "memory_mb": host, "gpu_memory_mb": cap(gpu_memory_mb()?) })
    } else {
        json!({ "device": "cpu", "memory_mb": host })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_worker_registers_measured_memory_capped_by_its_operator() {
        let measured = measure(&Device::Cpu, None).unwrap();
        let host = measured["memory_mb"].as_u64().unwrap();
        assert!(
            host > 64,
            "this machine has more than 64 MiB available: {measured}"
        );
        assert!(measured.get("gpu_memory_mb").is_none());
        let capped = measure(&Device::Cpu, Some(300)).unwrap();
        assert_eq!(capped["memory_mb"], 300.min(host));
    }
}
