// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// Prints a line in `forge test -vv` output. Forge watches calls to this address (the bytes of
/// "console.log") and decodes them as console logs; nothing runs there, so the call costs only
/// its own gas and never reverts.
library Console {
    address internal constant CONSOLE_ADDRESS = address(0x000000000000000000636F6e736F6c652e6c6f67);

    function log(string memory line) internal view {
        // The result is ignored on purpose: a print must never change what a test does.
        (bool ignored,) = CONSOLE_ADDRESS.staticcall(abi.encodeWithSignature("log(string)", line));
        ignored;
    }
}
