// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {TestBase} from "../utils/TestBase.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {MockERC20} from "../mocks/MockERC20.sol";
import {FeeOnTransferToken} from "../mocks/FeeOnTransferToken.sol";
import {EscrowHandler} from "./EscrowHandler.sol";

/// Money is conserved under any sequence of calls: for every token, the escrow holds exactly
/// what unfinished jobs still hold (the stake, or stake - paid so far of a batched payout under
/// way) plus every credit not yet withdrawn.
contract JobEscrowInvariants is TestBase {
    JobEscrow internal escrow;
    MockERC20 internal usdc;
    FeeOnTransferToken internal fot;
    EscrowHandler internal handler;
    uint256 internal constant ACTIONS = 24;
    /// Picks the fixed sequence of `test_handler_reaches_every_path_in_a_fixed_sequence`: one
    /// whose 900 steps reach every path (changing the actions reshuffles what a salt reaches).
    uint256 internal constant SEQUENCE_SALT = 5;
    address internal treasury = makeAddr("treasury");

    function setUp() public {
        vm.warp(1_700_000_000);
        address admin = makeAddr("admin");
        address validator = makeAddr("validator");
        address feeManager = makeAddr("feeManager");
        escrow = new JobEscrow(admin, validator, feeManager, treasury, 250);
        usdc = new MockERC20("USD Coin", "USDC");
        fot = new FeeOnTransferToken();
        vm.startPrank(admin);
        escrow.setTokenAllowed(address(usdc), true);
        escrow.setTokenAllowed(address(fot), true);
        vm.stopPrank();
        handler = new EscrowHandler(escrow, usdc, fot, admin, validator, feeManager, treasury);
        targetContract(address(handler));
        bytes4[] memory actions = new bytes4[](ACTIONS);
        actions[0] = EscrowHandler.createJob.selector;
        actions[1] = EscrowHandler.markStarted.selector;
        actions[2] = EscrowHandler.complete.selector;
        actions[3] = EscrowHandler.cancel.selector;
        actions[4] = EscrowHandler.refund.selector;
        actions[5] = EscrowHandler.withdraw.selector;
        actions[6] = EscrowHandler.walletWithdrawTo.selector;
        actions[7] = EscrowHandler.setFee.selector;
        actions[8] = EscrowHandler.warp.selector;
        actions[9] = EscrowHandler.abort.selector;
        actions[10] = EscrowHandler.beginPayout.selector;
        actions[11] = EscrowHandler.payBatch.selector;
        actions[12] = EscrowHandler.setTreasury.selector;
        actions[13] = EscrowHandler.refundStalledPayout.selector;
        // Drawn twice as often: jobs end fast (aborts, cancels, refunds), and a batched payout
        // needs a live federated job, then several batches.
        actions[14] = EscrowHandler.createJob.selector;
        actions[15] = EscrowHandler.beginPayout.selector;
        actions[16] = EscrowHandler.payBatch.selector;
        actions[17] = EscrowHandler.recordProgress.selector;
        actions[18] = EscrowHandler.abortPaying.selector;
        actions[19] = EscrowHandler.abortPaying.selector;
        // Worker bonds (decision 0044): bonded, unbonding, unbonded and slashed beside the jobs.
        actions[20] = EscrowHandler.bond.selector;
        actions[21] = EscrowHandler.requestUnbond.selector;
        actions[22] = EscrowHandler.completeUnbond.selector;
        actions[23] = EscrowHandler.slash.selector;
        targetSelector(FuzzSelector({addr: address(handler), selectors: actions}));
    }

    function _balance(address token) internal view returns (uint256) {
        return token == address(0) ? address(escrow).balance : IERC20(token).balanceOf(address(escrow));
    }

    function invariant_balance_equals_escrowed_stakes_plus_unwithdrawn_credits() public view {
        for (uint256 t; t < 3; ++t) {
            address token = handler.tokens(t);
            assertEq(
                _balance(token),
                handler.totalEscrowed(token) + handler.totalCredited(token) + handler.totalBonded(token),
                "balance != escrowed + credited + bonded"
            );
        }
    }

    function invariant_balance_equals_deposits_minus_withdrawals() public view {
        for (uint256 t; t < 3; ++t) {
            address token = handler.tokens(t);
            assertEq(_balance(token), handler.ghostDeposited(token) - handler.ghostWithdrawn(token));
        }
    }

    function invariant_fee_on_transfer_token_never_funds_a_job() public view {
        assertEq(handler.ghostFeeOnTransferJobs(), 0);
        assertEq(fot.balanceOf(address(escrow)), 0);
    }

    /// One-transaction completions, batched payouts as a whole, aborts and refunds each credit
    /// exactly what they owe, once; every batch credits what it paid; no batch is paid twice.
    function invariant_each_completion_credits_exactly_the_stake_once() public view {
        assertEq(handler.ghostBrokenCompletions(), 0);
    }

    /// Work done is paid, whatever ends the job: every ended job split its stake exactly
    /// (stake == paid + fee + refunded), a payout took the fee on its earned part only and paid
    /// contributors no more than that part's pool, and a job ends Aborted exactly when part of
    /// it was unearned.
    function invariant_every_ended_job_splits_its_stake_exactly() public view {
        assertEq(handler.unbalancedEndedJobs(), 0);
    }

    /// Recorded progress only grows, and holds a deadline refund back for the grace.
    function invariant_progress_is_monotonic_and_holds_the_refund_back() public view {
        assertEq(handler.ghostProgressDecreases(), 0);
        assertEq(handler.ghostEarlyRefunds(), 0);
    }

    function invariant_no_payout_exceeds_its_pool() public view {
        assertEq(handler.overpaidJobs(), 0);
    }

    /// A slash takes at most the bond there is, at most once per job and worker, and an
    /// unbonding completes only after its delay.
    function invariant_bonds_leave_only_by_their_rules() public view {
        assertEq(handler.ghostBrokenSlashes(), 0);
        assertEq(handler.ghostEarlyUnbonds(), 0);
    }

    function invariant_reentrant_attacker_never_gets_in() public view {
        assertEq(handler.attacker().reentrySuccesses(), 0);
    }

    function invariant_reputation_stays_within_bounds() public view {
        for (uint256 i; i < handler.actorCount(); ++i) {
            assertLe(escrow.reputationOf(handler.actors(i)), 10_000);
        }
    }

    /// At the end of every run, everything must be able to leave: refund what is unfinished
    /// (a batched payout under way once its grace has passed), let everyone withdraw
    /// everything, and the escrow must be empty in every token.
    function afterInvariant() public {
        handler.drainEverything();
        for (uint256 t; t < 3; ++t) {
            assertEq(_balance(handler.tokens(t)), 0, "money stuck in the escrow");
        }
        assertEq(handler.unbalancedEndedJobs(), 0, "an ended job's books do not balance");
    }

    /// A fixed pseudo-random sequence through the handler: proves every action can succeed (a
    /// handler whose calls all failed would make the invariants above pass vacuously) and that
    /// the invariants hold on it.
    /// One bond action of the fixed sequence: bond, ask to unbond, complete an unbonding (never
    /// warping: the job actions' clock stays theirs) or slash.
    function _bondStep(uint256 r) private {
        uint256 kind = r % 4;
        if (kind == 0) handler.bond(r >> 8, r >> 16, r >> 24);
        else if (kind == 1) handler.requestUnbond(r >> 8, r >> 16, r >> 24);
        else if (kind == 2) handler.completeUnbond(r >> 8, r >> 16, false);
        else handler.slash(r >> 8, r >> 16, r >> 24);
    }

    function test_handler_reaches_every_path_in_a_fixed_sequence() public {
        for (uint256 i; i < 900; ++i) {
            uint256 r = uint256(keccak256(abi.encode(i, SEQUENCE_SALT)));
            // The job actions draw as they did before bonds existed (20 of them), so the
            // sequence still reaches every job path; one step in five also moves a bond.
            uint256 action = r % 20;
            if ((r >> 200) % 5 == 0) _bondStep(r >> 204);
            if (action == 0 || action == 14) {
                handler.createJob(r >> 8, r >> 16, r >> 24, r >> 32, (r >> 40) & 1 == 1);
            } else if (action == 1) {
                handler.markStarted(r >> 8);
            } else if (action == 2) {
                handler.complete(r >> 8, r >> 16, r >> 24, (r >> 32) & 1 == 1);
            } else if (action == 3) {
                handler.cancel(r >> 8, (r >> 16) & 1 == 1, r >> 24);
            } else if (action == 4) {
                handler.refund(r >> 8, r >> 16);
            } else if (action == 5) {
                handler.withdraw(r >> 8, r >> 16, (r >> 24) & 3 == 0);
            } else if (action == 6) {
                handler.walletWithdrawTo(r >> 8);
            } else if (action == 7) {
                handler.setFee(r >> 8);
            } else if (action == 8) {
                handler.warp(r >> 8);
            } else if (action == 9) {
                handler.abort(r >> 8, (r >> 16) & 1 == 1);
            } else if (action == 10 || action == 15) {
                handler.beginPayout(r >> 8, r >> 16, r >> 24, r >> 32, (r >> 40) & 1 == 1);
            } else if (action == 11 || action == 16) {
                handler.payBatch(r >> 8, r >> 16);
            } else if (action == 12) {
                handler.setTreasury((r >> 8) & 1 == 1);
            } else if (action == 17) {
                handler.recordProgress(r >> 8, r >> 16, (r >> 32) & 1 == 1, (r >> 33) & 3 == 0);
            } else if (action == 18 || action == 19) {
                handler.abortPaying(r >> 8, r >> 16, r >> 24, r >> 32, (r >> 48) & 1 == 1);
            } else {
                handler.refundStalledPayout(r >> 8, r >> 16);
            }
        }
        assertGt(handler.jobCount(), 0, "no job created");
        assertGt(handler.ghostCompletions(), 0, "no completion");
        assertGt(handler.ghostCancels(), 0, "no cancel");
        assertGt(handler.ghostRefunds(), 0, "no refund");
        assertGt(handler.ghostWithdrawals(), 0, "no withdrawal");
        assertGt(handler.ghostAborts(), 0, "no abort");
        assertGt(handler.ghostPayoutsBegun(), 0, "no batched payout begun");
        assertGt(handler.ghostBatches(), handler.ghostBatchedCompletions(), "no batch short of completion");
        assertGt(handler.ghostBatchedCompletions(), 0, "no batched payout completed");
        assertGt(handler.ghostPayingRefunds(), 0, "no stalled payout refunded");
        assertGt(handler.ghostFeeRefusals(), 0, "no job refused for its fee");
        assertGt(handler.attacker().reentryAttempts(), 0, "attacker never re-entered");
        assertGt(handler.ghostProgressRecords(), 0, "no progress recorded");
        assertGt(handler.ghostPaidAborts(), 0, "no abort paid the work done in one transaction");
        assertGt(handler.ghostAbortPayoutsBegun(), 0, "no batched abort begun");
        assertGt(handler.ghostBatchedAborts(), 0, "no batched abort finished");
        assertGt(handler.ghostProgressRefunds(), 0, "no refund of unpaid recorded progress");
        assertGt(handler.ghostBonds(), 0, "no bond");
        assertGt(handler.ghostSlashes(), 0, "no slash");
        assertGt(handler.ghostUnbonds(), 0, "no unbonding completed");
        invariant_bonds_leave_only_by_their_rules();
        invariant_every_ended_job_splits_its_stake_exactly();
        invariant_progress_is_monotonic_and_holds_the_refund_back();
        invariant_balance_equals_escrowed_stakes_plus_unwithdrawn_credits();
        invariant_balance_equals_deposits_minus_withdrawals();
        invariant_each_completion_credits_exactly_the_stake_once();
        invariant_no_payout_exceeds_its_pool();
        invariant_reentrant_attacker_never_gets_in();
        afterInvariant();
    }
}
