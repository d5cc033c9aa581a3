// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "./utils/Packing.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Vm} from "./utils/Vm.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {MockERC20} from "./mocks/MockERC20.sol";
import {EscrowFixture} from "./EscrowFixture.sol";

/// Unit tests of escrow v2: the requester's fee maximum, the treasury fixed per job, completion
/// only of Started jobs, requesters barred from their own jobs, reputation weighed by value,
/// early aborts and batched federated payouts.
contract EscrowV2Test is EscrowFixture {
    JobEscrow.JobKind internal constant LORA = JobEscrow.JobKind.LoRA;
    JobEscrow.JobKind internal constant FED = JobEscrow.JobKind.Federated;
    bytes32 internal constant ADMIN = 0x00;
    bytes32 internal constant VALIDATOR = keccak256("VALIDATOR_ROLE");

    address internal alice = address(0x1000);
    address internal bob = address(0x2000);
    address internal carol = address(0x3000);
    address internal dave = address(0x4000);

    uint256 internal constant FEE = STAKE * FEE_BPS / 10_000;
    uint256 internal constant POOL = STAKE - FEE;

    function _unauthorized(address who, bytes32 role) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, who, role);
    }

    function _wrongStatus(uint256 jobId, JobEscrow.JobStatus status) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(JobEscrow.WrongJobStatus.selector, jobId, status);
    }

    function _status(uint256 jobId) internal view returns (JobEscrow.JobStatus) {
        return escrow.getJob(jobId).status;
    }

    function _list(address a) internal pure returns (address[] memory l) {
        l = new address[](1);
        l[0] = a;
    }

    function _list(address a, address b) internal pure returns (address[] memory l) {
        l = new address[](2);
        (l[0], l[1]) = (a, b);
    }

    function _four() internal view returns (address[] memory l) {
        l = new address[](4);
        (l[0], l[1], l[2], l[3]) = (alice, bob, carol, dave);
    }

    function _q(uint16 a) internal pure returns (uint16[] memory q) {
        q = new uint16[](1);
        q[0] = a;
    }

    function _q(uint16 a, uint16 b) internal pure returns (uint16[] memory q) {
        q = new uint16[](2);
        (q[0], q[1]) = (a, b);
    }

    /// Begins a payout to newcomers (reputation 0), whose total quality is their total weight
    /// over REP_FLOOR.
    function _begin(uint256 jobId, uint256 count, uint256 totalWeight) internal {
        vm.prank(validator);
        escrow.beginFederatedPayout(
            jobId, "bafy-adapter", "bafy-manifest", uint32(count), uint64(totalWeight), uint64(totalWeight / 10_000)
        );
    }

    /// Pays a batch weighed by the contributors' reputations now.
    function _batch(uint256 jobId, address[] memory contributors, uint16[] memory scores) internal {
        bytes memory reputations = Packing.packed(escrow.reputationsOf(contributors));
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, contributors, scores, reputations);
    }

    /// Sum of every account's credit in ETH among `accounts`, the treasury and the requester.
    function _credited(address[] memory accounts) internal view returns (uint256 sum) {
        for (uint256 i; i < accounts.length; ++i) {
            sum += escrow.withdrawable(accounts[i], ETH);
        }
        sum += escrow.withdrawable(treasury, ETH) + escrow.withdrawable(requester, ETH);
    }

    // ------------------------------------------------------------------ requester's maximum fee

    function test_fee_raised_above_the_requesters_maximum_refuses_the_job() public {
        // The requester signed at today's fee; the fee manager raises it before the creation is mined.
        vm.prank(feeManager);
        escrow.setFeeBps(FEE_BPS + 1);
        vm.startPrank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeAboveMaximum.selector, FEE_BPS + 1, FEE_BPS));
        escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, FEE_BPS);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeAboveMaximum.selector, FEE_BPS + 1, FEE_BPS));
        escrow.createJob(address(usdc), 1_000e6, SPEC_CID, _deadline(), FED, FEE_BPS);
        vm.stopPrank();
        assertEq(escrow.jobCount(), 0);
        assertEq(address(escrow).balance, 0);
        assertEq(usdc.balanceOf(address(escrow)), 0);
    }

    function test_fee_at_or_below_the_requesters_maximum_is_taken_as_it_is() public {
        vm.prank(requester);
        uint256 atMaximum = escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, FEE_BPS);
        assertEq(escrow.getJob(atMaximum).feeBps, FEE_BPS);
        // A fee lowered before mining applies: the job gets today's fee, not the maximum.
        vm.prank(feeManager);
        escrow.setFeeBps(100);
        vm.prank(requester);
        uint256 below = escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, FEE_BPS);
        assertEq(escrow.getJob(below).feeBps, 100);
        // A maximum of 0 accepts only a zero fee.
        vm.prank(requester);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.FeeAboveMaximum.selector, 100, 0));
        escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, 0);
        vm.prank(feeManager);
        escrow.setFeeBps(0);
        vm.prank(requester);
        escrow.createJob{value: STAKE}(ETH, STAKE, SPEC_CID, _deadline(), LORA, 0);
    }

    // ------------------------------------------------------------------ treasury fixed per job

    function test_treasury_is_fixed_per_job_whichever_way_it_completes() public {
        uint256 lora = _createEth(LORA, STAKE);
        uint256 fed = _createEth(FED, STAKE);
        uint256 batched = _createEth(FED, STAKE);
        address newTreasury = makeAddr("newTreasury");
        vm.prank(admin);
        escrow.setTreasury(newTreasury);
        uint256 later = _createEth(LORA, STAKE);
        assertEq(escrow.getJob(lora).treasury, treasury);
        assertEq(escrow.getJob(batched).treasury, treasury);
        assertEq(escrow.getJob(later).treasury, newTreasury);

        _completeLora(lora, alice, 10_000);
        _completeFederated(fed, _list(alice, bob), _q(5_000, 9_000));
        _payInBatches(batched, _list(alice, bob), _q(5_000, 9_000), 1);
        _completeLora(later, alice, 10_000);
        // Three jobs were created under the old treasury: their fees go there, set or not.
        assertEq(escrow.withdrawable(treasury, ETH), 3 * FEE);
        assertEq(escrow.withdrawable(newTreasury, ETH), FEE);
        vm.prank(treasury);
        escrow.withdraw(ETH);
        assertEq(treasury.balance, 3 * FEE);
    }

    // ------------------------------------------------------------------ completion needs Started

    function test_completion_of_an_open_job_is_refused() public {
        uint256 lora = _createEth(LORA, STAKE);
        uint256 fed = _createEth(FED, STAKE);
        vm.startPrank(validator);
        vm.expectRevert(_wrongStatus(lora, JobEscrow.JobStatus.Open));
        escrow.completeJob(lora, "a", alice, 10_000);
        vm.expectRevert(_wrongStatus(fed, JobEscrow.JobStatus.Open));
        escrow.completeFederatedJob(fed, "a", "m", _list(alice, bob), _q(1, 1));
        vm.expectRevert(_wrongStatus(fed, JobEscrow.JobStatus.Open));
        escrow.beginFederatedPayout(fed, "a", "m", 2, 2, 2);
        vm.expectRevert(_wrongStatus(fed, JobEscrow.JobStatus.Open));
        escrow.payFederatedBatch(fed, _list(alice, bob), _q(1, 1), new bytes(4));
        vm.stopPrank();
        // Still Open, so still the requester's to cancel.
        vm.prank(requester);
        escrow.cancel(fed);
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
    }

    function test_cancel_mined_before_the_completion_wins() public {
        uint256 lora = _createEth(LORA, STAKE);
        uint256 fed = _createEth(FED, STAKE);
        vm.startPrank(requester);
        escrow.cancel(lora);
        escrow.cancel(fed);
        vm.stopPrank();

        vm.startPrank(validator);
        vm.expectRevert(_wrongStatus(lora, JobEscrow.JobStatus.Cancelled));
        escrow.markStarted(lora);
        vm.expectRevert(_wrongStatus(lora, JobEscrow.JobStatus.Cancelled));
        escrow.completeJob(lora, "a", alice, 10_000);
        vm.expectRevert(_wrongStatus(fed, JobEscrow.JobStatus.Cancelled));
        escrow.completeFederatedJob(fed, "a", "m", _list(alice, bob), _q(1, 1));
        vm.expectRevert(_wrongStatus(fed, JobEscrow.JobStatus.Cancelled));
        escrow.beginFederatedPayout(fed, "a", "m", 2, 2, 2);
        vm.stopPrank();
        assertEq(escrow.withdrawable(requester, ETH), 2 * STAKE);
        assertEq(escrow.withdrawable(alice, ETH), 0);
        assertEq(escrow.withdrawable(treasury, ETH), 0);
    }

    function test_start_and_completion_mined_before_the_cancel_win() public {
        uint256 lora = _createEth(LORA, STAKE);
        uint256 batched = _createEth(FED, STAKE);
        _start(lora);
        // Started: work was handed out, the requester can no longer pull the stake.
        vm.prank(requester);
        vm.expectRevert(_wrongStatus(lora, JobEscrow.JobStatus.Started));
        escrow.cancel(lora);
        vm.prank(validator);
        escrow.completeJob(lora, "a", alice, 10_000);
        vm.prank(requester);
        vm.expectRevert(_wrongStatus(lora, JobEscrow.JobStatus.Completed));
        escrow.cancel(lora);

        _start(batched);
        _begin(batched, 2, 2 * 10_000 * 10_000);
        vm.prank(requester);
        vm.expectRevert(_wrongStatus(batched, JobEscrow.JobStatus.Paying));
        escrow.cancel(batched);

        assertEq(escrow.withdrawable(alice, ETH), POOL);
        assertEq(escrow.withdrawable(treasury, ETH), FEE);
        assertEq(escrow.withdrawable(requester, ETH), 0);
    }

    // ------------------------------------------------------------------ requester as contributor

    function test_requester_cannot_be_a_contributor_of_its_own_job() public {
        uint256 lora = _createEth(LORA, STAKE);
        uint256 fed = _createEth(FED, STAKE);
        uint256 batched = _createEth(FED, STAKE);
        _start(lora);
        _start(fed);
        _start(batched);
        address[] memory list = new address[](3);
        (list[0], list[1], list[2]) = (alice, requester, carol);
        _sort(list);
        uint256 at;
        while (list[at] != requester) ++at;
        uint16[] memory q = _uniformQuality(3, 8_000);
        bytes memory refused = abi.encodeWithSelector(JobEscrow.RequesterIsContributor.selector, at);

        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.RequesterIsContributor.selector, 0));
        escrow.completeJob(lora, "a", requester, 10_000);
        vm.expectRevert(refused);
        escrow.completeFederatedJob(fed, "a", "m", list, q);
        vm.expectRevert(refused);
        escrow.weigh(fed, list, q);
        escrow.beginFederatedPayout(batched, "a", "m", 3, 3 * 8_000 * 10_000, 3 * 8_000);
        vm.expectRevert(refused);
        escrow.payFederatedBatch(batched, list, q, new bytes(6));
        vm.stopPrank();

        assertEq(uint8(_status(lora)), uint8(JobEscrow.JobStatus.Started));
        assertEq(uint8(_status(fed)), uint8(JobEscrow.JobStatus.Started));
        assertEq(uint8(_status(batched)), uint8(JobEscrow.JobStatus.Paying));
        assertEq(escrow.payoutOf(batched).paidCount, 0);
        assertEq(escrow.reputationOf(requester), 0);
    }

    // ------------------------------------------------------------------ reputation weighs value

    function test_farming_reputation_with_1_wei_jobs_gains_nothing() public {
        // The requester posts 30 LoRA jobs of 1 wei and names a second address of its own.
        address sock = makeAddr("sockPuppet");
        for (uint256 i; i < 30; ++i) {
            _completeLora(_createEth(LORA, 1), sock, 10_000);
        }
        assertEq(escrow.reputationOf(sock), 0);
        assertEq(escrow.withdrawable(sock, ETH), 30);
        // Before v2 every completion moved reputation a quarter of the way, whatever the stake:
        // the same 30 jobs reached 9,997 of 10,000 for 30 wei.
        uint256 v1;
        for (uint256 i; i < 30; ++i) {
            v1 = (3 * v1 + 10_000) / 4;
        }
        assertEq(v1, 9_997);
    }

    function test_farmer_gains_no_more_reputation_than_one_real_job_of_the_same_total_stake() public {
        // 30 self-dealt jobs of 0.0003 ETH against one real job of 0.009 ETH: the total stays
        // under the reputation unit, where reputation is bought in proportion to value.
        uint256 small = 0.0003 ether;
        address sock = makeAddr("sockPuppet");
        for (uint256 i; i < 30; ++i) {
            _completeLora(_createEth(LORA, small), sock, 10_000);
        }
        uint256 farmerFees = escrow.withdrawable(treasury, ETH);
        _completeLora(_createEth(LORA, 30 * small), alice, 10_000);
        uint256 realFee = escrow.withdrawable(treasury, ETH) - farmerFees;

        uint256 farmed = escrow.reputationOf(sock);
        uint256 earned = escrow.reputationOf(alice);
        assertEq(farmerFees, realFee, "both paid the same fee");
        uint256 realPool = 30 * small - realFee;
        assertEq(earned, escrow.reputationStepOf(ETH, realPool, 1), "one full-quality job from 0: rep = step");
        assertGt(farmed, 0);
        assertLe(farmed, earned, "the farmer out-earned a real contributor of the same value");
    }

    function test_farming_a_high_reputation_costs_the_fee_on_real_value() public {
        // What the v1 attack costs now: each job must pay its contributor a full unit (0.01 ETH)
        // to move reputation a full step, so 30 jobs put 0.3 ETH through the escrow and leave
        // the fee on it with the treasury.
        uint256 stake = 0.0103 ether; // pool 0.0100425 ETH >= 0.01 ETH
        address sock = makeAddr("sockPuppet");
        for (uint256 i; i < 30; ++i) {
            _completeLora(_createEth(LORA, stake), sock, 10_000);
        }
        assertEq(escrow.reputationOf(sock), 9_997);
        assertEq(escrow.withdrawable(treasury, ETH), 30 * (stake * FEE_BPS / 10_000));
        assertGe(escrow.withdrawable(treasury, ETH), 30 * 0.01 ether * uint256(FEE_BPS) / 10_000);
    }

    /// The issue-46 attack: 30 self-dealt jobs of 0.0103 ETH take a second address to
    /// reputation 9,997 for 0.0077 ETH of fees; before the bonus budget it then earned 0.050 ETH
    /// more than an honest newcomer on one real job of the same total value (6.5x its cost),
    /// and again on every later job. Now the bonus is paid only out of half the fees its
    /// earnings paid: at most 0.0039 ETH, over any number of jobs.
    function test_farmed_reputation_earns_back_at_most_half_its_fees_over_any_horizon() public {
        uint256 stake = 0.0103 ether;
        (address sock, address honest) = (alice, bob);
        for (uint256 i; i < 30; ++i) {
            _completeLora(_createEth(LORA, stake), sock, 10_000);
        }
        assertEq(escrow.reputationOf(sock), 9_997);
        uint256 farmFees = escrow.withdrawable(treasury, ETH);
        assertEq(farmFees, 30 * (stake * FEE_BPS / 10_000));
        uint256 farmed = escrow.withdrawable(sock, ETH);

        // From here on no fee, so no budget is added: whatever the sock earns above its share by
        // quality alone comes out of the budget the farming bought.
        vm.prank(feeManager);
        escrow.setFeeBps(0);
        uint256 gains;
        for (uint256 k; k < 20; ++k) {
            uint256 jobId = _createEth(FED, 30 * stake);
            uint256 before = escrow.withdrawable(sock, ETH);
            _completeFederated(jobId, _list(sock, honest), _q(8_000, 8_000));
            uint256 share = escrow.withdrawable(sock, ETH) - before;
            assertGe(share, 30 * stake / 2, "never below its share by quality alone");
            gains += share - 30 * stake / 2;
            if (k == 0) {
                // What the weights alone would have paid: 19,997 against 10,000.
                uint256 v2 = 30 * stake * 19_997 / 29_997;
                assertGt(v2 - 30 * stake / 2, 0.05 ether, "the attack as the audit measured it");
                assertLt(share, v2);
            }
        }
        assertGt(gains, 0, "reputation still counts, as far as it was paid for");
        assertLe(gains, farmFees / 2, "farming earned back more than half its fees");
        assertEq(escrow.bonusBudgetOf(sock), 0, "the budget is spent");
        assertEq(escrow.withdrawable(sock, ETH) - farmed, 20 * (30 * stake / 2) + gains);
    }

    function test_at_a_zero_fee_reputation_pays_no_bonus() public {
        vm.prank(feeManager);
        escrow.setFeeBps(0);
        for (uint256 i; i < 30; ++i) {
            _completeLora(_createEth(LORA, 0.0103 ether), alice, 10_000);
        }
        assertEq(escrow.reputationOf(alice), 9_997);
        assertEq(escrow.bonusBudgetOf(alice), 0);
        uint256 before = escrow.withdrawable(alice, ETH);
        _completeFederated(_createEth(FED, 1 ether), _list(alice, bob), _q(8_000, 8_000));
        assertEq(escrow.withdrawable(alice, ETH) - before, 0.5 ether);
        // Bob, diluted by alice's weight, gets his weighted share; what alice could not take
        // goes back to the requester.
        assertEq(escrow.withdrawable(bob, ETH), uint256(1 ether) * 10_000 / 29_997);
        assertEq(escrow.withdrawable(requester, ETH), 0.5 ether - uint256(1 ether) * 10_000 / 29_997);
    }

    /// Farming at any fee, stake and number of jobs, then any number of real jobs at fee 0:
    /// what reputation added never exceeds half the fees the farming paid.
    function testFuzz_farming_never_earns_back_its_fees(uint16 feeBps, uint256 stake, uint8 jobs, uint8 horizon)
        public
    {
        feeBps = uint16(bound(feeBps, 0, escrow.MAX_FEE_BPS()));
        stake = bound(stake, 1, 1 ether);
        uint256 k = bound(jobs, 1, 30);
        uint256 h = bound(horizon, 1, 12);
        vm.prank(feeManager);
        escrow.setFeeBps(feeBps);
        for (uint256 i; i < k; ++i) {
            _completeLora(_createEth(LORA, stake), alice, 10_000);
        }
        uint256 farmFees = escrow.withdrawable(treasury, ETH);
        vm.prank(feeManager);
        escrow.setFeeBps(0);
        uint256 gains;
        for (uint256 j; j < h; ++j) {
            uint256 before = escrow.withdrawable(alice, ETH);
            _completeFederated(_createEth(FED, 1 ether), _list(alice, bob), _q(10_000, 10_000));
            gains += escrow.withdrawable(alice, ETH) - before - 0.5 ether;
        }
        assertLe(gains, farmFees / 2);
        if (feeBps == 0) assertEq(gains, 0);
    }

    function test_reputation_step_scales_with_the_share_per_contributor() public view {
        uint256 unit = escrow.DEFAULT_ETH_REPUTATION_UNIT();
        assertEq(unit, 0.01 ether);
        assertEq(escrow.reputationUnitOf(ETH), unit);
        assertEq(escrow.reputationUnitOf(address(usdc)), 0);
        assertEq(escrow.reputationStepOf(ETH, unit, 1), 2_500);
        assertEq(escrow.reputationStepOf(ETH, 100 ether, 1), 2_500, "capped at the maximum step");
        assertEq(escrow.reputationStepOf(ETH, unit / 2, 1), 1_250);
        assertEq(escrow.reputationStepOf(ETH, unit, 2), 1_250, "per contributor");
        assertEq(escrow.reputationStepOf(ETH, 2 * unit, 2), 2_500);
        assertEq(escrow.reputationStepOf(ETH, 1, 1), 0);
        assertEq(escrow.reputationStepOf(address(usdc), 1e30, 1), 0, "ERC-20s start without reputation");
    }

    function test_a_small_job_moves_reputation_by_the_scaled_step() public {
        // Give alice 2_500 first, then a job worth a fifth of the unit at quality 0.
        _completeLora(_createEth(LORA, 1 ether), alice, 10_000);
        assertEq(escrow.reputationOf(alice), 2_500);
        uint256 stake = 0.002 ether;
        uint256 pool = stake - stake * FEE_BPS / 10_000;
        uint256 step = escrow.reputationStepOf(ETH, pool, 1);
        assertEq(step, 2_500 * pool / 0.01 ether);
        _completeLora(_createEth(LORA, stake), alice, 0);
        assertEq(escrow.reputationOf(alice), (2_500 * (10_000 - step)) / 10_000);
        // Federated: the step is set by the pool per contributor.
        uint256 fed = _createEth(FED, 0.004 ether);
        pool = 0.004 ether - 0.004 ether * uint256(FEE_BPS) / 10_000;
        step = escrow.reputationStepOf(ETH, pool, 2);
        uint256 aliceBefore = escrow.reputationOf(alice);
        _completeFederated(fed, _list(alice, bob), _q(10_000, 6_000));
        assertEq(escrow.reputationOf(alice), (aliceBefore * (10_000 - step) + 10_000 * step) / 10_000);
        assertEq(escrow.reputationOf(bob), (6_000 * step) / 10_000);
    }

    function test_admin_sets_a_reputation_unit_per_token() public {
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, ADMIN));
        escrow.setReputationUnit(address(usdc), 10e6);
        MockERC20 other = new MockERC20("Other", "OTH");
        vm.prank(admin);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TokenNotAllowed.selector, address(other)));
        escrow.setReputationUnit(address(other), 10e6);

        // No unit: a USDC job moves no reputation.
        _completeLora(_createUsdc(LORA, 1_000e6), alice, 10_000);
        assertEq(escrow.reputationOf(alice), 0);

        vm.expectEmit(address(escrow));
        emit JobEscrow.ReputationUnitChanged(address(usdc), 10e6);
        vm.prank(admin);
        escrow.setReputationUnit(address(usdc), 10e6);
        assertEq(escrow.reputationUnitOf(address(usdc)), 10e6);
        _completeLora(_createUsdc(LORA, 1_000e6), alice, 10_000);
        assertEq(escrow.reputationOf(alice), 2_500);

        // Unit 0 for ETH turns ETH reputation off.
        vm.prank(admin);
        escrow.setReputationUnit(ETH, 0);
        _completeLora(_createEth(LORA, STAKE), alice, 0);
        assertEq(escrow.reputationOf(alice), 2_500);
    }

    // ------------------------------------------------------------------ abortJob

    function test_validator_aborts_an_open_job_and_refunds_the_whole_stake() public {
        uint256 jobId = _createEth(LORA, STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobAborted(jobId, STAKE, "model cannot be loaded");
        vm.prank(validator);
        escrow.abortJob(jobId, "model cannot be loaded");
        assertEq(uint8(_status(jobId)), 7);
        assertEq(uint8(JobEscrow.JobStatus.Aborted), 7);
        assertEq(uint8(JobEscrow.JobStatus.Paying), 6);
        assertEq(escrow.withdrawable(requester, ETH), STAKE);
        assertEq(escrow.withdrawable(treasury, ETH), 0, "no fee on an aborted job");
        uint256 before = requester.balance;
        vm.prank(requester);
        escrow.withdraw(ETH);
        assertEq(requester.balance, before + STAKE);
        assertEq(address(escrow).balance, 0);
    }

    function test_validator_aborts_a_started_token_job_before_the_deadline() public {
        uint256 jobId = _createUsdc(FED, 2_000e6);
        _start(jobId);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobAborted(jobId, 2_000e6, "task 3 used up its attempts");
        vm.prank(validator);
        escrow.abortJob(jobId, "task 3 used up its attempts");
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Aborted));
        assertEq(escrow.withdrawable(requester, address(usdc)), 2_000e6);
        assertEq(escrow.withdrawable(treasury, address(usdc)), 0);
        vm.prank(requester);
        escrow.withdraw(address(usdc));
        assertEq(usdc.balanceOf(requester), 1_000_000e6);
        assertEq(usdc.balanceOf(address(escrow)), 0);
    }

    function test_abort_is_for_the_validator_only_and_only_before_a_payout() public {
        uint256 jobId = _createEth(FED, STAKE);
        vm.prank(requester);
        vm.expectRevert(_unauthorized(requester, VALIDATOR));
        escrow.abortJob(jobId, "r");
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.abortJob(jobId, "r");

        uint256 completed = _createEth(LORA, STAKE);
        _completeLora(completed, alice, 5_000);
        uint256 paying = _createEth(FED, STAKE);
        _start(paying);
        _begin(paying, 2, 2e8);
        uint256 cancelled = _createEth(LORA, STAKE);
        vm.prank(requester);
        escrow.cancel(cancelled);
        uint256 refunded = _createEth(LORA, 1);

        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 99));
        escrow.abortJob(99, "r");
        vm.expectRevert(_wrongStatus(completed, JobEscrow.JobStatus.Completed));
        escrow.abortJob(completed, "r");
        vm.expectRevert(_wrongStatus(paying, JobEscrow.JobStatus.Paying));
        escrow.abortJob(paying, "r");
        vm.expectRevert(_wrongStatus(cancelled, JobEscrow.JobStatus.Cancelled));
        escrow.abortJob(cancelled, "r");
        escrow.abortJob(jobId, "r");
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.abortJob(jobId, "again");
        // An aborted job is final for everyone else too.
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.markStarted(jobId);
        vm.stopPrank();
        vm.prank(requester);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.cancel(jobId);
        vm.warp(block.timestamp + 8 days);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Aborted));
        escrow.refund(jobId);
        escrow.refund(refunded);
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(refunded, JobEscrow.JobStatus.Refunded));
        escrow.abortJob(refunded, "r");
    }

    // ------------------------------------------------------------------ batched payouts

    /// Twelve contributors with varied reputations (two earlier jobs) and varied scores, one zero.
    function _crowd() internal returns (address[] memory list, uint16[] memory q) {
        list = _sortedContributors(12, 0xC0FFEE);
        q = new uint16[](12);
        for (uint256 i; i < 12; ++i) {
            q[i] = uint16(uint256(keccak256(abi.encode("q", i))) % 10_001);
        }
        q[5] = 0;
        for (uint256 r; r < 2; ++r) {
            uint16[] memory warm = new uint16[](12);
            for (uint256 i; i < 12; ++i) {
                warm[i] = uint16(uint256(keccak256(abi.encode("warm", r, i))) % 10_001);
            }
            _completeFederated(_createEth(FED, 1 ether), list, warm);
        }
    }

    function _creditsOf(address[] memory list) internal view returns (uint256[] memory credits) {
        credits = new uint256[](list.length + 2);
        for (uint256 i; i < list.length; ++i) {
            credits[i] = escrow.withdrawable(list[i], ETH);
        }
        credits[list.length] = escrow.withdrawable(treasury, ETH);
        credits[list.length + 1] = escrow.withdrawable(requester, ETH);
    }

    function _reputationsOf(address[] memory list) internal view returns (uint256[] memory reps) {
        reps = new uint256[](list.length);
        for (uint256 i; i < list.length; ++i) {
            reps[i] = escrow.reputationOf(list[i]);
        }
    }

    /// Every ContributorsPaid entry logged since recordLogs, batches concatenated, and the data
    /// of the last JobCompleted.
    function _paidEntries() internal returns (uint256[] memory all, bytes memory completed) {
        Vm.Log[] memory logs = vm.getRecordedLogs();
        uint256 total;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].topics.length == 0) continue;
            if (logs[i].topics[0] == JobEscrow.ContributorsPaid.selector) {
                total += abi.decode(logs[i].data, (uint256[])).length;
            }
        }
        all = new uint256[](total);
        uint256 k;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].topics.length == 0) continue;
            if (logs[i].topics[0] == JobEscrow.ContributorsPaid.selector) {
                uint256[] memory part = abi.decode(logs[i].data, (uint256[]));
                for (uint256 j; j < part.length; ++j) {
                    all[k++] = part[j];
                }
            } else if (logs[i].topics[0] == JobEscrow.JobCompleted.selector) {
                completed = logs[i].data;
            }
        }
    }

    struct Settled {
        uint256 jobId;
        uint256[] credits;
        uint256[] reputations;
        uint256[] events;
        bytes completed;
    }

    /// Settles a fresh federated job of STAKE for `list`: at once, or in batches of `batchSize`.
    function _settle(address[] memory list, uint16[] memory q, uint256 batchSize) internal returns (Settled memory s) {
        s.jobId = _createEth(FED, STAKE);
        vm.recordLogs();
        if (batchSize == 0) _completeFederated(s.jobId, list, q);
        else _payInBatches(s.jobId, list, q, batchSize);
        (s.events, s.completed) = _paidEntries();
        s.credits = _creditsOf(list);
        s.reputations = _reputationsOf(list);
    }

    function test_batched_payout_pays_exactly_what_one_transaction_pays() public {
        (address[] memory list, uint16[] memory q) = _crowd();
        uint256[] memory before = _creditsOf(list);
        uint256 snapshot = vm.snapshotState();
        Settled memory once = _settle(list, q, 0);
        vm.revertToState(snapshot);
        Settled memory batched = _settle(list, q, 5); // batches of 5, 5 and 2
        assertEq(batched.jobId, once.jobId, "same job id after the revert");

        uint256 paid;
        for (uint256 i; i < list.length + 2; ++i) {
            assertEq(batched.credits[i] - before[i], once.credits[i] - before[i], "credit differs");
            if (i < list.length) paid += batched.credits[i] - before[i];
        }
        for (uint256 i; i < list.length; ++i) {
            assertEq(batched.reputations[i], once.reputations[i], "reputation differs");
        }
        assertEq(batched.events.length, 2 * list.length);
        assertEq(keccak256(abi.encode(batched.events)), keccak256(abi.encode(once.events)), "ContributorsPaid differ");
        assertEq(batched.completed, once.completed, "JobCompleted differs");
        assertEq(uint160(batched.events[2 * 11]), uint160(list[11]));
        assertEq((batched.events[2 * 11] >> 160) & 0xffff, once.reputations[11]);
        assertEq(batched.events[2 * 11 + 1], batched.credits[11] - before[11]);

        assertEq(uint8(_status(batched.jobId)), uint8(JobEscrow.JobStatus.Completed));
        JobEscrow.Payout memory p = escrow.payoutOf(batched.jobId);
        assertEq(p.expected, 12);
        assertEq(p.paidCount, 12);
        assertEq(p.lastContributor, list[11]);
        assertEq(p.paid, paid);
        assertEq(p.reputationStepBps, 2_500);
        assertEq(batched.credits[12] - before[12], FEE);
        assertEq(paid + FEE + (batched.credits[13] - before[13]), STAKE);
    }

    function test_begin_payout_records_the_plan_and_weigh_reports_the_divisor() public {
        (address[] memory list, uint16[] memory q) = _crowd();
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 feesBefore = escrow.withdrawable(treasury, ETH);
        uint256 expected;
        for (uint256 i; i < list.length; ++i) {
            expected += uint256(q[i]) * (10_000 + escrow.reputationOf(list[i]));
        }
        assertEq(escrow.weigh(jobId, list, q), expected);
        // In chunks (each sorted on its own) the sums add up.
        assertEq(
            escrow.weigh(jobId, _slice(list, 0, 7), _slice(q, 0, 7))
                + escrow.weigh(jobId, _slice(list, 7, 12), _slice(q, 7, 12)),
            expected
        );
        vm.expectEmit(address(escrow));
        emit JobEscrow.PayoutStarted(jobId, "bafy-adapter", "bafy-manifest", 12, expected);
        _begin(jobId, 12, expected);
        JobEscrow.Payout memory p = escrow.payoutOf(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Paying));
        assertEq(p.expected, 12);
        assertEq(p.paidCount, 0);
        assertEq(p.paid, 0);
        assertEq(p.lastContributor, address(0));
        assertEq(p.totalWeight, expected);
        assertEq(p.reputationStepBps, escrow.reputationStepOf(ETH, POOL, 12));
        assertEq(escrow.withdrawable(treasury, ETH), feesBefore, "no fee before the last batch");
    }

    function test_begin_payout_rejects_bad_calls() public {
        uint256 jobId = _createEth(FED, STAKE);
        uint256 lora = _createEth(LORA, STAKE);
        _start(jobId);
        _start(lora);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.beginFederatedPayout(jobId, "a", "m", 2, 2, 2);
        vm.startPrank(validator);
        vm.expectRevert(JobEscrow.NoContributors.selector);
        escrow.beginFederatedPayout(jobId, "a", "m", 0, 0, 2);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 9));
        escrow.beginFederatedPayout(9, "a", "m", 2, 2, 2);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongJobKind.selector, lora, LORA));
        escrow.beginFederatedPayout(lora, "a", "m", 2, 2, 2);
        escrow.beginFederatedPayout(jobId, "a", "m", 2, 2e8, 2);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Paying));
        escrow.beginFederatedPayout(jobId, "a", "m", 2, 2e8, 2);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Paying));
        escrow.completeFederatedJob(jobId, "a", "m", _list(alice, bob), _q(1, 1));
        vm.stopPrank();

        uint256 late = _createEth(FED, STAKE);
        _start(late);
        uint64 deadline = escrow.getJob(late).deadline;
        vm.warp(deadline + 1);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector, late, deadline));
        escrow.beginFederatedPayout(late, "a", "m", 2, 2e8, 2);
    }

    function test_pay_batch_rejects_bad_calls() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Started));
        escrow.payFederatedBatch(jobId, _list(alice), _q(1), new bytes(2));
        _begin(jobId, 2, 2e8);
        vm.prank(stranger);
        vm.expectRevert(_unauthorized(stranger, VALIDATOR));
        escrow.payFederatedBatch(jobId, _list(alice), _q(1), new bytes(2));
        vm.startPrank(validator);
        vm.expectRevert(JobEscrow.NoContributors.selector);
        escrow.payFederatedBatch(jobId, new address[](0), new uint16[](0), new bytes(0));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.LengthMismatch.selector, 1, 2));
        escrow.payFederatedBatch(jobId, _list(alice), _q(1, 1), new bytes(2));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 77));
        escrow.payFederatedBatch(77, _list(alice), _q(1), new bytes(2));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QualityOutOfRange.selector, 1, 10_001));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(1, 10_001), new bytes(4));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 0));
        escrow.payFederatedBatch(jobId, _list(address(0)), _q(1), new bytes(2));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ReputationsMissing.selector, 2, 2));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(1, 1), new bytes(2));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ReputationOutOfRange.selector, 1, 10_001));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(1, 1), Packing.packed(_q(0, 10_001)));
        vm.stopPrank();
    }

    function test_a_repeated_batch_reverts_instead_of_paying_twice() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 4, 4 * 10_000 * 10_000);
        _batch(jobId, _list(alice, bob), _q(10_000, 10_000));
        uint256 aliceCredit = escrow.withdrawable(alice, ETH);
        assertEq(aliceCredit, POOL / 4);

        vm.startPrank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 0));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(10_000, 10_000), new bytes(4));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ContributorsNotSorted.selector, 0));
        escrow.payFederatedBatch(jobId, _list(bob, carol), _q(10_000, 10_000), new bytes(4)); // overlaps by one
        escrow.payFederatedBatch(jobId, _list(carol, dave), _q(10_000, 10_000), new bytes(4));
        vm.stopPrank();
        assertEq(escrow.withdrawable(alice, ETH), aliceCredit);
        assertEq(escrow.withdrawable(bob, ETH), POOL / 4);
        assertEq(escrow.withdrawable(dave, ETH), POOL / 4);
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Completed));
    }

    function test_more_contributors_than_announced_revert_and_batches_after_completion_too() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 3, 3 * 10_000 * 10_000);
        _batch(jobId, _list(alice, bob), _q(10_000, 10_000));
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooManyContributors.selector, 3, 4));
        escrow.payFederatedBatch(jobId, _list(carol, dave), _q(10_000, 10_000), new bytes(4));

        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 3, 3 * (POOL / 3), FEE, POOL - 3 * (POOL / 3));
        _batch(jobId, _list(carol), _q(10_000));
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Completed));
        assertEq(escrow.withdrawable(treasury, ETH), FEE);

        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Completed));
        escrow.payFederatedBatch(jobId, _list(dave), _q(10_000), new bytes(2));
        vm.warp(escrow.getJob(jobId).deadline + 8 days);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Completed));
        escrow.refund(jobId);
    }

    function test_stalled_payout_is_refunded_what_was_not_paid_only_after_the_grace() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 4, 4 * 10_000 * 10_000);
        _batch(jobId, _list(alice, bob), _q(10_000, 10_000));
        uint256 paid = escrow.payoutOf(jobId).paid;
        assertEq(paid, 2 * (POOL / 4));
        uint256 deadline = escrow.getJob(jobId).deadline;
        uint256 until = deadline + escrow.PAYOUT_GRACE();
        assertEq(until, deadline + 7 days);
        bytes memory tooEarly = abi.encodeWithSelector(JobEscrow.PayoutGraceNotPassed.selector, jobId, until);

        vm.expectRevert(tooEarly);
        escrow.refund(jobId);
        vm.warp(deadline + 1);
        vm.expectRevert(tooEarly);
        escrow.refund(jobId);
        vm.warp(until);
        vm.expectRevert(tooEarly);
        escrow.refund(jobId);

        vm.warp(until + 1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobRefunded(jobId, stranger, STAKE - paid);
        vm.prank(stranger);
        escrow.refund(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Refunded));
        assertEq(escrow.withdrawable(requester, ETH), STAKE - paid);
        assertEq(escrow.withdrawable(treasury, ETH), 0, "no fee on a payout that never finished");
        assertEq(escrow.withdrawable(alice, ETH) + escrow.withdrawable(bob, ETH), paid);
        assertEq(address(escrow).balance, STAKE);

        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Refunded));
        escrow.payFederatedBatch(jobId, _list(carol, dave), _q(10_000, 10_000), new bytes(4));
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Refunded));
        escrow.refund(jobId);

        address[] memory everyone = new address[](3);
        (everyone[0], everyone[1], everyone[2]) = (alice, bob, requester);
        for (uint256 i; i < everyone.length; ++i) {
            vm.prank(everyone[i]);
            escrow.withdraw(ETH);
        }
        assertEq(address(escrow).balance, 0);
    }

    function test_refund_during_the_grace_is_refused_and_the_payout_may_finish_in_it() public {
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 2, 2 * 10_000 * 10_000);
        _batch(jobId, _list(alice), _q(10_000));
        uint256 deadline = escrow.getJob(jobId).deadline;
        vm.warp(deadline + 3 days);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.PayoutGraceNotPassed.selector, jobId, deadline + 7 days));
        escrow.refund(jobId);
        vm.prank(validator);
        vm.expectRevert(_wrongStatus(jobId, JobEscrow.JobStatus.Paying));
        escrow.abortJob(jobId, "too late to abort");
        _batch(jobId, _list(bob), _q(10_000));
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Completed));
        assertEq(escrow.withdrawable(bob, ETH), POOL / 2);
        assertEq(escrow.withdrawable(treasury, ETH), FEE);
    }

    /// Four new contributors (reputation 0), each of weight 10_000 x 10_000 at full quality.
    function _newcomers(uint256 salt) internal pure returns (address[] memory list) {
        list = _sortedContributors(4, salt);
    }

    function _creditedTo(address[] memory list) internal view returns (uint256[] memory credits) {
        credits = new uint256[](list.length);
        for (uint256 i; i < list.length; ++i) {
            credits[i] = escrow.withdrawable(list[i], ETH);
        }
    }

    /// The audit's case: other jobs raised the reputations of a batched payout's later
    /// contributors between its batches, so those took more than announced and the last got
    /// what was left (1.54 ETH of an announced 4.875). The batches now carry the reputations of
    /// the moment the payout began, and each contributor gets what was announced.
    function test_a_batched_payout_pays_the_weights_announced_when_it_began() public {
        address[] memory four = _newcomers(7);
        uint16[] memory q = _uniformQuality(4, 10_000);
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        uint256 totalWeight = escrow.weigh(jobId, four, q);
        bytes memory atBegin = Packing.packed(escrow.reputationsOf(four));
        _begin(jobId, 4, totalWeight);
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(four, 0, 2), _slice(q, 0, 2), _slice2(atBegin, 0, 2));

        // Meanwhile other jobs pay the last two and raise their reputations.
        _completeLora(_createEth(LORA, 1 ether), four[2], 10_000);
        _completeLora(_createEth(LORA, 1 ether), four[3], 10_000);
        assertEq(escrow.reputationOf(four[3]), 2_500);

        // Their reputations now would weigh more than announced: refused.
        bytes memory now_ = Packing.packed(escrow.reputationsOf(_slice(four, 2, 4)));
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WeightsDoNotAddUp.selector, 4e8, 4e8 + 2 * 2_500 * 10_000));
        escrow.payFederatedBatch(jobId, _slice(four, 2, 4), _slice(q, 2, 4), now_);

        uint256[] memory before = _creditedTo(four);
        vm.prank(validator);
        escrow.payFederatedBatch(jobId, _slice(four, 2, 4), _slice(q, 2, 4), _slice2(atBegin, 2, 4));
        uint256[] memory credits = _creditedTo(four);
        for (uint256 i; i < 4; ++i) {
            uint256 paidHere = i < 2 ? credits[i] : credits[i] - before[i];
            assertEq(paidHere, POOL / 4, "the announced share");
        }
        assertEq(uint8(_status(jobId)), uint8(JobEscrow.JobStatus.Completed));
        // Reputations still move from where they are now.
        assertEq(escrow.reputationOf(four[3]), 2_500 + (10_000 - 2_500) / 4);
    }

    /// Two-byte entries `from` .. `to` of packed reputations.
    function _slice2(bytes memory packed, uint256 from, uint256 to) internal pure returns (bytes memory part) {
        part = new bytes(2 * (to - from));
        for (uint256 i; i < part.length; ++i) {
            part[i] = packed[2 * from + i];
        }
    }

    function test_batches_that_do_not_add_up_to_the_announced_weights_revert() public {
        // The true divisor is 4 x 10_000 x 10_000; announce a quarter of it: the first batch
        // already carries more than was announced.
        address[] memory first = _newcomers(1);
        uint256 jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 4, 10_000 * 10_000);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WeightsDoNotAddUp.selector, 1e8, 2e8));
        escrow.payFederatedBatch(jobId, _slice(first, 0, 2), _uniformQuality(2, 10_000), new bytes(4));

        // Twice the truth: the last batch leaves the sum short of it, so nothing is completed
        // on a divisor nobody's weights add up to.
        jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 2, 4 * 10_000 * 10_000);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WeightsDoNotAddUp.selector, 4e8, 2e8));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(10_000, 10_000), new bytes(4));

        // The right weight with the wrong total quality is refused the same way.
        jobId = _createEth(FED, STAKE);
        _start(jobId);
        vm.prank(validator);
        escrow.beginFederatedPayout(jobId, "a", "m", 2, 2e8, 30_000);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WeightsDoNotAddUp.selector, 30_000, 20_000));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(10_000, 10_000), new bytes(4));

        // Reputations inflated after the announcement: more weight than announced.
        jobId = _createEth(FED, STAKE);
        _start(jobId);
        _begin(jobId, 2, 2e8);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WeightsDoNotAddUp.selector, 2e8, 2e8 + 1e4 * 5_000));
        escrow.payFederatedBatch(jobId, _list(alice, bob), _q(10_000, 10_000), Packing.packed(_q(0, 5_000)));
        assertEq(escrow.payoutOf(jobId).paidCount, 0);
        assertEq(escrow.withdrawable(alice, ETH), 0);
    }
}
