// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {JobEscrow} from "../../src/JobEscrow.sol";

/// An account that refuses ETH (like a contract wallet without a payable fallback). It can still
/// act as a requester or contributor and pull its credit to another address.
contract RevertingRecipient {
    error NoThanks();

    JobEscrow public immutable escrow;

    constructor(JobEscrow escrow_) {
        escrow = escrow_;
    }

    receive() external payable {
        revert NoThanks();
    }

    function createJob(address token, uint256 stake, uint64 deadline, JobEscrow.JobKind kind)
        external
        payable
        returns (uint256)
    {
        return escrow.createJob{value: msg.value}(token, stake, "bafy-reverting", deadline, kind, escrow.MAX_FEE_BPS());
    }

    function cancel(uint256 jobId) external {
        escrow.cancel(jobId);
    }

    function withdraw(address token) external {
        escrow.withdraw(token);
    }

    function withdrawTo(address token, address payable to) external {
        escrow.withdrawTo(token, to);
    }
}
