//! Whether the platform's nodes can hold a job: at posting, the job's training memory against
//! the largest registered worker; at claim time, against the claiming worker.
//!
//! A worker trains on its device: a GPU worker's limit is its accelerator memory, a CPU
//! worker's its host memory, as each measured and registered at start.

use sea_orm::{DatabaseConnection, EntityTrait};

use crate::domain::DomainError;
use crate::entities::{job, worker};

/// Memory (MiB) the worker whose registered capabilities are `capabilities` trains in.
pub fn training_memory_of(capabilities: &serde_json::Value) -> u64 {
    let host = capabilities["memory_mb"].as_u64().unwrap_or(0);
    match capabilities["device"].as_str() {
        Some("gpu") => capabilities["gpu_memory_mb"].as_u64().unwrap_or(0),
        _ => host,
    }
}

/// Refuses a job needing `memory_mb` that no registered worker can hold; while no worker has
/// registered yet, the deployment's `ceiling_mb` stands in for the fleet. The refusal names
/// `base_model.cid` (the model's size decides the memory) and says what would fit.
pub async fn check_fits(
    db: &DatabaseConnection,
    memory_mb: u64,
    ceiling_mb: u64,
) -> Result<(), DomainError> {
    let workers = worker::Entity::find().all(db).await?;
    let (largest, whose) = match workers
        .iter()
        .map(|w| training_memory_of(&w.capabilities))
        .max()
    {
        Some(largest) => (largest, "the largest registered worker"),
        None => (
            ceiling_mb,
            "this deployment's limit while no worker is registered",
        ),
    };
    if memory_mb > largest {
        return Err(DomainError::invalid(
            "base_model.cid",
            format!(
                "training this model with this batch_size and max_seq_len needs about \
                 {memory_mb} MiB; {whose} has {largest} MiB (lower training.batch_size or \
                 training.max_seq_len, or use a smaller model)"
            ),
        ));
    }
    Ok(())
}

/// Refuses `worker` a task of `job` that needs more memory than the worker registered (403:
/// the worker puts the message back for a larger one).
pub fn check_worker_fits(job: &job::Model, worker: &worker::Model) -> Result<(), DomainError> {
    let Some(needed) = job.memory_mb else {
        return Ok(());
    };
    let has = training_memory_of(&worker.capabilities);
    if u64::try_from(needed).unwrap_or(u64::MAX) > has {
        return Err(DomainError::Forbidden(format!(
            "job {} needs about {needed} MiB to train; {} registered {has} MiB",
            job.id, worker.address
        )));
    }
    Ok(())
}
