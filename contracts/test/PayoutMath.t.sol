// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {JobEscrow} from "../src/JobEscrow.sol";
import {EscrowFixture} from "./EscrowFixture.sol";

/// Fuzz tests of the payout math: conservation (payouts + fee + dust == stake) and fairness
/// (nobody gets more than their exact weighted share, nor more than 1 wei less).
contract PayoutMathTest is EscrowFixture {
    uint256 internal constant MAX_N = 24;

    struct Outcome {
        uint256[] shares;
        uint256[] weights;
        uint256 totalWeight;
        uint256 fee;
        uint256 dust;
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
        for (uint256 i; i < n; ++i) {
            paid += out.shares[i];
        }
        assertEq(paid + out.fee + out.dust, stake, "payouts + fee + dust != stake");
        assertEq(out.fee, stake * feeBps / 10_000, "fee");
        uint256 pool = stake - out.fee;
        if (out.totalWeight == 0) {
            assertEq(out.dust, pool, "nobody earned: the pool goes back");
        } else {
            assertLt(out.dust, n, "each floor loses less than 1 wei");
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
            // share <= pool * w / W exactly, and share > pool * w / W - 1.
            uint256 exactTimesW = pool * out.weights[i];
            uint256 divisor = out.totalWeight == 0 ? 1 : out.totalWeight;
            assertLe(out.shares[i] * divisor, exactTimesW, "share above its weighted part");
            assertGt((out.shares[i] + 1) * divisor, exactTimesW, "share more than 1 wei below");
        }
    }

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
}
