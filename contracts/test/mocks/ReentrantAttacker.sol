// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {JobEscrow} from "../../src/JobEscrow.sol";

/// On receiving ETH, tries to re-enter the escrow (withdraw again, cancel, refund, create a job).
/// Every attempt must fail; it records what happened so tests can assert on it.
contract ReentrantAttacker {
    JobEscrow public immutable escrow;
    uint256 public reentryAttempts;
    uint256 public reentrySuccesses;
    uint256 public received;
    uint256 public targetJob;
    /// Revert data of the last re-entrant withdraw, to check which guard stopped it.
    bytes public lastWithdrawRevert;

    constructor(JobEscrow escrow_) {
        escrow = escrow_;
    }

    function setTargetJob(uint256 jobId) external {
        targetJob = jobId;
    }

    function createJob(uint256 stake, uint64 deadline) external payable returns (uint256) {
        return escrow.createJob{value: msg.value}(
            address(0), stake, "bafy-attacker", deadline, JobEscrow.JobKind.LoRA, escrow.MAX_FEE_BPS()
        );
    }

    function cancel(uint256 jobId) external {
        escrow.cancel(jobId);
    }

    function withdraw(address token) external {
        escrow.withdraw(token);
    }

    receive() external payable {
        received += msg.value;
        reentryAttempts += 1;
        try escrow.withdraw(address(0)) {
            reentrySuccesses += 1;
        } catch (bytes memory reason) {
            lastWithdrawRevert = reason;
        }
        try escrow.cancel(targetJob) {
            reentrySuccesses += 1;
        } catch {}
        try escrow.refund(targetJob) {
            reentrySuccesses += 1;
        } catch {}
    }
}
