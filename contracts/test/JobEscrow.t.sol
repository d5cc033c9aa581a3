// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {MockERC20} from "./mocks/MockERC20.sol";
import {RevertingRecipient} from "./mocks/RevertingRecipient.sol";
import {ReentrantAttacker} from "./mocks/ReentrantAttacker.sol";
import {EscrowFixture} from "./EscrowFixture.sol";

/// Unit tests: every external function, every revert.
contract JobEscrowTest is EscrowFixture {
    JobEscrow.JobKind internal constant LORA = JobEscrow.JobKind.LoRA;
    JobEscrow.JobKind internal constant FED = JobEscrow.JobKind.Federated;

    // Spelled out rather than read from the contract: reading one between vm.prank and the call
    // under test would consume the prank, and this also pins the role ids.
    bytes32 internal constant ADMIN = 0x00;
    bytes32 internal constant VALIDATOR = keccak256("VALIDATOR_ROLE");
    bytes32 internal constant FEE_MANAGER = keccak256("FEE_MANAGER_ROLE");

    address internal alice = address(0x1000);
    address internal bob = address(0x2000);
    address internal carol = address(0x3000);

    function _unauthorized(address who, bytes32 role) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, who, role);
    }

    function _pair(address a, address b) internal pure returns (address[] memory list) {
        list = new address[](2);
        list[0] = a;
        list[1] = b;
    }

    function _scores(uint16 a, uint16 b) internal pure returns (uint16[] memory list) {
        list = new uint16[](2);
        list[0] = a;
        list[1] = b;
    }

    // ------------------------------------------------------------------ constructor

    function test_constructor_grants_roles_and_sets_fee_and_treasury() public view {
        assertEq(escrow.VALIDATOR_ROLE(), VALIDATOR);
        assertEq(escrow.FEE_MANAGER_ROLE(), FEE_MANAGER);
        assertTrue(escrow.hasRole(ADMIN, admin));
        assertTrue(escrow.hasRole(VALIDATOR, validator));
        assertTrue(escrow.hasRole(FEE_MANAGER, feeManager));
        assertFalse(escrow.hasRole(VALIDATOR, admin));
        assertEq(escrow.treasury(), treasury);
        assertEq(escrow.feeBps(), FEE_BPS);
        assertEq(escrow.jobCount(), 0);
    }

    function test_constructor_rejects_any_zero_address() public {
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        new JobEscrow(address(0), validator, feeManager, treasury, 0);
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        new JobEscrow(admin, address(0), feeManager, treasury, 0);
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        new JobEscrow(admin, validator, address(0), treasury, 0);
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        new JobEscrow(admin, validator, feeManager, address(0), 0);
    }

    function test_constructor_rejects_fee_above_cap() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeTooHigh.selector, 1_001, 1_000));
        new JobEscrow(admin, validator, feeManager, treasury, 1_001);
    }

    // ------------------------------------------------------------------ admin knobs

    function test_fee_manager_sets_fee_up_to_the_cap() public {
        vm.expectEmit(address(escrow));
        emit JobEscrow.FeeChanged(FEE_BPS, 1_000);
        vm.prank(feeManager);
        escrow.setFeeBps(1_000);
        assertEq(escrow.feeBps(), 1_000);
    }

    function test_fee_above_cap_is_rejected() public {
        vm.prank(feeManager);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeTooHigh.selector, 1_001, 1_000));
        escrow.setFeeBps(1_001);
    }

    function test_only_fee_manager_sets_fee() public {
        vm.prank(admin);
        vm.expectRevert(_unauthorized(admin, FEE_MANAGER));
        escrow.setFeeBps(1);
    }

    function test_admin_sets_treasury_and_later_fees_go_there() public {
        address newTreasury = makeAddr("newTreasury");
        vm.expectEmit(address(escrow));
        emit JobEscrow.TreasuryChanged(treasury, newTreasury);
        vm.prank(admin);
        escrow.setTreasury(newTreasury);
        uint256 jobId = _createEth(LORA, STAKE);
        assertEq(escrow.getJob(jobId).treasury, newTreasury);
        _completeLora(jobId, alice, 10_000);
        assertEq(escrow.withdrawable(newTreasury, ETH), STAKE * FEE_BPS / 10_000);
        assertEq(escrow.withdrawable(treasury, ETH), 0);
    }

    function test_treasury_cannot_be_zero_or_set_by_others() public {
        vm.prank(admin);
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        escrow.setTreasury(address(0));
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, ADMIN));
        escrow.setTreasury(stranger);
    }

    function test_allow_listing_assigns_a_stable_token_index() public {
        MockERC20 dai = new MockERC20("Dai", "DAI");
        vm.startPrank(admin);
        vm.expectEmit(address(escrow));
        emit JobEscrow.TokenAllowed(address(dai), true, 3);
        escrow.setTokenAllowed(address(dai), true);
        escrow.setTokenAllowed(address(dai), false);
        escrow.setTokenAllowed(address(dai), true);
        vm.stopPrank();
        assertEq(escrow.tokenIndexOf(address(usdc)), 1);
        assertEq(escrow.tokenIndexOf(address(dai)), 3);
        assertTrue(escrow.tokenAllowed(address(dai)));
    }

    function test_allow_list_rejects_zero_address_strangers_and_token_256() public {
        vm.prank(admin);
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        escrow.setTokenAllowed(address(0), true);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, ADMIN));
        escrow.setTokenAllowed(address(usdc), false);

        vm.startPrank(admin);
        // Indexes 1 and 2 are taken by usdc and fot; 253 more fill the 8-bit index space.
        for (uint256 i; i < 253; ++i) {
            escrow.setTokenAllowed(address(uint160(0xA000 + i)), true);
        }
        vm.expectRevert(JobEscrow.TooManyTokens.selector);
        escrow.setTokenAllowed(address(0xFFFF), true);
        vm.stopPrank();
    }

    function test_disallowed_token_blocks_new_jobs_but_not_withdrawals() public {
        uint256 jobId = _createUsdc(LORA, 1_000e6);
        vm.prank(admin);
        escrow.setTokenAllowed(address(usdc), false);
        vm.prank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TokenNotAllowed.selector, address(usdc)));
        escrow.createJob(address(usdc), 1e6, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.prank(requester);
        escrow.cancel(jobId);
        vm.prank(requester);
        escrow.withdraw(address(usdc));
        assertEq(usdc.balanceOf(requester), 1_000_000e6);
    }

    function test_pause_stops_new_jobs_only() public {
        uint256 started = _createEth(FED, STAKE);
        uint256 toCancel = _createEth(LORA, STAKE);
        uint256 toRefund = _createEth(LORA, STAKE);
        vm.prank(admin);
        escrow.pause();

        vm.prank(requester);
        vm.expectRevert(Pausable.EnforcedPause.selector);
        escrow.createJob{value: 1}(ETH, 1, SPEC_CID, _deadline(), LORA, ANY_FEE);

        address[] memory one = new address[](1);
        one[0] = alice;
        uint16[] memory q = new uint16[](1);
        q[0] = 5_000;
        _completeFederated(started, one, q); // markStarted and completion go on while paused
        vm.prank(requester);
        escrow.cancel(toCancel);
        vm.warp(block.timestamp + 8 days);
        escrow.refund(toRefund);
        vm.prank(alice);
        escrow.withdraw(ETH);
        vm.prank(requester);
        escrow.withdraw(ETH);
        assertGt(alice.balance, 0);

        vm.prank(admin);
        escrow.unpause();
        vm.warp(block.timestamp - 8 days);
        _createEth(LORA, 1);
    }

    function test_only_admin_pauses_and_unpauses() public {
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, ADMIN));
        escrow.pause();
        vm.prank(admin);
        escrow.pause();
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, ADMIN));
        escrow.unpause();
    }

    // ------------------------------------------------------------------ createJob

    function test_create_eth_job_stores_it_and_emits_everything_the_api_needs() public {
        uint64 deadline = _deadline();
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCreated(
            1, requester, ETH, STAKE, deadline, FED, FEE_BPS, keccak256(bytes(SPEC_CID)), SPEC_CID
        );
        vm.prank(requester);
        uint256 jobId = escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, deadline, FED, FEE_BPS);

        assertEq(jobId, 1);
        JobEscrow.Job memory job = escrow.getJob(jobId);
        assertEq(job.requester, requester);
        assertEq(job.deadline, deadline);
        assertEq(uint8(job.kind), uint8(FED));
        assertEq(uint8(job.status), uint8(JobEscrow.JobStatus.Open));
        assertEq(job.feeBps, FEE_BPS);
        assertEq(job.token, ETH);
        assertEq(job.stake, STAKE);
        assertEq(job.specHash, keccak256(bytes(SPEC_CID)));
        assertEq(job.treasury, treasury);
        assertEq(address(escrow).balance, STAKE);
        assertEq(_createEth(LORA, 1), 2);
    }

    function test_create_token_job_pulls_exactly_the_stake() public {
        uint256 jobId = _createUsdc(FED, 2_500e6);
        assertEq(usdc.balanceOf(address(escrow)), 2_500e6);
        assertEq(escrow.getJob(jobId).tokenIndex, 1);
    }

    function test_create_rejects_zero_and_oversized_stakes() public {
        vm.startPrank(requester);
        vm.expectRevert(JobEscrow.ZeroStake.selector);
        escrow.createJob(ETH, 0, SPEC_CID, _deadline(), LORA, ANY_FEE);
        uint256 huge = uint256(type(uint128).max) + 1;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeTooLarge.selector, huge, type(uint128).max));
        escrow.createJob(address(usdc), huge, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.stopPrank();
    }

    function test_create_rejects_deadlines_now_or_beyond_a_year() public {
        vm.startPrank(requester);
        vm.expectRevert(
            abi.encodeWithSelector(JobEscrow.DeadlineNotInFuture.selector, block.timestamp, block.timestamp)
        );
        escrow.createJob{value: 1}(ETH, 1, SPEC_CID, uint64(block.timestamp), LORA, ANY_FEE);
        uint256 latest = block.timestamp + 365 days;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineTooFar.selector, latest + 1, latest));
        escrow.createJob{value: 1}(ETH, 1, SPEC_CID, uint64(latest + 1), LORA, ANY_FEE);
        escrow.createJob{value: 1}(ETH, 1, SPEC_CID, uint64(latest), LORA, ANY_FEE);
        vm.stopPrank();
    }

    function test_create_rejects_wrong_eth_amounts() public {
        vm.startPrank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEthAmount.selector, STAKE - 1, STAKE));
        escrow.createJob{value: STAKE - 1}(ETH, STAKE, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EthSentWithToken.selector, 1));
        escrow.createJob{value: 1}(address(usdc), 1e6, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.stopPrank();
    }

    function test_create_rejects_tokens_not_allow_listed() public {
        MockERC20 other = new MockERC20("Other", "OTH");
        vm.prank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TokenNotAllowed.selector, address(other)));
        escrow.createJob(address(other), 1, SPEC_CID, _deadline(), LORA, ANY_FEE);
    }

    function test_create_rejects_fee_on_transfer_tokens_even_when_allow_listed() public {
        fot.mint(requester, 1_000e18);
        vm.startPrank(requester);
        fot.approve(address(escrow), type(uint256).max);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeOnTransferToken.selector, address(fot), 100e18, 99e18));
        escrow.createJob(address(fot), 100e18, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.stopPrank();
        assertEq(fot.balanceOf(address(escrow)), 0);
        assertEq(escrow.jobCount(), 0);
    }

    function test_create_fails_without_allowance() public {
        vm.startPrank(stranger);
        usdc.mint(stranger, 10e6);
        vm.expectRevert();
        escrow.createJob(address(usdc), 10e6, SPEC_CID, _deadline(), LORA, ANY_FEE);
        vm.stopPrank();
    }

    function test_fee_is_snapshotted_at_creation() public {
        uint256 jobId = _createEth(LORA, STAKE);
        vm.prank(feeManager);
        escrow.setFeeBps(1_000);
        _completeLora(jobId, alice, 10_000);
        assertEq(escrow.withdrawable(treasury, ETH), STAKE * FEE_BPS / 10_000);
    }

    // ------------------------------------------------------------------ markStarted

    function test_validator_marks_a_job_started_and_requester_can_no_longer_cancel() public {
        uint256 jobId = _createEth(LORA, STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobStarted(jobId);
        vm.prank(validator);
        escrow.markStarted(jobId);
        assertEq(uint8(escrow.getJob(jobId).status), uint8(JobEscrow.JobStatus.Started));
        vm.prank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, JobEscrow.JobStatus.Started));
        escrow.cancel(jobId);
    }

    function test_mark_started_reverts_for_strangers_unknown_jobs_twice_and_after_deadline() public {
        uint256 jobId = _createEth(LORA, STAKE);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.markStarted(jobId);
        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 99));
        escrow.markStarted(99);
        escrow.markStarted(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, JobEscrow.JobStatus.Started));
        escrow.markStarted(jobId);
        vm.stopPrank();

        uint256 late = _createEth(LORA, STAKE);
        uint64 deadline = escrow.getJob(late).deadline;
        vm.warp(deadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, late, deadline));
        escrow.markStarted(late);
    }

    // ------------------------------------------------------------------ cancel

    function test_requester_cancels_an_open_job_and_withdraws_the_stake() public {
        uint256 jobId = _createEth(LORA, STAKE);
        uint256 before = requester.balance;
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCancelled(jobId, STAKE);
        vm.prank(requester);
        escrow.cancel(jobId);
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
        vm.prank(requester);
        escrow.withdraw(ETH);
        assertEq(requester.balance, before + STAKE);
        assertEq(address(escrow).balance, 0);
    }

    function test_cancel_reverts_for_others_unknown_and_finished_jobs() public {
        uint256 jobId = _createEth(LORA, STAKE);
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotRequester.selector, jobId, stranger));
        escrow.cancel(jobId);
        vm.startPrank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 7));
        escrow.cancel(7);
        escrow.cancel(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, JobEscrow.JobStatus.Cancelled));
        escrow.cancel(jobId);
        vm.stopPrank();
    }

    // ------------------------------------------------------------------ refund

    function test_anyone_refunds_the_requester_after_the_deadline() public {
        uint256 jobId = _createUsdc(FED, 500e6);
        vm.prank(validator);
        escrow.markStarted(jobId);
        vm.warp(escrow.getJob(jobId).deadline + 1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobRefunded(jobId, stranger, 500e6);
        vm.prank(stranger);
        escrow.refund(jobId);
        assertEq(escrow.withdrawable(requester, address(usdc)), 500e6);
        assertEq(escrow.withdrawable(stranger, address(usdc)), 0);
    }

    function test_refund_reverts_until_the_deadline_has_passed() public {
        uint256 jobId = _createEth(LORA, STAKE);
        uint64 deadline = escrow.getJob(jobId).deadline;
        vm.warp(deadline);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineNotPassed.selector, jobId, deadline));
        escrow.refund(jobId);
    }

    function test_refund_reverts_for_unknown_completed_and_refunded_jobs() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 3));
        escrow.refund(3);
        uint256 done = _createEth(LORA, STAKE);
        uint256 lapsed = _createEth(LORA, STAKE);
        _completeLora(done, alice, 9_000);
        vm.warp(block.timestamp + 8 days);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, done, JobEscrow.JobStatus.Completed));
        escrow.refund(done);
        escrow.refund(lapsed);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, lapsed, JobEscrow.JobStatus.Refunded));
        escrow.refund(lapsed);
    }

    // ------------------------------------------------------------------ completeJob

    function test_complete_lora_job_pays_contributor_fee_and_updates_reputation() public {
        uint256 jobId = _createEth(LORA, STAKE);
        _start(jobId);
        uint256 fee = STAKE * FEE_BPS / 10_000;
        uint256[] memory payouts = new uint256[](2);
        payouts[0] = uint256(uint160(alice)) | (uint256(2_000) << 160);
        payouts[1] = STAKE - fee;
        vm.expectEmit(address(escrow));
        emit JobEscrow.PayoutStarted(jobId, "bafy-adapter", "", 1, 8_000 * 10_000);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ContributorsPaid(jobId, payouts);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 1, STAKE - fee, fee, 0);
        vm.prank(validator);
        escrow.completeJob(jobId, "bafy-adapter", alice, 8_000);

        assertEq(escrow.withdrawable(alice, ETH), STAKE - fee);
        assertEq(escrow.withdrawable(treasury, ETH), fee);
        assertEq(escrow.withdrawable(requester, ETH), 0);
        assertEq(escrow.reputationOf(alice), 2_000);
        assertEq(uint8(escrow.getJob(jobId).status), uint8(JobEscrow.JobStatus.Completed));
    }

    function test_complete_lora_job_with_zero_quality_returns_the_pool_to_the_requester() public {
        uint256 jobId = _createEth(LORA, STAKE);
        uint256 fee = STAKE * FEE_BPS / 10_000;
        _completeLora(jobId, alice, 0);
        assertEq(escrow.withdrawable(alice, ETH), 0);
        assertEq(escrow.withdrawable(requester, ETH), STAKE - fee);
        assertEq(escrow.withdrawable(treasury, ETH), fee);
    }

    function test_complete_job_reverts_on_every_bad_input() public {
        uint256 jobId = _createEth(LORA, STAKE);
        uint256 fedJob = _createEth(FED, STAKE);
        _start(jobId);
        _start(fedJob);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.completeJob(jobId, "a", alice, 1);

        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.RequesterIsContributor.selector, 0));
        escrow.completeJob(jobId, "a", requester, 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 0));
        escrow.completeJob(jobId, "a", address(0), 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QualityOutOfRange.selector, 0, 10_001));
        escrow.completeJob(jobId, "a", alice, 10_001);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 42));
        escrow.completeJob(42, "a", alice, 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobKind.selector, fedJob, FED));
        escrow.completeJob(fedJob, "a", alice, 1);
        escrow.completeJob(jobId, "a", alice, 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, JobEscrow.JobStatus.Completed));
        escrow.completeJob(jobId, "a", alice, 1);
        vm.stopPrank();
    }

    function test_complete_job_reverts_after_deadline_and_on_cancelled_jobs() public {
        uint256 cancelled = _createEth(LORA, STAKE);
        vm.prank(requester);
        escrow.cancel(cancelled);
        vm.prank(validator);
        vm.expectRevert(
            abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, cancelled, JobEscrow.JobStatus.Cancelled)
        );
        escrow.completeJob(cancelled, "a", alice, 1);

        uint256 late = _createEth(LORA, STAKE);
        _start(late);
        uint64 deadline = escrow.getJob(late).deadline;
        vm.warp(deadline);
        vm.prank(validator);
        escrow.completeJob(late, "a", alice, 1); // the deadline itself still counts
        uint256 later = _createEth(LORA, STAKE);
        _start(later);
        deadline = escrow.getJob(later).deadline;
        vm.warp(deadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, later, deadline));
        escrow.completeJob(later, "a", alice, 1);
    }

    // ------------------------------------------------------------------ completeFederatedJob

    /// EIP-170: no chain deploys runtime code above 24,576 bytes, and forge's tests would not
    /// notice (the embedded chain's deployment did).
    function test_the_escrow_fits_the_code_size_limit() public view {
        assertLt(address(escrow).code.length, 24_576);
    }

    function test_federated_payout_weights_quality_by_reputation() public {
        // Give bob reputation 2_500 first: one LoRA job at quality 10_000. Its fee (2.5% of
        // 1 ETH) backs a bonus budget of half of it: 0.0125 ETH, 1.25 reputation units.
        uint256 warmup = _createEth(LORA, 1 ether);
        _completeLora(warmup, bob, 10_000);
        assertEq(escrow.reputationOf(bob), 2_500);
        uint256 bobBudget = 1 ether * uint256(FEE_BPS) / 10_000 / 2;
        assertEq(escrow.bonusBudgetOf(bob), bobBudget * 1e6 / 0.01 ether);

        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 pool = STAKE - STAKE * FEE_BPS / 10_000;
        // alice: 6_000 x (10_000 + 0) = 60e6; bob: 8_000 x (10_000 + 2_500) = 100e6. Alice's
        // weighted share is below her share by quality alone (6/14 of the pool), so she gets
        // it; bob's is above his (8/14), and his budget pays the bonus up to 0.0125 ETH.
        uint256 aliceShare = pool * 60e6 / 160e6;
        uint256 bobBaseline = pool * 8_000 / 14_000;
        uint256 bobBonus = pool * 100e6 / 160e6 - bobBaseline;
        assertGt(bobBonus, bobBudget, "the budget binds here");
        uint256 bobShare = bobBaseline + bobBudget;
        uint256[] memory payouts = new uint256[](4);
        payouts[0] = uint256(uint160(alice)) | (uint256(1_500) << 160);
        payouts[1] = aliceShare;
        payouts[2] = uint256(uint160(bob)) | (uint256(3_875) << 160) | (uint256(2_500) << 176);
        payouts[3] = bobShare;
        vm.expectEmit(address(escrow));
        emit JobEscrow.PayoutStarted(jobId, "bafy-adapter", "bafy-manifest", 2, 160e6);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ContributorsPaid(jobId, payouts);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 2, aliceShare + bobShare, STAKE - pool, pool - aliceShare - bobShare);
        vm.prank(validator);
        escrow.completeFederatedJob(jobId, "bafy-adapter", "bafy-manifest", _pair(alice, bob), _scores(6_000, 8_000));

        uint256 bobBefore = escrow.withdrawable(bob, ETH) - bobShare;
        assertEq(escrow.withdrawable(alice, ETH), aliceShare);
        assertEq(bobBefore, 1 ether - 1 ether * uint256(FEE_BPS) / 10_000);
        assertEq(escrow.reputationOf(alice), 1_500);
        assertEq(escrow.reputationOf(bob), 3_875);
        // The budget was spent; each share then added half the fee it paid.
        uint256 fee = STAKE - pool;
        assertEq(escrow.bonusBudgetOf(bob), (fee * bobShare / pool) * 1e6 / 2 / 0.01 ether);
        assertEq(escrow.bonusBudgetOf(alice), (fee * aliceShare / pool) * 1e6 / 2 / 0.01 ether);
    }

    function test_federated_rounding_dust_goes_to_the_requester() public {
        uint256 jobId = _createEth(FED, 100); // pool 98 split three ways: 32 each, 2 wei dust
        address[] memory three = new address[](3);
        three[0] = alice;
        three[1] = bob;
        three[2] = carol;
        uint16[] memory q = new uint16[](3);
        q[0] = q[1] = q[2] = 5_000;
        _completeFederated(jobId, three, q);
        assertEq(escrow.withdrawable(alice, ETH), 32);
        assertEq(escrow.withdrawable(treasury, ETH), 2);
        assertEq(escrow.withdrawable(requester, ETH), 2);
    }

    function test_federated_zero_quality_lowers_reputation_and_pays_nothing() public {
        uint256 warmup = _createEth(LORA, 1 ether);
        _completeLora(warmup, alice, 10_000);
        vm.prank(alice);
        escrow.withdraw(ETH);

        uint256 jobId = _createEth(FED, STAKE);
        _completeFederated(jobId, _pair(alice, bob), _scores(0, 5_000));
        assertEq(escrow.reputationOf(alice), 1_875); // 3/4 of 2_500
        assertEq(escrow.withdrawable(alice, ETH), 0);
        assertEq(escrow.withdrawable(bob, ETH), STAKE - STAKE * FEE_BPS / 10_000);
    }

    function test_federated_all_zero_quality_returns_the_pool_to_the_requester() public {
        uint256 jobId = _createEth(FED, STAKE);
        _completeFederated(jobId, _pair(alice, bob), _scores(0, 0));
        assertEq(escrow.withdrawable(requester, ETH), STAKE - STAKE * FEE_BPS / 10_000);
    }

    function test_reputation_converges_toward_repeated_scores() public {
        uint16[] memory q = new uint16[](1);
        address[] memory one = new address[](1);
        one[0] = alice;
        q[0] = 8_000;
        for (uint256 i; i < 40; ++i) {
            _completeFederated(_createEth(FED, 1 ether), one, q);
        }
        assertApproxEqAbs(escrow.reputationOf(alice), 8_000, 4);
    }

    function test_federated_rejects_duplicates_unsorted_and_zero_addresses() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 1));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, alice), _scores(1, 1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 1));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(bob, alice), _scores(1, 1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 0));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(address(0), alice), _scores(1, 1));
        vm.stopPrank();
    }

    function test_federated_rejects_empty_mismatched_and_out_of_range_inputs() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.startPrank(validator);
        vm.expectRevert(JobEscrow.NoContributors.selector);
        escrow.completeFederatedJob(jobId, "a", "m", new address[](0), new uint16[](0));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.LengthMismatch.selector, 2, 1));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, bob), new uint16[](1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QualityOutOfRange.selector, 1, 10_001));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, bob), _scores(1, 10_001));
        vm.stopPrank();
    }

    function test_federated_rejects_strangers_wrong_kind_double_completion_and_late_calls() public {
        uint256 jobId = _createEth(FED, STAKE);
        uint256 loraJob = _createEth(LORA, STAKE);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, bob), _scores(1, 1));

        vm.startPrank(validator);
        escrow.markStarted(loraJob);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobKind.selector, loraJob, LORA));
        escrow.completeFederatedJob(loraJob, "a", "m", _pair(alice, bob), _scores(1, 1));
        escrow.markStarted(jobId);
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, bob), _scores(1, 1));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, JobEscrow.JobStatus.Completed));
        escrow.completeFederatedJob(jobId, "a", "m", _pair(alice, bob), _scores(1, 1));
        vm.stopPrank();

        uint256 late = _createEth(FED, STAKE);
        _start(late);
        uint64 deadline = escrow.getJob(late).deadline;
        vm.warp(deadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, late, deadline));
        escrow.completeFederatedJob(late, "a", "m", _pair(alice, bob), _scores(1, 1));
    }

    function test_federated_rejects_words_that_are_not_addresses_or_uint16() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        // Same ABI layout as (address[], uint16[]), but with the high bits the assembly loop
        // must not ignore: a "contributor" above 2^160 and a "quality" above 2^16.
        uint256[] memory words = new uint256[](2);
        words[0] = uint256(uint160(alice));
        words[1] = (uint256(1) << 160) | uint256(uint160(bob));
        uint256[] memory scores = new uint256[](2);
        scores[0] = 1;
        scores[1] = 1;
        bytes memory dirtyAddress =
            abi.encodeWithSelector(JobEscrow.completeFederatedJob.selector, jobId, "a", "m", words, scores);
        words[1] = uint256(uint160(bob));
        scores[0] = (uint256(1) << 16) | 5;
        bytes memory dirtyQuality =
            abi.encodeWithSelector(JobEscrow.completeFederatedJob.selector, jobId, "a", "m", words, scores);

        vm.startPrank(validator);
        (bool ok, bytes memory reason) = address(escrow).call(dirtyAddress);
        assertFalse(ok);
        assertEq(reason, abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 1));
        (ok, reason) = address(escrow).call(dirtyQuality);
        assertFalse(ok);
        assertEq(reason, abi.encodeWithSelector(JobEscrow.QualityOutOfRange.selector, 0, (uint256(1) << 16) | 5));
        vm.stopPrank();
        assertEq(uint8(escrow.getJob(jobId).status), uint8(JobEscrow.JobStatus.Started));
    }

    function test_unpause_when_not_paused_reverts() public {
        vm.prank(admin);
        vm.expectRevert(Pausable.ExpectedPause.selector);
        escrow.unpause();
    }

    // ------------------------------------------------------------------ withdraw

    function test_withdraw_pays_tokens_once() public {
        uint256 jobId = _createUsdc(LORA, 1_000e6);
        _completeLora(jobId, alice, 10_000);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Withdrawn(alice, address(usdc), alice, 975e6);
        vm.prank(alice);
        escrow.withdraw(address(usdc));
        assertEq(usdc.balanceOf(alice), 975e6);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToWithdraw.selector, alice, address(usdc)));
        escrow.withdraw(address(usdc));
        vm.prank(treasury);
        escrow.withdraw(address(usdc));
        assertEq(usdc.balanceOf(treasury), 25e6);
        assertEq(usdc.balanceOf(address(escrow)), 0);
    }

    function test_withdraw_to_sends_tokens_elsewhere() public {
        uint256 jobId = _createUsdc(LORA, 1_000e6);
        _completeLora(jobId, alice, 10_000);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Withdrawn(alice, address(usdc), bob, 975e6);
        vm.prank(alice);
        escrow.withdrawTo(address(usdc), payable(bob));
        assertEq(usdc.balanceOf(bob), 975e6);
        assertEq(escrow.withdrawable(alice, address(usdc)), 0);
    }

    function test_withdraw_of_another_token_finds_nothing() public {
        uint256 jobId = _createUsdc(LORA, 1_000e6);
        _completeLora(jobId, alice, 10_000);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToWithdraw.selector, alice, ETH));
        escrow.withdraw(ETH);
    }

    function test_credits_in_two_tokens_are_kept_apart_and_both_withdrawable() public {
        uint256 ethJob = _createEth(LORA, STAKE);
        uint256 usdcJob = _createUsdc(LORA, 1_000e6);
        uint256 ethJob2 = _createEth(LORA, STAKE);
        _completeLora(ethJob, alice, 10_000);
        _completeLora(usdcJob, alice, 10_000); // parks the ETH credit
        _completeLora(ethJob2, alice, 10_000); // parks the USDC credit
        uint256 ethShare = STAKE - STAKE * FEE_BPS / 10_000;
        assertEq(escrow.withdrawable(alice, ETH), 2 * ethShare);
        assertEq(escrow.withdrawable(alice, address(usdc)), 975e6);
        // 0 -> 2_500 -> 2_500 -> 4_375: USDC's reputation unit is 0 until the admin sets one,
        // so the USDC job moved no reputation (and had to keep it through the packing).
        assertEq(escrow.reputationOf(alice), 4_375);

        vm.startPrank(alice);
        escrow.withdraw(ETH);
        escrow.withdraw(address(usdc));
        vm.stopPrank();
        assertEq(alice.balance, 2 * ethShare);
        assertEq(usdc.balanceOf(alice), 975e6);
        assertEq(escrow.reputationOf(alice), 4_375); // withdrawing never touches reputation
    }

    function test_reverting_recipient_keeps_its_credit_and_can_withdraw_elsewhere() public {
        RevertingRecipient wallet = new RevertingRecipient(escrow);
        vm.deal(address(wallet), STAKE);
        vm.prank(address(wallet));
        uint256 jobId = escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, ANY_FEE);
        wallet.cancel(jobId);

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EthTransferFailed.selector, address(wallet), STAKE));
        wallet.withdraw(ETH);
        assertEq(escrow.withdrawable(address(wallet), ETH), STAKE);

        address payable cold = payable(makeAddr("cold"));
        vm.expectRevert(JobEscrow.ZeroAddress.selector);
        wallet.withdrawTo(ETH, payable(address(0)));
        wallet.withdrawTo(ETH, cold);
        assertEq(cold.balance, STAKE);
        assertEq(escrow.withdrawable(address(wallet), ETH), 0);
    }

    function test_reverting_contributor_does_not_block_the_others() public {
        RevertingRecipient wallet = new RevertingRecipient(escrow);
        uint256 jobId = _createEth(FED, STAKE);
        address[] memory list = _pair(alice, address(wallet));
        _sort(list);
        _completeFederated(jobId, list, _scores(5_000, 5_000));
        vm.prank(alice);
        escrow.withdraw(ETH);
        assertGt(alice.balance, 0);
        vm.expectRevert();
        wallet.withdraw(ETH);
    }

    function test_reentrant_withdraw_is_blocked_and_pays_once() public {
        ReentrantAttacker attacker = new ReentrantAttacker(escrow);
        vm.deal(address(attacker), 2 * STAKE);
        uint256 first = attacker.createJob{value: STAKE}(STAKE, _deadline());
        uint256 second = attacker.createJob{value: STAKE}(STAKE, _deadline());
        attacker.setTargetJob(second);
        attacker.cancel(first);

        attacker.withdraw(ETH);
        assertEq(attacker.received(), STAKE);
        assertEq(attacker.reentryAttempts(), 1);
        assertEq(attacker.reentrySuccesses(), 0);
        assertEq(
            attacker.lastWithdrawRevert(),
            abi.encodeWithSelector(ReentrancyGuardTransient.ReentrancyGuardReentrantCall.selector)
        );
        assertEq(uint8(escrow.getJob(second).status), uint8(JobEscrow.JobStatus.Open));
        assertEq(address(escrow).balance, STAKE);
    }
}
