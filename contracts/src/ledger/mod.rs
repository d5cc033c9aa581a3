//! The Ledger port: everything the API does with the escrow, behind one trait.
//!
//! Adapters implement only the chain primitives (send a transaction, make a call, read logs,
//! balances, time). Every escrow operation — ABI encoding, revert decoding, event decoding — is
//! a provided method written once here, so both adapters run the same code above the EVM and
//! the shared suite (`testkit::ledger_suite`) checks the same behaviour on both:
//! - [`rpc::RpcLedger`]: any Ethereum node over JSON-RPC (anvil, Sepolia, mainnet, L2s).
//! - [`embedded::EmbeddedLedger`]: revm in-process, state in a file, for `shardwork up`.

pub mod embedded;
mod error;
mod payout;
pub mod rpc;
pub mod stream;
mod types;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol_types::{SolCall, SolConstructor, SolEventInterface};
use async_trait::async_trait;

use crate::bindings::{JobEscrow, MockERC20};
pub use error::{LedgerError, Result, Revert};
use payout::{Settlement, settle_federated};
pub use types::*;

/// Everything the API does with the escrow. Adapters implement only the chain primitives; the
/// escrow operations are provided methods, the same on every adapter.
#[async_trait]
pub trait Ledger: Send + Sync {
    // ------------------------------------------------------------ chain primitives (adapters)

    /// The accounts this ledger can sign for.
    fn accounts(&self) -> Vec<Address>;

    /// The chain's id, which transactions are signed for (EIP-155).
    async fn chain_id(&self) -> Result<u64>;

    /// The latest mined block.
    async fn block_number(&self) -> Result<u64>;

    /// Timestamp of the latest mined block, Unix seconds.
    async fn block_timestamp(&self) -> Result<u64>;

    /// The hash of block `number` on the chain as the node sees it now; `None` when it has no
    /// such block (yet). A follower compares it with the hash it saw to notice a reorg.
    async fn block_hash(&self, number: u64) -> Result<Option<B256>>;

    /// Lets this ledger sign for `key`'s account from now on (an in-process node whose key the
    /// caller holds). The embedded chain does; a JSON-RPC ledger's signers are fixed when it
    /// connects, so it refuses.
    async fn unlock_key(&self, key: &alloy::signers::local::PrivateKeySigner) -> Result<()> {
        Err(LedgerError::UnknownSigner(key.address()))
    }

    /// Signs `tx` as `tx.from`, sends it and waits for it to be mined. A revert is
    /// [`LedgerError::Reverted`] with the decoded reason.
    async fn send_transaction(&self, tx: TxRequest) -> Result<Receipt>;

    /// Runs `tx` against the latest state without changing it and returns its output.
    async fn call(&self, tx: TxRequest) -> Result<Bytes>;

    /// Logs of `address` in blocks `from_block ..= to_block`.
    async fn logs(&self, address: Address, from_block: u64, to_block: u64) -> Result<Vec<RawLog>>;

    /// `account`'s native ether balance, in wei.
    async fn eth_balance(&self, account: Address) -> Result<U256>;

    /// The runtime code at `address`; empty when it has none.
    async fn code_at(&self, address: Address) -> Result<Bytes>;

    /// Moves the chain's clock forward by `seconds` and mines a block. Development chains only
    /// (anvil, embedded); a production node answers with [`LedgerError::Rpc`].
    async fn advance_time(&self, seconds: u64) -> Result<()>;

    // ------------------------------------------------------------------- escrow (provided)

    /// Deploys JobEscrow (the committed bytecode) and returns its address.
    async fn deploy_escrow(&self, from: Address, params: &DeployParams) -> Result<Address> {
        let args = JobEscrow::constructorCall {
            admin: params.admin,
            validator: params.validator,
            feeManager: params.fee_manager,
            treasury_: params.treasury,
            feeBps_: params.fee_bps,
        }
        .abi_encode();
        let init_code = [JobEscrow::BYTECODE.as_ref(), &args].concat();
        deploy(self, from, init_code.into(), "deploy JobEscrow").await
    }

    /// Allow-lists (or stops accepting) an ERC-20 for new jobs; admin only.
    async fn set_token_allowed(
        &self,
        escrow: Address,
        admin: Address,
        token: Address,
        allowed: bool,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::setTokenAllowedCall { token, allowed };
        transact(self, escrow, admin, call, U256::ZERO, "setTokenAllowed").await
    }

    /// Sets the share of a job in `token` ([`ETH`] included) that moves a contributor's
    /// reputation a full step; admin only.
    async fn set_reputation_unit(
        &self,
        escrow: Address,
        admin: Address,
        token: Address,
        unit: U256,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::setReputationUnitCall { token, unit };
        transact(self, escrow, admin, call, U256::ZERO, "setReputationUnit").await
    }

    /// Escrows a new job's stake and returns its id. For an ERC-20 the requester's allowance is
    /// raised to the stake first when it is lower (a separate `approve` transaction).
    async fn create_job(
        &self,
        escrow: Address,
        requester: Address,
        job: &NewJob,
    ) -> Result<(U256, TxOutcome)> {
        if job.spec_cid.is_empty() {
            return Err(LedgerError::InvalidInput {
                field: "spec_cid",
                problem: "empty".into(),
            });
        }
        let value = if job.token == ETH {
            job.stake
        } else {
            let allowance = view(
                self,
                job.token,
                MockERC20::allowanceCall {
                    owner: requester,
                    spender: escrow,
                },
                "allowance",
            )
            .await?;
            if allowance < job.stake {
                let approve = MockERC20::approveCall {
                    spender: escrow,
                    value: job.stake,
                };
                transact(self, job.token, requester, approve, U256::ZERO, "approve").await?;
            }
            U256::ZERO
        };
        let call = JobEscrow::createJobCall {
            token: job.token,
            stake: job.stake,
            specCid: job.spec_cid.clone(),
            deadline: job.deadline,
            kind: job.kind.into(),
            maxFeeBps: job.max_fee_bps,
        };
        let outcome = transact(self, escrow, requester, call, value, "createJob").await?;
        let job_id = outcome
            .events
            .iter()
            .find_map(|e| match &e.event {
                JobEscrow::JobEscrowEvents::JobCreated(created) => Some(created.jobId),
                _ => None,
            })
            .ok_or(LedgerError::MissingFromReceipt {
                what: "JobCreated event",
                tx_hash: outcome.tx_hash,
            })?;
        Ok((job_id, outcome))
    }

    /// Marks a job started (validator only): the requester can no longer cancel.
    async fn mark_started(
        &self,
        escrow: Address,
        validator: Address,
        job_id: U256,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::markStartedCall { jobId: job_id };
        transact(
            self,
            escrow,
            validator,
            call,
            U256::ZERO,
            format!("markStarted({job_id})"),
        )
        .await
    }

    /// Completes a single-contributor LoRA job (validator only).
    async fn complete_job(
        &self,
        escrow: Address,
        validator: Address,
        job_id: U256,
        adapter_cid: &str,
        contribution: Contribution,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::completeJobCall {
            jobId: job_id,
            adapterCid: adapter_cid.to_owned(),
            contributor: contribution.contributor,
            qualityScore: contribution.quality,
        };
        transact(
            self,
            escrow,
            validator,
            call,
            U256::ZERO,
            format!("completeJob({job_id})"),
        )
        .await
    }

    /// Ends a job that cannot finish (validator only): the whole stake goes back to the
    /// requester now, with `reason` recorded in the `JobAborted` event.
    async fn abort_job(
        &self,
        escrow: Address,
        validator: Address,
        job_id: U256,
        reason: &str,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::abortJobCall {
            jobId: job_id,
            reason: reason.to_owned(),
        };
        transact(
            self,
            escrow,
            validator,
            call,
            U256::ZERO,
            format!("abortJob({job_id})"),
        )
        .await
    }

    /// Records that a started federated job's completed rounds earned `earned_bps` of its stake
    /// (validator only; 1 ..= 10,000, never lower than what is recorded). Sending the recorded
    /// value again is a no-op on chain, so a repeated send is harmless.
    async fn record_progress(
        &self,
        escrow: Address,
        validator: Address,
        job_id: U256,
        earned_bps: u16,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::recordProgressCall {
            jobId: job_id,
            earnedBps: earned_bps,
        };
        transact(
            self,
            escrow,
            validator,
            call,
            U256::ZERO,
            format!("recordProgress({job_id}, {earned_bps})"),
        )
        .await
    }

    /// Ends a federated job that cannot finish, paying the work its completed rounds earned
    /// (`abort.earned_bps` of the stake, the fee on that part only) and returning the rest to
    /// the requester, in as few transactions as the gas cap allows: one `abortFederatedJob`
    /// when the contributors fit one, else `beginFederatedAbort` and `payFederatedBatch`es,
    /// resumed from [`Ledger::payout_progress`] after a crash like
    /// [`Ledger::pay_federated_job`]. A job already ended sends nothing. Returns the
    /// transactions it sent.
    async fn pay_federated_abort(
        &self,
        escrow: Address,
        validator: Address,
        abort: &FederatedAbort,
        limits: PayoutLimits,
    ) -> Result<Vec<TxOutcome>> {
        settle_federated(self, escrow, validator, Settlement::Abort(abort), limits).await
    }

    /// Where a federated payout of `job_id` stands.
    async fn payout_progress(&self, escrow: Address, job_id: U256) -> Result<PayoutProgress> {
        let p = view(
            self,
            escrow,
            JobEscrow::payoutOfCall { jobId: job_id },
            "payoutOf",
        )
        .await?;
        Ok(PayoutProgress {
            expected: p.expected,
            paid_count: p.paidCount,
            last_contributor: p.lastContributor,
            paid: U256::from(p.paid),
            total_weight: p.totalWeight,
            earned_bps: p.earnedBps,
            total_quality: p.totalQuality,
            weighed: p.weighed,
            began_at: p.beganAt,
        })
    }

    /// Pays a federated job's contributors (validator only) in as few transactions as the
    /// chain's per-transaction gas cap allows: one `completeFederatedJob` when they fit one,
    /// else `beginFederatedPayout` and `payFederatedBatch`es of
    /// [`PayoutLimits::contributors_per_batch`]. Safe to call again after a crash: it reads
    /// [`Ledger::payout_progress`] and sends only the batches not yet mined (a batch sent
    /// twice reverts on chain instead of paying twice); a job already completed sends nothing.
    /// Returns the transactions it sent.
    async fn pay_federated_job(
        &self,
        escrow: Address,
        validator: Address,
        completion: &FederatedCompletion,
        limits: PayoutLimits,
    ) -> Result<Vec<TxOutcome>> {
        settle_federated(
            self,
            escrow,
            validator,
            Settlement::Complete(completion),
            limits,
        )
        .await
    }

    /// Completes a federated job in one transaction (validator only), paying contributors by
    /// quality x reputation; [`Ledger::pay_federated_job`] splits a long list into batches.
    async fn complete_federated_job(
        &self,
        escrow: Address,
        validator: Address,
        completion: &FederatedCompletion,
    ) -> Result<TxOutcome> {
        let mut contributions = completion.contributions.clone();
        contributions.sort_by_key(|c| c.contributor);
        let call = JobEscrow::completeFederatedJobCall {
            jobId: completion.job_id,
            adapterCid: completion.adapter_cid.clone(),
            manifestCid: completion.manifest_cid.clone(),
            contributors: contributions.iter().map(|c| c.contributor).collect(),
            qualityScores: contributions.iter().map(|c| c.quality).collect(),
        };
        let action = format!("completeFederatedJob({})", completion.job_id);
        // Computed from the list when it fits one batch at the smallest cap (else estimated).
        let limits = PayoutLimits::default();
        let gas_limit = (contributions.len() <= limits.contributors_per_batch())
            .then(|| limits.batch_gas_limit(contributions.len()));
        transact_within(self, escrow, validator, call, U256::ZERO, gas_limit, action).await
    }

    /// The requester takes the stake back before work started (credited, then withdrawn).
    async fn cancel(&self, escrow: Address, requester: Address, job_id: U256) -> Result<TxOutcome> {
        let call = JobEscrow::cancelCall { jobId: job_id };
        transact(
            self,
            escrow,
            requester,
            call,
            U256::ZERO,
            format!("cancel({job_id})"),
        )
        .await
    }

    /// After the deadline of an unfinished job, credits the stake back to its requester.
    async fn refund(&self, escrow: Address, caller: Address, job_id: U256) -> Result<TxOutcome> {
        let call = JobEscrow::refundCall { jobId: job_id };
        transact(
            self,
            escrow,
            caller,
            call,
            U256::ZERO,
            format!("refund({job_id})"),
        )
        .await
    }

    /// Pulls everything credited to `account` in `token`; returns the amount paid out.
    async fn withdraw(
        &self,
        escrow: Address,
        account: Address,
        token: Address,
    ) -> Result<(U256, TxOutcome)> {
        let outcome = transact(
            self,
            escrow,
            account,
            JobEscrow::withdrawCall { token },
            U256::ZERO,
            "withdraw",
        )
        .await?;
        let amount = withdrawn_amount(&outcome)?;
        Ok((amount, outcome))
    }

    /// Pulls everything credited to `account` in `token` to `to` (`withdrawTo`: for an account
    /// that keeps its funds elsewhere); returns the amount paid out.
    async fn withdraw_to(
        &self,
        escrow: Address,
        account: Address,
        token: Address,
        to: Address,
    ) -> Result<(U256, TxOutcome)> {
        let outcome = transact(
            self,
            escrow,
            account,
            JobEscrow::withdrawToCall { token, to },
            U256::ZERO,
            "withdrawTo",
        )
        .await?;
        let amount = withdrawn_amount(&outcome)?;
        Ok((amount, outcome))
    }

    /// What `account` is credited in `token` and can withdraw now.
    async fn withdrawable(
        &self,
        escrow: Address,
        account: Address,
        token: Address,
    ) -> Result<U256> {
        view(
            self,
            escrow,
            JobEscrow::withdrawableCall { account, token },
            "withdrawable",
        )
        .await
    }

    /// `account`'s balance of `token` ([`ETH`] for native ether) outside the escrow.
    async fn token_balance(&self, token: Address, account: Address) -> Result<U256> {
        if token == ETH {
            return self.eth_balance(account).await;
        }
        view(
            self,
            token,
            MockERC20::balanceOfCall { account },
            "balanceOf",
        )
        .await
    }

    /// Whether the escrow accepts new jobs staked in `token` (its allow-list).
    async fn token_allowed(&self, escrow: Address, token: Address) -> Result<bool> {
        view(
            self,
            escrow,
            JobEscrow::tokenAllowedCall { token },
            "tokenAllowed",
        )
        .await
    }

    /// An ERC-20's name, symbol and decimals (the optional metadata of EIP-20, which every
    /// token a wallet can show implements).
    async fn token_metadata(&self, token: Address) -> Result<TokenMetadata> {
        Ok(TokenMetadata {
            name: view(self, token, MockERC20::nameCall {}, "name").await?,
            symbol: view(self, token, MockERC20::symbolCall {}, "symbol").await?,
            decimals: view(self, token, MockERC20::decimalsCall {}, "decimals").await?,
        })
    }

    /// Bonds `amount` of `token` ([`ETH`]: sent as the value) as `worker`'s bond; a token must
    /// be allow-listed and approved for the escrow first.
    async fn bond(
        &self,
        escrow: Address,
        worker: Address,
        token: Address,
        amount: U256,
    ) -> Result<TxOutcome> {
        let value = if token == ETH { amount } else { U256::ZERO };
        let call = JobEscrow::bondCall { token, amount };
        transact(self, escrow, worker, call, value, "bond").await
    }

    /// `owner` lets `spender` (the escrow) pull `amount` of ERC-20 `token`.
    async fn approve(
        &self,
        token: Address,
        owner: Address,
        spender: Address,
        amount: U256,
    ) -> Result<TxOutcome> {
        let call = MockERC20::approveCall {
            spender,
            value: amount,
        };
        transact(self, token, owner, call, U256::ZERO, "approve").await
    }

    /// Starts unbonding `amount` of `worker`'s active bond in `token`.
    async fn request_unbond(
        &self,
        escrow: Address,
        worker: Address,
        token: Address,
        amount: U256,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::requestUnbondCall { token, amount };
        transact(self, escrow, worker, call, U256::ZERO, "requestUnbond").await
    }

    /// Credits `worker` what finished unbonding in `token` (then `withdraw`).
    async fn complete_unbond(
        &self,
        escrow: Address,
        worker: Address,
        token: Address,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::completeUnbondCall { token };
        transact(self, escrow, worker, call, U256::ZERO, "completeUnbond").await
    }

    /// `worker`'s bond in `token`.
    async fn bond_of(&self, escrow: Address, worker: Address, token: Address) -> Result<BondInfo> {
        let bond = view(
            self,
            escrow,
            JobEscrow::bondOfCall { worker, token },
            "bondOf",
        )
        .await?;
        Ok(BondInfo {
            active: U256::from(bond.active),
            unbonding: U256::from(bond.unbonding),
            unlock_at: bond.unlockAt,
        })
    }

    /// Slashes up to `amount` of `worker`'s bond in job `job_id`'s token to its requester
    /// (validator only); once per job and worker, a repeat takes nothing.
    async fn slash_bond(
        &self,
        escrow: Address,
        validator: Address,
        job_id: U256,
        worker: Address,
        amount: U256,
    ) -> Result<TxOutcome> {
        let call = JobEscrow::slashBondCall {
            jobId: job_id,
            worker,
            amount,
        };
        transact(
            self,
            escrow,
            validator,
            call,
            U256::ZERO,
            format!("slashBond({job_id}, {worker})"),
        )
        .await
    }

    /// Whether `worker`'s bond was already slashed for job `job_id`.
    async fn bond_slashed(&self, escrow: Address, job_id: U256, worker: Address) -> Result<bool> {
        view(
            self,
            escrow,
            JobEscrow::slashedCall {
                jobId: job_id,
                worker,
            },
            "slashed",
        )
        .await
    }

    /// On-chain reputation in basis points (0 ..= 10,000).
    async fn reputation(&self, escrow: Address, account: Address) -> Result<u16> {
        view(
            self,
            escrow,
            JobEscrow::reputationOfCall { account },
            "reputationOf",
        )
        .await
    }

    /// How long past its deadline a stalled federated payout (status [`JobStatus::Paying`])
    /// must wait before `refund` returns what it had not paid, in seconds (the escrow's
    /// `PAYOUT_GRACE`).
    async fn payout_grace(&self, escrow: Address) -> Result<u64> {
        let grace = view(self, escrow, JobEscrow::PAYOUT_GRACECall {}, "PAYOUT_GRACE").await?;
        u64::try_from(grace).map_err(|_| LedgerError::Decode {
            what: "PAYOUT_GRACE",
            detail: format!("{grace} seconds does not fit 64 bits"),
        })
    }

    /// The job `job_id` as the escrow stores it; an unknown id reads as status
    /// [`JobStatus::None`], not as an error.
    async fn job(&self, escrow: Address, job_id: U256) -> Result<JobInfo> {
        let job = view(
            self,
            escrow,
            JobEscrow::getJobCall { jobId: job_id },
            "getJob",
        )
        .await?;
        let undecodable = |field: &str, raw: u8| LedgerError::Decode {
            what: "getJob",
            detail: format!(
                "{field} {raw} is not a known value; are the bindings older than the contract?"
            ),
        };
        Ok(JobInfo {
            requester: job.requester,
            deadline: job.deadline,
            kind: JobKind::from_escrow_code(job.kind)
                .ok_or_else(|| undecodable("kind", job.kind))?,
            status: JobStatus::from_raw(job.status)
                .ok_or_else(|| undecodable("status", job.status))?,
            fee_bps: job.feeBps,
            token: job.token,
            treasury: job.treasury,
            earned_bps: job.earnedBps,
            stake: job.stake,
            spec_hash: job.specHash,
        })
    }

    /// The escrow's events in blocks `from_block ..= to_block` (the latest block when `None`).
    async fn events(
        &self,
        escrow: Address,
        from_block: u64,
        to_block: Option<u64>,
    ) -> Result<Vec<EscrowEvent>> {
        let to_block = match to_block {
            Some(to) => to,
            None => self.block_number().await?,
        };
        if to_block < from_block {
            return Ok(Vec::new());
        }
        let logs = self.logs(escrow, from_block, to_block).await?;
        decode_events(escrow, &logs)
    }

    // ------------------------------------------------------------- dev-chain test token

    /// Deploys the mintable test ERC-20 (dev chains: tests and `shardwork up`).
    async fn deploy_test_token(&self, from: Address, name: &str, symbol: &str) -> Result<Address> {
        let args = MockERC20::constructorCall {
            name: name.to_owned(),
            symbol: symbol.to_owned(),
        }
        .abi_encode();
        let init_code = [MockERC20::BYTECODE.as_ref(), &args].concat();
        deploy(self, from, init_code.into(), "deploy MockERC20").await
    }

    /// Mints test tokens; anyone may, which is why it exists on dev chains only.
    async fn mint_test_token(
        &self,
        token: Address,
        from: Address,
        to: Address,
        amount: U256,
    ) -> Result<()> {
        transact(
            self,
            token,
            from,
            MockERC20::mintCall { to, amount },
            U256::ZERO,
            "mint",
        )
        .await?;
        Ok(())
    }
}

/// The amount a withdrawal's `Withdrawn` event reports.
fn withdrawn_amount(outcome: &TxOutcome) -> Result<U256> {
    outcome
        .events
        .iter()
        .find_map(|e| match &e.event {
            JobEscrow::JobEscrowEvents::Withdrawn(w) => Some(w.amount),
            _ => None,
        })
        .ok_or(LedgerError::MissingFromReceipt {
            what: "Withdrawn event",
            tx_hash: outcome.tx_hash,
        })
}

async fn deploy<L: Ledger + ?Sized>(
    ledger: &L,
    from: Address,
    init_code: Bytes,
    action: &str,
) -> Result<Address> {
    let tx = TxRequest {
        from,
        to: None,
        input: init_code,
        value: U256::ZERO,
        gas_limit: None,
    };
    let receipt = ledger
        .send_transaction(tx)
        .await
        .map_err(|e| e.during(action))?;
    receipt
        .contract_address
        .ok_or(LedgerError::MissingFromReceipt {
            what: "contract address",
            tx_hash: receipt.tx_hash,
        })
}

async fn transact<L: Ledger + ?Sized, C: SolCall>(
    ledger: &L,
    to: Address,
    from: Address,
    call: C,
    value: U256,
    action: impl Into<String>,
) -> Result<TxOutcome> {
    transact_within(ledger, to, from, call, value, None, action).await
}

/// [`transact`] with the gas limit the caller computed (`None`: estimated).
async fn transact_within<L: Ledger + ?Sized, C: SolCall>(
    ledger: &L,
    to: Address,
    from: Address,
    call: C,
    value: U256,
    gas_limit: Option<u64>,
    action: impl Into<String>,
) -> Result<TxOutcome> {
    let tx = TxRequest {
        from,
        to: Some(to),
        input: call.abi_encode().into(),
        value,
        gas_limit,
    };
    let receipt = ledger
        .send_transaction(tx)
        .await
        .map_err(|e| e.during(action))?;
    Ok(TxOutcome {
        tx_hash: receipt.tx_hash,
        block_number: receipt.block_number,
        gas_used: receipt.gas_used,
        events: decode_events(to, &receipt.logs)?,
    })
}

async fn view<L: Ledger + ?Sized, C: SolCall>(
    ledger: &L,
    to: Address,
    call: C,
    action: &'static str,
) -> Result<C::Return> {
    let tx = TxRequest {
        from: Address::ZERO,
        to: Some(to),
        input: call.abi_encode().into(),
        value: U256::ZERO,
        gas_limit: None,
    };
    let output = ledger.call(tx).await.map_err(|e| e.during(action))?;
    C::abi_decode_returns(&output).map_err(|e| LedgerError::Decode {
        what: action,
        detail: e.to_string(),
    })
}

/// Decodes the JobEscrow events `escrow` emitted. Logs of other addresses (a token's Transfer
/// during `createJob`) and logs that are no JobEscrow event (a token's own events, when a
/// token is the contract called) are skipped.
pub fn decode_events(escrow: Address, logs: &[RawLog]) -> Result<Vec<EscrowEvent>> {
    logs.iter()
        .filter(|raw| raw.log.address == escrow)
        .filter(|raw| {
            raw.log
                .topics()
                .first()
                .is_some_and(|topic| JobEscrow::JobEscrowEvents::SELECTORS.contains(&topic.0))
        })
        .map(|raw| {
            let event = JobEscrow::JobEscrowEvents::decode_log(&raw.log)
                .map_err(|e| LedgerError::Decode {
                    what: "escrow event",
                    detail: e.to_string(),
                })?
                .data;
            Ok(EscrowEvent {
                block_number: raw.block_number,
                tx_hash: raw.tx_hash,
                log_index: raw.log_index,
                event,
            })
        })
        .collect()
}
