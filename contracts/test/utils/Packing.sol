// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// How the tests build a batched payout's arguments from lists of scores and reputations.
library Packing {
    /// Reputations as `payFederatedBatch` takes them: two bytes each, big-endian.
    function packed(uint16[] memory reputations) internal pure returns (bytes memory out) {
        out = new bytes(2 * reputations.length);
        for (uint256 i; i < reputations.length; ++i) {
            out[2 * i] = bytes1(uint8(reputations[i] >> 8));
            out[2 * i + 1] = bytes1(uint8(reputations[i]));
        }
    }

    /// The total quality a payout announces.
    function sum(uint16[] memory values) internal pure returns (uint64 total) {
        for (uint256 i; i < values.length; ++i) {
            total += values[i];
        }
    }
}
