// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// The registry forge reads before an invariant run. Forge looks these view functions up by name
/// in the test contract's ABI and calls them after `setUp`; their names, return types and the
/// FuzzSelector layout must match what forge decodes. A function absent from the ABI (the
/// artifact-based filters here) simply means "no filter of that kind".
abstract contract InvariantTargets {
    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    address[] private targetedContracts;
    address[] private excludedContracts;
    address[] private targetedSenders;
    address[] private excludedSenders;
    FuzzSelector[] private targetedSelectors;

    /// Only these contracts are called (all of them when none is named).
    function targetContract(address target) internal {
        targetedContracts.push(target);
    }

    /// Never call `target`, even if forge would otherwise pick it.
    function excludeContract(address target) internal {
        excludedContracts.push(target);
    }

    /// Only these functions of `selector.addr` are called.
    function targetSelector(FuzzSelector memory selector) internal {
        targetedSelectors.push(selector);
    }

    /// Calls come only from these senders (random ones when none is named).
    function targetSender(address sender) internal {
        targetedSenders.push(sender);
    }

    /// Calls never come from `sender`.
    function excludeSender(address sender) internal {
        excludedSenders.push(sender);
    }

    function targetContracts() public view returns (address[] memory) {
        return targetedContracts;
    }

    function excludeContracts() public view returns (address[] memory) {
        return excludedContracts;
    }

    function targetSelectors() public view returns (FuzzSelector[] memory) {
        return targetedSelectors;
    }

    function targetSenders() public view returns (address[] memory) {
        return targetedSenders;
    }

    function excludeSenders() public view returns (address[] memory) {
        return excludedSenders;
    }
}
