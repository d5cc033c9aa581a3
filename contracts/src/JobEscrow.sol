// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// @title JobEscrow: stakes for Shardwork fine-tuning jobs, paid out by quality and reputation.
/// @notice A requester escrows a stake (ETH or an allow-listed ERC-20) for a job. A validator
/// completes the job by naming its contributors and their quality scores; the stake is split
/// into a platform fee, contributor shares weighted by quality x reputation, and rounding dust
/// that goes back to the requester. Nothing is ever pushed: every payout is a credit that its
/// owner pulls with `withdraw`, so one reverting or blacklisted recipient cannot block anyone else.
///
/// Storage layout choice: each account has ONE packed slot holding its reputation, the index of
/// the token its pending credit is in, and that credit. Paying a contributor therefore writes a
/// single slot (reputation and credit together), which is what keeps a federated completion near
/// the 22.1k-gas floor of one fresh storage slot per new contributor. Credit in a second token is
/// moved to a per-token side mapping (`_parked`) only when an account is paid in a different
/// token while it still has unwithdrawn credit in the first.
contract JobEscrow is AccessControl, ReentrancyGuardTransient, Pausable {
    using SafeERC20 for IERC20;

    // ----------------------------------------------------------------- roles and constants

    /// @notice May mark jobs started and complete them.
    bytes32 public constant VALIDATOR_ROLE = keccak256("VALIDATOR_ROLE");
    /// @notice May change the platform fee (within MAX_FEE_BPS).
    bytes32 public constant FEE_MANAGER_ROLE = keccak256("FEE_MANAGER_ROLE");

    uint256 public constant BPS = 10_000;
    /// @notice The platform fee can never exceed 10% of a stake.
    uint16 public constant MAX_FEE_BPS = 1_000;
    /// @notice Quality scores and reputation are both in basis points: 0 ..= 10_000.
    uint16 public constant MAX_QUALITY = 10_000;
    /// @notice weight = quality x (REP_FLOOR + reputation). With the floor equal to the top
    /// reputation, a newcomer (reputation 0) earns half of what a perfect-reputation contributor
    /// earns for the same quality: reputation matters, yet newcomers are always payable.
    uint256 public constant REP_FLOOR = 10_000;
    /// @notice Reputation moves a quarter of the way toward each new quality score:
    /// rep' = (3 rep + quality) / 4. A zero score lowers it; repeated scores converge to them.
    uint256 public constant REP_EMA_DIVISOR = 4;
    /// @notice Stakes are capped so `pool * weight` can never overflow (2^128 x 2^28 < 2^256) and
    /// credits always fit their 232-bit field. No real token amount comes near 2^128.
    uint256 public constant MAX_STAKE = type(uint128).max;
    /// @notice A job's deadline lies at most this far ahead, so a stake cannot be locked forever.
    uint256 public constant MAX_JOB_DURATION = 365 days;

    // Packed account slot: [0, 232) credit | [232, 240) token index | [240, 256) reputation.
    uint256 private constant CREDIT_BITS = 232;
    uint256 private constant CREDIT_MASK = (uint256(1) << CREDIT_BITS) - 1;
    uint256 private constant TOKEN_SHIFT = 232;
    uint256 private constant REP_SHIFT = 240;

    // ----------------------------------------------------------------------------- types

    enum JobKind {
        LoRA,
        Federated
    }

    /// @dev None: no such job. Open: funded, cancellable by the requester. Started: a validator
    /// said work began (tasks were handed out), so the requester can no longer cancel.
    /// Completed, Cancelled, Refunded: final; the stake has been credited to its recipients.
    enum JobStatus {
        None,
        Open,
        Started,
        Completed,
        Cancelled,
        Refunded
    }

    struct Job {
        address requester;
        uint64 deadline;
        JobKind kind;
        JobStatus status;
        /// Fee snapshot at creation: a later fee change never touches an escrowed stake.
        uint16 feeBps;
        address token;
        uint8 tokenIndex;
        uint256 stake;
        /// keccak256 of the spec CID, so anyone can check a CID against the job.
        bytes32 specHash;
    }

    /// What every contributor's payout in one completion shares; a struct only because the
    /// stack cannot hold these beside the calldata arrays.
    struct Round {
        uint256 jobId;
        uint8 tokenIndex;
        uint256 pool;
        uint256 divisor;
        bytes32 topic;
    }

    // ---------------------------------------------------------------------------- storage

    uint256 public jobCount;
    uint16 public feeBps;
    address public treasury;

    mapping(uint256 jobId => Job) private _jobs;
    mapping(address account => uint256 packed) private _accounts;
    mapping(address token => mapping(address account => uint256)) private _parked;

    mapping(address token => bool) public tokenAllowed;
    /// Index 0 is ETH (address(0)); tokens get 1..255 when first allow-listed, kept forever so
    /// credits in a token removed from the list can still be withdrawn.
    mapping(address token => uint8) private _tokenIndex;
    address[] private _tokenByIndex;

    // ----------------------------------------------------------------------------- events

    event JobCreated(
        uint256 indexed jobId,
        address indexed requester,
        address indexed token,
        uint256 stake,
        uint64 deadline,
        JobKind kind,
        uint16 feeBps,
        bytes32 specHash,
        string specCid
    );
    event JobStarted(uint256 indexed jobId);
    event ContributorPaid(uint256 indexed jobId, address indexed contributor, uint256 amount, uint16 reputation);
    event JobCompleted(
        uint256 indexed jobId,
        string adapterCid,
        string manifestCid,
        uint256 contributorsPaid,
        uint256 fee,
        uint256 dust
    );
    event JobCancelled(uint256 indexed jobId, uint256 stake);
    event JobRefunded(uint256 indexed jobId, address indexed triggeredBy, uint256 stake);
    event Withdrawn(address indexed account, address indexed token, address to, uint256 amount);
    event FeeChanged(uint16 oldFeeBps, uint16 newFeeBps);
    event TreasuryChanged(address oldTreasury, address newTreasury);
    event TokenAllowed(address indexed token, bool allowed, uint8 index);

    // ----------------------------------------------------------------------------- errors

    error ZeroAddress();
    error FeeTooHigh(uint256 feeBps, uint256 maxFeeBps);
    error TokenNotAllowed(address token);
    error TooManyTokens();
    error ZeroStake();
    error StakeTooLarge(uint256 stake, uint256 maxStake);
    error WrongEthAmount(uint256 sent, uint256 stake);
    error EthSentWithToken(uint256 sent);
    error FeeOnTransferToken(address token, uint256 expected, uint256 received);
    error DeadlineNotInFuture(uint256 deadline, uint256 nowTs);
    error DeadlineTooFar(uint256 deadline, uint256 latest);
    error UnknownJob(uint256 jobId);
    error WrongJobStatus(uint256 jobId, JobStatus status);
    error WrongJobKind(uint256 jobId, JobKind kind);
    error DeadlinePassed(uint256 jobId, uint256 deadline);
    error DeadlineNotPassed(uint256 jobId, uint256 deadline);
    error NotRequester(uint256 jobId, address caller);
    error NoContributors();
    error LengthMismatch(uint256 contributors, uint256 qualityScores);
    /// Contributors must be sorted by address, strictly increasing (which also rules out
    /// duplicates and the zero address); `index` is the first entry that breaks the order.
    error ContributorsNotSorted(uint256 index);
    error QualityOutOfRange(uint256 index, uint256 quality);
    error NothingToWithdraw(address account, address token);
    error EthTransferFailed(address to, uint256 amount);

    // ------------------------------------------------------------------------ constructor

    constructor(address admin, address validator, address feeManager, address treasury_, uint16 feeBps_) {
        if (admin == address(0) || validator == address(0) || feeManager == address(0) || treasury_ == address(0)) {
            revert ZeroAddress();
        }
        if (feeBps_ > MAX_FEE_BPS) revert FeeTooHigh(feeBps_, MAX_FEE_BPS);
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _grantRole(VALIDATOR_ROLE, validator);
        _grantRole(FEE_MANAGER_ROLE, feeManager);
        treasury = treasury_;
        feeBps = feeBps_;
        _tokenByIndex.push(address(0));
        emit TreasuryChanged(address(0), treasury_);
        emit FeeChanged(0, feeBps_);
    }

    // ----------------------------------------------------------------------- admin knobs

    function setFeeBps(uint16 newFeeBps) external onlyRole(FEE_MANAGER_ROLE) {
        if (newFeeBps > MAX_FEE_BPS) revert FeeTooHigh(newFeeBps, MAX_FEE_BPS);
        emit FeeChanged(feeBps, newFeeBps);
        feeBps = newFeeBps;
    }

    function setTreasury(address newTreasury) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (newTreasury == address(0)) revert ZeroAddress();
        emit TreasuryChanged(treasury, newTreasury);
        treasury = newTreasury;
    }

    /// @notice Allow-list an ERC-20 for new jobs, or stop accepting it. Only list plain tokens:
    /// fee-on-transfer tokens are rejected at deposit, but rebasing tokens cannot be detected.
    function setTokenAllowed(address token, bool allowed) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (token == address(0)) revert ZeroAddress();
        uint8 index = _tokenIndex[token];
        if (index == 0 && allowed) {
            if (_tokenByIndex.length > type(uint8).max) revert TooManyTokens();
            index = uint8(_tokenByIndex.length);
            _tokenByIndex.push(token);
            _tokenIndex[token] = index;
        }
        tokenAllowed[token] = allowed;
        emit TokenAllowed(token, allowed, index);
    }

    /// @notice Stops new jobs only. Completion, cancellation, refunds and withdrawals go on, so
    /// a pause can never trap anyone's money.
    function pause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _pause();
    }

    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    // ------------------------------------------------------------------------ requester

    /// @notice Escrow `stake` of `token` (address(0) for ETH, sent as msg.value) for a job.
    /// @return jobId the new job's id, counting from 1.
    function createJob(address token, uint256 stake, string calldata specCid, uint64 deadline, JobKind kind)
        external
        payable
        whenNotPaused
        nonReentrant
        returns (uint256 jobId)
    {
        uint8 tokenIndex = _checkDeposit(token, stake, deadline);
        jobId = ++jobCount;
        _jobs[jobId] = Job({
            requester: msg.sender,
            deadline: deadline,
            kind: kind,
            status: JobStatus.Open,
            feeBps: feeBps,
            token: token,
            tokenIndex: tokenIndex,
            stake: stake,
            specHash: keccak256(bytes(specCid))
        });
        if (token != address(0)) _pullExactly(token, stake);
        emit JobCreated(jobId, msg.sender, token, stake, deadline, kind, feeBps, keccak256(bytes(specCid)), specCid);
    }

    function _checkDeposit(address token, uint256 stake, uint64 deadline) private view returns (uint8 tokenIndex) {
        if (stake == 0) revert ZeroStake();
        if (stake > MAX_STAKE) revert StakeTooLarge(stake, MAX_STAKE);
        if (deadline <= block.timestamp) revert DeadlineNotInFuture(deadline, block.timestamp);
        if (deadline > block.timestamp + MAX_JOB_DURATION) {
            revert DeadlineTooFar(deadline, block.timestamp + MAX_JOB_DURATION);
        }
        if (token == address(0)) {
            if (msg.value != stake) revert WrongEthAmount(msg.value, stake);
        } else {
            if (msg.value != 0) revert EthSentWithToken(msg.value);
            if (!tokenAllowed[token]) revert TokenNotAllowed(token);
            tokenIndex = _tokenIndex[token];
        }
    }

    /// The only external call of createJob, made after all effects. The balance delta is the
    /// one measure of what arrived that a fee-on-transfer token cannot misreport.
    function _pullExactly(address token, uint256 stake) private {
        uint256 before = IERC20(token).balanceOf(address(this));
        IERC20(token).safeTransferFrom(msg.sender, address(this), stake);
        uint256 received = IERC20(token).balanceOf(address(this)) - before;
        if (received != stake) revert FeeOnTransferToken(token, stake, received);
    }

    /// @notice The requester takes the stake back before any work started.
    function cancel(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (msg.sender != job.requester) revert NotRequester(jobId, msg.sender);
        if (job.status != JobStatus.Open) revert WrongJobStatus(jobId, job.status);
        job.status = JobStatus.Cancelled;
        _credit(job.requester, job.tokenIndex, job.stake);
        emit JobCancelled(jobId, job.stake);
    }

    /// @notice After the deadline of an unfinished job, anyone may return its stake to the
    /// requester (as a credit; the requester withdraws it).
    function refund(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != JobStatus.Open && job.status != JobStatus.Started) {
            revert WrongJobStatus(jobId, job.status);
        }
        if (block.timestamp <= job.deadline) revert DeadlineNotPassed(jobId, job.deadline);
        job.status = JobStatus.Refunded;
        _credit(job.requester, job.tokenIndex, job.stake);
        emit JobRefunded(jobId, msg.sender, job.stake);
    }

    // ------------------------------------------------------------------------ validator

    /// @notice Work began (the first task was handed out): from now on the requester cannot
    /// cancel, only wait for completion or the deadline refund. The API marks a job started
    /// and waits for this transaction before it leases the first task, so no worker trains
    /// for a job its requester can still withdraw from.
    function markStarted(uint256 jobId) external onlyRole(VALIDATOR_ROLE) {
        Job storage job = _existing(jobId);
        if (job.status != JobStatus.Open) revert WrongJobStatus(jobId, job.status);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        job.status = JobStatus.Started;
        emit JobStarted(jobId);
    }

    /// @notice Complete a single-contributor LoRA job. The contributor gets the whole stake less
    /// the fee, unless its quality score is 0 (then the requester gets it back); reputation is
    /// updated exactly as in a federated completion.
    function completeJob(uint256 jobId, string calldata adapterCid, address contributor, uint16 qualityScore)
        external
        onlyRole(VALIDATOR_ROLE)
        nonReentrant
    {
        if (contributor == address(0)) revert ContributorsNotSorted(0);
        if (qualityScore > MAX_QUALITY) revert QualityOutOfRange(0, qualityScore);
        Job storage job = _completable(jobId, JobKind.LoRA);
        (uint256 fee, uint256 pool) = _split(job);
        uint256 share = qualityScore == 0 ? 0 : pool;
        _payContributor(jobId, contributor, _accounts[contributor], job.tokenIndex, share, qualityScore);
        _finish(jobId, job, adapterCid, "", share, fee, pool - share);
    }

    /// @notice Complete a federated job: weight_i = quality_i x (REP_FLOOR + reputation_i),
    /// share_i = floor(pool x weight_i / sum(weight)), where pool = stake - fee. The rounding dust
    /// (and the whole pool if every quality is 0) goes back to the requester.
    /// @param contributors sorted by address, strictly increasing. Sorting is done off-chain by
    /// the validator; checking it costs one comparison per entry and no storage, whereas a
    /// "seen" set would cost a storage (or transient) write per entry.
    /// @param qualityScores in basis points (0 ..= 10_000), one per contributor.
    function completeFederatedJob(
        uint256 jobId,
        string calldata adapterCid,
        string calldata manifestCid,
        address[] calldata contributors,
        uint16[] calldata qualityScores
    ) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        if (contributors.length == 0) revert NoContributors();
        if (contributors.length != qualityScores.length) {
            revert LengthMismatch(contributors.length, qualityScores.length);
        }
        Job storage job = _completable(jobId, JobKind.Federated);
        (uint256 paid, uint256 fee, uint256 dust) = _settleFederated(jobId, job, contributors, qualityScores);
        _finish(jobId, job, adapterCid, manifestCid, paid, fee, dust);
    }

    function _settleFederated(
        uint256 jobId,
        Job storage job,
        address[] calldata contributors,
        uint16[] calldata qualityScores
    ) private returns (uint256 paid, uint256 fee, uint256 dust) {
        uint256 pool;
        (fee, pool) = _split(job);
        (uint256[] memory slots, uint256 totalWeight) = _weigh(contributors, qualityScores);
        // With every quality 0 all weights are 0: dividing by 1 then pays 0 to everyone.
        Round memory round = Round({
            jobId: jobId,
            tokenIndex: job.tokenIndex,
            pool: pool,
            divisor: totalWeight == 0 ? 1 : totalWeight,
            topic: ContributorPaid.selector
        });
        paid = _distribute(round, contributors, qualityScores, slots);
        dust = pool - paid;
    }

    /// Pass 1: every weight needs its contributor's reputation before any is updated. The
    /// account slots are kept in memory so pass 2 does not read storage again; this is sound
    /// because contributors are distinct (sorted), so no slot changes between the two reads.
    function _weigh(address[] calldata contributors, uint16[] calldata qualityScores)
        private
        view
        returns (uint256[] memory slots, uint256 totalWeight)
    {
        uint256 n = contributors.length;
        slots = new uint256[](n);
        // Assembly because this loop runs once per contributor and the checked, bounds-checked
        // Solidity version costs about 850 gas per entry beyond the storage read; this one
        // about a third of that. The ABI decoder has already checked that both arrays lie
        // within calldata, and the lengths are equal (checked by the caller).
        uint256 badIndex = type(uint256).max;
        uint256 badQuality;
        assembly ("memory-safe") {
            let cs := contributors.offset
            let qs := qualityScores.offset
            let out := add(slots, 0x20)
            let previous := 0
            for { let i := 0 } lt(i, n) { i := add(i, 1) } {
                let contributor := calldataload(add(cs, shl(5, i)))
                // Strictly increasing also rejects duplicates and address(0); dirty high bits
                // (not an address) are rejected the same way.
                if or(shr(160, contributor), iszero(gt(contributor, previous))) {
                    badIndex := i
                    break
                }
                previous := contributor
                let quality := calldataload(add(qs, shl(5, i)))
                if gt(quality, MAX_QUALITY) {
                    badIndex := i
                    badQuality := quality
                    break
                }
                mstore(0x00, contributor)
                mstore(0x20, _accounts.slot)
                let packed := sload(keccak256(0x00, 0x40))
                mstore(add(out, shl(5, i)), packed)
                // weight <= 10_000 x 20_000 < 2^28; n such terms cannot overflow.
                totalWeight := add(totalWeight, mul(quality, add(REP_FLOOR, shr(REP_SHIFT, packed))))
            }
        }
        if (badIndex != type(uint256).max) {
            if (badQuality != 0) revert QualityOutOfRange(badIndex, badQuality);
            revert ContributorsNotSorted(badIndex);
        }
    }

    /// Pass 2: shares round down, so their sum never exceeds the pool. Per contributor this
    /// does exactly what `_payContributor` does (see there for the plain Solidity), in assembly
    /// because it runs once per contributor: ~1.5k gas of checked Solidity bookkeeping per entry
    /// came on top of the 22.1k of the slot write and the 2k of the event.
    function _distribute(
        Round memory round,
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        uint256[] memory slots
    ) private returns (uint256 paid) {
        // Round fields are read from memory inside the loop: the stack has no room for them.
        // Layout: jobId @0x00, tokenIndex @0x20, pool @0x40, divisor @0x60, topic @0x80.
        // Inner blocks keep each variable's lifetime short for the same reason.
        assembly ("memory-safe") {
            for { let i := 0 } lt(i, mload(slots)) { i := add(i, 1) } {
                let contributor := calldataload(add(contributors.offset, shl(5, i)))
                let packed := mload(add(slots, add(0x20, shl(5, i))))
                let share
                let newReputation
                {
                    let quality := calldataload(add(qualityScores.offset, shl(5, i)))
                    newReputation := div(
                        add(mul(shr(REP_SHIFT, packed), sub(REP_EMA_DIVISOR, 1)), quality),
                        REP_EMA_DIVISOR
                    )
                    share := mul(quality, add(REP_FLOOR, shr(REP_SHIFT, packed))) // the weight, for now
                }
                // pool < 2^128 and weight < 2^28: no overflow; the divisor is never 0.
                share := div(mul(mload(add(round, 0x40)), share), mload(add(round, 0x60)))
                // Shares are floors of a partition of the pool: the sum stays <= pool.
                paid := add(paid, share)
                if share {
                    let credit := and(packed, sub(shl(CREDIT_BITS, 1), 1))
                    // Unwithdrawn credit in another token: park it (_parked[token][contributor]).
                    if and(
                        iszero(iszero(credit)),
                        iszero(eq(and(shr(TOKEN_SHIFT, packed), 0xff), mload(add(round, 0x20))))
                    ) {
                        mstore(0x00, _tokenByIndex.slot)
                        mstore(0x00, sload(add(keccak256(0x00, 0x20), and(shr(TOKEN_SHIFT, packed), 0xff))))
                        mstore(0x20, _parked.slot)
                        mstore(0x20, keccak256(0x00, 0x40))
                        mstore(0x00, contributor)
                        // Parked sums are bounded by this contract's balance of the token.
                        mstore(0x00, keccak256(0x00, 0x40))
                        sstore(mload(0x00), add(sload(mload(0x00)), credit))
                        credit := 0
                    }
                    // credit + share < 2^232: every credit stems from stakes < 2^128.
                    packed := or(shl(TOKEN_SHIFT, mload(add(round, 0x20))), add(credit, share))
                }
                packed := or(and(packed, not(shl(REP_SHIFT, 0xffff))), shl(REP_SHIFT, newReputation))
                mstore(0x00, contributor)
                mstore(0x20, _accounts.slot)
                sstore(keccak256(0x00, 0x40), packed)
                // emit ContributorPaid(jobId, contributor, share, newReputation)
                mstore(0x00, share)
                mstore(0x20, newReputation)
                log3(0x00, 0x40, mload(add(round, 0x80)), mload(round), contributor)
            }
        }
    }

    // ------------------------------------------------------------------------- withdraw

    /// @notice Pull everything credited to the caller in `token` (address(0) for ETH).
    function withdraw(address token) external nonReentrant {
        _withdraw(token, payable(msg.sender));
    }

    /// @notice Pull the caller's credit to another address, for accounts that cannot receive
    /// (a contract without a payable fallback, an address a token has blacklisted).
    function withdrawTo(address token, address payable to) external nonReentrant {
        if (to == address(0)) revert ZeroAddress();
        _withdraw(token, to);
    }

    // ---------------------------------------------------------------------------- views

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice What `account` can withdraw in `token` now.
    function withdrawable(address account, address token) external view returns (uint256 amount) {
        amount = _parked[token][account];
        uint256 packed = _accounts[account];
        uint256 credit = packed & CREDIT_MASK;
        if (credit != 0 && _tokenAt(packed) == token) amount += credit;
    }

    /// @notice Reputation in basis points (0 ..= 10_000); 0 for an address never scored.
    function reputationOf(address account) external view returns (uint16) {
        // forge-lint: disable-next-line(unsafe-typecast) the top 16 bits are the reputation field
        return uint16(_accounts[account] >> REP_SHIFT);
    }

    /// @notice Index of a token in the packed account slots; 0 is ETH (and any unlisted token).
    function tokenIndexOf(address token) external view returns (uint8) {
        return _tokenIndex[token];
    }

    // -------------------------------------------------------------------------- internal

    function _existing(uint256 jobId) private view returns (Job storage job) {
        job = _jobs[jobId];
        if (job.status == JobStatus.None) revert UnknownJob(jobId);
    }

    /// Completion is allowed up to and including the deadline; refund only strictly after it.
    /// The two windows never overlap, so a completion and a refund can never race.
    function _completable(uint256 jobId, JobKind kind) private returns (Job storage job) {
        job = _existing(jobId);
        if (job.status != JobStatus.Open && job.status != JobStatus.Started) {
            revert WrongJobStatus(jobId, job.status);
        }
        if (job.kind != kind) revert WrongJobKind(jobId, job.kind);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        job.status = JobStatus.Completed;
    }

    function _split(Job storage job) private view returns (uint256 fee, uint256 pool) {
        uint256 stake = job.stake;
        fee = stake * job.feeBps / BPS;
        pool = stake - fee;
    }

    function _payContributor(
        uint256 jobId,
        address contributor,
        uint256 packed,
        uint8 tokenIndex,
        uint256 share,
        uint256 quality
    ) private {
        uint256 reputation = ((packed >> REP_SHIFT) * (REP_EMA_DIVISOR - 1) + quality) / REP_EMA_DIVISOR;
        packed = _withCredit(contributor, packed, tokenIndex, share);
        _accounts[contributor] = (packed & ~(uint256(type(uint16).max) << REP_SHIFT)) | (reputation << REP_SHIFT);
        // forge-lint: disable-next-line(unsafe-typecast) an average of values <= 10_000
        emit ContributorPaid(jobId, contributor, share, uint16(reputation));
    }

    function _finish(
        uint256 jobId,
        Job storage job,
        string calldata adapterCid,
        string memory manifestCid,
        uint256 paid,
        uint256 fee,
        uint256 dust
    ) private {
        uint8 tokenIndex = job.tokenIndex;
        if (fee != 0) _credit(treasury, tokenIndex, fee);
        if (dust != 0) _credit(job.requester, tokenIndex, dust);
        emit JobCompleted(jobId, adapterCid, manifestCid, paid, fee, dust);
    }

    function _credit(address account, uint8 tokenIndex, uint256 amount) private {
        _accounts[account] = _withCredit(account, _accounts[account], tokenIndex, amount);
    }

    /// Adds `amount` in token `tokenIndex` to a packed account slot. If the slot holds credit in
    /// another token, that credit is parked first (the rare path). Overflow of the 232-bit field
    /// is impossible: every credit stems from a stake <= 2^128, and 2^104 jobs will not happen.
    function _withCredit(address account, uint256 packed, uint8 tokenIndex, uint256 amount) private returns (uint256) {
        if (amount == 0) return packed;
        uint256 credit = packed & CREDIT_MASK;
        // forge-lint: disable-next-line(unsafe-typecast) truncation extracts the 8-bit index field
        if (credit != 0 && uint8(packed >> TOKEN_SHIFT) != tokenIndex) {
            _parked[_tokenAt(packed)][account] += credit;
            credit = 0;
        }
        credit += amount;
        return (packed & (uint256(type(uint16).max) << REP_SHIFT)) | (uint256(tokenIndex) << TOKEN_SHIFT) | credit;
    }

    function _tokenAt(uint256 packed) private view returns (address) {
        // forge-lint: disable-next-line(unsafe-typecast) truncation extracts the 8-bit index field
        return _tokenByIndex[uint8(packed >> TOKEN_SHIFT)];
    }

    function _withdraw(address token, address payable to) private {
        uint256 amount = _parked[token][msg.sender];
        if (amount != 0) _parked[token][msg.sender] = 0;
        uint256 packed = _accounts[msg.sender];
        uint256 credit = packed & CREDIT_MASK;
        if (credit != 0 && _tokenAt(packed) == token) {
            amount += credit;
            _accounts[msg.sender] = packed & ~CREDIT_MASK;
        }
        if (amount == 0) revert NothingToWithdraw(msg.sender, token);
        emit Withdrawn(msg.sender, token, to, amount);

        // Interaction last: the credit is already zero, so a reentrant call finds nothing.
        if (token == address(0)) {
            (bool ok,) = to.call{value: amount}("");
            if (!ok) revert EthTransferFailed(to, amount);
        } else {
            IERC20(token).safeTransfer(to, amount);
        }
    }
}
