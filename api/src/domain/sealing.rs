//! Held-out sealing keys. Each job's key is derived from the configured `sealing_secret` and
//! the job id, so no key is ever stored: not in the content store (where the sealed data is
//! public), not in the database (whose backups travel further than the server's secrets).
//! Rotating the secret makes old held-out sets unreadable, which is its point.

use sha2::{Digest, Sha256};
use shardwork_core::store::seal::SealingKey;
use uuid::Uuid;

/// Domain separation: this hash is used for nothing else.
const CONTEXT: &[u8] = b"shardwork/held-out-key/v1\0";

/// The key that seals job `job_id`'s held-out set, derived from the `sealing_secret`.
pub fn held_out_key(secret: &str, job_id: Uuid) -> SealingKey {
    let mut hasher = Sha256::new();
    hasher.update(CONTEXT);
    hasher.update((secret.len() as u64).to_be_bytes());
    hasher.update(secret.as_bytes());
    hasher.update(job_id.as_bytes());
    SealingKey::from_bytes(hasher.finalize().into())
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
    fn keys_differ_per_job_and_per_secret_and_are_stable() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(held_out_key("s", a), held_out_key("s", a));
        assert_ne!(held_out_key("s", a), held_out_key("s", b));
        assert_ne!(held_out_key("s", a), held_out_key("t", a));
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
