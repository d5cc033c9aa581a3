// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Cheats} from "./Cheats.sol";
import {InvariantTargets} from "./InvariantTargets.sol";

/// Base of every test contract: cheatcodes, input helpers, the invariant target registry and
/// assertions. Each assertion forwards to forge's native assertion cheatcode, which reverts with
/// both values in the message on failure; a reverting test is a failed test, so there is no
/// failure flag to keep.
abstract contract TestBase is Cheats, InvariantTargets {
    function assertTrue(bool condition) internal pure {
        vm.assertTrue(condition);
    }

    function assertTrue(bool condition, string memory error) internal pure {
        vm.assertTrue(condition, error);
    }

    function assertFalse(bool condition) internal pure {
        vm.assertFalse(condition);
    }

    function assertFalse(bool condition, string memory error) internal pure {
        vm.assertFalse(condition, error);
    }

    function assertEq(bool left, bool right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(bool left, bool right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(uint256 left, uint256 right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(uint256 left, uint256 right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(int256 left, int256 right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(int256 left, int256 right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(address left, address right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(address left, address right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(bytes32 left, bytes32 right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(bytes32 left, bytes32 right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(string memory left, string memory right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(string memory left, string memory right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertEq(bytes memory left, bytes memory right) internal pure {
        vm.assertEq(left, right);
    }

    function assertEq(bytes memory left, bytes memory right, string memory error) internal pure {
        vm.assertEq(left, right, error);
    }

    function assertLt(uint256 left, uint256 right) internal pure {
        vm.assertLt(left, right);
    }

    function assertLt(uint256 left, uint256 right, string memory error) internal pure {
        vm.assertLt(left, right, error);
    }

    function assertLe(uint256 left, uint256 right) internal pure {
        vm.assertLe(left, right);
    }

    function assertLe(uint256 left, uint256 right, string memory error) internal pure {
        vm.assertLe(left, right, error);
    }

    function assertGt(uint256 left, uint256 right) internal pure {
        vm.assertGt(left, right);
    }

    function assertGt(uint256 left, uint256 right, string memory error) internal pure {
        vm.assertGt(left, right, error);
    }

    function assertGe(uint256 left, uint256 right) internal pure {
        vm.assertGe(left, right);
    }

    function assertGe(uint256 left, uint256 right, string memory error) internal pure {
        vm.assertGe(left, right, error);
    }

    function assertApproxEqAbs(uint256 left, uint256 right, uint256 maxDelta) internal pure {
        vm.assertApproxEqAbs(left, right, maxDelta);
    }

    function assertApproxEqAbs(uint256 left, uint256 right, uint256 maxDelta, string memory error) internal pure {
        vm.assertApproxEqAbs(left, right, maxDelta, error);
    }
}
