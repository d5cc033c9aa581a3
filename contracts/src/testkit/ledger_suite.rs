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
    Contribution, DeployParams, ETH, EscrowEvent, FederatedCompletion, JobKind, JobStatus, Ledger,
    LedgerError, NewJob, Revert,
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
    }
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
    ledger
        .complete_job(escrow, p.validator, job_id, "bafyadapter", contribution)
        .await
        .unwrap();

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

    let new_job = job(ledger, token, stake, JobKind::Federated).await;
    let refused = ledger.create_job(escrow, p.requester, &new_job).await;
    assert!(matches!(revert_of(refused), JobEscrowErrors::TokenNotAllowed(e) if e.token == token));
    ledger
        .set_token_allowed(escrow, p.admin, token, true)
        .await
        .unwrap();
    let (job_id, _) = ledger
        .create_job(escrow, p.requester, &new_job)
        .await
        .unwrap();
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
    let paid: Vec<(Address, U256)> = outcome
        .events
        .iter()
        .filter_map(|e| match &e.event {
            JobEscrowEvents::ContributorPaid(c) => Some((c.contributor, c.amount)),
            _ => None,
        })
        .collect();
    assert_eq!(
        paid.len(),
        3,
        "one ContributorPaid per contributor: {:?}",
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
        (completed.fee, completed.dust, completed.contributorsPaid),
        (fee, U256::ZERO, first + second)
    );
    assert_eq!(completed.manifestCid, "bafymanifest");
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

    let (job_id, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(ledger, ETH, ether(1), JobKind::Lora).await,
        )
        .await
        .unwrap();
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

    let (federated, _) = ledger
        .create_job(
            escrow,
            p.requester,
            &job(ledger, ETH, ether(1), JobKind::Federated).await,
        )
        .await
        .unwrap();
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
    // Nothing of the refused completion stuck: the job is still open and completable.
    assert_eq!(
        ledger.job(escrow, federated).await.unwrap().status,
        JobStatus::Open
    );

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
