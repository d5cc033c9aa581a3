// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {EscrowFixture} from "./EscrowFixture.sol";
import {JobEscrow} from "../src/JobEscrow.sol";

/// Worker bonds (issue 47, decision 0044): bond in ETH or an allow-listed token, unbond only
/// after UNBONDING_DELAY, slashed (active first, then unbonding) to the requester of a job the
/// worker forfeited, once per job.
contract WorkerBondTest is EscrowFixture {
    address internal worker = makeAddr("worker");

    function setUp() public override {
        super.setUp();
        vm.deal(worker, 100 ether);
        usdc.mint(worker, 1_000e6);
        vm.prank(worker);
        usdc.approve(address(escrow), type(uint256).max);
    }

    function _bondEth(uint256 amount) internal {
        vm.prank(worker);
        escrow.bond{value: amount}(ETH, amount);
    }

    function test_bond_in_eth_and_in_an_allowed_token() public {
        _bondEth(2 ether);
        _bondEth(1 ether);
        vm.prank(worker);
        escrow.bond(address(usdc), 500e6);
        JobEscrow.Bond memory eth = escrow.bondOf(worker, ETH);
        assertEq(eth.active, 3 ether);
        assertEq(eth.unbonding, 0);
        assertEq(escrow.bondOf(worker, address(usdc)).active, 500e6);
        assertEq(address(escrow).balance, 3 ether);
        assertEq(usdc.balanceOf(address(escrow)), 500e6);
    }

    function test_a_bond_must_send_what_it_says_in_an_allowed_token() public {
        vm.startPrank(worker);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEthAmount.selector, 1 ether, 2 ether));
        escrow.bond{value: 1 ether}(ETH, 2 ether);
        vm.expectRevert(JobEscrow.ZeroStake.selector);
        escrow.bond(ETH, 0);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TokenNotAllowed.selector, stranger));
        escrow.bond(stranger, 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.EthSentWithToken.selector, 1));
        escrow.bond{value: 1}(address(usdc), 1e6);
        vm.stopPrank();
    }

    function test_a_fee_on_transfer_token_cannot_bond() public {
        fot.mint(worker, 100e18);
        vm.startPrank(worker);
        fot.approve(address(escrow), type(uint256).max);
        vm.expectRevert();
        escrow.bond(address(fot), 100e18);
        vm.stopPrank();
        assertEq(escrow.bondOf(worker, address(fot)).active, 0);
    }

    function test_unbonding_waits_the_delay_then_credits_the_worker() public {
        _bondEth(3 ether);
        vm.prank(worker);
        escrow.requestUnbond(ETH, 2 ether);
        JobEscrow.Bond memory b = escrow.bondOf(worker, ETH);
        assertEq(b.active, 1 ether);
        assertEq(b.unbonding, 2 ether);
        assertEq(b.unlockAt, block.timestamp + escrow.UNBONDING_DELAY());
        vm.warp(block.timestamp + escrow.UNBONDING_DELAY() - 1);
        vm.prank(worker);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BondLocked.selector, b.unlockAt));
        escrow.completeUnbond(ETH);
        vm.warp(block.timestamp + 1);
        vm.prank(worker);
        escrow.completeUnbond(ETH);
        assertEq(escrow.withdrawable(worker, ETH), 2 ether);
        assertEq(escrow.bondOf(worker, ETH).unbonding, 0);
        uint256 before = worker.balance;
        vm.prank(worker);
        escrow.withdraw(ETH);
        assertEq(worker.balance, before + 2 ether);
        vm.prank(worker);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToWithdraw.selector, worker, ETH));
        escrow.completeUnbond(ETH);
    }

    function test_unbonding_more_than_the_active_bond_is_refused() public {
        _bondEth(1 ether);
        vm.prank(worker);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BondOutOfRange.selector, 2 ether, 1 ether));
        escrow.requestUnbond(ETH, 2 ether);
        vm.prank(worker);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BondOutOfRange.selector, 0, 1 ether));
        escrow.requestUnbond(ETH, 0);
    }

    function test_a_second_request_restarts_the_delay_for_all_that_is_unbonding() public {
        _bondEth(2 ether);
        vm.prank(worker);
        escrow.requestUnbond(ETH, 1 ether);
        vm.warp(block.timestamp + escrow.UNBONDING_DELAY() - 1 hours);
        vm.prank(worker);
        escrow.requestUnbond(ETH, 1 ether);
        vm.warp(block.timestamp + 2 hours);
        vm.prank(worker);
        vm.expectRevert();
        escrow.completeUnbond(ETH);
    }

    function test_a_forfeit_slashes_active_then_unbonding_to_the_requester_once() public {
        uint256 jobId = _createEth(JobEscrow.JobKind.Federated, STAKE);
        _bondEth(3 ether);
        vm.prank(worker);
        escrow.requestUnbond(ETH, 2 ether);
        // Slashed during unbonding: the delay does not shelter the bond.
        vm.prank(validator);
        uint256 taken = escrow.slashBond(jobId, worker, 2.5 ether);
        assertEq(taken, 2.5 ether);
        JobEscrow.Bond memory b = escrow.bondOf(worker, ETH);
        assertEq(b.active, 0);
        assertEq(b.unbonding, 0.5 ether);
        assertEq(escrow.withdrawable(requester, ETH), 2.5 ether);
        assertTrue(escrow.slashed(jobId, worker));
        // Once per job: a repeat (an outbox retry) changes nothing.
        vm.prank(validator);
        assertEq(escrow.slashBond(jobId, worker, 1 ether), 0);
        assertEq(escrow.bondOf(worker, ETH).unbonding, 0.5 ether);
        assertEq(escrow.withdrawable(requester, ETH), 2.5 ether);
        // What is left still unbonds.
        vm.warp(block.timestamp + escrow.UNBONDING_DELAY());
        vm.prank(worker);
        escrow.completeUnbond(ETH);
        assertEq(escrow.withdrawable(worker, ETH), 0.5 ether);
    }

    function test_a_slash_takes_no_more_than_the_bond_and_only_in_the_jobs_token() public {
        uint256 jobId = _createUsdc(JobEscrow.JobKind.Federated, 1_000e6);
        _bondEth(1 ether);
        vm.prank(worker);
        escrow.bond(address(usdc), 100e6);
        vm.prank(validator);
        assertEq(escrow.slashBond(jobId, worker, 1_000e6), 100e6);
        assertEq(escrow.bondOf(worker, address(usdc)).active, 0);
        assertEq(escrow.bondOf(worker, ETH).active, 1 ether, "the ETH bond is untouched");
        assertEq(escrow.withdrawable(requester, address(usdc)), 100e6);
    }

    function test_only_the_validator_slashes_and_only_for_a_job() public {
        uint256 jobId = _createEth(JobEscrow.JobKind.Federated, STAKE);
        _bondEth(1 ether);
        vm.prank(stranger);
        vm.expectRevert();
        escrow.slashBond(jobId, worker, 1 ether);
        vm.prank(requester);
        vm.expectRevert();
        escrow.slashBond(jobId, worker, 1 ether);
        vm.prank(validator);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, jobId + 1));
        escrow.slashBond(jobId + 1, worker, 1 ether);
        assertEq(escrow.bondOf(worker, ETH).active, 1 ether);
    }

    function test_bonding_is_paused_with_the_escrow_but_unbonding_is_not() public {
        _bondEth(1 ether);
        vm.prank(admin);
        escrow.pause();
        vm.prank(worker);
        vm.expectRevert();
        escrow.bond{value: 1 ether}(ETH, 1 ether);
        vm.prank(worker);
        escrow.requestUnbond(ETH, 1 ether);
        vm.warp(block.timestamp + escrow.UNBONDING_DELAY());
        vm.prank(worker);
        escrow.completeUnbond(ETH);
        assertEq(escrow.withdrawable(worker, ETH), 1 ether);
    }

    function testFuzz_bond_unbond_slash_conserve_the_money(uint96 bonded, uint96 unbond, uint96 slash) public {
        bonded = uint96(bound(bonded, 1, type(uint96).max));
        unbond = uint96(bound(unbond, 1, bonded));
        vm.deal(worker, bonded);
        _bondEth(bonded);
        vm.prank(worker);
        escrow.requestUnbond(ETH, unbond);
        uint256 jobId = _createEth(JobEscrow.JobKind.Federated, STAKE);
        vm.prank(validator);
        uint256 taken = escrow.slashBond(jobId, worker, slash);
        assertEq(taken, slash < bonded ? slash : bonded);
        JobEscrow.Bond memory b = escrow.bondOf(worker, ETH);
        assertEq(uint256(b.active) + b.unbonding + taken, bonded);
        assertEq(address(escrow).balance, STAKE + b.active + b.unbonding + escrow.withdrawable(requester, ETH));
    }
}
