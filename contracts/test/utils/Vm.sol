// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

// The forge cheatcodes this suite calls, and nothing more. Forge answers calls to this address
// itself (there is no code there); a declaration here only has to match the cheatcode's ABI
// signature. Assertions are cheatcodes too: forge implements them natively and they revert with
// a readable message, which is all a test failure needs to be.
address constant VM_ADDRESS = address(uint160(uint256(keccak256("hevm cheat code"))));

interface Vm {
    /// What `lastCallGas` reports about the last call, from the callee's side. Newer forge
    /// versions append fields; the ABI decoder ignores trailing words, so these five suffice.
    struct Gas {
        uint64 gasLimit;
        uint64 gasTotalUsed;
        uint64 gasMemoryUsed;
        int64 gasRefunded;
        uint64 gasRemaining;
    }

    /// A log `recordLogs` captured.
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    // ------------------------------------------------------------------ environment

    function warp(uint256 newTimestamp) external;
    function deal(address account, uint256 newBalance) external;
    function prank(address msgSender) external;
    function startPrank(address msgSender) external;
    function stopPrank() external;
    function snapshotState() external returns (uint256 snapshotId);
    function revertToState(uint256 snapshotId) external returns (bool success);
    function lastCallGas() external view returns (Gas memory gas);
    /// Marks `target`'s account and every storage slot of it cold again (EIP-2929), so the next
    /// call pays cold-access gas as it would in a transaction of its own.
    function cool(address target) external;
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);

    // ------------------------------------------------------------------ expectations

    function expectRevert() external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    /// Every topic and the data of the next event must match, and `emitter` must emit it.
    function expectEmit(address emitter) external;

    // ------------------------------------------------------------------ utilities

    function addr(uint256 privateKey) external pure returns (address keyAddr);
    function label(address account, string calldata newLabel) external;
    function toString(uint256 value) external pure returns (string memory stringifiedValue);

    // ------------------------------------------------------------------ assertions

    function assertTrue(bool condition) external pure;
    function assertTrue(bool condition, string calldata error) external pure;
    function assertFalse(bool condition) external pure;
    function assertFalse(bool condition, string calldata error) external pure;

    function assertEq(bool left, bool right) external pure;
    function assertEq(bool left, bool right, string calldata error) external pure;
    function assertEq(uint256 left, uint256 right) external pure;
    function assertEq(uint256 left, uint256 right, string calldata error) external pure;
    function assertEq(int256 left, int256 right) external pure;
    function assertEq(int256 left, int256 right, string calldata error) external pure;
    function assertEq(address left, address right) external pure;
    function assertEq(address left, address right, string calldata error) external pure;
    function assertEq(bytes32 left, bytes32 right) external pure;
    function assertEq(bytes32 left, bytes32 right, string calldata error) external pure;
    function assertEq(string calldata left, string calldata right) external pure;
    function assertEq(string calldata left, string calldata right, string calldata error) external pure;
    function assertEq(bytes calldata left, bytes calldata right) external pure;
    function assertEq(bytes calldata left, bytes calldata right, string calldata error) external pure;

    function assertLt(uint256 left, uint256 right) external pure;
    function assertLt(uint256 left, uint256 right, string calldata error) external pure;
    function assertLe(uint256 left, uint256 right) external pure;
    function assertLe(uint256 left, uint256 right, string calldata error) external pure;
    function assertGt(uint256 left, uint256 right) external pure;
    function assertGt(uint256 left, uint256 right, string calldata error) external pure;
    function assertGe(uint256 left, uint256 right) external pure;
    function assertGe(uint256 left, uint256 right, string calldata error) external pure;

    function assertApproxEqAbs(uint256 left, uint256 right, uint256 maxDelta) external pure;
    function assertApproxEqAbs(uint256 left, uint256 right, uint256 maxDelta, string calldata error) external pure;
}
