//! A job's sealing keys. Each is derived from the configured `sealing_secret` and the job id,
//! so no key is ever stored: not in the content store (where the sealed data is public), not in
//! the database (whose backups travel further than the server's secrets). Rotating the secret
//! makes old sealed content unreadable, which is its point.
//!
//! Three roots per job, each for its own readers: the held-out key (the validator), the job key
//! of `shardwork_core::store::keys` (the validator; its children reach workers with their leases
//! and the requester through the result endpoint), and the dataset key (nobody but this server:
//! an uploaded dataset holds the held-out records, so it is never stored in the clear).

use sha2::{Digest, Sha256};
use shardwork_core::protocol::TaskMessage;
use shardwork_core::protocol::node::LeaseKeys;
use shardwork_core::store::keys::Sealed;
use shardwork_core::store::seal::SealingKey;
use uuid::Uuid;

/// Domain separation of each root: these hashes derive nothing else.
const HELD_OUT: &[u8] = b"shardwork/held-out-key/v1\0";
const JOB: &[u8] = b"shardwork/job-key/v1\0";
const DATASET: &[u8] = b"shardwork/dataset-key/v1\0";

fn derive(context: &[u8], secret: &str, job_id: Uuid) -> SealingKey {
    let mut hasher = Sha256::new();
    hasher.update(context);
    hasher.update((secret.len() as u64).to_be_bytes());
    hasher.update(secret.as_bytes());
    hasher.update(job_id.as_bytes());
    SealingKey::from_bytes(hasher.finalize().into())
}

/// The key that seals job `job_id`'s held-out set, derived from the `sealing_secret`.
pub fn held_out_key(secret: &str, job_id: Uuid) -> SealingKey {
    derive(HELD_OUT, secret, job_id)
}

/// The root of job `job_id`'s adapter keys (`shardwork_core::store::keys`).
pub fn job_key(secret: &str, job_id: Uuid) -> SealingKey {
    derive(JOB, secret, job_id)
}

/// The key an uploaded dataset is stored under. No endpoint gives it out.
pub fn dataset_key(secret: &str, job_id: Uuid) -> SealingKey {
    derive(DATASET, secret, job_id)
}

/// The associated data an uploaded dataset is sealed with.
pub fn dataset_associated_data(job_id: Uuid) -> Vec<u8> {
    format!("shardwork dataset {job_id}").into_bytes()
}

/// What a lease of `task` to `worker` gives: the key to seal its submission with; when the
/// round starts from an adapter (every round after the first; round 1 of a job that continues
/// from one), the key that opens it; and when the task names a reference policy (a preference
/// job that continues from an adapter), the key that opens that.
pub fn lease_keys(secret: &str, task: &TaskMessage, worker: &str) -> LeaseKeys {
    let job = job_key(secret, task.job_id);
    let submission = Sealed::Submission {
        task_id: task.task_id,
        worker: worker.to_owned(),
    };
    LeaseKeys {
        submission: submission.key(&job).to_hex(),
        start: task
            .previous_adapter_cid
            .as_ref()
            .map(|_| Sealed::start_of(task.round).key(&job).to_hex()),
        reference: task
            .reference_adapter_cid
            .as_ref()
            .map(|_| Sealed::JOB_START.key(&job).to_hex()),
    }
}

/// The associated data a job's held-out set is sealed with (the validator opens it with the
/// same function).
pub fn associated_data(job_id: Uuid) -> Vec<u8> {
    shardwork_core::store::seal::held_out_associated_data(job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_per_job_per_secret_and_per_root_and_are_stable() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(held_out_key("s", a), held_out_key("s", a));
        assert_ne!(held_out_key("s", a), held_out_key("s", b));
        assert_ne!(held_out_key("s", a), held_out_key("t", a));
        assert_ne!(held_out_key("s", a), job_key("s", a));
        assert_ne!(job_key("s", a), dataset_key("s", a));
        assert_ne!(held_out_key("s", a), dataset_key("s", a));
    }

    #[test]
    fn sealed_set_opens_only_for_its_job() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let key = held_out_key("secret", a);
        let sealed = shardwork_core::store::seal::seal(&key, b"held out", &associated_data(a));
        assert_eq!(
            shardwork_core::store::seal::open(&key, &sealed, &associated_data(a)).unwrap(),
            b"held out"
        );
        assert!(shardwork_core::store::seal::open(&key, &sealed, &associated_data(b)).is_err());
    }
}
