//! The embedded chain's state file: serde of accounts, storage, logs and clock, written
//! atomically (temp file, fsync, rename) so a crash mid-write leaves the previous state intact.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use alloy::primitives::{Address, Bytes, U256};
use revm::bytecode::Bytecode;
use revm::database::{AccountState, CacheDB, EmptyDB};
use revm::state::AccountInfo;
use serde::{Deserialize, Serialize};

use super::{Chain, EMBEDDED_CHAIN_ID};
use crate::ledger::{LedgerError, RawLog, Result};

/// Bumped when the file's layout changes incompatibly.
const FORMAT_VERSION: u32 = 1;

/// The embedded chain's whole state, as written to its state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Layout version the file was written with; bumped on incompatible changes.
    pub format_version: u32,
    /// Chain the state belongs to; [`EmbeddedLedger::open`](super::EmbeddedLedger::open) refuses
    /// any other than [`EMBEDDED_CHAIN_ID`].
    pub chain_id: u64,
    /// Number of the latest mined block.
    pub block_number: u64,
    /// Timestamp of the latest mined block, Unix seconds.
    pub timestamp: u64,
    /// Seconds added by [`Ledger::advance_time`](crate::ledger::Ledger::advance_time), on top of
    /// the wall clock.
    pub time_offset: u64,
    /// Every existing account: balance, nonce, code and storage.
    pub accounts: BTreeMap<Address, AccountSnapshot>,
    /// Every log emitted so far, in chain order.
    pub logs: Vec<LogSnapshot>,
}

/// One account of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountSnapshot {
    /// Balance in wei.
    pub balance: U256,
    /// Transactions sent from it (for a contract: contracts it created, plus one).
    pub nonce: u64,
    /// Runtime code; empty, and left out of the file, for an account without code.
    #[serde(default, skip_serializing_if = "is_empty_code")]
    pub code: Bytes,
    /// Storage slot -> value; zero slots are left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage: BTreeMap<U256, U256>,
}

/// One log of a [`Snapshot`], with where it was emitted (as in [`RawLog`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSnapshot {
    /// Block the log was emitted in.
    pub block_number: u64,
    /// Transaction that emitted it.
    pub tx_hash: alloy::primitives::B256,
    /// Position of the log in its block.
    pub log_index: u64,
    /// Emitting address, topics and data.
    pub log: alloy::primitives::Log,
}

impl Chain {
    pub(super) fn snapshot(&self) -> Snapshot {
        let accounts = self
            .db
            .cache
            .accounts
            .iter()
            .filter(|(_, account)| account.account_state != AccountState::NotExisting)
            .map(|(address, account)| {
                let code = account
                    .info
                    .code
                    .clone()
                    .or_else(|| {
                        self.db
                            .cache
                            .contracts
                            .get(&account.info.code_hash)
                            .cloned()
                    })
                    .map(|code| code.original_bytes())
                    .unwrap_or_default();
                let storage = account
                    .storage
                    .iter()
                    .filter(|(_, value)| !value.is_zero())
                    .map(|(k, v)| (*k, *v))
                    .collect();
                (
                    *address,
                    AccountSnapshot {
                        balance: account.info.balance,
                        nonce: account.info.nonce,
                        code,
                        storage,
                    },
                )
            })
            .collect();
        let logs = self
            .logs
            .iter()
            .map(|l| LogSnapshot {
                block_number: l.block_number,
                tx_hash: l.tx_hash,
                log_index: l.log_index,
                log: l.log.clone(),
            })
            .collect();
        Snapshot {
            format_version: FORMAT_VERSION,
            chain_id: EMBEDDED_CHAIN_ID,
            block_number: self.block_number,
            timestamp: self.timestamp,
            time_offset: self.time_offset,
            accounts,
            logs,
        }
    }

    pub(super) fn restore(snapshot: Snapshot) -> Self {
        let mut db = CacheDB::new(EmptyDB::default());
        for (address, account) in snapshot.accounts {
            let code = Bytecode::new_raw(account.code);
            let info = AccountInfo::new(account.balance, account.nonce, code.hash_slow(), code);
            db.insert_account_info(address, info);
            for (slot, value) in account.storage {
                // EmptyDB never fails: the storage is entirely ours.
                let _ = db.insert_account_storage(address, slot, value);
            }
        }
        let logs = snapshot
            .logs
            .into_iter()
            .map(|l| RawLog {
                block_number: l.block_number,
                tx_hash: l.tx_hash,
                log_index: l.log_index,
                log: l.log,
            })
            .collect();
        Chain {
            db,
            block_number: snapshot.block_number,
            timestamp: snapshot.timestamp,
            time_offset: snapshot.time_offset,
            logs,
        }
    }
}

pub(super) fn write_atomically(path: &Path, snapshot: &Snapshot) -> Result<()> {
    let io = |source| LedgerError::StateIo {
        path: path.to_owned(),
        source,
    };
    let json = serde_json::to_vec(snapshot).map_err(|source| LedgerError::StateCorrupt {
        path: path.to_owned(),
        source,
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(&json).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    // The rename is durable only once the directory entry is.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

fn is_empty_code(code: &Bytes) -> bool {
    code.is_empty()
}
