// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "./utils/Packing.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {EscrowFixture} from "./EscrowFixture.sol";

/// Fuzz tests of the payout math: conservation (payouts + fee + dust == stake) and fairness
/// (nobody gets more than their exact weighted share; everybody gets it to the wei, or its
/// share by quality alone plus what its bonus budget affords), for one-transaction and
/// batched payouts; reputation steps weighed by value.
contract PayoutMathTest is EscrowFixture {
    uint256 internal constant MAX_N = 24;

    struct Outcome {
        uint256[] shares;
        uint256[] weights;
        uint256 totalWeight;
        uint256 fee;
        uint256 dust;
        /// What each share should be: its weighted part, or its share by quality alone plus
        /// the bonus its budget (before the payout) affords, whichever is smaller.
        uint256[] expected;
    }

    /// The share the escrow should pay: floor(pool x w / W), unless that exceeds the share by
    /// quality alone floor(pool x q / Q) by more than the bonus budget affords.
    function _expectedShares(
        uint256 pool,
        address token,
        address[] memory contributors,
        uint16[] memory scores,
        uint256[] memory weights,
        uint256 totalWeight
    ) internal view returns (uint256[] memory expected) {
        uint256 totalQuality;
        for (uint256 i; i < scores.length; ++i) {
            totalQuality += scores[i];
        }
        expected = new uint256[](scores.length);
        uint256 unit = escrow.reputationUnitOf(token);
        for (uint256 i; i < scores.length; ++i) {
            uint256 weighted = pool * weights[i] / (totalWeight == 0 ? 1 : totalWeight);
            uint256 baseline = totalQuality == 0 ? 0 : pool * scores[i] / totalQuality;
            uint256 affordable = escrow.bonusBudgetOf(contributors[i]) * unit / escrow.BONUS_BUDGET_SCALE();
            expected[i] = weighted > baseline + affordable ? baseline + affordable : weighted;
        }
    }

    function _scores(uint256 n, uint256 seed) internal pure returns (uint16[] memory scores) {
        scores = new uint16[](n);
        for (uint256 i; i < n; ++i) {
            uint256 r = uint256(keccak256(abi.encode(seed, i)));
            // One in eight scores is 0, one in eight is the maximum: the edges get exercised.
            uint256 kind = r % 8;
            scores[i] = kind == 0 ? 0 : kind == 1 ? 10_000 : uint16((r >> 8) % 10_001);
        }
    }

    /// Gives the contributors varied reputations by completing `rounds` earlier jobs.
    function _warmUp(address[] memory contributors, uint256 seed, uint256 rounds) internal {
        for (uint256 r; r < rounds; ++r) {
            uint256 jobId = _createEth(JobEscrow.JobKind.Federated, 1 ether);
            _completeFederated(
                jobId, contributors, _scores(contributors.length, uint256(keccak256(abi.encode(seed, r))))
            );
        }
    }

    function _settle(uint256 stake, address token, address[] memory contributors, uint16[] memory scores)
        internal
        returns (Outcome memory out)
    {
        uint256 n = contributors.length;
        out.shares = new uint256[](n);
        out.weights = new uint256[](n);
        uint256[] memory before = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            out.weights[i] = uint256(scores[i]) * (escrow.REP_FLOOR() + escrow.reputationOf(contributors[i]));
            out.totalWeight += out.weights[i];
            before[i] = escrow.withdrawable(contributors[i], token);
        }
        uint256 treasuryBefore = escrow.withdrawable(treasury, token);
        uint256 requesterBefore = escrow.withdrawable(requester, token);

        uint256 jobId = token == ETH
            ? _createEth(JobEscrow.JobKind.Federated, stake)
            : _createUsdc(JobEscrow.JobKind.Federated, stake);
        uint256 pool = stake - stake * escrow.getJob(jobId).feeBps / 10_000;
        out.expected = _expectedShares(pool, token, contributors, scores, out.weights, out.totalWeight);
        _completeFederated(jobId, contributors, scores);

        for (uint256 i; i < n; ++i) {
            out.shares[i] = escrow.withdrawable(contributors[i], token) - before[i];
        }
        out.fee = escrow.withdrawable(treasury, token) - treasuryBefore;
        out.dust = escrow.withdrawable(requester, token) - requesterBefore;
    }

    function testFuzz_payouts_fee_and_dust_add_up_to_the_stake(
        uint256 stake,
        uint16 feeBps,
        uint8 n,
        uint256 seed,
        bool inToken
    ) public {
        n = uint8(bound(n, 1, MAX_N));
        feeBps = uint16(bound(feeBps, 0, escrow.MAX_FEE_BPS()));
        stake = bound(stake, 1, inToken ? 1_000_000e6 : 500 ether);
        vm.prank(feeManager);
        escrow.setFeeBps(feeBps);
        address[] memory contributors = _sortedContributors(n, seed);
        _warmUp(contributors, seed, seed % 3);

        address token = inToken ? address(usdc) : ETH;
        Outcome memory out = _settle(stake, token, contributors, _scores(n, seed));

        uint256 paid;
        uint256 expectedPaid;
        for (uint256 i; i < n; ++i) {
            paid += out.shares[i];
            expectedPaid += out.expected[i];
            assertEq(out.shares[i], out.expected[i], "share");
        }
        assertEq(paid + out.fee + out.dust, stake, "payouts + fee + dust != stake");
        assertEq(out.fee, stake * feeBps / 10_000, "fee");
        uint256 pool = stake - out.fee;
        if (out.totalWeight == 0) {
            assertEq(out.dust, pool, "nobody earned: the pool goes back");
        } else {
            assertEq(out.dust, pool - expectedPaid, "the dust is what the shares left");
        }
    }

    function testFuzz_nobody_exceeds_their_weighted_share(uint256 stake, uint8 n, uint256 seed) public {
        n = uint8(bound(n, 1, MAX_N));
        stake = bound(stake, 1, type(uint128).max);
        address[] memory contributors = _sortedContributors(n, seed);
        _warmUp(contributors, seed, 1 + seed % 3);
        usdc.mint(requester, stake);

        Outcome memory out = _settle(stake, address(usdc), contributors, _scores(n, seed));
        uint256 pool = stake - out.fee;
        for (uint256 i; i < n; ++i) {
            // share <= pool * w / W exactly; a share below it by 1 wei or more is one whose
            // bonus its budget could not pay (in USDC, with no reputation unit, any bonus).
            uint256 exactTimesW = pool * out.weights[i];
            uint256 divisor = out.totalWeight == 0 ? 1 : out.totalWeight;
            assertLe(out.shares[i] * divisor, exactTimesW, "share above its weighted part");
            assertEq(out.shares[i], out.expected[i], "share");
        }
    }

    /// At a full step (a share worth at least the reputation unit, here 0.975 ETH against
    /// 0.01 ETH) the v2 rule rep + (q - rep) x 2_500 / 10_000 is v1's (3 rep + q) / 4 exactly.
    function testFuzz_reputation_moves_a_quarter_toward_the_score(uint16 first, uint16 second) public {
        first = uint16(bound(first, 0, 10_000));
        second = uint16(bound(second, 0, 10_000));
        address[] memory one = _sortedContributors(1, first);
        uint16[] memory q = new uint16[](1);
        q[0] = first;
        _completeFederated(_createEth(JobEscrow.JobKind.Federated, 1 ether), one, q);
        uint256 rep1 = escrow.reputationOf(one[0]);
        assertEq(rep1, uint256(first) / 4);

        q[0] = second;
        _completeFederated(_createEth(JobEscrow.JobKind.Federated, 1 ether), one, q);
        uint256 rep2 = escrow.reputationOf(one[0]);
        assertEq(rep2, (3 * rep1 + second) / 4);
        // Between the old value and the score (rounding down by under 1), never above 10_000.
        uint256 lo = rep1 < second ? rep1 : second;
        uint256 hi = rep1 < second ? second : rep1;
        assertGe(rep2 + 1, lo);
        assertLe(rep2, hi);
        if (second == 0 && rep1 > 0) assertLt(rep2, rep1, "a zero score lowers reputation");
    }

    function testFuzz_credits_survive_switching_tokens(uint96 ethStake, uint96 tokenStake, uint8 order) public {
        ethStake = uint96(bound(ethStake, 1, 100 ether));
        tokenStake = uint96(bound(tokenStake, 1, 1_000_000e6));
        address[] memory one = _sortedContributors(1, order);
        uint16[] memory q = new uint16[](1);
        q[0] = 10_000;
        usdc.mint(requester, 4 * uint256(tokenStake));
        uint256 expectedEth;
        uint256 expectedToken;
        for (uint256 k; k < 4; ++k) {
            bool eth = ((order >> k) & 1) == 1;
            uint256 stake = eth ? ethStake : tokenStake;
            uint256 jobId =
                eth ? _createEth(JobEscrow.JobKind.Federated, stake) : _createUsdc(JobEscrow.JobKind.Federated, stake);
            _completeFederated(jobId, one, q);
            uint256 pool = stake - stake * FEE_BPS / 10_000;
            if (eth) expectedEth += pool;
            else expectedToken += pool;
        }
        assertEq(escrow.withdrawable(one[0], ETH), expectedEth);
        assertEq(escrow.withdrawable(one[0], address(usdc)), expectedToken);
        vm.startPrank(one[0]);
        if (expectedEth > 0) escrow.withdraw(ETH);
        if (expectedToken > 0) escrow.withdraw(address(usdc));
        vm.stopPrank();
        assertEq(one[0].balance, expectedEth);
        assertEq(usdc.balanceOf(one[0]), expectedToken);
    }

    function testFuzz_reputation_step_scales_with_the_share(uint256 stake, uint16 first, uint16 second) public {
        first = uint16(bound(first, 0, 10_000));
        second = uint16(bound(second, 0, 10_000));
        stake = bound(stake, 1, 0.05 ether);
        address contributor = _sortedContributors(1, stake)[0];
        _completeLora(_createEth(JobEscrow.JobKind.LoRA, 1 ether), contributor, first);
        uint256 rep1 = escrow.reputationOf(contributor);

        uint256 pool = stake - stake * FEE_BPS / 10_000;
        uint256 unit = escrow.DEFAULT_ETH_REPUTATION_UNIT();
        uint256 step = pool >= unit ? 2_500 : 2_500 * pool / unit;
        assertEq(escrow.reputationStepOf(ETH, pool, 1), step);
        _completeLora(_createEth(JobEscrow.JobKind.LoRA, stake), contributor, second);
        uint256 rep2 = escrow.reputationOf(contributor);
        assertEq(rep2, (rep1 * (10_000 - step) + uint256(second) * step) / 10_000);
        // Never further from the old value than the step allows, rounding down by under 1.
        uint256 moved = rep2 > rep1 ? rep2 - rep1 : rep1 - rep2;
        uint256 gap = second > rep1 ? second - rep1 : rep1 - second;
        assertLe(moved, gap * step / 10_000 + 1);
    }

    /// A requester paying itself (a second address) `jobs` LoRA jobs of `stake` each gains no
    /// more reputation than the jobs' steps add up to, and no more than a real contributor of
    /// one job worth all of them together, as long as that job stays under the reputation unit
    /// (above it the single job's step is capped at 25%, while the EMA of many capped steps is
    /// not: there, see EscrowV2Test.test_farming_a_high_reputation_costs_the_fee_on_real_value).
    function testFuzz_self_dealing_buys_no_more_reputation_than_real_value(uint256 stake, uint8 jobs) public {
        uint256 k = bound(jobs, 1, 30);
        stake = bound(stake, 1, escrow.DEFAULT_ETH_REPUTATION_UNIT() / k);
        address sock = makeAddr("sockPuppet");
        address real = makeAddr("realContributor");
        for (uint256 i; i < k; ++i) {
            _completeLora(_createEth(JobEscrow.JobKind.LoRA, stake), sock, 10_000);
        }
        uint256 farmerFees = escrow.withdrawable(treasury, ETH);
        _completeLora(_createEth(JobEscrow.JobKind.LoRA, k * stake), real, 10_000);
        uint256 realFee = escrow.withdrawable(treasury, ETH) - farmerFees;

        uint256 farmed = escrow.reputationOf(sock);
        uint256 stepEach = escrow.reputationStepOf(ETH, stake - stake * FEE_BPS / 10_000, 1);
        assertLe(farmed, k * stepEach, "more than the steps paid for");
        assertLe(farmed, escrow.reputationOf(real), "the farmer out-earned real value");
        assertGe(farmerFees + k, realFee, "the farmer paid (within rounding) the same fee");
    }

    /// Pays a started job in batches of `batchSize`, dividing by `announced` and carrying the
    /// reputations of the start; returns what the contributors, the treasury and the requester
    /// were credited, and whether a batch was refused (the sums did not add up).
    function _payBatchedWith(
        uint256 jobId,
        address[] memory contributors,
        uint16[] memory scores,
        uint256 announced,
        uint256 batchSize
    ) internal returns (Batched memory out) {
        uint256 n = contributors.length;
        uint256[] memory before = new uint256[](n + 2);
        for (uint256 i; i < n; ++i) {
            before[i] = escrow.withdrawable(contributors[i], ETH);
        }
        before[n] = escrow.withdrawable(treasury, ETH);
        before[n + 1] = escrow.withdrawable(requester, ETH);
        uint16[] memory reputations = escrow.reputationsOf(contributors);
        vm.prank(validator);
        escrow.beginFederatedPayout(jobId, "a", "m", uint32(n), uint64(announced), Packing.sum(scores));
        for (uint256 from; from < n; from += batchSize) {
            uint256 to = from + batchSize < n ? from + batchSize : n;
            vm.prank(validator);
            try escrow.payFederatedBatch(
                jobId,
                _slice(contributors, from, to),
                _slice(scores, from, to),
                Packing.packed(_slice(reputations, from, to))
            ) {}
            catch {
                out.refused = true;
                break;
            }
        }
        for (uint256 i; i < n; ++i) {
            out.paid += escrow.withdrawable(contributors[i], ETH) - before[i];
        }
        out.fee = escrow.withdrawable(treasury, ETH) - before[n];
        out.dust = escrow.withdrawable(requester, ETH) - before[n + 1];
    }

    struct Batched {
        uint256 paid;
        uint256 fee;
        uint256 dust;
        bool refused;
    }

    function testFuzz_batched_payout_pays_the_announced_weights_or_nothing_more(
        uint256 stake,
        uint8 n,
        uint256 seed,
        uint256 announced,
        uint8 batchSize
    ) public {
        n = uint8(bound(n, 1, MAX_N));
        batchSize = uint8(bound(batchSize, 1, n));
        stake = bound(stake, 1, 500 ether);
        address[] memory contributors = _sortedContributors(n, seed);
        _warmUp(contributors, seed, seed % 3);
        uint16[] memory scores = _scores(n, seed);

        uint256 jobId = _createEth(JobEscrow.JobKind.Federated, stake);
        _start(jobId);
        uint256 trueWeight = escrow.weigh(jobId, contributors, scores);
        // Half the runs announce the true divisor, the others anything up to three times it:
        // a validator's mistake must not let the contract pay out more than the pool, and
        // batches that do not add up to the announcement are refused by the last batch.
        if (seed % 2 == 0) announced = bound(announced, 0, 3 * trueWeight);
        else announced = trueWeight;
        Batched memory out = _payBatchedWith(jobId, contributors, scores, announced, batchSize);

        assertLe(out.paid, stake - stake * FEE_BPS / 10_000, "paid more than the pool");
        assertEq(escrow.payoutOf(jobId).paid, out.paid);
        assertEq(out.refused, announced != trueWeight, "refused exactly the batches that do not add up");
        if (out.refused) {
            assertEq(uint8(escrow.getJob(jobId).status), uint8(JobEscrow.JobStatus.Paying));
            assertEq(out.fee + out.dust, 0, "no fee or dust before the last batch");
        } else {
            assertEq(out.fee, stake * FEE_BPS / 10_000, "fee");
            assertEq(out.paid + out.fee + out.dust, stake, "payouts + fee + dust != stake");
        }
    }
}
