// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Packing} from "./utils/Packing.sol";
import {Console} from "./utils/Console.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {EscrowFixture} from "./EscrowFixture.sol";

/// Gas of a batched federated payout (beginFederatedPayout, then payFederatedBatch in batches of
/// BATCH contributors) as transactions pay it. Print the tables with (from the repository root):
///   scripts/forge-test --match-contract GasPerContributorTest -vv
/// Each measured call is one transaction: its gas is the callee's execution gas (forge's
/// `lastCallGas`) + 21,000 intrinsic + calldata (16 per non-zero byte, 4 per zero byte), and
/// `vm.cool` makes the escrow's account and storage cold before it, as at the start of a
/// transaction of its own. Storage written earlier in the same test would still count as dirty
/// (cheaper re-writes), so credits that must be pre-existing are made in `setUp`, a
/// transaction of its own. With `--isolate` forge runs every call as a real transaction and
/// reports its full gas itself; both ways give the same figures.
abstract contract BatchedPayoutGas is EscrowFixture {
    /// EIP-7825: no transaction may use more than 2^24 gas.
    uint256 internal constant TX_GAS_CAP = 1 << 24;
    /// The batch size the Rust ledger sends: floor((2^24 - 200,000) / 32,000) = 518, i.e. a
    /// 32,000-gas allowance per contributor and 200,000 for the rest of the transaction.
    uint256 internal constant BATCH = (TX_GAS_CAP - 200_000) / 32_000;
    uint16 internal constant QUALITY = 7_500;
    JobEscrow.JobKind internal constant FED = JobEscrow.JobKind.Federated;

    struct Measured {
        uint256 n;
        uint256 beginGas;
        /// begin + every batch, each a whole transaction.
        uint256 totalGas;
        uint256 maxBatchGas;
        uint256 batches;
    }

    bool internal isolated;

    function setUp() public virtual override {
        super.setUp();
        vm.deal(requester, 1_000_000 ether);
        // An isolated top-level call is a transaction, so even a tiny one costs 21,000. (Static
        // calls are not isolated, hence a state-changing call.)
        vm.prank(feeManager);
        escrow.setFeeBps(FEE_BPS);
        isolated = vm.lastCallGas().gasTotalUsed >= 21_000;
    }

    function _calldataGas(bytes memory data) internal pure returns (uint256 total) {
        assembly ("memory-safe") {
            let start := add(data, 0x20)
            let end := add(start, mload(data))
            for { let p := start } lt(p, end) { p := add(p, 1) } {
                total := add(total, sub(16, mul(12, iszero(byte(0, mload(p))))))
            }
        }
    }

    /// Gas of the validator's transaction carrying `data` to the escrow.
    function _txGas(bytes memory data) internal returns (uint256) {
        vm.cool(address(escrow));
        vm.prank(validator);
        (bool ok, bytes memory reason) = address(escrow).call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(reason, 0x20), mload(reason))
            }
        }
        uint256 measured = vm.lastCallGas().gasTotalUsed;
        return isolated ? measured : 21_000 + _calldataGas(data) + measured;
    }

    /// Pays `list` (sorted) from a fresh federated job in `token` through begin + batches of
    /// BATCH, checking every transaction against the 2^24 cap.
    function _payBatched(address[] memory list, address token, uint256 stake) internal returns (Measured memory m) {
        m.n = list.length;
        uint16[] memory q = _uniformQuality(m.n, QUALITY);
        uint256 jobId = token == ETH ? _createEth(FED, stake) : _createUsdc(FED, stake);
        _start(jobId);
        uint256 totalWeight = escrow.weigh(jobId, list, q);
        uint16[] memory reputations = escrow.reputationsOf(list);
        m.beginGas = _txGas(
            abi.encodeCall(
                JobEscrow.beginFederatedPayout,
                (jobId, "bafy-adapter", "bafy-manifest", uint32(m.n), uint64(totalWeight), Packing.sum(q))
            )
        );
        assertLt(m.beginGas, TX_GAS_CAP);
        m.totalGas = m.beginGas;
        for (uint256 from; from < m.n; from += BATCH) {
            uint256 to = from + BATCH < m.n ? from + BATCH : m.n;
            uint256 gas = _txGas(
                abi.encodeCall(
                    JobEscrow.payFederatedBatch,
                    (jobId, _slice(list, from, to), _slice(q, from, to), Packing.packed(_slice(reputations, from, to)))
                )
            );
            assertLt(gas, TX_GAS_CAP, "a batch transaction above 2^24 gas");
            if (gas > m.maxBatchGas) m.maxBatchGas = gas;
            m.totalGas += gas;
            m.batches += 1;
        }
        assertEq(uint8(escrow.getJob(jobId).status), uint8(JobEscrow.JobStatus.Completed));
        assertEq(escrow.payoutOf(jobId).paidCount, m.n);
    }

    /// A stake that gives every contributor a full reputation step (0.02 ETH each).
    function _ethStake(uint256 n) internal pure returns (uint256) {
        return n * 0.02 ether;
    }

    function _log(string memory what, Measured memory m) internal view {
        Console.log(
            string.concat(
                what,
                ": n = ",
                vm.toString(m.n),
                ", batches = ",
                vm.toString(m.batches),
                ", begin tx = ",
                vm.toString(m.beginGas),
                ", largest batch tx = ",
                vm.toString(m.maxBatchGas),
                ", all txs = ",
                vm.toString(m.totalGas),
                ", per contributor = ",
                vm.toString(m.totalGas / m.n)
            )
        );
    }
}

/// Contributors the escrow has never seen: each payout creates their account slot.
contract GasPerContributorTest is BatchedPayoutGas {
    /// A regression guard: all-in gas per new contributor (begin + batches, intrinsic and
    /// calldata included) at n = 1,000, i.e. two batches (518 + 482).
    uint256 internal constant LIMIT_PER_CONTRIBUTOR_AT_1000 = 25_000;

    function test_gas_per_new_contributor_at_1000_is_within_target() public {
        Measured memory m = _payBatched(_spreadContributors(1_000, 1), ETH, _ethStake(1_000));
        assertEq(m.batches, 2);
        assertLe(m.totalGas / 1_000, LIMIT_PER_CONTRIBUTOR_AT_1000);
    }

    function test_gas_per_new_contributor_report() public {
        Console.log(isolated ? "isolated: one transaction per call" : "not isolated: tx gas = 21,000 + calldata + call");
        Console.log(string.concat("batch size ", vm.toString(BATCH), ", tx gas cap 2^24 = 16,777,216"));
        uint256[3] memory sizes = [uint256(100), 1_000, 10_000];
        for (uint256 k; k < sizes.length; ++k) {
            Measured memory m = _payBatched(_spreadContributors(sizes[k], 100 + k), ETH, _ethStake(sizes[k]));
            _log("new contributors", m);
            assertEq(m.batches, (sizes[k] + BATCH - 1) / BATCH);
        }

        // For comparison: the same 100 new contributors' worth in one completeFederatedJob.
        address[] memory list = _spreadContributors(100, 200);
        uint256 jobId = _createEth(FED, _ethStake(100));
        _start(jobId);
        uint256 once = _txGas(
            abi.encodeCall(
                JobEscrow.completeFederatedJob,
                (jobId, "bafy-adapter", "bafy-manifest", list, _uniformQuality(100, QUALITY))
            )
        );
        Console.log(
            string.concat(
                "one-transaction completeFederatedJob: n = 100, tx = ",
                vm.toString(once),
                ", per contributor = ",
                vm.toString(once / 100)
            )
        );
    }
}

/// The worst case: every contributor already holds unwithdrawn credit in an allow-listed ERC-20
/// (a USDC job paid them in setUp, a transaction of its own, and nobody withdrew), so each ETH
/// payout first parks that credit in a fresh `_parked` slot and rewrites the account slot.
/// Named so that `--match-contract GasPerContributorTest` runs it too.
contract GasPerContributorTestWithParkedCredit is BatchedPayoutGas {
    uint256 internal constant CROWD = 11_100; // 100 + 1,000 + 10,000, each payout its own

    address[] internal crowd;

    function setUp() public override {
        super.setUp();
        address[] memory list = _spreadContributors(CROWD, 300);
        crowd = list;
        usdc.mint(requester, CROWD * 1e6);
        _payBatched(list, address(usdc), CROWD * 1e6);
    }

    function test_gas_per_contributor_with_credit_to_park_report() public {
        address[] memory list = crowd;
        assertGt(escrow.withdrawable(list[0], address(usdc)), 0);
        uint256[3] memory sizes = [uint256(100), 1_000, 10_000];
        uint256 from;
        for (uint256 k; k < sizes.length; ++k) {
            address[] memory part = _slice(list, from, from + sizes[k]);
            uint256 usdcBefore = escrow.withdrawable(part[0], address(usdc));
            Measured memory m = _payBatched(part, ETH, _ethStake(sizes[k]));
            _log("contributors with USDC credit to park", m);
            // The USDC credit was parked, not lost, and the ETH share sits beside it.
            assertEq(escrow.withdrawable(part[0], address(usdc)), usdcBefore);
            assertGt(escrow.withdrawable(part[0], ETH), 0);
            from += sizes[k];
        }
        vm.prank(list[CROWD - 1]);
        escrow.withdraw(address(usdc));
        vm.prank(list[CROWD - 1]);
        escrow.withdraw(ETH);
    }
}
