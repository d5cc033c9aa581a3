// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// Burns 1% (at least 1 unit) of every transfer, so the receiver gets less than was sent.
contract FeeOnTransferToken is ERC20 {
    constructor() ERC20("Fee On Transfer", "FOT") {}

    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }

    function _update(address from, address to, uint256 value) internal override {
        if (from == address(0) || to == address(0) || value == 0) {
            super._update(from, to, value);
            return;
        }
        uint256 fee = value / 100 == 0 ? 1 : value / 100;
        if (fee > value) fee = value;
        super._update(from, address(0), fee);
        super._update(from, to, value - fee);
    }
}
