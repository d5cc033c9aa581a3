//! The Ledger over Ethereum JSON-RPC (anvil in tests; Sepolia, mainnet or an L2 in production).
//!
//! Transactions are signed here with local keys and sent raw, which is what makes the two
//! delivery guarantees possible:
//! - Nonces: one async lock per account covers estimate, nonce choice, signing and sending, so
//!   concurrent callers sharing a key never reuse a nonce, and a call that reverts during gas
//!   estimation never consumes one (alloy's nonce filler runs beside the gas filler and would).
//!   The receipt is awaited after the lock is released, so concurrent sends still pipeline.
//! - Dropped transactions: the signed bytes are kept and re-sent unchanged (same nonce, same
//!   hash) whenever `resend_after` passes without a receipt, until `receipt_timeout`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy::eips::BlockNumberOrTag;
use alloy::network::eip2718::Encodable2718;
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{Filter, TransactionReceipt, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::transports::TransportError;
use alloy::transports::http::reqwest::Url;
use async_trait::async_trait;

use super::{Ledger, LedgerError, PayoutLimits, RawLog, Receipt, Result, Revert, TxRequest};

/// How the JSON-RPC ledger waits for transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcConfig {
    /// The node's HTTP(S) endpoint.
    pub url: String,
    /// Give up on a transaction not mined within this time.
    pub receipt_timeout: Duration,
    /// Re-send a transaction's signed bytes when it has not been mined for this long (it may
    /// have been dropped from the node's pool, e.g. on a node restart).
    pub resend_after: Duration,
    /// Pause between two polls for a receipt.
    pub poll_interval: Duration,
    /// Gas limit = estimate x (100 + margin) / 100; state can change between estimate and
    /// inclusion (another job credits a contributor first, changing which slots are fresh).
    pub gas_margin_percent: u64,
    /// The chain's per-transaction gas cap: the margin never lifts a gas limit above it
    /// (a node under EIP-7825 rejects such a transaction outright).
    pub tx_gas_cap: u64,
}

impl RpcConfig {
    /// Defaults for the node at `url`: receipts awaited up to 180 s, transactions re-sent after
    /// 30 s, polls every 200 ms, a 25 % gas margin, EIP-7825's gas cap of 2^24.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            receipt_timeout: Duration::from_secs(180),
            resend_after: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            gas_margin_percent: 25,
            tx_gas_cap: PayoutLimits::default().tx_gas_cap,
        }
    }
}

/// The [`Ledger`] over a node's JSON-RPC, signing locally with the keys given to
/// [`RpcLedger::connect`] (see the module docs).
pub struct RpcLedger {
    provider: RootProvider,
    wallet: Option<EthereumWallet>,
    accounts: Vec<Address>,
    config: RpcConfig,
    chain_id: u64,
    /// Next nonce per account; `None` until read from the node (or after an error that may
    /// have left the cached value wrong).
    nonces: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Option<u64>>>>>,
}

impl std::fmt::Debug for RpcLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("RpcLedger")
            .field("url", &self.config.url)
            .field("accounts", &self.accounts)
            .finish()
    }
}

impl RpcLedger {
    /// Connects to `config.url` with the given signing keys and reads the chain id.
    pub async fn connect(config: RpcConfig, signers: Vec<PrivateKeySigner>) -> Result<Self> {
        let url: Url = config.url.parse().map_err(|e| LedgerError::InvalidInput {
            field: "rpc url",
            problem: format!("{}: {e}", config.url),
        })?;
        // reqwest is built without a TLS crypto provider of its own (see the workspace
        // Cargo.toml): install ring's, unless the process already chose one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider = RootProvider::new_http(url);
        let chain_id = provider
            .get_chain_id()
            .await
            .map_err(|e| rpc("eth_chainId", e))?;
        let accounts: Vec<Address> = signers.iter().map(PrivateKeySigner::address).collect();
        // No keys gives a read-only ledger (an event watcher, a code check): sends then fail
        // with UnknownSigner.
        let mut signers = signers.into_iter();
        let wallet = signers.next().map(|first| {
            let mut wallet = EthereumWallet::new(first);
            for signer in signers {
                wallet.register_signer(signer);
            }
            wallet
        });
        Ok(Self {
            provider,
            wallet,
            accounts,
            config,
            chain_id,
            nonces: Mutex::default(),
        })
    }

    /// The underlying alloy provider, for reads the [`Ledger`] does not offer.
    pub fn provider(&self) -> &RootProvider {
        &self.provider
    }

    fn nonce_slot(&self, account: Address) -> Arc<tokio::sync::Mutex<Option<u64>>> {
        let mut nonces = self
            .nonces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        nonces.entry(account).or_default().clone()
    }

    fn request(tx: &TxRequest) -> TransactionRequest {
        let request = TransactionRequest::default()
            .with_from(tx.from)
            .with_input(tx.input.clone())
            .with_value(tx.value);
        match tx.to {
            Some(to) => request.with_to(to),
            None => request.into_create(),
        }
    }

    /// Estimates, signs with the next nonce and sends; returns the hash and the signed bytes.
    async fn sign_and_send(&self, tx: &TxRequest) -> Result<(B256, Vec<u8>)> {
        let wallet = self
            .wallet
            .as_ref()
            .ok_or(LedgerError::UnknownSigner(tx.from))?;
        let slot = self.nonce_slot(tx.from);
        let mut next_nonce = slot.lock().await;
        let request = Self::request(tx);
        let gas = self
            .provider
            .estimate_gas(request.clone())
            .await
            .map_err(|e| revert_or_rpc("eth_estimateGas", e))?;
        // The estimate also says, before anything is paid, whether the call would revert. The
        // limit is the caller's computed worst case where it gave one (the estimate holds only
        // for the state it ran on), else the estimate plus the margin.
        let gas_limit = match tx.gas_limit {
            Some(limit) => limit.max(gas),
            None => (gas.saturating_mul(100 + self.config.gas_margin_percent) / 100).max(gas),
        }
        .min(self.config.tx_gas_cap)
        .max(gas);
        let fees = self
            .provider
            .estimate_eip1559_fees()
            .await
            .map_err(|e| rpc("eth_feeHistory", e))?;
        let mut resynced = false;
        loop {
            let nonce = match *next_nonce {
                Some(nonce) => nonce,
                None => self
                    .provider
                    .get_transaction_count(tx.from)
                    .pending()
                    .await
                    .map_err(|e| rpc("eth_getTransactionCount", e))?,
            };
            let envelope = request
                .clone()
                .with_nonce(nonce)
                .with_chain_id(self.chain_id)
                .with_gas_limit(gas_limit)
                .with_max_fee_per_gas(fees.max_fee_per_gas)
                .with_max_priority_fee_per_gas(fees.max_priority_fee_per_gas)
                .build(wallet)
                .await
                .map_err(|e| match e {
                    alloy::network::TransactionBuilderError::Signer(_) => {
                        LedgerError::UnknownSigner(tx.from)
                    }
                    other => LedgerError::InvalidInput {
                        field: "transaction",
                        problem: other.to_string(),
                    },
                })?;
            let raw = envelope.encoded_2718();
            match self.provider.send_raw_transaction(&raw).await {
                Ok(pending) => {
                    *next_nonce = Some(nonce + 1);
                    return Ok((*pending.tx_hash(), raw));
                }
                // Someone else (another process with the same key) used this nonce: read the
                // node's count once and try again.
                Err(e) if !resynced && is_nonce_error(&e) => {
                    tracing::warn!(account = %tx.from, nonce, error = %e, "nonce rejected; re-reading from the node");
                    *next_nonce = None;
                    resynced = true;
                }
                Err(e) => {
                    *next_nonce = None;
                    return Err(revert_or_rpc("eth_sendRawTransaction", e));
                }
            }
        }
    }

    /// Polls for the receipt, re-sending the same signed bytes while it is missing.
    async fn await_receipt(
        &self,
        tx_hash: B256,
        raw: &[u8],
        from: Address,
    ) -> Result<TransactionReceipt> {
        let started = Instant::now();
        let mut last_send = started;
        let mut resends = 0;
        loop {
            let receipt = self
                .provider
                .get_transaction_receipt(tx_hash)
                .await
                .map_err(|e| rpc("eth_getTransactionReceipt", e))?;
            if let Some(receipt) = receipt {
                return Ok(receipt);
            }
            if started.elapsed() >= self.config.receipt_timeout {
                // The nonce may now be a gap or already used: read it afresh next time.
                *self.nonce_slot(from).lock().await = None;
                return Err(LedgerError::ReceiptTimeout {
                    tx_hash,
                    waited: started.elapsed(),
                    resends,
                });
            }
            if last_send.elapsed() >= self.config.resend_after {
                resends += 1;
                last_send = Instant::now();
                // "already known" means it is still pooled; "nonce too low" that it was mined
                // meanwhile. Either way the next receipt poll tells.
                match self.provider.send_raw_transaction(raw).await {
                    Ok(_) => {
                        tracing::info!(%tx_hash, resends, "re-sent a transaction not mined in time")
                    }
                    Err(e) => tracing::debug!(%tx_hash, error = %e, "re-send refused"),
                }
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    /// Why a mined transaction failed: replays it as a call on the state before its block.
    async fn replay_failure(&self, tx: &TxRequest, block_number: u64) -> Revert {
        let at = BlockNumberOrTag::Number(block_number.saturating_sub(1));
        match self.provider.call(Self::request(tx)).block(at.into()).await {
            Err(e) => match revert_or_rpc("eth_call", e) {
                LedgerError::Reverted { reason, .. } => reason,
                other => Revert::Message(format!("failed on chain; replay failed too: {other}")),
            },
            Ok(_) => Revert::Message(format!(
                "failed on chain in block {block_number}; the replay on the state before it succeeds \
                 (an earlier transaction of the same block changed the state, or it ran out of gas)"
            )),
        }
    }
}

#[async_trait]
impl Ledger for RpcLedger {
    fn accounts(&self) -> Vec<Address> {
        self.accounts.clone()
    }

    async fn chain_id(&self) -> Result<u64> {
        Ok(self.chain_id)
    }

    async fn block_number(&self) -> Result<u64> {
        self.provider
            .get_block_number()
            .await
            .map_err(|e| rpc("eth_blockNumber", e))
    }

    async fn block_timestamp(&self) -> Result<u64> {
        let block = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await
            .map_err(|e| rpc("eth_getBlockByNumber", e))?
            .ok_or(LedgerError::Rpc {
                method: "eth_getBlockByNumber",
                detail: "no latest block".into(),
            })?;
        Ok(block.header.timestamp)
    }

    async fn block_hash(&self, number: u64) -> Result<Option<B256>> {
        let block = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Number(number))
            .await
            .map_err(|e| rpc("eth_getBlockByNumber", e))?;
        Ok(block.map(|b| b.header.hash))
    }

    async fn send_transaction(&self, tx: TxRequest) -> Result<Receipt> {
        if !self.accounts.contains(&tx.from) {
            return Err(LedgerError::UnknownSigner(tx.from));
        }
        let (tx_hash, raw) = self.sign_and_send(&tx).await?;
        let receipt = self.await_receipt(tx_hash, &raw, tx.from).await?;
        let block_number = receipt.block_number.unwrap_or_default();
        if !receipt.status() {
            let reason = self.replay_failure(&tx, block_number).await;
            return Err(LedgerError::Reverted {
                action: format!("transaction {tx_hash}"),
                reason,
            });
        }
        let logs = receipt
            .inner
            .logs()
            .iter()
            .map(|log| RawLog {
                block_number: log.block_number.unwrap_or(block_number),
                tx_hash,
                log_index: log.log_index.unwrap_or_default(),
                log: log.inner.clone(),
            })
            .collect();
        Ok(Receipt {
            tx_hash,
            block_number,
            gas_used: receipt.gas_used,
            contract_address: receipt.contract_address,
            logs,
        })
    }

    async fn call(&self, tx: TxRequest) -> Result<Bytes> {
        self.provider
            .call(Self::request(&tx))
            .await
            .map_err(|e| revert_or_rpc("eth_call", e))
    }

    async fn logs(&self, address: Address, from_block: u64, to_block: u64) -> Result<Vec<RawLog>> {
        let filter = Filter::new()
            .address(address)
            .from_block(from_block)
            .to_block(to_block);
        let logs = self
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| rpc("eth_getLogs", e))?;
        logs.into_iter()
            .map(|log| {
                let (Some(block_number), Some(tx_hash), Some(log_index)) =
                    (log.block_number, log.transaction_hash, log.log_index)
                else {
                    return Err(LedgerError::Rpc {
                        method: "eth_getLogs",
                        detail: "a mined log without its position".into(),
                    });
                };
                Ok(RawLog {
                    block_number,
                    tx_hash,
                    log_index,
                    log: log.inner,
                })
            })
            .collect()
    }

    async fn eth_balance(&self, account: Address) -> Result<U256> {
        self.provider
            .get_balance(account)
            .await
            .map_err(|e| rpc("eth_getBalance", e))
    }

    async fn code_at(&self, address: Address) -> Result<Bytes> {
        self.provider
            .get_code_at(address)
            .await
            .map_err(|e| rpc("eth_getCode", e))
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        let _: serde_json::Value = self
            .provider
            .raw_request("evm_increaseTime".into(), (seconds,))
            .await
            .map_err(|e| rpc("evm_increaseTime", e))?;
        let _: serde_json::Value = self
            .provider
            .raw_request("evm_mine".into(), Vec::<u64>::new())
            .await
            .map_err(|e| rpc("evm_mine", e))?;
        Ok(())
    }
}

fn rpc(method: &'static str, error: TransportError) -> LedgerError {
    LedgerError::Rpc {
        method,
        detail: error.to_string(),
    }
}

/// An error response carrying revert data is a revert; anything else is a node problem.
fn revert_or_rpc(method: &'static str, error: TransportError) -> LedgerError {
    if let Some(payload) = error.as_error_resp() {
        if let Some(data) = payload.as_revert_data() {
            return LedgerError::Reverted {
                action: method.into(),
                reason: Revert::decode(&data),
            };
        }
        if payload.message.contains("revert") {
            return LedgerError::Reverted {
                action: method.into(),
                reason: Revert::Message(payload.message.to_string()),
            };
        }
    }
    rpc(method, error)
}

fn is_nonce_error(error: &TransportError) -> bool {
    error.as_error_resp().is_some_and(|p| {
        let message = p.message.to_lowercase();
        message.contains("nonce too low")
            || message.contains("nonce too high")
            || message.contains("replacement transaction underpriced")
    })
}
