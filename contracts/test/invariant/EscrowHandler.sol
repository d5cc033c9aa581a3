// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "../utils/Packing.sol";
import {Cheats} from "../utils/Cheats.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {MockERC20} from "../mocks/MockERC20.sol";
import {FeeOnTransferToken} from "../mocks/FeeOnTransferToken.sol";
import {RevertingRecipient} from "../mocks/RevertingRecipient.sol";
import {ReentrantAttacker} from "../mocks/ReentrantAttacker.sol";

/// Drives random sequences of create / start / record progress / complete / batched payout
/// (begin, batches) / abort (whole refund, or paying the work done in one transaction or in
/// batches) / cancel / refund / withdraw / fee and treasury changes by random actors (plain
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
    /// The reputations when each payout began: what its batches carry.
    mapping(uint256 jobId => uint16[]) internal _plannedReputations;
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
    /// recordProgress calls that took, and ones that lowered the recorded value (must be 0).
    uint256 public ghostProgressRecords;
    uint256 public ghostProgressDecreases;
    /// Aborts that paid the work done: in one transaction, begun in batches, and batched ones
    /// that finished.
    uint256 public ghostPaidAborts;
    uint256 public ghostAbortPayoutsBegun;
    uint256 public ghostBatchedAborts;
    /// Deadline refunds of a Started job with recorded progress (only past the grace).
    uint256 public ghostProgressRefunds;
    /// Refunds that landed before they were allowed (a Started job with progress inside the
    /// grace): must stay 0.
    uint256 public ghostEarlyRefunds;

    /// Per job, where its stake went: to contributors, to the treasury as the fee, back to the
    /// requester. Every action that credits anything books it here by whom it credited.
    mapping(uint256 jobId => uint256) public ghostPaidOf;
    mapping(uint256 jobId => uint256) public ghostFeeOf;
    mapping(uint256 jobId => uint256) public ghostRefundedOf;
    /// The share of the stake the payout that ended the job paid out (BPS for a completion,
    /// less for an abort paying completed rounds); 0 when no payout ended it.
    mapping(uint256 jobId => uint256) public ghostEarnedOf;
    /// Slashes that took more than the bond held, took twice for one job and worker, or
    /// credited the requester other than what they took: must stay 0.
    uint256 public ghostBrokenSlashes;
    /// Unbondings completed before their unlock time: must stay 0.
    uint256 public ghostEarlyUnbonds;
    uint256 public ghostBonds;
    uint256 public ghostSlashes;
    uint256 public ghostUnbonds;

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

    /// Every actor's bond in `token`, active and unbonding.
    function totalBonded(address token) public view returns (uint256 sum) {
        for (uint256 i; i < actors.length; ++i) {
            JobEscrow.Bond memory b = escrow.bondOf(actors[i], token);
            sum += uint256(b.active) + b.unbonding;
        }
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
            JobEscrow.Payout memory payout = escrow.payoutOf(jobIds[i]);
            uint256 earned = job.stake * (payout.earnedBps == 0 ? 10_000 : payout.earnedBps) / 10_000;
            uint256 pool = earned - earned * job.feeBps / 10_000;
            if (payout.paid > pool) ++count;
        }
    }

    function _live(JobEscrow.JobStatus status) private pure returns (bool) {
        return status == JobEscrow.JobStatus.Open || status == JobEscrow.JobStatus.Started;
    }

    /// Credits in the job's token of everyone, of its requester and of its treasury.
    struct Books {
        uint256 all;
        uint256 requester;
        uint256 treasury;
    }

    function _books(JobEscrow.Job memory job) private view returns (Books memory b) {
        b.all = totalCredited(job.token);
        b.requester = escrow.withdrawable(job.requester, job.token);
        b.treasury = escrow.withdrawable(job.treasury, job.token);
    }

    /// Books what happened since `before` to job `jobId`: what the treasury gained is fee, what
    /// the requester gained went back, the rest went to contributors (neither the requester nor
    /// a treasury can be one). Returns the total credited.
    function _book(uint256 jobId, JobEscrow.Job memory job, Books memory before) private returns (uint256 credited) {
        Books memory after_ = _books(job);
        credited = after_.all - before.all;
        uint256 fee = after_.treasury - before.treasury;
        uint256 back = after_.requester - before.requester;
        ghostFeeOf[jobId] += fee;
        ghostRefundedOf[jobId] += back;
        ghostPaidOf[jobId] += credited - fee - back;
    }

    /// Ended jobs whose books do not balance: stake != paid + fee + refunded, or, for a job
    /// ended by a payout of `earned` = stake x earnedBps / BPS, a fee other than the rate on
    /// `earned`, contributors paid more than `earned` - fee, or a final status other than
    /// Completed (all earned) or Aborted (part earned).
    function unbalancedEndedJobs() external view returns (uint256 count) {
        for (uint256 i; i < jobIds.length; ++i) {
            uint256 jobId = jobIds[i];
            JobEscrow.Job memory job = escrow.getJob(jobId);
            if (_live(job.status) || job.status == JobEscrow.JobStatus.Paying) continue;
            uint256 paid = ghostPaidOf[jobId];
            uint256 fee = ghostFeeOf[jobId];
            if (paid + fee + ghostRefundedOf[jobId] != job.stake) {
                ++count;
                continue;
            }
            uint256 earnedBps = ghostEarnedOf[jobId];
            if (earnedBps == 0) {
                // Cancel, refund, plain abort: no fee; a stalled payout's refund leaves what
                // its batches paid with the contributors.
                if (fee != 0 || (paid != 0 && job.status != JobEscrow.JobStatus.Refunded)) ++count;
                continue;
            }
            uint256 earned = job.stake * earnedBps / 10_000;
            uint256 expectedFee = earned * job.feeBps / 10_000;
            JobEscrow.JobStatus expected =
                earnedBps == 10_000 ? JobEscrow.JobStatus.Completed : JobEscrow.JobStatus.Aborted;
            if (fee != expectedFee || paid > earned - expectedFee || job.status != expected) ++count;
        }
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
        Books memory before = _books(job);

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
        ghostEarnedOf[jobId] = 10_000;
        if (!wasStarted || _book(jobId, job, before) != job.stake) ghostBrokenCompletions += 1;
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
            jobId,
            "bafy-adapter",
            "bafy-manifest",
            uint32(contributors.length),
            uint64(totalWeight),
            Packing.sum(scores)
        ) {
            _planned[jobId] = contributors;
            _plannedScores[jobId] = scores;
            _plannedReputations[jobId] = escrow.reputationsOf(contributors);
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
        uint16[] memory reputations = new uint16[](to - from);
        for (uint256 i = from; i < to; ++i) {
            contributors[i - from] = _planned[jobId][i];
            scores[i - from] = _plannedScores[jobId][i];
            reputations[i - from] = _plannedReputations[jobId][i];
        }
        Books memory before = _books(job);
        uint256 paidBefore = escrow.payoutOf(jobId).paid;
        vm.prank(validator);
        try escrow.payFederatedBatch(jobId, contributors, scores, Packing.packed(reputations)) {}
        catch {
            return;
        }
        ghostBatches += 1;
        uint256 credited = _book(jobId, job, before);
        ghostPayoutCredited[jobId] += credited;
        JobEscrow.JobStatus status = escrow.getJob(jobId).status;
        if (status == JobEscrow.JobStatus.Completed || status == JobEscrow.JobStatus.Aborted) {
            uint256 earnedBps = escrow.payoutOf(jobId).earnedBps;
            ghostEarnedOf[jobId] = earnedBps;
            if (earnedBps == 10_000) {
                ghostBatchedCompletions += 1;
                ghostCompletions += 1;
            } else {
                ghostBatchedAborts += 1;
            }
            // The last batch: the whole payout, fee, dust and unearned part included,
            // credited the stake.
            if (ghostPayoutCredited[jobId] != job.stake) ghostBrokenCompletions += 1;
        } else if (credited != escrow.payoutOf(jobId).paid - paidBefore) {
            ghostBrokenCompletions += 1;
        }
        vm.prank(validator);
        try escrow.payFederatedBatch(jobId, contributors, scores, Packing.packed(reputations)) {
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
        Books memory before = _books(job);
        vm.prank(validator);
        try escrow.abortJob(jobId, "aborted by the handler") {
            ghostAborts += 1;
            if (
                !_live(job.status) || _book(jobId, job, before) != job.stake
                    || escrow.withdrawable(job.requester, job.token) - before.requester != job.stake
            ) ghostBrokenCompletions += 1;
        } catch {}
    }

    /// The validator records that a federated job's completed rounds earned a random share (the
    /// first live federated job at or after the seed's, or with `anyJob` the seed's job whatever
    /// it is; marking it started first with `startFirst`). A lower value than recorded must
    /// revert.
    function recordProgress(uint256 jobSeed, uint256 earnedSeed, bool startFirst, bool anyJob) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        for (uint256 k; k < jobIds.length && !anyJob; ++k) {
            uint256 candidate = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            JobEscrow.Job memory job = escrow.getJob(candidate);
            if (job.kind == JobEscrow.JobKind.Federated && _live(job.status) && block.timestamp <= job.deadline) {
                jobId = candidate;
                break;
            }
        }
        if (startFirst) {
            vm.prank(validator);
            try escrow.markStarted(jobId) {} catch {}
        }
        uint256 recorded = escrow.getJob(jobId).earnedBps;
        uint16 earnedBps = uint16(bound(earnedSeed, 1, 10_000));
        vm.prank(validator);
        try escrow.recordProgress(jobId, earnedBps) {
            ghostProgressRecords += 1;
            if (earnedBps < recorded) ghostProgressDecreases += 1;
        } catch {}
    }

    /// The validator ends a Started federated job (the first at or after the seed's still in its
    /// window: up to the deadline, or the grace past it with progress recorded; an Open one is
    /// marked started first) paying a random
    /// earned share (the recorded progress, or a random one) of it to a random subset: in one
    /// transaction, or begun as a batched abort with the true divisor or half or twice it.
    function abortPaying(uint256 jobSeed, uint256 subsetSeed, uint256 qualitySeed, uint256 earnedSeed, bool batched)
        external
    {
        uint256 jobId;
        JobEscrow.Job memory job;
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 candidate = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            job = escrow.getJob(candidate);
            uint256 until = job.earnedBps == 0 ? job.deadline : uint256(job.deadline) + escrow.PAYOUT_GRACE();
            if (job.kind == JobEscrow.JobKind.Federated && _live(job.status) && block.timestamp <= until) {
                jobId = candidate;
                break;
            }
        }
        if (jobId == 0) return;
        if (job.status == JobEscrow.JobStatus.Open) {
            vm.prank(validator);
            escrow.markStarted(jobId);
        }
        (address[] memory contributors, uint16[] memory scores) = _subset(subsetSeed, qualitySeed, job.requester);
        if (contributors.length == 0) return;
        // One in eight pays the whole stake (a completion by this door).
        uint16 earnedBps = earnedSeed % 8 == 0
            ? 10_000
            : job.earnedBps != 0 && earnedSeed % 2 == 0 ? job.earnedBps : uint16(bound(earnedSeed >> 8, 1, 9_999));
        if (batched) {
            uint256 totalWeight = escrow.weigh(jobId, contributors, scores);
            if (earnedSeed % 3 == 0) totalWeight /= 2;
            else if (earnedSeed % 3 == 1) totalWeight *= 2;
            vm.prank(validator);
            try escrow.beginFederatedAbort(
                jobId,
                earnedBps,
                "bafy-round",
                "aborted by the handler",
                uint32(contributors.length),
                uint64(totalWeight),
                Packing.sum(scores)
            ) {
                _planned[jobId] = contributors;
                _plannedScores[jobId] = scores;
                _plannedReputations[jobId] = escrow.reputationsOf(contributors);
                ghostAbortPayoutsBegun += 1;
            } catch {}
            return;
        }
        Books memory before = _books(job);
        vm.prank(validator);
        try escrow.abortFederatedJob(jobId, earnedBps, "bafy-round", "aborted by the handler", contributors, scores) {
            ghostPaidAborts += 1;
            ghostEarnedOf[jobId] = earnedBps;
            if (_book(jobId, job, before) != job.stake) ghostBrokenCompletions += 1;
        } catch {}
    }

    function cancel(uint256 jobSeed, bool byRequester, uint256 actorSeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        JobEscrow.Job memory job = escrow.getJob(jobId);
        address caller = byRequester ? job.requester : actors[actorSeed % actors.length];
        Books memory before = _books(job);
        vm.prank(caller);
        try escrow.cancel(jobId) {
            ghostCancels += 1;
            _book(jobId, job, before);
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
        bool withProgress = job.status == JobEscrow.JobStatus.Started && job.earnedBps != 0;
        Books memory before = _books(job);
        vm.prank(caller);
        try escrow.refund(jobId) {
            ghostRefunds += 1;
            if (job.status == JobEscrow.JobStatus.Paying) ghostPayingRefunds += 1;
            if (withProgress) {
                ghostProgressRefunds += 1;
                if (block.timestamp <= uint256(job.deadline) + escrow.PAYOUT_GRACE()) ghostEarlyRefunds += 1;
            }
            if (_book(jobId, job, before) != owed) ghostBrokenCompletions += 1;
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

    function bond(uint256 actorSeed, uint256 tokenSeed, uint256 amount) external {
        address actor = actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        amount = bound(amount, 0, 1e24);
        if (token == address(0)) {
            vm.deal(actor, actor.balance + amount);
        } else {
            MockERC20(token).mint(actor, amount);
            vm.prank(actor);
            IERC20(token).approve(address(escrow), amount);
        }
        uint256 before = _balance(token);
        vm.prank(actor);
        try escrow.bond{value: token == address(0) ? amount : 0}(token, amount) {
            ghostDeposited[token] += _balance(token) - before;
            ghostBonds += 1;
        } catch {}
    }

    function requestUnbond(uint256 actorSeed, uint256 tokenSeed, uint256 amount) external {
        address actor = actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        uint256 active = escrow.bondOf(actor, token).active;
        vm.prank(actor);
        try escrow.requestUnbond(token, bound(amount, 0, active + 1)) {} catch {}
    }

    function completeUnbond(uint256 actorSeed, uint256 tokenSeed, bool waitFirst) external {
        address actor = actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        JobEscrow.Bond memory b = escrow.bondOf(actor, token);
        // Half the time the delay is waited out, so completions are reached within a run.
        if (waitFirst && b.unlockAt > block.timestamp) vm.warp(b.unlockAt);
        uint256 credited = escrow.withdrawable(actor, token);
        vm.prank(actor);
        try escrow.completeUnbond(token) {
            if (block.timestamp < b.unlockAt) ghostEarlyUnbonds += 1;
            if (escrow.withdrawable(actor, token) != credited + b.unbonding) ghostBrokenSlashes += 1;
            ghostUnbonds += 1;
        } catch {}
    }

    function slash(uint256 jobSeed, uint256 actorSeed, uint256 amount) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        address worker = actors[actorSeed % actors.length];
        JobEscrow.Job memory job = escrow.getJob(jobId);
        JobEscrow.Bond memory b = escrow.bondOf(worker, job.token);
        bool again = escrow.slashed(jobId, worker);
        uint256 credited = escrow.withdrawable(job.requester, job.token);
        amount = bound(amount, 0, 2e24);
        vm.prank(validator);
        try escrow.slashBond(jobId, worker, amount) returns (uint256 taken) {
            uint256 held = uint256(b.active) + b.unbonding;
            uint256 due = again ? 0 : (amount < held ? amount : held);
            JobEscrow.Bond memory after_ = escrow.bondOf(worker, job.token);
            uint256 paid = escrow.withdrawable(job.requester, job.token) - credited;
            // A requester slashing its own bond credits itself: the books still balance.
            if (worker == job.requester) paid = taken;
            if (taken != due || uint256(after_.active) + after_.unbonding + taken != held || paid != taken) {
                ghostBrokenSlashes += 1;
            }
            ghostSlashes += 1;
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

    /// A batched payout stalls, or a job's recorded progress is never paid: jump just past its
    /// grace (the first such job at or after the seed's) and refund it, so those paths are
    /// reachable within a run's depth.
    function refundStalledPayout(uint256 jobSeed, uint256 actorSeed) external {
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 jobId = jobIds[(jobSeed % jobIds.length + k) % jobIds.length];
            JobEscrow.Job memory job = escrow.getJob(jobId);
            bool stalled = job.status == JobEscrow.JobStatus.Paying
                || (job.status == JobEscrow.JobStatus.Started && job.earnedBps != 0);
            if (!stalled) continue;
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
        // Every bond unbonds in full, past its delay.
        for (uint256 t; t < tokens.length; ++t) {
            for (uint256 i; i < actors.length; ++i) {
                uint256 active = escrow.bondOf(actors[i], tokens[t]).active;
                if (active == 0) continue;
                vm.prank(actors[i]);
                escrow.requestUnbond(tokens[t], active);
            }
        }
        vm.warp(block.timestamp + 8 days + escrow.PAYOUT_GRACE() + escrow.UNBONDING_DELAY());
        for (uint256 t; t < tokens.length; ++t) {
            for (uint256 i; i < actors.length; ++i) {
                if (escrow.bondOf(actors[i], tokens[t]).unbonding == 0) continue;
                vm.prank(actors[i]);
                escrow.completeUnbond(tokens[t]);
            }
        }
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.Job memory job = escrow.getJob(jobIds[i]);
            if (_live(job.status) || job.status == JobEscrow.JobStatus.Paying) {
                Books memory before = _books(job);
                escrow.refund(jobIds[i]);
                _book(jobIds[i], job, before);
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
