// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Vm, VM_ADDRESS} from "./Vm.sol";

/// What tests and invariant handlers share: the cheatcode handle and the input helpers built on
/// it. Handlers inherit this alone; they must not carry assertions or a target registry.
abstract contract Cheats {
    Vm internal constant vm = Vm(VM_ADDRESS);

    uint256 private constant UINT256_MAX = type(uint256).max;

    /// Maps any fuzzed `x` into [min, max]. Values already inside pass through unchanged, so
    /// the fuzzer's dictionary values keep their meaning; values just above zero land just above
    /// `min` and values just below 2^256 land just below `max`, so the fuzzer's favourite edge
    /// inputs (0, 1, max) still reach the edges of the range. Anything else wraps by modulo.
    function bound(uint256 x, uint256 min, uint256 max) internal pure returns (uint256) {
        require(min <= max, "bound: min > max");
        if (x >= min && x <= max) return x;
        // Not reached for the full range (every x is inside it), so `size` cannot overflow.
        uint256 size = max - min + 1;
        if (x < size) return min + x;
        if (UINT256_MAX - x < size) return max - (UINT256_MAX - x);
        return min + x % size;
    }

    /// A deterministic address for `name`, labelled with it in traces. The same name always gives
    /// the same address (the address of the private key keccak256(name)), in every test.
    function makeAddr(string memory name) internal returns (address account) {
        account = vm.addr(uint256(keccak256(abi.encodePacked(name))));
        vm.label(account, name);
    }
}
