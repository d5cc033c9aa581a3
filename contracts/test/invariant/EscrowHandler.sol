// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Cheats} from "../utils/Cheats.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {MockERC20} from "../mocks/MockERC20.sol";
import {FeeOnTransferToken} from "../mocks/FeeOnTransferToken.sol";
import {RevertingRecipient} from "../mocks/RevertingRecipient.sol";
import {ReentrantAttacker} from "../mocks/ReentrantAttacker.sol";

/// Drives random sequences of create / start / complete / batched payout (begin, batches) /
/// abort / cancel / refund / withdraw / fee and treasury changes by random actors (plain
/// accounts, a contract that refuses ETH, a reentrant attacker) in ETH, a plain ERC-20 and a
/// fee-on-transfer token. Reverts are expected (wrong caller, wrong state, past the deadline)
/// and swallowed; what succeeds is recorded in ghost variables the invariants check.
contract EscrowHandler is Cheats {
    JobEscrow public immutable escrow;
    MockERC20 public immutable usdc;
    FeeOnTransferToken public immutable fot;
    RevertingRecipient public immutable wallet;
    ReentrantAttacker public immutable attacker;
    address public immutable admin;
    address public immutable validator;
    address public immutable feeManager;
    address public immutable treasury;
    /// The treasury `setTreasury` alternates with; jobs keep the one they were created under.
    address public constant OTHER_TREASURY = address(0x7EA5);

    /// Sorted by address, so any subset in order is a valid contributor list.
    address[] public actors;
    address[3] public tokens;
    uint256[] public jobIds;
    /// A batched payout's contributors and scores, fixed when it began; batches take them in order.
    mapping(uint256 jobId => address[]) internal _planned;
    mapping(uint256 jobId => uint16[]) internal _plannedScores;
    /// What a batched payout has credited so far, fee and dust included once it completes.
    mapping(uint256 jobId => uint256) public ghostPayoutCredited;

    mapping(address token => uint256) public ghostDeposited;
    mapping(address token => uint256) public ghostWithdrawn;
    uint256 public ghostFeeOnTransferJobs;
    /// Completions, batches, aborts and refunds that credited other than what they owed (the
    /// stake, once, over a whole payout; what a batch paid; stake - paid on a stalled payout),
    /// finished a finished job, or paid a batch twice.
    uint256 public ghostBrokenCompletions;
    uint256 public ghostCompletions;
    uint256 public ghostCancels;
    uint256 public ghostRefunds;
    uint256 public ghostWithdrawals;
    uint256 public ghostAborts;
    uint256 public ghostPayoutsBegun;
    uint256 public ghostBatches;
    uint256 public ghostBatchedCompletions;
    /// Refunds of a batched payout that stalled (after deadline + grace).
    uint256 public ghostPayingRefunds;
    /// createJob refused because the fee was above the requester's maximum.
    uint256 public ghostFeeRefusals;

    constructor(
        JobEscrow escrow_,
        MockERC20 usdc_,
        FeeOnTransferToken fot_,
        address admin_,
        address validator_,
        address feeManager_,
        address treasury_
    ) {
        escrow = escrow_;
        usdc = usdc_;
        fot = fot_;
        admin = admin_;
        validator = validator_;
        feeManager = feeManager_;
        treasury = treasury_;
        wallet = new RevertingRecipient(escrow_);
        attacker = new ReentrantAttacker(escrow_);
        tokens = [address(0), address(usdc_), address(fot_)];
        actors.push(address(0xA11CE));
        actors.push(address(0xB0B));
        actors.push(address(0xCA401));
        actors.push(address(0xD0D0));
        actors.push(address(wallet));
        actors.push(address(attacker));
        _sortActors();
    }

    function _sortActors() private {
        for (uint256 i = 1; i < actors.length; ++i) {
            address key = actors[i];
            uint256 j = i;
            while (j > 0 && actors[j - 1] > key) {
                actors[j] = actors[j - 1];
                --j;
            }
            actors[j] = key;
        }
    }

    function actorCount() external view returns (uint256) {
        return actors.length;
    }

    function jobCount() external view returns (uint256) {
        return jobIds.length;
    }

    function _balance(address token) private view returns (uint256) {
        return token == address(0) ? address(escrow).balance : IERC20(token).balanceOf(address(escrow));
    }

    function _job(uint256 seed) private view returns (uint256 jobId, bool found) {
        if (jobIds.length == 0) return (0, false);
        return (jobIds[seed % jobIds.length], true);
    }

    /// Sum of every credit in `token` anyone could hold: actors and both treasuries.
    function totalCredited(address token) public view returns (uint256 sum) {
        for (uint256 i; i < actors.length; ++i) {
            sum += escrow.withdrawable(actors[i], token);
        }
        sum += escrow.withdrawable(treasury, token) + escrow.withdrawable(OTHER_TREASURY, token);
    }

    /// What unfinished jobs still hold: the stake of Open and Started jobs, stake - paid so far
    /// of jobs whose batched payout is under way.
    function totalEscrowed(address token) public view returns (uint256 sum) {
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.Job memory job = escrow.getJob(jobIds[i]);
            if (job.token != token) continue;
            if (job.status == JobEscrow.JobStatus.Open || job.status == JobEscrow.JobStatus.Started) {
                sum += job.stake;
            } else if (job.status == JobEscrow.JobStatus.Paying) {
                sum += job.stake - escrow.payoutOf(jobIds[i]).paid;
            }
        }
    }

    /// Federated jobs whose payout (batched or not) paid contributors more than the pool.
    function overpaidJobs() external view returns (uint256 count) {
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.Job memory job = escrow.getJob(jobIds[i]);
            uint256 pool = job.stake - job.stake * job.feeBps / 10_000;
            if (escrow.payoutOf(jobIds[i]).paid > pool) ++count;
        }
    }

    function _live(JobEscrow.JobStatus status) private pure returns (bool) {
        return status == JobEscrow.JobStatus.Open || status == JobEscrow.JobStatus.Started;
    }

    // ------------------------------------------------------------------ actions

    function createJob(uint256 actorSeed, uint256 tokenSeed, uint256 stake, uint256 duration, bool federated) external {
        address actor = actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        stake = bound(stake, 1, 1e24);
        // One creation in four names a random maximum fee, which may be below today's fee.
        uint16 maxFee = (duration >> 128) % 4 == 0 ? uint16(bound(duration >> 130, 0, 1_000)) : 1_000;
        duration = bound(duration, 1, 7 days);
        if (token == address(0)) {
            vm.deal(actor, actor.balance + stake);
        } else {
            MockERC20(token).mint(actor, stake);
            vm.prank(actor);
            IERC20(token).approve(address(escrow), stake);
        }
        uint256 before = _balance(token);
        JobEscrow.JobKind kind = federated ? JobEscrow.JobKind.Federated : JobEscrow.JobKind.LoRA;
        vm.prank(actor);
        try escrow.createJob{value: token == address(0) ? stake : 0}(
            token, stake, "bafy-spec", uint64(block.timestamp + duration), kind, maxFee
        ) returns (
            uint256 jobId
        ) {
            jobIds.push(jobId);
            // The attacker re-enters cancel/refund on its own latest job when paid.
            if (actor == address(attacker)) attacker.setTargetJob(jobId);
            ghostDeposited[token] += _balance(token) - before;
            if (token == address(fot)) ghostFeeOnTransferJobs += 1;
        } catch (bytes memory reason) {
            if (bytes4(reason) == JobEscrow.FeeAboveMaximum.selector) ghostFeeRefusals += 1;
        }
    }

    function markStarted(uint256 jobSeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        vm.prank(validator);
        try escrow.markStarted(jobId) {} catch {}
    }

    /// Completes a job in one transaction; with `startFirst` the validator marks it started
    /// just before (completion needs a Started job).
    function complete(uint256 jobSeed, uint256 subsetSeed, uint256 qualitySeed, bool startFirst) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        if (startFirst) {
            vm.prank(validator);
            try escrow.markStarted(jobId) {} catch {}
        }
        JobEscrow.Job memory job = escrow.getJob(jobId);
        bool wasStarted = job.status == JobEscrow.JobStatus.Started;
        uint256 creditedBefore = totalCredited(job.token);

        bool ok;
        if (job.kind == JobEscrow.JobKind.LoRA) {
            address contributor = actors[subsetSeed % actors.length];
            // The requester cannot be its own contributor: take the next actor instead.
            if (contributor == job.requester) contributor = actors[(subsetSeed % actors.length + 1) % actors.length];
            uint16 quality = uint16(qualitySeed % 10_001);
            vm.prank(validator);
            try escrow.completeJob(jobId, "bafy-adapter", contributor, quality) {
                ok = true;
            } catch {}
        } else {
            (address[] memory contributors, uint16[] memory scores) = _subset(subsetSeed, qualitySeed, job.requester);
            if (contributors.length == 0) return;
            vm.prank(validator);
            try escrow.completeFederatedJob(jobId, "bafy-adapter", "bafy-manifest", contributors, scores) {
                ok = true;
            } catch {}
        }
        if (!ok) return;
        ghostCompletions += 1;
        if (!wasStarted || totalCredited(job.token) - creditedBefore != job.stake) ghostBrokenCompletions += 1;
    }

    /// A subset of the actors (sorted, as the actors are), never `requester`.
    function _subset(uint256 subsetSeed, uint256 qualitySeed, address requester)
        private
        view
        returns (address[] memory contributors, uint16[] memory scores)
    {
        uint256 mask = subsetSeed % (1 << actors.length);
        if (mask == 0) mask = 1;
        uint256 n;
        for (uint256 i; i < actors.length; ++i) {
            if (mask & (1 << i) != 0 && actors[i] != requester) ++n;
        }
        contributors = new address[](n);
        scores = new uint16[](n);
        uint256 k;
        for (uint256 i; i < actors.length; ++i) {
            if (mask & (1 << i) == 0 || actors[i] == requester) continue;
            contributors[k] = actors[i];
            scores[k] = uint16(uint256(keccak256(abi.encode(qualitySeed, i))) % 10_001);
            ++k;
        }
    }

    /// Begins a batched payout of a federated job (the first Open or Started one at or after the
    /// seed's whose deadline has not passed) to a random subset of the actors. The divisor is
    /// what `weigh` reports, or (one time in four each) half or twice that, so shares capped by
    /// the pool and dust left by an overstated divisor are both exercised.
    function beginPayout(uint256 jobSeed, uint256 subsetSeed, uint256 qualitySeed, uint256 skew, bool startFirst)
        external
    {
        uint256 jobId;
        JobEscrow.Job memory job;
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 candidate = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            job = escrow.getJob(candidate);
            if (job.kind == JobEscrow.JobKind.Federated && _live(job.status) && block.timestamp <= job.deadline) {
                jobId = candidate;
                break;
            }
        }
        if (jobId == 0) return;
        if (startFirst) {
            vm.prank(validator);
            try escrow.markStarted(jobId) {} catch {}
        }
        (address[] memory contributors, uint16[] memory scores) = _subset(subsetSeed, qualitySeed, job.requester);
        if (contributors.length == 0) return;
        uint256 totalWeight = escrow.weigh(jobId, contributors, scores);
        if (skew % 4 == 0) totalWeight /= 2;
        else if (skew % 4 == 1) totalWeight *= 2;
        vm.prank(validator);
        try escrow.beginFederatedPayout(
            jobId, "bafy-adapter", "bafy-manifest", uint32(contributors.length), uint64(totalWeight)
        ) {
            _planned[jobId] = contributors;
            _plannedScores[jobId] = scores;
            ghostPayoutsBegun += 1;
        } catch {}
    }

    /// Pays the next 1 to 3 planned contributors of a payout under way (the first Paying job
    /// at or after the seed's), then sends the same batch again, which must revert.
    function payBatch(uint256 jobSeed, uint256 sizeSeed) external {
        if (jobIds.length == 0) return;
        uint256 jobId;
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 candidate = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            if (escrow.getJob(candidate).status == JobEscrow.JobStatus.Paying) {
                jobId = candidate;
                break;
            }
        }
        if (jobId == 0) return;
        JobEscrow.Job memory job = escrow.getJob(jobId);
        uint256 from = escrow.payoutOf(jobId).paidCount;
        uint256 to = from + 1 + sizeSeed % 3;
        if (to > _planned[jobId].length) to = _planned[jobId].length;
        address[] memory contributors = new address[](to - from);
        uint16[] memory scores = new uint16[](to - from);
        for (uint256 i = from; i < to; ++i) {
            contributors[i - from] = _planned[jobId][i];
            scores[i - from] = _plannedScores[jobId][i];
        }
        uint256 creditedBefore = totalCredited(job.token);
        uint256 paidBefore = escrow.payoutOf(jobId).paid;
        vm.prank(validator);
        try escrow.payFederatedBatch(jobId, contributors, scores) {}
        catch {
            return;
        }
        ghostBatches += 1;
        uint256 credited = totalCredited(job.token) - creditedBefore;
        ghostPayoutCredited[jobId] += credited;
        if (escrow.getJob(jobId).status == JobEscrow.JobStatus.Completed) {
            ghostBatchedCompletions += 1;
            ghostCompletions += 1;
            // The last batch: the whole payout, fee and dust included, credited the stake.
            if (ghostPayoutCredited[jobId] != job.stake) ghostBrokenCompletions += 1;
        } else if (credited != escrow.payoutOf(jobId).paid - paidBefore) {
            ghostBrokenCompletions += 1;
        }
        vm.prank(validator);
        try escrow.payFederatedBatch(jobId, contributors, scores) {
            ghostBrokenCompletions += 1;
        } catch {}
    }

    /// The validator ends a job early; with `startFirst` it marks it started first.
    function abort(uint256 jobSeed, bool startFirst) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        if (startFirst) {
            vm.prank(validator);
            try escrow.markStarted(jobId) {} catch {}
        }
        JobEscrow.Job memory job = escrow.getJob(jobId);
        uint256 creditedBefore = totalCredited(job.token);
        uint256 requesterBefore = escrow.withdrawable(job.requester, job.token);
        vm.prank(validator);
        try escrow.abortJob(jobId, "aborted by the handler") {
            ghostAborts += 1;
            if (
                !_live(job.status) || totalCredited(job.token) - creditedBefore != job.stake
                    || escrow.withdrawable(job.requester, job.token) - requesterBefore != job.stake
            ) ghostBrokenCompletions += 1;
        } catch {}
    }

    function cancel(uint256 jobSeed, bool byRequester, uint256 actorSeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        address caller = byRequester ? escrow.getJob(jobId).requester : actors[actorSeed % actors.length];
        vm.prank(caller);
        try escrow.cancel(jobId) {
            ghostCancels += 1;
        } catch {}
    }

    function refund(uint256 jobSeed, uint256 actorSeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        _refund(jobId, actors[actorSeed % actors.length]);
    }

    /// Refund by `caller`, checked: the requester is credited the stake, or stake - paid of a
    /// stalled batched payout.
    function _refund(uint256 jobId, address caller) private {
        JobEscrow.Job memory job = escrow.getJob(jobId);
        uint256 owed = job.stake;
        if (job.status == JobEscrow.JobStatus.Paying) owed -= escrow.payoutOf(jobId).paid;
        uint256 creditedBefore = totalCredited(job.token);
        vm.prank(caller);
        try escrow.refund(jobId) {
            ghostRefunds += 1;
            if (job.status == JobEscrow.JobStatus.Paying) ghostPayingRefunds += 1;
            if (totalCredited(job.token) - creditedBefore != owed) ghostBrokenCompletions += 1;
        } catch {}
    }

    function withdraw(uint256 actorSeed, uint256 tokenSeed, bool asTreasury) external {
        address who = asTreasury ? treasury : actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        uint256 before = _balance(token);
        vm.prank(who);
        try escrow.withdraw(token) {
            ghostWithdrawn[token] += before - _balance(token);
            ghostWithdrawals += 1;
        } catch {}
    }

    /// The ETH-refusing wallet's way out: pull to another address.
    function walletWithdrawTo(uint256 tokenSeed) external {
        address token = tokens[tokenSeed % tokens.length];
        uint256 before = _balance(token);
        try wallet.withdrawTo(token, payable(address(0xC01D))) {
            ghostWithdrawn[token] += before - _balance(token);
            ghostWithdrawals += 1;
        } catch {}
    }

    function setFee(uint256 feeBps) external {
        vm.prank(feeManager);
        escrow.setFeeBps(uint16(bound(feeBps, 0, 1_000)));
    }

    /// The admin moves the treasury; jobs already created keep theirs.
    function setTreasury(bool other) external {
        vm.prank(admin);
        escrow.setTreasury(other ? OTHER_TREASURY : treasury);
    }

    function warp(uint256 seconds_) external {
        vm.warp(block.timestamp + bound(seconds_, 0, 3 days));
    }

    /// A batched payout stalls: jump just past its grace (the first Paying job at or after the
    /// seed's) and refund it, so that path is reachable within a run's depth.
    function refundStalledPayout(uint256 jobSeed, uint256 actorSeed) external {
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 jobId = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            JobEscrow.Job memory job = escrow.getJob(jobId);
            if (job.status != JobEscrow.JobStatus.Paying) continue;
            uint256 until = uint256(job.deadline) + escrow.PAYOUT_GRACE() + 1;
            if (until > block.timestamp) vm.warp(until);
            _refund(jobId, actors[actorSeed % actors.length]);
            return;
        }
    }

    /// End of a run: refund every unfinished job (batched payouts under way included, past their
    /// grace), then every account withdraws every token (the ETH-refusing wallet through
    /// withdrawTo). Not a fuzzed action: the invariant test calls it from afterInvariant.
    function drainEverything() external {
        vm.warp(block.timestamp + 8 days + escrow.PAYOUT_GRACE());
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.JobStatus status = escrow.getJob(jobIds[i]).status;
            if (_live(status) || status == JobEscrow.JobStatus.Paying) {
                escrow.refund(jobIds[i]);
            }
        }
        for (uint256 t; t < tokens.length; ++t) {
            address token = tokens[t];
            for (uint256 i; i <= actors.length + 1; ++i) {
                address who = i == actors.length ? treasury : i == actors.length + 1 ? OTHER_TREASURY : actors[i];
                if (escrow.withdrawable(who, token) == 0) continue;
                if (who == address(wallet)) {
                    wallet.withdrawTo(token, payable(address(0xC01D)));
                } else {
                    vm.prank(who);
                    escrow.withdraw(token);
                }
            }
        }
    }
}
