//! Sealing: authenticated encryption for content that must live on a public store but be read
//! only by its key holder (a job's held-out evaluation set, readable by the validator only).
//!
//! XChaCha20-Poly1305 (RustCrypto `chacha20poly1305`): its 192-bit nonce is safe to pick at
//! random for every message, so no nonce counter has to be stored or coordinated, and one key can
//! seal many shards. The associated data (for example the job id) is authenticated but not
//! stored, so a sealed blob cannot be replayed as another job's data.
//!
//! Sealed layout: `version (1 byte) || nonce (24 bytes) || ciphertext || tag (16 bytes)`. The
//! key is never part of it; callers keep keys in their own secret configuration.

use std::fmt;
use std::str::FromStr;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

use super::StoreError;

/// Format version written as the first byte, so the scheme can change without guessing.
const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Smallest valid sealed message: header and tag around an empty plaintext.
pub const SEAL_OVERHEAD: usize = 1 + NONCE_LEN + TAG_LEN;

/// The associated data a job's held-out set is sealed with: binds the ciphertext to its job,
/// so a sealed set moved to another job does not open.
pub fn held_out_associated_data(job_id: uuid::Uuid) -> Vec<u8> {
    format!("shardwork held-out {job_id}").into_bytes()
}

/// A 256-bit sealing key. Prints as `SealingKey(<redacted>)`; serializes as 64 hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct SealingKey([u8; 32]);

/// Why a string is not a sealing key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sealing key must be 64 hex digits (32 bytes): {0}")]
pub struct InvalidSealingKey(String);

impl SealingKey {
    /// A fresh random key from the operating system's entropy (via the thread-local CSPRNG).
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        SealingKey(key)
    }

    /// The key made of these 32 bytes (one derived from a secret, say).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SealingKey(bytes)
    }

    /// The key as 64 lowercase hex digits, for the key holder's secret configuration.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The raw key bytes, for deriving child keys ([`super::keys`]).
    pub(crate) fn expose(&self) -> &[u8; 32] {
        &self.0
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.0).into())
    }
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealingKey(<redacted>)")
    }
}

impl FromStr for SealingKey {
    type Err = InvalidSealingKey;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(input.trim(), &mut key)
            .map_err(|err| InvalidSealingKey(err.to_string()))?;
        Ok(SealingKey(key))
    }
}

impl serde::Serialize for SealingKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for SealingKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Encrypts and authenticates `plaintext`, binding it to `associated` (e.g. the job id).
pub fn seal(key: &SealingKey, plaintext: &[u8], associated: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    let aad = aad(associated);
    let ciphertext = key
        .cipher()
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad: &aad,
            },
        )
        .expect("XChaCha20-Poly1305 encryption cannot fail for in-memory input");
    let mut out = Vec::with_capacity(SEAL_OVERHEAD + plaintext.len());
    out.push(VERSION);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ciphertext);
    out
}

/// Decrypts what [`seal`] produced. A wrong key, different associated data, any changed byte,
/// truncation or an unknown version are all [`StoreError::SealBroken`]: the cipher cannot tell
/// them apart, and a caller must treat them alike.
pub fn open(key: &SealingKey, sealed: &[u8], associated: &[u8]) -> Result<Vec<u8>, StoreError> {
    if sealed.len() < SEAL_OVERHEAD || sealed[0] != VERSION {
        return Err(StoreError::SealBroken);
    }
    let (nonce, ciphertext) = sealed[1..].split_at(NONCE_LEN);
    let aad = aad(associated);
    key.cipher()
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad: &aad,
            },
        )
        .map_err(|_| StoreError::SealBroken)
}

/// The version byte is authenticated too, so a downgrade to another format cannot go unnoticed.
fn aad(associated: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(1 + associated.len());
    aad.push(VERSION);
    aad.extend_from_slice(associated);
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_data_opens_with_the_same_key_and_job() {
        let key = SealingKey::generate();
        let sealed = seal(&key, b"held-out rows", b"job-42");
        assert_eq!(sealed.len(), SEAL_OVERHEAD + 13);
        assert!(!sealed.windows(13).any(|w| w == b"held-out rows"));
        assert_eq!(open(&key, &sealed, b"job-42").unwrap(), b"held-out rows");
    }

    #[test]
    fn sealing_twice_gives_different_ciphertexts() {
        let key = SealingKey::generate();
        assert_ne!(seal(&key, b"same", b""), seal(&key, b"same", b""));
    }

    #[test]
    fn wrong_key_other_job_tamper_and_truncation_are_all_seal_broken() {
        let key = SealingKey::generate();
        let sealed = seal(&key, b"held-out rows", b"job-42");
        let broken =
            |result: Result<Vec<u8>, StoreError>| matches!(result, Err(StoreError::SealBroken));
        assert!(broken(open(&SealingKey::generate(), &sealed, b"job-42")));
        assert!(broken(open(&key, &sealed, b"job-43")));
        for i in 0..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[i] ^= 0x01;
            assert!(
                broken(open(&key, &tampered, b"job-42")),
                "flipped byte {i} went unnoticed"
            );
        }
        for len in 0..sealed.len() {
            assert!(
                broken(open(&key, &sealed[..len], b"job-42")),
                "truncation to {len} went unnoticed"
            );
        }
    }

    #[test]
    fn key_is_redacted_in_debug_and_round_trips_as_hex() {
        let key = SealingKey::generate();
        let hex = key.to_hex();
        assert_eq!(format!("{key:?}"), "SealingKey(<redacted>)");
        assert!(!format!("{key:?}").contains(&hex[..8]));
        assert_eq!(hex.parse::<SealingKey>().unwrap(), key);
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(serde_json::from_str::<SealingKey>(&json).unwrap(), key);
    }

    #[test]
    fn malformed_key_text_names_the_problem() {
        let err = "abc".parse::<SealingKey>().unwrap_err();
        assert!(err.to_string().contains("64 hex digits"), "{err}");
        assert!("zz".repeat(32).parse::<SealingKey>().is_err());
        assert!("00".repeat(33).parse::<SealingKey>().is_err());
    }
}
