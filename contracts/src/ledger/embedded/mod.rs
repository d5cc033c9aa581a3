//! The Ledger with no node: revm executes the committed JobEscrow bytecode in-process.
//!
//! It behaves as a one-validator dev chain: every transaction is mined in its own block; a
//! block's timestamp is the wall clock (plus whatever [`Ledger::advance_time`] added), never
//! earlier than its parent's plus one second, so deadlines pass as they would on a real chain.
//! Gas is metered but priced at zero, so accounts pay only the value they send.
//!
//! With a state file, the whole state (accounts, storage, logs, clock) is written after every
//! block, atomically, so `shardwork up` keeps jobs and balances across restarts.

mod snapshot;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::signers::local::PrivateKeySigner;
use async_trait::async_trait;
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::context_interface::result::{ExecutionResult, Output};
use revm::database::{CacheDB, EmptyDB};
use revm::database_interface::DatabaseRef;
use revm::primitives::TxKind;
use revm::primitives::hardfork::SpecId;
use revm::{Context, ExecuteCommitEvm, ExecuteEvm, MainBuilder, MainContext};

use super::{Ledger, LedgerError, RawLog, Receipt, Result, Revert, TxRequest};
use crate::dev_keys;
pub use snapshot::Snapshot;

/// Chain id of the embedded chain (anvil's default, so wallets configured for a local dev chain
/// work with either).
pub const EMBEDDED_CHAIN_ID: u64 = 31337;
/// Gas available to one transaction: EIP-7825's cap under Osaka (2^24), so the embedded chain
/// refuses what a current mainnet would; the Ledger pays large jobs in batches within it.
pub const TX_GAS_LIMIT: u64 = 1 << 24;
/// Gas available to one block.
const BLOCK_GAS_LIMIT: u64 = 30_000_000;

/// The [`Ledger`] on an in-process revm chain, in memory or kept in a state file (see the
/// module docs). Signs for the dev accounts, and for the accounts a caller in the same process
/// holds the keys of and unlocks ([`Ledger::unlock_key`]).
pub struct EmbeddedLedger {
    chain: Mutex<Chain>,
    accounts: std::sync::RwLock<Vec<Address>>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for EmbeddedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedLedger")
            .field("path", &self.path)
            .field("accounts", &self.accounts)
            .finish()
    }
}

/// The chain's whole state.
struct Chain {
    db: CacheDB<EmptyDB>,
    block_number: u64,
    timestamp: u64,
    /// Seconds added by `advance_time`, on top of the wall clock.
    time_offset: u64,
    logs: Vec<RawLog>,
}

impl EmbeddedLedger {
    /// A fresh chain in memory, the dev accounts funded.
    pub fn in_memory() -> Self {
        Self {
            chain: Mutex::new(Chain::genesis()),
            accounts: std::sync::RwLock::new(dev_keys::dev_addresses()),
            path: None,
        }
    }

    /// Opens the chain stored at `path`, or starts one there (dev accounts funded) when the file
    /// does not exist yet.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let chain = match std::fs::read(&path) {
            Ok(bytes) => {
                let snapshot: Snapshot =
                    serde_json::from_slice(&bytes).map_err(|source| LedgerError::StateCorrupt {
                        path: path.clone(),
                        source,
                    })?;
                if snapshot.chain_id != EMBEDDED_CHAIN_ID {
                    return Err(LedgerError::WrongChain {
                        path,
                        expected: EMBEDDED_CHAIN_ID,
                        found: snapshot.chain_id,
                    });
                }
                Chain::restore(snapshot)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let chain = Chain::genesis();
                snapshot::write_atomically(&path, &chain.snapshot())?;
                chain
            }
            Err(source) => return Err(LedgerError::StateIo { path, source }),
        };
        Ok(Self {
            chain: Mutex::new(chain),
            accounts: std::sync::RwLock::new(dev_keys::dev_addresses()),
            path: Some(path),
        })
    }

    /// The state file, or `None` for a chain in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The keys of the funded dev accounts ([`Ledger::accounts`]), for a CLI that shows them.
    pub fn dev_signers(&self) -> Vec<PrivateKeySigner> {
        dev_keys::dev_signers()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chain> {
        // A panic while holding the lock cannot leave the chain half-updated: the state is only
        // replaced after a transaction finished, so the poisoned value is still consistent.
        self.chain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn persist(&self, chain: &Chain) -> Result<()> {
        match &self.path {
            Some(path) => snapshot::write_atomically(path, &chain.snapshot()),
            None => Ok(()),
        }
    }
}

fn wall_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Chain {
    fn genesis() -> Self {
        let mut db = CacheDB::new(EmptyDB::default());
        for account in dev_keys::dev_addresses() {
            db.insert_account_info(
                account,
                revm::state::AccountInfo::from_balance(dev_keys::dev_balance()),
            );
        }
        Chain {
            db,
            block_number: 0,
            timestamp: wall_clock(),
            time_offset: 0,
            logs: Vec::new(),
        }
    }

    /// Opens the next block: number + 1, timestamp from the (shifted) clock, at least + 1 s.
    fn next_block(&mut self) -> BlockEnv {
        self.block_number += 1;
        self.timestamp = (wall_clock() + self.time_offset).max(self.timestamp + 1);
        self.block_env(self.block_number, self.timestamp)
    }

    fn block_env(&self, number: u64, timestamp: u64) -> BlockEnv {
        BlockEnv {
            number: U256::from(number),
            timestamp: U256::from(timestamp),
            gas_limit: BLOCK_GAS_LIMIT,
            basefee: 0,
            ..BlockEnv::default()
        }
    }

    fn tx_env(&self, tx: &TxRequest) -> Result<TxEnv> {
        let nonce = self
            .db
            .basic_ref(tx.from)
            .map_err(|e| LedgerError::Evm(e.to_string()))?
            .map_or(0, |a| a.nonce);
        TxEnv::builder()
            .caller(tx.from)
            .kind(match tx.to {
                Some(to) => TxKind::Call(to),
                None => TxKind::Create,
            })
            .data(tx.input.clone())
            .value(tx.value)
            .nonce(nonce)
            .gas_limit(tx.gas_limit.unwrap_or(TX_GAS_LIMIT).min(TX_GAS_LIMIT))
            .gas_price(0)
            .chain_id(Some(EMBEDDED_CHAIN_ID))
            .build()
            .map_err(|e| LedgerError::Evm(format!("transaction: {e:?}")))
    }

    /// Runs `tx` in `block`, committing its effects when `commit`; returns the result.
    fn execute(&mut self, tx: TxEnv, block: BlockEnv, commit: bool) -> Result<ExecutionResult> {
        let db = std::mem::replace(&mut self.db, CacheDB::new(EmptyDB::default()));
        let mut evm = Context::mainnet()
            .with_db(db)
            .with_block(block)
            .with_cfg({
                let mut cfg = CfgEnv::new_with_spec(SpecId::OSAKA);
                cfg.chain_id = EMBEDDED_CHAIN_ID;
                cfg.tx_gas_limit_cap = Some(TX_GAS_LIMIT);
                cfg
            })
            .build_mainnet();
        let result = if commit {
            evm.transact_commit(tx)
                .map_err(|e| LedgerError::Evm(e.to_string()))
        } else {
            evm.transact(tx)
                .map(|r| r.result)
                .map_err(|e| LedgerError::Evm(e.to_string()))
        };
        // Put the database back whatever happened: a failed transaction changes nothing.
        self.db = evm.ctx.journaled_state.database;
        result
    }
}

/// A transaction's hash on the embedded chain: unique per (sender, nonce), as on a real chain.
fn tx_hash(tx: &TxRequest, nonce: u64) -> B256 {
    let mut preimage = Vec::with_capacity(72 + tx.input.len());
    preimage.extend_from_slice(&EMBEDDED_CHAIN_ID.to_be_bytes());
    preimage.extend_from_slice(tx.from.as_slice());
    preimage.extend_from_slice(&nonce.to_be_bytes());
    preimage.extend_from_slice(tx.to.unwrap_or_default().as_slice());
    preimage.extend_from_slice(&tx.value.to_be_bytes::<32>());
    preimage.extend_from_slice(&tx.input);
    keccak256(preimage)
}

fn outcome_error(result: ExecutionResult) -> LedgerError {
    match result {
        ExecutionResult::Revert { output, .. } => LedgerError::Reverted {
            action: "transaction".into(),
            reason: Revert::decode(&output),
        },
        ExecutionResult::Halt { reason, .. } => LedgerError::Reverted {
            action: "transaction".into(),
            reason: Revert::Message(format!("halted: {reason:?}")),
        },
        ExecutionResult::Success { .. } => unreachable!("only failures are passed here"),
    }
}

#[async_trait]
impl Ledger for EmbeddedLedger {
    fn accounts(&self) -> Vec<Address> {
        self.accounts
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    async fn chain_id(&self) -> Result<u64> {
        Ok(EMBEDDED_CHAIN_ID)
    }

    async fn block_number(&self) -> Result<u64> {
        Ok(self.lock().block_number)
    }

    async fn block_timestamp(&self) -> Result<u64> {
        Ok(self.lock().timestamp)
    }

    async fn block_hash(&self, number: u64) -> Result<Option<B256>> {
        // One validator, every block final as it is mined: the chain never reorgs, so a block's
        // hash need only be its own and stable across restarts, a function of its number.
        let latest = self.lock().block_number;
        Ok((number <= latest).then(|| {
            keccak256(
                [
                    b"shardwork embedded block ".as_slice(),
                    number.to_be_bytes().as_slice(),
                ]
                .concat(),
            )
        }))
    }

    async fn unlock_key(&self, key: &alloy::signers::local::PrivateKeySigner) -> Result<()> {
        let mut accounts = self
            .accounts
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !accounts.contains(&key.address()) {
            accounts.push(key.address());
        }
        Ok(())
    }

    async fn send_transaction(&self, tx: TxRequest) -> Result<Receipt> {
        if !self.accounts().contains(&tx.from) {
            return Err(LedgerError::UnknownSigner(tx.from));
        }
        let mut chain = self.lock();
        let tx_env = chain.tx_env(&tx)?;
        let hash = tx_hash(&tx, tx_env.nonce);
        // Execute against the next block, but only keep that block when the transaction is
        // valid (an invalid one, e.g. without the funds for its value, is never mined).
        let (number, timestamp) = (chain.block_number, chain.timestamp);
        let block = chain.next_block();
        let result = match chain.execute(tx_env, block, true) {
            Ok(result) => result,
            Err(e) => {
                (chain.block_number, chain.timestamp) = (number, timestamp);
                return Err(e);
            }
        };
        // A reverted transaction is mined (its nonce is used), like on any chain.
        let block_number = chain.block_number;
        let gas_used = result.tx_gas_used();
        let receipt = match result {
            ExecutionResult::Success { output, logs, .. } => {
                let first_index = chain
                    .logs
                    .iter()
                    .filter(|l| l.block_number == block_number)
                    .count() as u64;
                let logs: Vec<RawLog> = logs
                    .into_iter()
                    .enumerate()
                    .map(|(i, log)| RawLog {
                        block_number,
                        tx_hash: hash,
                        log_index: first_index + i as u64,
                        log,
                    })
                    .collect();
                chain.logs.extend(logs.iter().cloned());
                let contract_address = match output {
                    Output::Create(_, address) => address,
                    Output::Call(_) => None,
                };
                Ok(Receipt {
                    tx_hash: hash,
                    block_number,
                    gas_used,
                    contract_address,
                    logs,
                })
            }
            failure => Err(outcome_error(failure)),
        };
        self.persist(&chain)?;
        receipt
    }

    async fn call(&self, tx: TxRequest) -> Result<Bytes> {
        let mut chain = self.lock();
        let tx_env = chain.tx_env(&tx)?;
        let block = chain.block_env(chain.block_number, chain.timestamp);
        match chain.execute(tx_env, block, false)? {
            ExecutionResult::Success { output, .. } => Ok(output.into_data()),
            failure => Err(outcome_error(failure)),
        }
    }

    async fn logs(&self, address: Address, from_block: u64, to_block: u64) -> Result<Vec<RawLog>> {
        let chain = self.lock();
        Ok(chain
            .logs
            .iter()
            .filter(|l| {
                l.log.address == address && (from_block..=to_block).contains(&l.block_number)
            })
            .cloned()
            .collect())
    }

    async fn eth_balance(&self, account: Address) -> Result<U256> {
        let chain = self.lock();
        let info = chain
            .db
            .basic_ref(account)
            .map_err(|e| LedgerError::Evm(e.to_string()))?;
        Ok(info.map_or(U256::ZERO, |a| a.balance))
    }

    async fn code_at(&self, address: Address) -> Result<Bytes> {
        let chain = self.lock();
        let info = chain
            .db
            .basic_ref(address)
            .map_err(|e| LedgerError::Evm(e.to_string()))?;
        let Some(info) = info else {
            return Ok(Bytes::new());
        };
        let code = match info.code {
            Some(code) => code,
            None => chain
                .db
                .code_by_hash_ref(info.code_hash)
                .map_err(|e| LedgerError::Evm(e.to_string()))?,
        };
        Ok(code.original_bytes())
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        let mut chain = self.lock();
        // The latest block may be ahead of the wall clock (many blocks in one second): make
        // sure the next block is at least `seconds` after it, as anvil's evm_increaseTime does.
        let target = chain.timestamp.saturating_add(seconds);
        chain.time_offset = chain
            .time_offset
            .saturating_add(seconds)
            .max(target.saturating_sub(wall_clock()));
        // Mine an empty block so the new time is the latest block's, as `evm_mine` does.
        chain.next_block();
        self.persist(&chain)
    }
}
