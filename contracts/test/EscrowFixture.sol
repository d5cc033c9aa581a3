// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "./utils/Packing.sol";
import {TestBase} from "./utils/TestBase.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {MockERC20} from "./mocks/MockERC20.sol";
import {FeeOnTransferToken} from "./mocks/FeeOnTransferToken.sol";

/// Deployment and helpers shared by the unit, fuzz and gas tests.
abstract contract EscrowFixture is TestBase {
    JobEscrow internal escrow;
    MockERC20 internal usdc;
    FeeOnTransferToken internal fot;

    address internal admin = makeAddr("admin");
    address internal validator = makeAddr("validator");
    address internal feeManager = makeAddr("feeManager");
    address internal treasury = makeAddr("treasury");
    address internal requester = makeAddr("requester");
    address internal stranger = makeAddr("stranger");

    address internal constant ETH = address(0);
    uint16 internal constant FEE_BPS = 250;
    /// The highest fee a requester may accept (`createJob`'s maxFeeBps): any fee the contract
    /// allows. Tests of the requester's maximum pass their own.
    uint16 internal constant ANY_FEE = 1_000;
    uint256 internal constant STAKE = 10 ether;
    string internal constant SPEC_CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi";

    function setUp() public virtual {
        vm.warp(1_700_000_000);
        escrow = new JobEscrow(admin, validator, feeManager, treasury, FEE_BPS);
        usdc = new MockERC20("USD Coin", "USDC");
        fot = new FeeOnTransferToken();
        vm.startPrank(admin);
        escrow.setTokenAllowed(address(usdc), true);
        escrow.setTokenAllowed(address(fot), true);
        vm.stopPrank();
        vm.deal(requester, 1_000 ether);
        usdc.mint(requester, 1_000_000e6);
        vm.prank(requester);
        usdc.approve(address(escrow), type(uint256).max);
    }

    function _deadline() internal view returns (uint64) {
        return uint64(block.timestamp + 7 days);
    }

    function _createEth(JobEscrow.JobKind kind, uint256 stake) internal returns (uint256 jobId) {
        vm.prank(requester);
        jobId = escrow.createJob{value: stake}(ETH, stake, SPEC_CID, _deadline(), kind, ANY_FEE);
    }

    function _createUsdc(JobEscrow.JobKind kind, uint256 stake) internal returns (uint256 jobId) {
        vm.prank(requester);
        jobId = escrow.createJob(address(usdc), stake, SPEC_CID, _deadline(), kind, ANY_FEE);
    }

    /// The validator's `markStarted`: completion needs a Started job.
    function _start(uint256 jobId) internal {
        vm.prank(validator);
        escrow.markStarted(jobId);
    }

    /// `n` distinct contributor addresses in strictly increasing order, as the contract demands.
    function _sortedContributors(uint256 n, uint256 salt) internal pure returns (address[] memory list) {
        list = new address[](n);
        for (uint256 i; i < n; ++i) {
            list[i] = address(uint160(uint256(keccak256(abi.encode(salt, i)))));
        }
        _sort(list);
    }

    /// `n` distinct addresses in strictly increasing order without sorting (O(n), for the large
    /// payouts): the top 15 bits count up from 1, the other 145 are pseudo-random, so the
    /// addresses carry as few zero bytes as real ones (calldata gas stays realistic).
    function _spreadContributors(uint256 n, uint256 salt) internal pure returns (address[] memory list) {
        require(n < 1 << 15, "too many");
        list = new address[](n);
        for (uint256 i; i < n; ++i) {
            list[i] = address(uint160(((i + 1) << 145) | (uint256(keccak256(abi.encode(salt, i))) >> 111)));
        }
    }

    function _sort(address[] memory list) internal pure {
        for (uint256 i = 1; i < list.length; ++i) {
            address key = list[i];
            uint256 j = i;
            while (j > 0 && list[j - 1] > key) {
                list[j] = list[j - 1];
                --j;
            }
            list[j] = key;
        }
    }

    function _uniformQuality(uint256 n, uint16 quality) internal pure returns (uint16[] memory scores) {
        scores = new uint16[](n);
        for (uint256 i; i < n; ++i) {
            scores[i] = quality;
        }
    }

    /// Start (as the API does before leasing tasks) and complete a federated job in one transaction.
    function _completeFederated(uint256 jobId, address[] memory contributors, uint16[] memory scores) internal {
        _start(jobId);
        vm.prank(validator);
        escrow.completeFederatedJob(jobId, "bafy-adapter", "bafy-manifest", contributors, scores);
    }

    /// Start and complete a LoRA job.
    function _completeLora(uint256 jobId, address contributor, uint16 quality) internal {
        _start(jobId);
        vm.prank(validator);
        escrow.completeJob(jobId, "bafy-adapter", contributor, quality);
    }

    /// Start a federated job and pay it in batches of at most `batchSize`, dividing by the total
    /// weight `weigh` reports before the first batch and carrying the reputations of that
    /// moment in every batch (as the validator does).
    function _payInBatches(uint256 jobId, address[] memory contributors, uint16[] memory scores, uint256 batchSize)
        internal
    {
        _start(jobId);
        uint256 totalWeight = escrow.weigh(jobId, contributors, scores);
        uint16[] memory reputations = escrow.reputationsOf(contributors);
        vm.prank(validator);
        escrow.beginFederatedPayout(
            jobId,
            "bafy-adapter",
            "bafy-manifest",
            uint32(contributors.length),
            uint64(totalWeight),
            Packing.sum(scores)
        );
        for (uint256 from; from < contributors.length; from += batchSize) {
            uint256 to = from + batchSize < contributors.length ? from + batchSize : contributors.length;
            vm.prank(validator);
            escrow.payFederatedBatch(
                jobId,
                _slice(contributors, from, to),
                _slice(scores, from, to),
                Packing.packed(_slice(reputations, from, to))
            );
        }
    }

    function _slice(address[] memory list, uint256 from, uint256 to) internal pure returns (address[] memory part) {
        part = new address[](to - from);
        for (uint256 i = from; i < to; ++i) {
            part[i - from] = list[i];
        }
    }

    function _slice(uint16[] memory list, uint256 from, uint256 to) internal pure returns (uint16[] memory part) {
        part = new uint16[](to - from);
        for (uint256 i = from; i < to; ++i) {
            part[i - from] = list[i];
        }
    }
}
