// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "./utils/Packing.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {EscrowFixture} from "./EscrowFixture.sol";
import {Console} from "./utils/Console.sol";

/// Work done is paid, whatever ends the job (issue 46, attack 1): an abort pays the completed
/// rounds' accepted work (`abortFederatedJob`, or `beginFederatedAbort` + batches) and refunds
/// only the rest; recorded progress (`recordProgress`) holds the deadline refund back by
/// PAYOUT_GRACE so a requester cannot race that payout.
contract PartialPayoutTest is EscrowFixture {
    JobEscrow.JobKind internal constant LORA = JobEscrow.JobKind.LoRA;
    JobEscrow.JobKind internal constant FED = JobEscrow.JobKind.Federated;
    bytes32 internal constant VALIDATOR = keccak256("VALIDATOR_ROLE");
    uint256 internal constant HALF = 5_000;

    address internal alice = address(0x1000);
    address internal bob = address(0x2000);

    /// Half of STAKE earned: 5 ETH, of which 2.5% is the fee.
    uint256 internal constant EARNED = STAKE / 2;
    uint256 internal constant EARNED_FEE = EARNED * FEE_BPS / 10_000;
    uint256 internal constant EARNED_POOL = EARNED - EARNED_FEE;

    function _wrongStatus(uint256 jobId, JobEscrow.JobStatus status) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, status);
    }

    function _status(uint256 jobId) internal view returns (JobEscrow.JobStatus) {
        return escrow.getJob(jobId).status;
    }

    function _pair() internal view returns (address[] memory l) {
        l = new address[](2);
        (l[0], l[1]) = (alice, bob);
    }

    function _q(uint16 a, uint16 b) internal pure returns (uint16[] memory q) {
        q = new uint16[](2);
        (q[0], q[1]) = (a, b);
    }

    function _record(uint256 jobId, uint16 earnedBps) internal {
        vm.prank(validator);
        escrow.recordProgress(jobId, earnedBps);
    }

    function _abort(uint256 jobId, uint16 earnedBps, address[] memory contributors, uint16[] memory scores) internal {
        vm.prank(validator);
        escrow.abortFederatedJob(jobId, earnedBps, "bafy-round-1", "task used up its attempts", contributors, scores);
    }

    // ------------------------------------------------------------ one transaction

    /// The attack: round 1 of 2 accepted, round 2's task failed its attempts. The workers of
    /// round 1 are paid half the stake (less the fee on that half only), the requester gets the
    /// other half back, and the job ends Aborted with what went back in the event.
    function test_abort_pays_the_completed_rounds_and_refunds_only_the_rest() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _record(jobId, uint16(HALF));
        // Newcomers at quality 10_000 and 5_000: weights 2:1 of a 4.875 ETH pool.
        vm.expectEmit(address(escrow));
        emit JobEscrow.PayoutStarted(jobId, "bafy-round-1", "", 2, 10_000 * 10_000 + 5_000 * 10_000);
        vm.expectEmit(address(escrow));
        uint256[] memory entries = new uint256[](4);
        entries[0] = uint256(uint160(alice)) | (uint256(2_500) << 160);
        entries[1] = EARNED_POOL * 2 / 3;
        entries[2] = uint256(uint160(bob)) | (uint256(1_250) << 160);
        entries[3] = EARNED_POOL / 3;
        emit JobEscrow.ContributorsPaid(jobId, entries);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobAborted(jobId, STAKE - EARNED, "task used up its attempts");
        _abort(jobId, uint16(HALF), _pair(), _q(10_000, 5_000));

        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Aborted));
        assertEq(escrow.withdrawable(alice, ETH), 3.25 ether);
        assertEq(escrow.withdrawable(bob, ETH), 1.625 ether);
        assertEq(escrow.withdrawable(treasury, ETH), 0.125 ether, "the fee on the earned half only");
        assertEq(escrow.withdrawable(requester, ETH), 5 ether, "the unearned half back");
        assertEq(escrow.reputationOf(alice), 2_500);
        // Everyone can leave: the stake split exactly.
        address[4] memory everyone = [alice, bob, treasury, requester];
        for (uint256 i; i < everyone.length; ++i) {
            vm.prank(everyone[i]);
            escrow.withdraw(ETH);
        }
        assertEq(address(escrow).balance, 0);
    }

    /// Rounding: what the shares leave over (dust) goes back with the unearned part.
    function test_abort_returns_the_dust_with_the_unearned_part() public {
        uint256 stake = 1_000_003;
        uint256 jobId = _createEth(FED, stake);
        _start(jobId);
        _abort(jobId, 3_333, _pair(), _q(7_777, 3_001));
        uint256 earned = stake * 3_333 / 10_000;
        uint256 fee = earned * FEE_BPS / 10_000;
        uint256 paid = escrow.withdrawable(alice, ETH) + escrow.withdrawable(bob, ETH);
        assertEq(escrow.withdrawable(treasury, ETH), fee);
        assertLt(paid, earned - fee, "some dust is left over at this stake");
        assertEq(escrow.withdrawable(requester, ETH), stake - earned + (earned - fee - paid));
        assertEq(paid + fee + escrow.withdrawable(requester, ETH), stake);
    }

    /// At every quality 0 nothing is paid: the earned pool goes back too, only the fee stays.
    function test_abort_with_every_quality_zero_returns_all_but_the_fee() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _abort(jobId, uint16(HALF), _pair(), _q(0, 0));
        assertEq(escrow.withdrawable(alice, ETH) + escrow.withdrawable(bob, ETH), 0);
        assertEq(escrow.withdrawable(requester, ETH), STAKE - EARNED_FEE);
    }

    /// earnedBps = BPS is a completion: the same credits and events as completeFederatedJob.
    function test_abort_at_the_whole_stake_is_a_completion() public {
        uint256 snap = vm.snapshotState();
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.prank(validator);
        escrow.completeFederatedJob(jobId, "bafy-adapter", "", _pair(), _q(9_000, 4_000));
        uint256 a = escrow.withdrawable(alice, ETH);
        uint256 b = escrow.withdrawable(bob, ETH);
        vm.revertToState(snap);

        jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 2, a + b, STAKE * FEE_BPS / 10_000, STAKE - STAKE * FEE_BPS / 10_000 - a - b);
        vm.prank(validator);
        escrow.abortFederatedJob(jobId, 10_000, "bafy-adapter", "unused", _pair(), _q(9_000, 4_000));
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Completed));
        assertEq(escrow.withdrawable(alice, ETH), a);
        assertEq(escrow.withdrawable(bob, ETH), b);
    }

    function test_abort_payout_rejects_bad_calls() public {
        uint256 jobId = _createEth(FED, STAKE);
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Open));
        escrow.abortFederatedJob(jobId, 1, "", "r", _pair(), _q(1, 1));
        _start(jobId);
        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EarnedOutOfRange.selector, 0));
        escrow.abortFederatedJob(jobId, 0, "", "r", _pair(), _q(1, 1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EarnedOutOfRange.selector, 10_001));
        escrow.abortFederatedJob(jobId, 10_001, "", "r", _pair(), _q(1, 1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EarnedOutOfRange.selector, 0));
        escrow.beginFederatedAbort(jobId, 0, "", "r", 2, 1, 1);
        vm.expectRevert(JobEscrow.NoContributors.selector);
        escrow.beginFederatedAbort(jobId, 1, "", "r", 0, 1, 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.RequesterIsContributor.selector, 0));
        address[] memory self = new address[](1);
        self[0] = requester;
        uint16[] memory one = new uint16[](1);
        one[0] = 1;
        escrow.abortFederatedJob(jobId, 1, "", "r", self, one);
        vm.stopPrank();
        vm.prank(stranger);
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, VALIDATOR)
        );
        escrow.abortFederatedJob(jobId, 1, "", "r", _pair(), _q(1, 1));
        vm.prank(requester);
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, requester, VALIDATOR)
        );
        escrow.beginFederatedAbort(jobId, 1, "", "r", 2, 1, 1);

        uint256 lora = _createEth(LORA, STAKE);
        _start(lora);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobKind.selector, lora, LORA));
        escrow.abortFederatedJob(lora, 1, "", "r", _pair(), _q(1, 1));

        // Ended jobs cannot be aborted again.
        _abort(jobId, 1, _pair(), _q(1, 1));
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.abortFederatedJob(jobId, 1, "", "r", _pair(), _q(1, 1));
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.abortJob(jobId, "r");
    }

    // ------------------------------------------------------------ batched

    function _crowd() internal pure returns (address[] memory list, uint16[] memory q) {
        list = _sortedContributors(12, 46);
        q = new uint16[](12);
        for (uint256 i; i < 12; ++i) {
            q[i] = uint16(1_000 + 750 * i);
        }
    }

    /// A batched abort (begin + batches of 5, 5, 2) credits exactly what the one-transaction
    /// abort credits, and its last batch ends the job Aborted with the reason given at begin.
    function test_batched_abort_pays_exactly_what_one_transaction_pays() public {
        (address[] memory list, uint16[] memory q) = _crowd();
        uint256 snap = vm.snapshotState();
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.prank(validator);
        escrow.abortFederatedJob(jobId, 2_500, "bafy-r1", "round 2 failed", list, q);
        uint256[] memory once = new uint256[](12);
        for (uint256 i; i < 12; ++i) {
            once[i] = escrow.withdrawable(list[i], ETH);
        }
        uint256 back = escrow.withdrawable(requester, ETH);
        uint256 fee = escrow.withdrawable(treasury, ETH);
        vm.revertToState(snap);

        jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 totalWeight = escrow.weigh(jobId, list, q);
        uint16[] memory reps = escrow.reputationsOf(list);
        vm.prank(validator);
        escrow.beginFederatedAbort(jobId, 2_500, "bafy-r1", "round 2 failed", 12, uint64(totalWeight), Packing.sum(q));
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Paying));
        assertEq(escrow.payoutOf(jobId).earnedBps, 2_500);
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(list, 0, 5), _slice(q, 0, 5), Packing.packed(_slice(reps, 0, 5)));
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(list, 5, 10), _slice(q, 5, 10), Packing.packed(_slice(reps, 5, 10)));
        assertEq(escrow.withdrawable(requester, ETH), 0, "nothing goes back before the last batch");
        assertEq(escrow.withdrawable(treasury, ETH), 0);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobAborted(jobId, back, "round 2 failed");
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(list, 10, 12), _slice(q, 10, 12), Packing.packed(_slice(reps, 10, 12)));

        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Aborted));
        uint256 paid;
        for (uint256 i; i < 12; ++i) {
            assertEq(escrow.withdrawable(list[i], ETH), once[i]);
            paid += once[i];
        }
        assertEq(escrow.withdrawable(requester, ETH), back);
        assertEq(fee, (STAKE / 4) * FEE_BPS / 10_000, "the fee on the earned quarter only");
        assertEq(escrow.withdrawable(treasury, ETH), fee);
        assertEq(paid + fee + back, STAKE);
        assertEq(escrow.payoutOf(jobId).paid, paid);
    }

    /// A batched abort that stalls is refunded stake - paid after deadline + grace, no fee.
    function test_stalled_batched_abort_is_refunded_what_it_had_not_paid() public {
        (address[] memory list, uint16[] memory q) = _crowd();
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 totalWeight = escrow.weigh(jobId, list, q);
        vm.prank(validator);
        escrow.beginFederatedAbort(jobId, 7_500, "", "stalled", 12, uint64(totalWeight), Packing.sum(q));
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(list, 0, 5), _slice(q, 0, 5), new bytes(10));
        uint256 paid = escrow.payoutOf(jobId).paid;
        uint256 until = uint256(escrow.getJob(jobId).deadline) + escrow.PAYOUT_GRACE();
        vm.warp(until);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.PayoutGraceNotPassed.selector, jobId, until));
        escrow.refund(jobId);
        vm.warp(until + 1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobRefunded(jobId, stranger, STAKE - paid);
        vm.prank(stranger);
        escrow.refund(jobId);
        assertEq(escrow.withdrawable(requester, ETH), STAKE - paid);
        assertEq(escrow.withdrawable(treasury, ETH), 0);
    }

    // ------------------------------------------------------------ recordProgress

    function test_progress_is_validator_only_monotonic_and_packed_into_the_job() public {
        uint256 jobId = _createEth(FED, STAKE);
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Open));
        escrow.recordProgress(jobId, 5_000);
        _start(jobId);
        vm.prank(requester);
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, requester, VALIDATOR)
        );
        escrow.recordProgress(jobId, 5_000);

        vm.expectEmit(address(escrow));
        emit JobEscrow.ProgressRecorded(jobId, 3_333);
        _record(jobId, 3_333);
        assertEq(escrow.getJob(jobId).earnedBps, 3_333);
        // A repeat (the outbox resending) changes nothing and logs nothing.
        vm.recordLogs();
        _record(jobId, 3_333);
        assertEq(vm.getRecordedLogs().length, 0);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ProgressDecreased.selector, jobId, 3_333, 3_332));
        escrow.recordProgress(jobId, 3_332);
        _record(jobId, 6_666);
        assertEq(escrow.getJob(jobId).earnedBps, 6_666);
        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EarnedOutOfRange.selector, 0));
        escrow.recordProgress(jobId, 0);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EarnedOutOfRange.selector, 10_001));
        escrow.recordProgress(jobId, 10_001);
        vm.stopPrank();
        // The other fields of its slot are untouched.
        JobEscrow.Job memory job = escrow.getJob(jobId);
        assertEq(job.token, ETH);
        assertEq(job.tokenIndex, 0);

        uint256 lora = _createEth(LORA, STAKE);
        _start(lora);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobKind.selector, lora, LORA));
        escrow.recordProgress(lora, 5_000);

        // Only up to the deadline, like a completion: it never races a refund.
        uint256 deadline = escrow.getJob(jobId).deadline;
        vm.warp(deadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, jobId, deadline));
        escrow.recordProgress(jobId, 9_000);
    }

    /// Gas of recordProgress as its own transaction: the first record writes the slot that
    /// holds `token` and `tokenIndex` (zero for an ETH job, so a fresh write), later ones
    /// rewrite it. Printed with -vv; bounds keep the figures honest.
    function test_gas_of_record_progress() public {
        uint256 eth = _createEth(FED, STAKE);
        uint256 usdcJob = _createUsdc(FED, 2_000e6);
        _start(eth);
        _start(usdcJob);
        vm.cool(address(escrow));
        vm.prank(validator);
        escrow.recordProgress(eth, 5_000);
        uint256 first = vm.lastCallGas().gasTotalUsed;
        vm.cool(address(escrow));
        vm.prank(validator);
        escrow.recordProgress(eth, 10_000);
        uint256 next = vm.lastCallGas().gasTotalUsed;
        vm.cool(address(escrow));
        vm.prank(validator);
        escrow.recordProgress(usdcJob, 5_000);
        uint256 token = vm.lastCallGas().gasTotalUsed;
        Console.log(string.concat("recordProgress, ETH job, first: ", vm.toString(first)));
        Console.log(string.concat("recordProgress, ETH job, later: ", vm.toString(next)));
        Console.log(string.concat("recordProgress, ERC-20 job, first: ", vm.toString(token)));
        assertLt(first, 30_000, "a fresh slot write and the role check");
        assertLt(next, 15_000);
        assertLt(token, 15_000, "the ERC-20's slot is already non-zero");
    }

    // ------------------------------------------------------------ refunds and the race

    function test_refund_after_the_deadline_without_progress_is_whole() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 deadline = escrow.getJob(jobId).deadline;
        vm.warp(deadline);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineNotPassed.selector, jobId, deadline));
        escrow.refund(jobId);
        vm.warp(deadline + 1);
        vm.prank(requester);
        escrow.refund(jobId);
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
        // Without recorded progress the abort's window ended with the deadline too.
        uint256 other = _createEth(FED, STAKE);
        _start(other);
        uint256 otherDeadline = escrow.getJob(other).deadline;
        vm.warp(otherDeadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, other, otherDeadline));
        escrow.abortFederatedJob(other, 5_000, "", "r", _pair(), _q(1, 1));
    }

    /// The front-run: with round 1 recorded, the requester's refund at the deadline reverts,
    /// and the validator pays the round in the grace that follows.
    function test_recorded_progress_holds_the_refund_back_so_the_work_is_paid() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _record(jobId, uint16(HALF));
        uint256 deadline = escrow.getJob(jobId).deadline;
        uint256 until = deadline + escrow.PAYOUT_GRACE();
        bytes memory tooEarly = abi.encodeWithSelector(JobEscrow.PayoutGraceNotPassed.selector, jobId, until);
        vm.warp(deadline + 1);
        vm.prank(requester);
        vm.expectRevert(tooEarly);
        escrow.refund(jobId);
        vm.warp(until);
        vm.prank(requester);
        vm.expectRevert(tooEarly);
        escrow.refund(jobId);
        _abort(jobId, uint16(HALF), _pair(), _q(10_000, 5_000));
        assertEq(escrow.withdrawable(alice, ETH), 3.25 ether);
        assertEq(escrow.withdrawable(requester, ETH), 5 ether);
        vm.warp(until + 1);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.refund(jobId);
    }

    /// If the platform vanished, the requester still gets its whole stake after the grace, and
    /// the validator can no longer pay then: the two windows never overlap.
    function test_recorded_progress_unpaid_past_the_grace_is_refunded_whole() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _record(jobId, uint16(HALF));
        uint256 until = uint256(escrow.getJob(jobId).deadline) + escrow.PAYOUT_GRACE();
        vm.warp(until + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, jobId, until));
        escrow.abortFederatedJob(jobId, uint16(HALF), "", "r", _pair(), _q(1, 1));
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, jobId, until));
        escrow.beginFederatedAbort(jobId, uint16(HALF), "", "r", 2, 1, 1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobRefunded(jobId, requester, STAKE);
        vm.prank(requester);
        escrow.refund(jobId);
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
    }

    /// A plain abort of a job with no accepted work stays a whole refund, no fee.
    function test_plain_abort_without_work_is_still_a_whole_refund() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobAborted(jobId, STAKE, "round 1 failed");
        vm.prank(validator);
        escrow.abortJob(jobId, "round 1 failed");
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
        assertEq(escrow.withdrawable(treasury, ETH), 0);
    }

    // ------------------------------------------------------------ fuzz

    /// Any stake, fee, earned share and scores: paid + fee + refunded == stake, the fee is the
    /// rate on the earned part only, the contributors never get more than the earned pool, and
    /// the requester gets at least the unearned part.
    function testFuzz_abort_splits_the_stake_exactly(
        uint256 stake,
        uint16 feeBps,
        uint16 earnedBps,
        uint16 qa,
        uint16 qb,
        bool batched
    ) public {
        stake = bound(stake, 1, 1e30);
        feeBps = uint16(bound(feeBps, 0, 1_000));
        earnedBps = uint16(bound(earnedBps, 1, 10_000));
        uint16[] memory q = _q(uint16(bound(qa, 0, 10_000)), uint16(bound(qb, 0, 10_000)));
        vm.prank(feeManager);
        escrow.setFeeBps(feeBps);
        vm.deal(requester, stake);
        uint256 jobId = _createEth(FED, stake);
        _start(jobId);
        if (batched) {
            uint256 totalWeight = escrow.weigh(jobId, _pair(), q);
            vm.startPrank(validator);
            escrow.beginFederatedAbort(jobId, earnedBps, "", "r", 2, uint64(totalWeight), Packing.sum(q));
            escrow.payFederatedBatch(jobId, _slice(_pair(), 0, 1), _slice(q, 0, 1), new bytes(2));
            escrow.payFederatedBatch(jobId, _slice(_pair(), 1, 2), _slice(q, 1, 2), new bytes(2));
            vm.stopPrank();
        } else {
            _abort(jobId, earnedBps, _pair(), q);
        }
        uint256 earned = stake * earnedBps / 10_000;
        uint256 fee = escrow.withdrawable(treasury, ETH);
        uint256 paid = escrow.withdrawable(alice, ETH) + escrow.withdrawable(bob, ETH);
        uint256 back = escrow.withdrawable(requester, ETH);
        assertEq(paid + fee + back, stake, "stake == paid + fee + refunded");
        assertEq(fee, earned * feeBps / 10_000, "fee only on the earned part");
        assertLe(paid, earned - fee);
        assertGe(back, stake - earned);
        assertEq(
            uint8(_status(jobId)),
            uint8(earnedBps < 10_000 ? JobEscrow.JobStatus.Aborted : JobEscrow.JobStatus.Completed)
        );
    }
}
