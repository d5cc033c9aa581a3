// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

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
        jobId = escrow.createJob{value: stake}(ETH, stake, SPEC_CID, _deadline(), kind);
    }

    function _createUsdc(JobEscrow.JobKind kind, uint256 stake) internal returns (uint256 jobId) {
        vm.prank(requester);
        jobId = escrow.createJob(address(usdc), stake, SPEC_CID, _deadline(), kind);
    }

    /// `n` distinct contributor addresses in strictly increasing order, as the contract demands.
    function _sortedContributors(uint256 n, uint256 salt) internal pure returns (address[] memory list) {
        list = new address[](n);
        for (uint256 i; i < n; ++i) {
            list[i] = address(uint160(uint256(keccak256(abi.encode(salt, i)))));
        }
        _sort(list);
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

    function _completeFederated(uint256 jobId, address[] memory contributors, uint16[] memory scores) internal {
        vm.prank(validator);
        escrow.completeFederatedJob(jobId, "bafy-adapter", "bafy-manifest", contributors, scores);
    }
}
