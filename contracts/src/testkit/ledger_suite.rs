//! The behaviour every Ledger adapter must show. Each function is one test; run them from a
//! `#[tokio::test]` per adapter (tests/ledger_rpc.rs, tests/ledger_embedded.rs). Amounts are
//! exact on both adapters; only native-ETH balances outside the escrow are compared with
//! inequalities, because anvil charges gas and the embedded chain does not.

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use futures::{Stream, StreamExt};

use crate::bindings::JobEscrow::{JobEscrowErrors, JobEscrowEvents};
use crate::ledger::stream::{StreamOptions, event_stream};
use crate::ledger::{
    Contribution, DeployParams, ETH, EscrowEvent, FederatedAbort, FederatedCompletion, JobKind,
    JobStatus, Ledger, LedgerError, NewJob, PayoutLimits, Revert, TxOutcome,
};

/// The parties of a test: the ledger's first six accounts.
pub struct Parties {
    /// Account 0: deploys the escrow; its admin and fee manager.
    pub admin: Address,
    /// Account 1: the validator.
    pub validator: Address,
    /// Account 2: receives the fees.
    pub treasury: Address,
    /// Account 3: creates the jobs.
    pub requester: Address,
    /// Accounts 4 and 5: the contributors.
    pub workers: [Address; 2],
}

impl Parties {
    /// Takes the parties from `ledger`'s accounts; panics when it has fewer than six.
    pub fn of(ledger: &dyn Ledger) -> Self {
        let a = ledger.accounts();
        assert!(
            a.len() >= 6,
            "the suite needs six funded accounts, the ledger has {}",
            a.len()
        );
        Self {
            admin: a[0],
            validator: a[1],
            treasury: a[2],
            requester: a[3],
            workers: [a[4], a[5]],
        }
    }
}

const FEE_BPS: u16 = 250;

fn ether(n: u64) -> U256 {
    U256::from(n) * U256::from(10u64).pow(U256::from(18u64))
}

async fn deploy(ledger: &dyn Ledger, p: &Parties) -> Address {
    let params = DeployParams {
        admin: p.admin,
        validator: p.validator,
        fee_manager: p.admin,
        treasury: p.treasury,
        fee_bps: FEE_BPS,
    };
    let escrow = ledger
        .deploy_escrow(p.admin, &params)
        .await
        .expect("deploy JobEscrow");
    assert!(
        !ledger.code_at(escrow).await.unwrap().is_empty(),
        "no code at the escrow address"
    );
    escrow
}

async fn job(ledger: &dyn Ledger, token: Address, stake: U256, kind: JobKind) -> NewJob {
    NewJob {
        token,
        stake,
        spec_cid: "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku".into(),
        deadline: ledger.block_timestamp().await.unwrap() + 3_600,
        kind,
        max_fee_bps: FEE_BPS,
    }
}

/// Creates `new_job` and marks it started, as the API does before leasing its first task.
async fn started(ledger: &dyn Ledger, escrow: Address, p: &Parties, new_job: &NewJob) -> U256 {
    let (job_id, _) = ledger
        .create_job(escrow, p.requester, new_job)
        .await
        .unwrap();
    ledger
        .mark_started(escrow, p.validator, job_id)
        .await
        .unwrap();
    job_id
}

/// The `(contributor, reputation, amount)` entries of every `ContributorsPaid` in `events`.
pub fn paid_entries(events: &[EscrowEvent]) -> Vec<(Address, u16, U256)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            JobEscrowEvents::ContributorsPaid(batch) => Some(batch.payouts.clone()),
            _ => None,
        })
        .flat_map(|words| {
            words
                .chunks(2)
                .map(|pair| {
                    let head = pair[0].to_be_bytes::<32>();
                    let reputation = u16::try_from((pair[0] >> 160) & U256::from(0xffff))
                        .expect("16-bit reputation");
                    (Address::from_slice(&head[12..]), reputation, pair[1])
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn revert_of(result: Result<impl std::fmt::Debug, LedgerError>) -> JobEscrowErrors {
    match result {
        Err(LedgerError::Reverted {
            reason: Revert::Escrow(e),
            ..
        }) => *e,
        other => panic!("expected a JobEscrow revert, got {other:?}"),
    }
}

/// ETH LoRA job: escrowed, completed, the contributor paid stake minus fee, the treasury the
/// fee, everyone withdraws, the escrow ends empty.
pub async fn eth_lora_job_pays_contributor_and_treasury(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(1);
    let new_job = job(ledger, ETH, stake, JobKind::Lora).await;
    let (job_id, created) = ledger
        .create_job(escrow, p.requester, &new_job)
        .await
        .unwrap();
    assert_eq!(job_id, U256::from(1));
    match &created.events[..] {
        [e] => match &e.event {
            JobEscrowEvents::JobCreated(c) => {
                assert_eq!(
                    (c.requester, c.token, c.stake, c.deadline),
                    (p.requester, ETH, stake, new_job.deadline)
                );
                assert_eq!(
                    (c.kind, c.feeBps, c.specCid.as_str()),
                    (0, FEE_BPS, new_job.spec_cid.as_str())
                );
            }
            other => panic!("expected JobCreated, got {other:?}"),
        },
        other => panic!("expected one event, got {other:?}"),
    }
    assert_eq!(ledger.eth_balance(escrow).await.unwrap(), stake);
    let info = ledger.job(escrow, job_id).await.unwrap();
    assert_eq!(
        (info.status, info.kind, info.requester, info.stake),
        (JobStatus::Open, JobKind::Lora, p.requester, stake)
    );

    let worker = p.workers[0];
    let contribution = Contribution {
        contributor: worker,
        quality: 8_000,
    };
    // Only a started job can be completed: a requester can never cancel ahead of a payout.
    let open = ledger
        .complete_job(escrow, p.validator, job_id, "bafyadapter", contribution)
        .await;
    assert!(matches!(revert_of(open), JobEscrowErrors::WrongJobStatus(e) if e.status == 1));
    ledger
        .mark_started(escrow, p.validator, job_id)
        .await
        .unwrap();
    let outcome = ledger
        .complete_job(escrow, p.validator, job_id, "bafyadapter", contribution)
        .await
        .unwrap();
    assert_eq!(
        paid_entries(&outcome.events),
        [(
            worker,
            2_000,
            stake - stake * U256::from(FEE_BPS) / U256::from(10_000)
        )]
    );

    let fee = stake * U256::from(FEE_BPS) / U256::from(10_000);
    assert_eq!(
        ledger.withdrawable(escrow, worker, ETH).await.unwrap(),
        stake - fee
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.treasury, ETH).await.unwrap(),
        fee
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        U256::ZERO
    );
    // rep' = (3 x 0 + 8000) / 4
    assert_eq!(ledger.reputation(escrow, worker).await.unwrap(), 2_000);
    assert_eq!(
        ledger.job(escrow, job_id).await.unwrap().status,
        JobStatus::Completed
    );

    let before = ledger.eth_balance(worker).await.unwrap();
    let (paid, _) = ledger.withdraw(escrow, worker, ETH).await.unwrap();
    assert_eq!(paid, stake - fee);
    let after = ledger.eth_balance(worker).await.unwrap();
    assert!(
        after > before && after <= before + paid,
        "worker balance {before} -> {after} after withdrawing {paid}"
    );
    ledger.withdraw(escrow, p.treasury, ETH).await.unwrap();
    assert_eq!(
        ledger.eth_balance(escrow).await.unwrap(),
        U256::ZERO,
        "escrow keeps nothing once all withdrew"
    );

    let again = ledger.withdraw(escrow, worker, ETH).await;
    assert!(matches!(
        revert_of(again),
        JobEscrowErrors::NothingToWithdraw(_)
    ));
}

/// ERC-20 federated job: shares by quality x reputation, fee to the treasury, zero quality
/// paid nothing, reputations moved, token balances exact and conserved.
pub async fn erc20_federated_job_splits_stake_by_quality(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let token = ledger
        .deploy_test_token(p.admin, "Test USD", "TUSD")
        .await
        .unwrap();
    let stake = U256::from(1_000_000u64);
    ledger
        .mint_test_token(token, p.admin, p.requester, stake)
        .await
        .unwrap();

    assert_eq!(
        ledger.token_metadata(token).await.unwrap(),
        crate::ledger::TokenMetadata {
            name: "Test USD".into(),
            symbol: "TUSD".into(),
            decimals: 18,
        }
    );

    let new_job = job(ledger, token, stake, JobKind::Federated).await;
    let refused = ledger.create_job(escrow, p.requester, &new_job).await;
    assert!(matches!(revert_of(refused), JobEscrowErrors::TokenNotAllowed(e) if e.token == token));
    assert!(!ledger.token_allowed(escrow, token).await.unwrap());
    ledger
        .set_token_allowed(escrow, p.admin, token, true)
        .await
        .unwrap();
    assert!(ledger.token_allowed(escrow, token).await.unwrap());
    // A share of 100,000 units or more moves reputation a full step (ERC-20s start at none).
    ledger
        .set_reputation_unit(escrow, p.admin, token, U256::from(100_000u64))
        .await
        .unwrap();
    let job_id = started(ledger, escrow, &p, &new_job).await;
    assert_eq!(ledger.token_balance(token, escrow).await.unwrap(), stake);
    assert_eq!(
        ledger.token_balance(token, p.requester).await.unwrap(),
        U256::ZERO
    );

    let zero_quality = p.treasury; // any third address; it is paid nothing
    let completion = FederatedCompletion {
        job_id,
        adapter_cid: "bafymerged".into(),
        manifest_cid: "bafymanifest".into(),
        // Deliberately unsorted: the ledger sorts by address as the contract requires.
        contributions: vec![
            Contribution {
                contributor: p.workers[1],
                quality: 5_000,
            },
            Contribution {
                contributor: zero_quality,
                quality: 0,
            },
            Contribution {
                contributor: p.workers[0],
                quality: 10_000,
            },
        ],
    };
    let outcome = ledger
        .complete_federated_job(escrow, p.validator, &completion)
        .await
        .unwrap();
    let paid = paid_entries(&outcome.events);
    assert_eq!(
        paid.len(),
        3,
        "one ContributorsPaid entry per contributor: {:?}",
        outcome.events
    );

    // pool = 975,000; weights 10,000 x 10,000 and 5,000 x 10,000 (both reputations 0): 2 : 1.
    let fee = U256::from(25_000u64);
    let (first, second) = (U256::from(650_000u64), U256::from(325_000u64));
    assert_eq!(
        ledger
            .withdrawable(escrow, p.workers[0], token)
            .await
            .unwrap(),
        first
    );
    assert_eq!(
        ledger
            .withdrawable(escrow, p.workers[1], token)
            .await
            .unwrap(),
        second
    );
    assert_eq!(
        ledger
            .withdrawable(escrow, p.treasury, token)
            .await
            .unwrap(),
        fee
    );
    assert_eq!(
        ledger
            .withdrawable(escrow, p.requester, token)
            .await
            .unwrap(),
        U256::ZERO,
        "no dust here"
    );
    let completed = outcome.events.iter().find_map(|e| match &e.event {
        JobEscrowEvents::JobCompleted(c) => Some(c.clone()),
        _ => None,
    });
    let completed = completed.expect("JobCompleted event");
    assert_eq!(
        (
            completed.fee,
            completed.dust,
            completed.paid,
            completed.contributors
        ),
        (fee, U256::ZERO, first + second, U256::from(3))
    );
    let begun = outcome.events.iter().find_map(|e| match &e.event {
        JobEscrowEvents::PayoutStarted(s) => Some(s.clone()),
        _ => None,
    });
    let begun = begun.expect("PayoutStarted event");
    assert_eq!(
        (begun.adapterCid.as_str(), begun.manifestCid.as_str()),
        ("bafymerged", "bafymanifest")
    );
    assert_eq!(
        ledger.reputation(escrow, p.workers[0]).await.unwrap(),
        2_500
    );
    assert_eq!(
        ledger.reputation(escrow, p.workers[1]).await.unwrap(),
        1_250
    );
    assert_eq!(ledger.reputation(escrow, zero_quality).await.unwrap(), 0);

    let (withdrawn, _) = ledger.withdraw(escrow, p.workers[1], token).await.unwrap();
    assert_eq!(withdrawn, second);
    assert_eq!(
        ledger.token_balance(token, p.workers[1]).await.unwrap(),
        second
    );
    assert_eq!(
        ledger.token_balance(token, escrow).await.unwrap(),
        stake - second,
        "escrow holds what is unwithdrawn"
    );

    // withdrawTo: the credit goes to the address named, not to the account that earned it.
    let elsewhere = Address::repeat_byte(0x77);
    let (withdrawn, _) = ledger
        .withdraw_to(escrow, p.workers[0], token, elsewhere)
        .await
        .unwrap();
    assert_eq!(withdrawn, first);
    assert_eq!(ledger.token_balance(token, elsewhere).await.unwrap(), first);
    assert_eq!(
        ledger.token_balance(token, p.workers[0]).await.unwrap(),
        U256::ZERO
    );
    assert_eq!(
        ledger
            .withdrawable(escrow, p.workers[0], token)
            .await
            .unwrap(),
        U256::ZERO
    );
}

/// Reverts come back as the contract's custom errors with their arguments, and read well.
pub async fn reverts_are_decoded_into_contract_errors(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;

    let unknown = ledger.cancel(escrow, p.requester, U256::from(42)).await;
    let message = unknown.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(
        message.contains("cancel(42)") && message.contains("UnknownJob"),
        "unreadable error: {message}"
    );
    assert!(
        matches!(revert_of(unknown), JobEscrowErrors::UnknownJob(e) if e.jobId == U256::from(42))
    );

    let mut late = job(ledger, ETH, ether(1), JobKind::Lora).await;
    late.deadline = 1;
    let refused = ledger.create_job(escrow, p.requester, &late).await;
    assert!(
        matches!(revert_of(refused), JobEscrowErrors::DeadlineNotInFuture(e) if e.deadline == U256::from(1))
    );

    let job_id = started(
        ledger,
        escrow,
        &p,
        &job(ledger, ETH, ether(1), JobKind::Lora).await,
    )
    .await;
    let contribution = Contribution {
        contributor: p.workers[0],
        quality: 9_000,
    };
    let not_validator = ledger
        .complete_job(escrow, p.requester, job_id, "bafy", contribution)
        .await;
    assert!(matches!(
        revert_of(not_validator),
        JobEscrowErrors::AccessControlUnauthorizedAccount(e) if e.account == p.requester
    ));
    let wrong_kind = FederatedCompletion {
        job_id,
        adapter_cid: "bafy".into(),
        manifest_cid: "bafym".into(),
        contributions: vec![contribution],
    };
    let refused = ledger
        .complete_federated_job(escrow, p.validator, &wrong_kind)
        .await;
    assert!(matches!(
        revert_of(refused),
        JobEscrowErrors::WrongJobKind(_)
    ));
    ledger
        .complete_job(escrow, p.validator, job_id, "bafy", contribution)
        .await
        .unwrap();
    let twice = ledger
        .complete_job(escrow, p.validator, job_id, "bafy", contribution)
        .await;
    assert!(
        matches!(revert_of(twice), JobEscrowErrors::WrongJobStatus(e) if e.jobId == job_id && e.status == 3)
    );

    let federated = started(
        ledger,
        escrow,
        &p,
        &job(ledger, ETH, ether(1), JobKind::Federated).await,
    )
    .await;
    let duplicate = FederatedCompletion {
        job_id: federated,
        adapter_cid: "bafy".into(),
        manifest_cid: "bafym".into(),
        contributions: vec![contribution, contribution],
    };
    let refused = ledger
        .complete_federated_job(escrow, p.validator, &duplicate)
        .await;
    assert!(
        matches!(revert_of(refused), JobEscrowErrors::ContributorsNotSorted(e) if e.index == U256::from(1))
    );
    // Nothing of the refused completion stuck: the job is still started and completable.
    assert_eq!(
        ledger.job(escrow, federated).await.unwrap().status,
        JobStatus::Started
    );
    let own = FederatedCompletion {
        contributions: vec![Contribution {
            contributor: p.requester,
            quality: 9_000,
        }],
        ..duplicate
    };
    let refused = ledger
        .complete_federated_job(escrow, p.validator, &own)
        .await;
    assert!(matches!(
        revert_of(refused),
        JobEscrowErrors::RequesterIsContributor(_)
    ));

    let mut greedy = job(ledger, ETH, ether(1), JobKind::Lora).await;
    greedy.max_fee_bps = FEE_BPS - 1;
    let refused = ledger.create_job(escrow, p.requester, &greedy).await;
    assert!(matches!(
        revert_of(refused),
        JobEscrowErrors::FeeAboveMaximum(e) if e.feeBps == U256::from(FEE_BPS)
    ));

    let stranger = Address::repeat_byte(0x5a);
    let unsigned = ledger.cancel(escrow, stranger, federated).await;
    assert!(
        matches!(unsigned, Err(LedgerError::UnknownSigner(a)) if a == stranger),
        "{unsigned:?}"
    );
}

/// Cancel before work starts, no cancel after, refund only after the deadline, by anyone.
pub async fn cancel_and_refund_return_the_stake_to_the_requester(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(2);
    let (cancelled, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(ledger, ETH, stake, JobKind::Lora).await,
        )
        .await
        .unwrap();
    let outcome = ledger.cancel(escrow, p.requester, cancelled).await.unwrap();
    assert!(
        matches!(&outcome.events[0].event, JobEscrowEvents::JobCancelled(e) if e.stake == stake)
    );
    assert_eq!(
        ledger.job(escrow, cancelled).await.unwrap().status,
        JobStatus::Cancelled
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        stake
    );

    let started_job = job(ledger, ETH, stake, JobKind::Federated).await;
    let (started, _) = ledger
        .create_job(escrow, p.requester, &started_job)
        .await
        .unwrap();
    ledger
        .mark_started(escrow, p.validator, started)
        .await
        .unwrap();
    let refused = ledger.cancel(escrow, p.requester, started).await;
    assert!(matches!(revert_of(refused), JobEscrowErrors::WrongJobStatus(e) if e.status == 2));
    let early = ledger.refund(escrow, p.workers[0], started).await;
    assert!(matches!(
        revert_of(early),
        JobEscrowErrors::DeadlineNotPassed(_)
    ));

    let now = ledger.block_timestamp().await.unwrap();
    ledger
        .advance_time(started_job.deadline - now + 1)
        .await
        .unwrap();
    assert!(
        ledger.block_timestamp().await.unwrap() > started_job.deadline,
        "the clock did not pass the deadline"
    );
    let contribution = Contribution {
        contributor: p.workers[0],
        quality: 10_000,
    };
    let completion = FederatedCompletion {
        job_id: started,
        adapter_cid: "a".into(),
        manifest_cid: "m".into(),
        contributions: vec![contribution],
    };
    let too_late = ledger
        .complete_federated_job(escrow, p.validator, &completion)
        .await;
    assert!(matches!(
        revert_of(too_late),
        JobEscrowErrors::DeadlinePassed(_)
    ));
    // Anyone may trigger the refund; the requester is the one credited.
    let outcome = ledger.refund(escrow, p.workers[0], started).await.unwrap();
    assert!(
        matches!(&outcome.events[0].event, JobEscrowEvents::JobRefunded(e) if e.triggeredBy == p.workers[0])
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        stake + stake
    );
    assert_eq!(
        ledger
            .withdrawable(escrow, p.workers[0], ETH)
            .await
            .unwrap(),
        U256::ZERO
    );
    let (paid, _) = ledger.withdraw(escrow, p.requester, ETH).await.unwrap();
    assert_eq!(paid, stake + stake);
    assert_eq!(ledger.eth_balance(escrow).await.unwrap(), U256::ZERO);
}

/// A started job that cannot finish is ended by the validator: the whole stake goes back to
/// the requester at once, no fee, and nothing can complete it afterwards.
pub async fn abort_refunds_the_whole_stake_at_once(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(3);
    let job_id = started(
        ledger,
        escrow,
        &p,
        &job(ledger, ETH, stake, JobKind::Federated).await,
    )
    .await;
    let stranger = ledger
        .abort_job(escrow, p.requester, job_id, "not mine to end")
        .await;
    assert!(matches!(
        revert_of(stranger),
        JobEscrowErrors::AccessControlUnauthorizedAccount(_)
    ));
    let reason = "task 7 used up its 3 attempts";
    let outcome = ledger
        .abort_job(escrow, p.validator, job_id, reason)
        .await
        .unwrap();
    assert!(matches!(
        &outcome.events[0].event,
        JobEscrowEvents::JobAborted(e) if e.stake == stake && e.reason == reason
    ));
    assert_eq!(
        ledger.job(escrow, job_id).await.unwrap().status,
        JobStatus::Aborted
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        stake
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.treasury, ETH).await.unwrap(),
        U256::ZERO,
        "no fee for a job that delivered nothing"
    );
    let completion = FederatedCompletion {
        job_id,
        adapter_cid: "a".into(),
        manifest_cid: "m".into(),
        contributions: vec![Contribution {
            contributor: p.workers[0],
            quality: 10_000,
        }],
    };
    let late = ledger
        .complete_federated_job(escrow, p.validator, &completion)
        .await;
    assert!(matches!(revert_of(late), JobEscrowErrors::WrongJobStatus(e) if e.status == 7));
}

/// Work done is paid, whatever ends the job (issue 46, attack 1). A 2-round job whose round 1
/// was accepted (progress recorded: 5,000 bps) and whose round 2 cannot finish is ended paying
/// round 1's workers half the stake (less the fee on that half) and the requester the other
/// half; the same in batches (a gas cap that fits one contributor per batch); sending it again
/// sends nothing. Recorded progress holds the deadline refund back until the grace has passed.
pub async fn abort_pays_the_completed_rounds_and_refunds_the_rest(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(4);
    let new_job = job(ledger, ETH, stake, JobKind::Federated).await;
    let job_id = started(ledger, escrow, &p, &new_job).await;

    let recorded = ledger
        .record_progress(escrow, p.validator, job_id, 5_000)
        .await
        .unwrap();
    assert!(matches!(
        &recorded.events[0].event,
        JobEscrowEvents::ProgressRecorded(e) if e.jobId == job_id && e.earnedBps == 5_000
    ));
    assert_eq!(ledger.job(escrow, job_id).await.unwrap().earned_bps, 5_000);
    let again = ledger
        .record_progress(escrow, p.validator, job_id, 5_000)
        .await
        .unwrap();
    assert!(again.events.is_empty(), "a repeat records nothing");
    let lower = ledger
        .record_progress(escrow, p.validator, job_id, 4_999)
        .await;
    assert!(matches!(
        revert_of(lower),
        JobEscrowErrors::ProgressDecreased(e) if e.recorded == U256::from(5_000)
    ));
    let by_requester = ledger
        .record_progress(escrow, p.requester, job_id, 6_000)
        .await;
    assert!(matches!(
        revert_of(by_requester),
        JobEscrowErrors::AccessControlUnauthorizedAccount(_)
    ));

    let reason = "round 2's task used up its attempts";
    let abort = FederatedAbort {
        job_id,
        earned_bps: 5_000,
        adapter_cid: "bafyround1".into(),
        reason: reason.into(),
        // Out of order on purpose: the ledger sorts.
        contributions: vec![
            Contribution {
                contributor: p.workers[1],
                quality: 5_000,
            },
            Contribution {
                contributor: p.workers[0],
                quality: 10_000,
            },
        ],
    };
    let sent = ledger
        .pay_federated_abort(escrow, p.validator, &abort, PayoutLimits::default())
        .await
        .unwrap();
    assert_eq!(sent.len(), 1, "two contributors fit one transaction");
    // Earned: 2 ETH; fee 2.5% of it; pool 1.95 ETH split 2:1 between newcomers.
    let earned = ether(2);
    let fee = earned * U256::from(FEE_BPS) / U256::from(10_000);
    let pool = earned - fee;
    let events = &sent[0].events;
    assert!(events.iter().any(|e| matches!(
        &e.event,
        JobEscrowEvents::JobAborted(a) if a.stake == stake - earned && a.reason == reason
    )));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, JobEscrowEvents::JobCompleted(_)))
    );
    let paid = paid_entries(events);
    assert_eq!(paid.len(), 2);
    let share = |who: Address| paid.iter().find(|(a, _, _)| *a == who).unwrap().2;
    assert_eq!(share(p.workers[0]), pool * U256::from(2) / U256::from(3));
    assert_eq!(share(p.workers[1]), pool / U256::from(3));
    assert_eq!(
        ledger.job(escrow, job_id).await.unwrap().status,
        JobStatus::Aborted
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.treasury, ETH).await.unwrap(),
        fee,
        "the fee on the earned half only"
    );
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        stake - earned,
        "the unearned half back (no dust at these numbers)"
    );
    let repeat = ledger
        .pay_federated_abort(escrow, p.validator, &abort, PayoutLimits::default())
        .await
        .unwrap();
    assert!(repeat.is_empty(), "an ended job is not paid twice");

    // Batched: a cap that fits one contributor per transaction (begin + 2 batches), the same
    // credits as the one-transaction abort; the reason given at begin ends the last batch.
    let batched_job = started(ledger, escrow, &p, &new_job).await;
    let one_per_batch = PayoutLimits {
        tx_gas_cap: PayoutLimits::BATCH_OVERHEAD_GAS + PayoutLimits::WORST_GAS_PER_CONTRIBUTOR,
    };
    assert_eq!(one_per_batch.contributors_per_batch(), 1);
    let w0 = ledger
        .withdrawable(escrow, p.workers[0], ETH)
        .await
        .unwrap();
    let w1 = ledger
        .withdrawable(escrow, p.workers[1], ETH)
        .await
        .unwrap();
    let back_before = ledger.withdrawable(escrow, p.requester, ETH).await.unwrap();
    let batched = FederatedAbort {
        job_id: batched_job,
        ..abort.clone()
    };
    let sent = ledger
        .pay_federated_abort(escrow, p.validator, &batched, one_per_batch)
        .await
        .unwrap();
    assert_eq!(sent.len(), 3, "begin and two batches");
    assert_eq!(
        ledger
            .payout_progress(escrow, batched_job)
            .await
            .unwrap()
            .earned_bps,
        5_000
    );
    // The last batch logs what went back: the unearned half plus whatever dust the new
    // weights leave (reputation moved with the first abort).
    let logged_back = sent[2]
        .events
        .iter()
        .find_map(|e| match &e.event {
            JobEscrowEvents::JobAborted(a) if a.reason == reason => Some(a.stake),
            _ => None,
        })
        .expect("the last batch logs JobAborted with the reason given at begin");
    assert_eq!(
        ledger.job(escrow, batched_job).await.unwrap().status,
        JobStatus::Aborted
    );
    // Reputation moved with the first abort, so the second pays by the new weights; what
    // matters here is that the split is exact again.
    let paid_again = ledger
        .withdrawable(escrow, p.workers[0], ETH)
        .await
        .unwrap()
        - w0
        + ledger
            .withdrawable(escrow, p.workers[1], ETH)
            .await
            .unwrap()
        - w1;
    let back = ledger.withdrawable(escrow, p.requester, ETH).await.unwrap() - back_before;
    assert_eq!(
        paid_again + fee + back,
        stake,
        "stake == paid + fee + refunded"
    );
    assert!(back >= stake - earned);
    assert_eq!(back, logged_back);

    // The requester's race: with progress recorded, a refund at the deadline reverts until
    // the grace has passed; then (the platform having vanished) the whole stake goes back.
    let raced = started(
        ledger,
        escrow,
        &p,
        &job(ledger, ETH, stake, JobKind::Federated).await,
    )
    .await;
    ledger
        .record_progress(escrow, p.validator, raced, 5_000)
        .await
        .unwrap();
    let deadline = ledger.job(escrow, raced).await.unwrap().deadline;
    let grace = ledger.payout_grace(escrow).await.unwrap();
    let now = ledger.block_timestamp().await.unwrap();
    ledger.advance_time(deadline + 1 - now).await.unwrap();
    let early = ledger.refund(escrow, p.requester, raced).await;
    assert!(matches!(
        revert_of(early),
        JobEscrowErrors::PayoutGraceNotPassed(e) if e.until == U256::from(deadline + grace)
    ));
    ledger.advance_time(grace).await.unwrap();
    let refund = ledger.refund(escrow, p.requester, raced).await.unwrap();
    assert!(matches!(
        &refund.events[0].event,
        JobEscrowEvents::JobRefunded(r) if r.stake == stake
    ));
}

/// Pays `completion` until the validator crashes after the begin transaction and one batch;
/// returns the gas of the two transactions it sent.
async fn crash_after_begin_and_one_batch(
    ledger: &dyn Ledger,
    escrow: Address,
    validator: Address,
    completion: &FederatedCompletion,
    limits: PayoutLimits,
) -> Vec<u64> {
    let crashing = CrashingAfter {
        inner: ledger,
        sends: 2.into(),
        gas_used: Default::default(),
    };
    let crashed = crashing
        .pay_federated_job(escrow, validator, completion, limits)
        .await;
    assert!(
        matches!(crashed, Err(LedgerError::Rpc { .. })),
        "{crashed:?}"
    );
    crashing.gas_used.into_inner().unwrap()
}

/// A Ledger that fails every transaction after its first `sends` ones, as a validator that
/// crashes halfway through a payout would.
struct CrashingAfter<'a> {
    inner: &'a dyn Ledger,
    sends: std::sync::atomic::AtomicUsize,
    /// Gas of each transaction it did send.
    gas_used: std::sync::Mutex<Vec<u64>>,
}

#[async_trait::async_trait]
impl Ledger for CrashingAfter<'_> {
    fn accounts(&self) -> Vec<Address> {
        self.inner.accounts()
    }
    async fn chain_id(&self) -> crate::ledger::Result<u64> {
        self.inner.chain_id().await
    }
    async fn block_number(&self) -> crate::ledger::Result<u64> {
        self.inner.block_number().await
    }
    async fn block_timestamp(&self) -> crate::ledger::Result<u64> {
        self.inner.block_timestamp().await
    }
    async fn block_hash(
        &self,
        number: u64,
    ) -> crate::ledger::Result<Option<alloy::primitives::B256>> {
        self.inner.block_hash(number).await
    }
    async fn send_transaction(
        &self,
        tx: crate::ledger::TxRequest,
    ) -> crate::ledger::Result<crate::ledger::Receipt> {
        use std::sync::atomic::Ordering;
        if self
            .sends
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(LedgerError::Rpc {
                method: "eth_sendRawTransaction",
                detail: "the validator crashed".into(),
            });
        }
        let receipt = self.inner.send_transaction(tx).await?;
        self.gas_used.lock().unwrap().push(receipt.gas_used);
        Ok(receipt)
    }
    async fn call(
        &self,
        tx: crate::ledger::TxRequest,
    ) -> crate::ledger::Result<alloy::primitives::Bytes> {
        self.inner.call(tx).await
    }
    async fn logs(
        &self,
        address: Address,
        from_block: u64,
        to_block: u64,
    ) -> crate::ledger::Result<Vec<crate::ledger::RawLog>> {
        self.inner.logs(address, from_block, to_block).await
    }
    async fn eth_balance(&self, account: Address) -> crate::ledger::Result<U256> {
        self.inner.eth_balance(account).await
    }
    async fn code_at(&self, address: Address) -> crate::ledger::Result<alloy::primitives::Bytes> {
        self.inner.code_at(address).await
    }
    async fn advance_time(&self, seconds: u64) -> crate::ledger::Result<()> {
        self.inner.advance_time(seconds).await
    }
}

/// Gas of a payout, as its receipts say.
#[derive(Debug, Clone, Copy)]
pub struct PayoutGas {
    /// Contributors paid.
    pub contributors: usize,
    /// Transactions sent (begin and batches, or the one completion).
    pub transactions: usize,
    /// Sum of the receipts' gas.
    pub total: u64,
    /// The largest receipt.
    pub largest: u64,
}

/// A federated job of `n` new contributors is paid through [`Ledger::pay_federated_job`] in
/// batches that each fit EIP-7825's 2^24 gas; a validator that crashes after the first batch
/// resumes where it stopped, and nobody is paid twice: every contributor exactly its share,
/// fee + shares + dust = stake. Returns what the payout cost (for the gas figures).
pub async fn large_payout_is_batched_under_the_gas_cap(ledger: &dyn Ledger, n: usize) -> PayoutGas {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(10);
    let job_id = started(
        ledger,
        escrow,
        &p,
        &job(ledger, ETH, stake, JobKind::Federated).await,
    )
    .await;
    // Addresses 0x...01 upward: fresh accounts, none the requester. Qualities vary so shares
    // differ and rounding dust appears.
    let contributions: Vec<Contribution> = (1..=n)
        .map(|i| {
            let mut bytes = [0u8; 20];
            bytes[12..].copy_from_slice(&(0x1000_0000u64 + i as u64).to_be_bytes());
            Contribution {
                contributor: Address::from(bytes),
                quality: (1 + (i * 7_919) % 10_000) as u16,
            }
        })
        .collect();
    let completion = FederatedCompletion {
        job_id,
        adapter_cid: "bafymerged".into(),
        manifest_cid: "bafymanifest".into(),
        contributions: contributions.clone(),
    };
    let limits = crate::ledger::PayoutLimits::default();
    let per_batch = limits.contributors_per_batch();
    let mut crashed_run_gas = Vec::new();
    if n > per_batch {
        let gas_used =
            crash_after_begin_and_one_batch(ledger, escrow, p.validator, &completion, limits).await;
        let progress = ledger.payout_progress(escrow, job_id).await.unwrap();
        assert_eq!(
            (progress.expected as usize, progress.paid_count as usize),
            (n, per_batch)
        );
        assert_eq!(
            ledger.job(escrow, job_id).await.unwrap().status,
            JobStatus::Paying
        );
        crashed_run_gas.extend(gas_used);
    }
    let resumed = ledger
        .pay_federated_job(escrow, p.validator, &completion, limits)
        .await
        .unwrap();
    // Sending the whole payout again pays nobody twice: it finds the job completed on chain
    // and sends nothing.
    let again = ledger
        .pay_federated_job(escrow, p.validator, &completion, limits)
        .await;
    assert!(
        matches!(&again, Ok(sent) if sent.is_empty()),
        "a completed payout was sent again: {again:?}"
    );
    assert_eq!(
        ledger.job(escrow, job_id).await.unwrap().status,
        JobStatus::Completed
    );

    let all = ledger.events(escrow, 0, None).await.unwrap();
    let paid = paid_entries(&all);
    assert_eq!(paid.len(), n, "one entry per contributor");
    let mut seen: Vec<Address> = paid.iter().map(|(a, _, _)| *a).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "somebody was paid twice");
    let fee = stake * U256::from(FEE_BPS) / U256::from(10_000);
    let pool = stake - fee;
    let total_weight: u64 = contributions
        .iter()
        .map(|c| u64::from(c.quality) * 10_000)
        .sum();
    let mut sum = U256::ZERO;
    for (who, _, amount) in &paid {
        let quality = contributions
            .iter()
            .find(|c| c.contributor == *who)
            .unwrap()
            .quality;
        let exact = pool * U256::from(u64::from(quality) * 10_000) / U256::from(total_weight);
        assert_eq!(*amount, exact, "{who}'s share");
        sum += *amount;
    }
    let completed = all
        .iter()
        .find_map(|e| match &e.event {
            JobEscrowEvents::JobCompleted(c) if c.jobId == job_id => Some(c.clone()),
            _ => None,
        })
        .expect("JobCompleted");
    assert_eq!(completed.paid, sum);
    assert_eq!(completed.fee + completed.paid + completed.dust, stake);
    assert_eq!(
        ledger.withdrawable(escrow, p.requester, ETH).await.unwrap(),
        completed.dust
    );

    let mut gas = PayoutGas {
        contributors: n,
        transactions: 0,
        total: 0,
        largest: 0,
    };
    let mut add = |used: u64| {
        gas.transactions += 1;
        gas.total += used;
        gas.largest = gas.largest.max(used);
    };
    for outcome in &resumed {
        add(outcome.gas_used);
    }
    for used in crashed_run_gas {
        add(used);
    }
    assert!(
        gas.largest <= limits.tx_gas_cap,
        "a payout transaction used {} gas, above the cap {}",
        gas.largest,
        limits.tx_gas_cap
    );
    gas
}

/// Between two batches of a payout, another job pays two of its later contributors and
/// raises their reputations; the validator crashed after the first batch and resumes. The
/// batches still weigh everyone by the reputations of the payout's start (recovered from the
/// log on resume), so each of the four equal contributors gets a quarter of the pool: before,
/// the raised ones took more and the last got what was left. Also: every batch's gas limit is
/// the one computed from it. Returns the resumed run's batches.
pub async fn batched_payout_pays_the_weights_of_its_start(ledger: &dyn Ledger) -> Vec<TxOutcome> {
    let p = Parties::of(ledger);
    let escrow = deploy(ledger, &p).await;
    let stake = ether(4);
    let new_job = job(ledger, ETH, stake, JobKind::Federated).await;
    let job_id = started(ledger, escrow, &p, &new_job).await;
    let contributions: Vec<Contribution> = (1..=4u64)
        .map(|i| {
            let mut bytes = [0u8; 20];
            bytes[12..].copy_from_slice(&(0x4600_0000u64 + i).to_be_bytes());
            Contribution {
                contributor: Address::from(bytes),
                quality: 10_000,
            }
        })
        .collect();
    let completion = FederatedCompletion {
        job_id,
        adapter_cid: "bafymerged".into(),
        manifest_cid: "bafymanifest".into(),
        contributions: contributions.clone(),
    };
    let one_per_batch = PayoutLimits {
        tx_gas_cap: PayoutLimits::BATCH_OVERHEAD_GAS + PayoutLimits::WORST_GAS_PER_CONTRIBUTOR,
    };
    crash_after_begin_and_one_batch(ledger, escrow, p.validator, &completion, one_per_batch).await;
    assert_eq!(
        ledger
            .payout_progress(escrow, job_id)
            .await
            .unwrap()
            .paid_count,
        1
    );

    // Meanwhile another job pays the last two, at full quality and a full step each.
    for c in &contributions[2..] {
        let lora = job(ledger, ETH, ether(1), JobKind::Lora).await;
        let lora_id = started(ledger, escrow, &p, &lora).await;
        ledger
            .complete_job(escrow, p.validator, lora_id, "bafylora", *c)
            .await
            .unwrap();
        assert_eq!(
            ledger.reputation(escrow, c.contributor).await.unwrap(),
            2_500
        );
    }
    let credit = |who: Address| ledger.withdrawable(escrow, who, ETH);
    let mut before = Vec::new();
    for c in &contributions {
        before.push(credit(c.contributor).await.unwrap());
    }

    let resumed = ledger
        .pay_federated_job(escrow, p.validator, &completion, one_per_batch)
        .await
        .unwrap();
    assert_eq!(resumed.len(), 3, "the three batches left");
    assert_eq!(
        ledger.job(escrow, job_id).await.unwrap().status,
        JobStatus::Completed
    );
    let fee = stake * U256::from(FEE_BPS) / U256::from(10_000);
    let quarter = (stake - fee) / U256::from(4);
    let first_paid = paid_entries(&ledger.events(escrow, 0, None).await.unwrap())
        .into_iter()
        .find(|(who, _, _)| *who == contributions[0].contributor)
        .map(|(_, _, amount)| amount)
        .unwrap();
    assert_eq!(first_paid, quarter, "the batch before the crash");
    for (c, before) in contributions.iter().zip(&before).skip(1) {
        let got = credit(c.contributor).await.unwrap() - before;
        assert_eq!(
            got, quarter,
            "{} got another share than announced",
            c.contributor
        );
    }
    let limit = one_per_batch.batch_gas_limit(1);
    assert_eq!(limit, 232_000);
    for outcome in &resumed {
        assert!(outcome.gas_used <= limit, "{} > {limit}", outcome.gas_used);
    }
    resumed
}

/// `block_hash` names every mined block, the same each time it is asked and differently for
/// each height, and nothing beyond the latest.
pub async fn block_hashes_name_the_mined_blocks(ledger: &dyn Ledger) {
    let p = Parties::of(ledger);
    deploy(ledger, &p).await;
    let latest = ledger.block_number().await.unwrap();
    assert!(latest >= 1);
    let mut seen = std::collections::HashSet::new();
    for number in 0..=latest {
        let hash = ledger.block_hash(number).await.unwrap();
        let hash = hash.unwrap_or_else(|| panic!("no hash for mined block {number}"));
        assert_eq!(ledger.block_hash(number).await.unwrap(), Some(hash));
        assert!(seen.insert(hash), "block {number} shares its hash");
    }
    assert_eq!(ledger.block_hash(latest + 1).await.unwrap(), None);
}

/// `events` lists typed events from a block on, in order; the stream delivers the same,
/// then new ones as they are mined.
pub async fn events_from_a_block_on_are_typed_and_ordered(ledger: Arc<dyn Ledger>) {
    let p = Parties::of(&*ledger);
    let escrow = deploy(&*ledger, &p).await;
    let deployed_at = ledger.block_number().await.unwrap();
    let (first, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(&*ledger, ETH, ether(1), JobKind::Lora).await,
        )
        .await
        .unwrap();
    let after_first = ledger.block_number().await.unwrap() + 1;
    let (second, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(&*ledger, ETH, ether(1), JobKind::Lora).await,
        )
        .await
        .unwrap();
    ledger.cancel(escrow, p.requester, second).await.unwrap();

    let all = ledger.events(escrow, deployed_at, None).await.unwrap();
    let kinds: Vec<&'static str> = all.iter().map(|e| event_name(&e.event)).collect();
    let deploy_events = [
        "RoleGranted",
        "RoleGranted",
        "RoleGranted",
        "TreasuryChanged",
        "FeeChanged",
    ];
    assert_eq!(kinds[..5], deploy_events);
    assert_eq!(kinds[5..], ["JobCreated", "JobCreated", "JobCancelled"]);
    let positions: Vec<(u64, u64)> = all.iter().map(|e| (e.block_number, e.log_index)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "events out of chain order: {positions:?}"
    );
    let later = ledger.events(escrow, after_first, None).await.unwrap();
    assert!(matches!(&later[0].event, JobEscrowEvents::JobCreated(c) if c.jobId == second));
    assert_eq!(later.len(), 2);

    let options = StreamOptions {
        poll_interval: Duration::from_millis(50),
        confirmations: 0,
        max_block_range: 2,
    };
    let mut stream = Box::pin(event_stream(ledger.clone(), escrow, after_first, options));
    assert!(
        matches!(next_event(&mut stream).await, JobEscrowEvents::JobCreated(c) if c.jobId == second)
    );
    assert!(matches!(
        next_event(&mut stream).await,
        JobEscrowEvents::JobCancelled(_)
    ));
    // A job created after the stream started arrives too.
    let (third, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(&*ledger, ETH, ether(1), JobKind::Lora).await,
        )
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut stream).await, JobEscrowEvents::JobCreated(c) if c.jobId == third)
    );
    assert_ne!(first, third);
}

async fn next_event<S: Stream<Item = Result<EscrowEvent, LedgerError>> + Unpin>(
    stream: &mut S,
) -> JobEscrowEvents {
    let next = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("event stream stalled");
    next.expect("event stream ended")
        .expect("event stream error")
        .event
}

fn event_name(event: &JobEscrowEvents) -> &'static str {
    match event {
        JobEscrowEvents::JobCreated(_) => "JobCreated",
        JobEscrowEvents::JobCancelled(_) => "JobCancelled",
        JobEscrowEvents::TreasuryChanged(_) => "TreasuryChanged",
        JobEscrowEvents::FeeChanged(_) => "FeeChanged",
        JobEscrowEvents::RoleGranted(_) => "RoleGranted",
        _ => "other",
    }
}

/// One account sending many transactions at once: every one is mined, none replaced, so no
/// nonce was used twice (and none skipped, or the later ones would never be mined).
pub async fn one_signer_sending_concurrently_never_reuses_a_nonce(ledger: Arc<dyn Ledger>) {
    let p = Parties::of(&*ledger);
    let escrow = deploy(&*ledger, &p).await;
    let template = job(&*ledger, ETH, ether(1), JobKind::Lora).await;
    let sends = (0..12).map(|i| {
        let (ledger, mut job) = (ledger.clone(), template.clone());
        job.stake = ether(1) + U256::from(i);
        tokio::spawn(async move { ledger.create_job(escrow, p.requester, &job).await })
    });
    let mut ids: Vec<U256> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|joined| joined.expect("task").expect("create_job").0)
        .collect();
    ids.sort();
    assert_eq!(ids, (1..=12u64).map(U256::from).collect::<Vec<_>>());
    let escrowed: U256 = (0..12u64).map(|i| ether(1) + U256::from(i)).sum();
    assert_eq!(ledger.eth_balance(escrow).await.unwrap(), escrowed);
}
