//! The well-known development accounts (anvil's and hardhat's default mnemonic,
//! "test test test test test test test test test test test junk", first ten keys).
//!
//! The embedded ledger funds exactly these, so `shardwork up`, the embedded chain and an
//! `anvil` started with defaults offer the same accounts, and the shared ledger test suite runs
//! unchanged on both. Public knowledge: never hold real funds with them.

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;

/// The ten private keys, hex without `0x`, in derivation order (index 0 first).
pub const DEV_PRIVATE_KEYS: [&str; 10] = [
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];

/// What each dev account starts with on the embedded chain: 10,000 ETH, as on anvil.
pub fn dev_balance() -> U256 {
    U256::from(10_000u64) * U256::from(10u64).pow(U256::from(18u64))
}

/// The dev signers, in the order of [`DEV_PRIVATE_KEYS`].
pub fn dev_signers() -> Vec<PrivateKeySigner> {
    DEV_PRIVATE_KEYS
        .iter()
        .map(|key| key.parse().expect("the dev keys are valid secp256k1 keys"))
        .collect()
}

/// The dev accounts' addresses.
pub fn dev_addresses() -> Vec<Address> {
    dev_signers()
        .iter()
        .map(PrivateKeySigner::address)
        .collect()
}
