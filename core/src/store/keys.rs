//! A job's key tree: what of a job is sealed on the content store, and which key opens it.
//!
//! On a store anyone can read (a Kubo node: every stored CID is public), only what is public by
//! design stays in the clear: job.json, the shard manifest, the shards workers train on and the
//! base model. Everything else a job stores is sealed ([`super::seal`]), each reader getting only
//! the keys it may hold:
//!
//! * the **job key** (the API derives it from its sealing secret; the validator gets it with the
//!   held-out key) opens every adapter of the job;
//! * a **submission key** ([`Sealed::Submission`], one per task and worker) seals what that
//!   worker hands in: the worker gets it with its lease, the validator derives it;
//! * a **round key** ([`Sealed::RoundResult`]) seals a round's merged adapter: the next round's
//!   leaseholders get it with their lease, and the API opens the last round's for the requester.
//!
//! Child keys are one-way hashes of the job key, so a worker holding its own keys learns nothing
//! of its siblings'.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::StoreError;
use super::seal::{SealingKey, open, seal};

/// Domain separation: this hash derives nothing else.
const CONTEXT: &[u8] = b"shardwork/job-key-tree/v1\0";

/// Something of a job sealed under its own child of the job key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealed {
    /// The adapter and metrics one worker handed in for one task.
    Submission {
        /// The task.
        task_id: Uuid,
        /// The worker's address (any case: it is lowered here).
        worker: String,
    },
    /// The adapter a round's merge produced (the next round's start; the job's result after
    /// the last round). Round 0's is the adapter the job continues from (`base_model.adapter`),
    /// sealed again to this job when it was posted.
    RoundResult {
        /// The round, counted from 1; 0 for the job's starting adapter.
        round: u32,
    },
}

impl Sealed {
    /// What the adapter a job continues from is sealed as, once it is the job's (its round 0's
    /// result): round 1's start, and a preference job's reference policy in every round.
    pub const JOB_START: Sealed = Sealed::RoundResult { round: 0 };

    /// What round `round`'s starting adapter is sealed as, when the round has one: the
    /// previous round's merge, or in round 1 the adapter the job continues from. (A round 1
    /// without a starting adapter trains from the bare base model.)
    pub fn start_of(round: u32) -> Sealed {
        Sealed::RoundResult {
            round: round.saturating_sub(1),
        }
    }

    /// Its label in the key derivation and the associated data.
    fn label(&self) -> String {
        match self {
            Sealed::Submission { task_id, worker } => {
                format!("submission {task_id} {}", worker.to_ascii_lowercase())
            }
            Sealed::RoundResult { round } => format!("round {round}"),
        }
    }

    /// Its key, derived from the job key.
    pub fn key(&self, job_key: &SealingKey) -> SealingKey {
        let label = self.label();
        let mut hasher = Sha256::new();
        hasher.update(CONTEXT);
        hasher.update(job_key.expose());
        hasher.update((label.len() as u64).to_be_bytes());
        hasher.update(label.as_bytes());
        SealingKey::from_bytes(hasher.finalize().into())
    }

    /// How its files are sealed, for a holder of the job key.
    pub fn seal_for(&self, job_id: Uuid, job_key: &SealingKey) -> BundleSeal {
        self.seal_with(job_id, self.key(job_key))
    }

    /// How its files are sealed, for a holder of its own key only (a worker).
    pub fn seal_with(&self, job_id: Uuid, key: SealingKey) -> BundleSeal {
        BundleSeal {
            key,
            context: format!("shardwork {job_id} {}", self.label()),
        }
    }
}

/// The key and context one bundle's files are sealed with. Each file's associated data names
/// the job, what the bundle is, and the file, so no sealed file can pass for another job's, for
/// another task's, or for its bundle sibling.
#[derive(Debug, Clone)]
pub struct BundleSeal {
    key: SealingKey,
    context: String,
}

impl BundleSeal {
    fn associated(&self, name: &str) -> Vec<u8> {
        format!("{} file {name}", self.context).into_bytes()
    }

    /// `bytes` of file `name`, sealed.
    pub fn seal_file(&self, name: &str, bytes: &[u8]) -> Vec<u8> {
        seal(&self.key, bytes, &self.associated(name))
    }

    /// File `name` opened, or [`StoreError::SealBroken`].
    pub fn open_file(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        open(&self.key, sealed, &self.associated(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission(task: u128, worker: &str) -> Sealed {
        Sealed::Submission {
            task_id: Uuid::from_u128(task),
            worker: worker.into(),
        }
    }

    #[test]
    fn children_differ_and_do_not_depend_on_address_case() {
        let job = SealingKey::from_bytes([7; 32]);
        let keys = [
            submission(1, "0xab").key(&job),
            submission(2, "0xab").key(&job),
            submission(1, "0xcd").key(&job),
            Sealed::RoundResult { round: 1 }.key(&job),
            Sealed::RoundResult { round: 2 }.key(&job),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
            assert_ne!(a, &job);
        }
        assert_eq!(submission(1, "0xAB").key(&job), keys[0]);
        assert_eq!(Sealed::start_of(1), Sealed::RoundResult { round: 0 });
        assert_eq!(Sealed::start_of(3), Sealed::RoundResult { round: 2 });
        assert_ne!(
            submission(1, "0xab").key(&SealingKey::from_bytes([8; 32])),
            keys[0]
        );
    }

    #[test]
    fn a_file_opens_only_as_itself_in_its_own_bundle() {
        let job_key = SealingKey::from_bytes([1; 32]);
        let job = Uuid::from_u128(9);
        let mine = submission(1, "0xab").seal_for(job, &job_key);
        let sealed = mine.seal_file("adapter_model.safetensors", b"weights");
        assert_eq!(
            mine.open_file("adapter_model.safetensors", &sealed)
                .unwrap(),
            b"weights"
        );
        // The worker's own copy of its key opens it the same way.
        let worker_side = submission(1, "0xab").seal_with(job, submission(1, "0xab").key(&job_key));
        assert!(
            worker_side
                .open_file("adapter_model.safetensors", &sealed)
                .is_ok()
        );
        let broken = |seal: BundleSeal, name: &str| {
            matches!(seal.open_file(name, &sealed), Err(StoreError::SealBroken))
        };
        assert!(broken(mine.clone(), "adapter_config.json"));
        assert!(broken(
            submission(2, "0xab").seal_for(job, &job_key),
            "adapter_model.safetensors"
        ));
        assert!(broken(
            submission(1, "0xab").seal_for(Uuid::from_u128(10), &job_key),
            "adapter_model.safetensors"
        ));
        assert!(broken(
            Sealed::RoundResult { round: 1 }.seal_for(job, &job_key),
            "adapter_model.safetensors"
        ));
    }
}
