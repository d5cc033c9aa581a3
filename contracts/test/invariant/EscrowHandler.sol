// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Cheats} from "../utils/Cheats.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {MockERC20} from "../mocks/MockERC20.sol";
import {FeeOnTransferToken} from "../mocks/FeeOnTransferToken.sol";
import {RevertingRecipient} from "../mocks/RevertingRecipient.sol";
import {ReentrantAttacker} from "../mocks/ReentrantAttacker.sol";

/// Drives random sequences of create / start / complete / cancel / refund / withdraw by random
/// actors (plain accounts, a contract that refuses ETH, a reentrant attacker) in ETH, a plain
/// ERC-20 and a fee-on-transfer token. Reverts are expected (wrong caller, wrong state, past the
/// deadline) and swallowed; what succeeds is recorded in ghost variables the invariants check.
contract EscrowHandler is Cheats {
    JobEscrow public immutable escrow;
    MockERC20 public immutable usdc;
    FeeOnTransferToken public immutable fot;
    RevertingRecipient public immutable wallet;
    ReentrantAttacker public immutable attacker;
    address public immutable validator;
    address public immutable feeManager;
    address public immutable treasury;

    /// Sorted by address, so any subset in order is a valid contributor list.
    address[] public actors;
    address[3] public tokens;
    uint256[] public jobIds;

    mapping(address token => uint256) public ghostDeposited;
    mapping(address token => uint256) public ghostWithdrawn;
    uint256 public ghostFeeOnTransferJobs;
    /// Completions that credited other than exactly the stake, or finished a finished job.
    uint256 public ghostBrokenCompletions;
    uint256 public ghostCompletions;
    uint256 public ghostCancels;
    uint256 public ghostRefunds;
    uint256 public ghostWithdrawals;

    constructor(
        JobEscrow escrow_,
        MockERC20 usdc_,
        FeeOnTransferToken fot_,
        address validator_,
        address feeManager_,
        address treasury_
    ) {
        escrow = escrow_;
        usdc = usdc_;
        fot = fot_;
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

    /// Sum of every credit in `token` anyone could hold: actors and the treasury.
    function totalCredited(address token) public view returns (uint256 sum) {
        for (uint256 i; i < actors.length; ++i) {
            sum += escrow.withdrawable(actors[i], token);
        }
        sum += escrow.withdrawable(treasury, token);
    }

    /// Stakes of jobs that are neither finished nor paid out.
    function totalEscrowed(address token) public view returns (uint256 sum) {
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.Job memory job = escrow.getJob(jobIds[i]);
            if (
                job.token == token
                    && (job.status == JobEscrow.JobStatus.Open || job.status == JobEscrow.JobStatus.Started)
            ) {
                sum += job.stake;
            }
        }
    }

    // ------------------------------------------------------------------ actions

    function createJob(uint256 actorSeed, uint256 tokenSeed, uint256 stake, uint256 duration, bool federated) external {
        address actor = actors[actorSeed % actors.length];
        address token = tokens[tokenSeed % tokens.length];
        stake = bound(stake, 1, 1e24);
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
            token, stake, "bafy-spec", uint64(block.timestamp + duration), kind
        ) returns (
            uint256 jobId
        ) {
            jobIds.push(jobId);
            // The attacker re-enters cancel/refund on its own latest job when paid.
            if (actor == address(attacker)) attacker.setTargetJob(jobId);
            ghostDeposited[token] += _balance(token) - before;
            if (token == address(fot)) ghostFeeOnTransferJobs += 1;
        } catch {}
    }

    function markStarted(uint256 jobSeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        vm.prank(validator);
        try escrow.markStarted(jobId) {} catch {}
    }

    function complete(uint256 jobSeed, uint256 subsetSeed, uint256 qualitySeed) external {
        (uint256 jobId, bool found) = _job(jobSeed);
        if (!found) return;
        JobEscrow.Job memory job = escrow.getJob(jobId);
        bool wasLive = job.status == JobEscrow.JobStatus.Open || job.status == JobEscrow.JobStatus.Started;
        uint256 creditedBefore = totalCredited(job.token);

        bool ok;
        if (job.kind == JobEscrow.JobKind.LoRA) {
            address contributor = actors[subsetSeed % actors.length];
            uint16 quality = uint16(qualitySeed % 10_001);
            vm.prank(validator);
            try escrow.completeJob(jobId, "bafy-adapter", contributor, quality) {
                ok = true;
            } catch {}
        } else {
            (address[] memory contributors, uint16[] memory scores) = _subset(subsetSeed, qualitySeed);
            vm.prank(validator);
            try escrow.completeFederatedJob(jobId, "bafy-adapter", "bafy-manifest", contributors, scores) {
                ok = true;
            } catch {}
        }
        if (!ok) return;
        ghostCompletions += 1;
        if (!wasLive || totalCredited(job.token) - creditedBefore != job.stake) ghostBrokenCompletions += 1;
    }

    function _subset(uint256 subsetSeed, uint256 qualitySeed)
        private
        view
        returns (address[] memory contributors, uint16[] memory scores)
    {
        uint256 mask = subsetSeed % (1 << actors.length);
        if (mask == 0) mask = 1;
        uint256 n;
        for (uint256 i; i < actors.length; ++i) {
            if (mask & (1 << i) != 0) ++n;
        }
        contributors = new address[](n);
        scores = new uint16[](n);
        uint256 k;
        for (uint256 i; i < actors.length; ++i) {
            if (mask & (1 << i) == 0) continue;
            contributors[k] = actors[i];
            scores[k] = uint16(uint256(keccak256(abi.encode(qualitySeed, i))) % 10_001);
            ++k;
        }
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
        vm.prank(actors[actorSeed % actors.length]);
        try escrow.refund(jobId) {
            ghostRefunds += 1;
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

    function warp(uint256 seconds_) external {
        vm.warp(block.timestamp + bound(seconds_, 0, 3 days));
    }

    /// End of a run: refund every unfinished job, then every account withdraws every token
    /// (the ETH-refusing wallet through withdrawTo). Not a fuzzed action: the invariant test
    /// calls it from afterInvariant.
    function drainEverything() external {
        vm.warp(block.timestamp + 8 days);
        for (uint256 i; i < jobIds.length; ++i) {
            JobEscrow.JobStatus status = escrow.getJob(jobIds[i]).status;
            if (status == JobEscrow.JobStatus.Open || status == JobEscrow.JobStatus.Started) {
                escrow.refund(jobIds[i]);
            }
        }
        for (uint256 t; t < tokens.length; ++t) {
            address token = tokens[t];
            for (uint256 i; i <= actors.length; ++i) {
                address who = i == actors.length ? treasury : actors[i];
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
