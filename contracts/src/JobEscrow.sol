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
/// Storage layout choice: each account has ONE packed slot holding its reputation, its bonus
/// budget (what reputation may still earn it, see REP_FLOOR), the index of the token its pending
/// credit is in, and that credit. Paying a contributor therefore writes a
/// single slot (reputation and credit together), which is what keeps a federated completion near
/// the 22.1k-gas floor of one fresh storage slot per new contributor. Credit in a second token is
/// moved to a per-token side mapping (`_parked`) only when an account is paid in a different
/// token while it still has unwithdrawn credit in the first.
contract JobEscrow is AccessControl, ReentrancyGuardTransient, Pausable {
    using SafeERC20 for IERC20;

    // ----------------------------------------------------------------- roles and constants

    /// @notice May mark jobs started, record their progress, complete them (paying
    /// contributors) and abort them (paying the work done, refunding the rest).
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
    /// What reputation adds is bounded by what it cost: a contributor's share above its share
    /// by quality alone (pool x quality / sum of qualities, what a newcomer would get) is its
    /// reputation bonus, and a bonus is paid only out of the contributor's bonus budget, which
    /// grows by half the platform fee its own earnings paid (BONUS_BUDGET_FEE_SHARE). Farming
    /// reputation through one's own second address therefore pays the fee F and can never earn
    /// back more than F/2 over any horizon; at a 0% fee reputation earns nothing. Any bonus the
    /// budget does not cover goes back to the requester with the rounding dust.
    uint256 public constant REP_FLOOR = 10_000;
    /// @notice The budget counts in millionths of the token's reputation unit, so fees earned in
    /// one token back a bonus in another at the admin's exchange rate (`setReputationUnit`); a
    /// token without a unit neither builds a budget nor pays a bonus.
    uint256 public constant BONUS_BUDGET_SCALE = 1_000_000;
    /// @notice The share (basis points) of the fee its earnings paid that a budget gains.
    uint256 public constant BONUS_BUDGET_FEE_SHARE = 5_000;
    /// @notice Reputation moves at most a quarter of the way toward each new quality score:
    /// rep' = rep + (quality - rep) x step / BPS with step <= MAX_REPUTATION_STEP_BPS. The step
    /// grows with what each contributor's work was worth (the pool per contributor) up to the
    /// token's reputation unit, so a job of 1 wei moves no reputation and farming reputation
    /// costs real fees: see `reputationStepOf`.
    uint256 public constant MAX_REPUTATION_STEP_BPS = 2_500;
    /// @notice What a contributor's share of a job must be worth, in ETH, for the full step;
    /// the admin sets it per token (`setReputationUnit`), ERC-20s start at 0 (no reputation).
    uint256 public constant DEFAULT_ETH_REPUTATION_UNIT = 0.01 ether;
    /// @notice A payout sent in batches may go on this long past the deadline, and so may the
    /// payout of a Started job's recorded progress (`recordProgress`, `abortFederatedJob`);
    /// after it, anyone may refund what was not paid yet, so a validator that stops halfway or
    /// vanishes locks nothing.
    uint256 public constant PAYOUT_GRACE = 7 days;
    /// @notice Stakes are capped so `pool * weight` can never overflow (2^128 x 2^28 < 2^256) and
    /// credits always fit their 232-bit field. No real token amount comes near 2^128.
    uint256 public constant MAX_STAKE = type(uint128).max;
    /// @notice A job's deadline lies at most this far ahead, so a stake cannot be locked forever.
    uint256 public constant MAX_JOB_DURATION = 365 days;
    /// @notice A worker's bond leaves only this long after it asked (`requestUnbond`): longer
    /// than any proof of training waits for its replay (the API replays each one while the job
    /// runs and stops leasing tasks to a worker whose bond is unbonding), so a cheat cannot pull
    /// its bond ahead of the replay that would slash it (issue 47, decision 0044).
    uint256 public constant UNBONDING_DELAY = 14 days;

    // Packed account slot: [0, 192) credit | [192, 232) bonus budget | [232, 240) token index |
    // [240, 256) reputation. 192 bits of credit hold 2^64 maximal stakes.
    uint256 private constant CREDIT_BITS = 192;
    uint256 private constant CREDIT_MASK = (uint256(1) << CREDIT_BITS) - 1;
    uint256 private constant BUDGET_SHIFT = 192;
    uint256 private constant BUDGET_MAX = 0xffffffffff; // 40 bits
    uint256 private constant TOKEN_SHIFT = 232;
    uint256 private constant REP_SHIFT = 240;

    // ----------------------------------------------------------------------------- types

    enum JobKind {
        LoRA,
        Federated
    }

    /// @dev None: no such job. Open: funded, cancellable by the requester. Started: a validator
    /// said work began (tasks were handed out), so the requester can no longer cancel, and only
    /// now can the job be completed. Paying: a batched payout is under way (`payFederatedBatch`).
    /// Completed, Cancelled, Refunded, Aborted: final; the stake has been credited to its
    /// recipients. Aborted: the validator ended a job that could not finish, paying the work
    /// its completed rounds earned (`abortFederatedJob`) or, with none, refunding all.
    enum JobStatus {
        None,
        Open,
        Started,
        Completed,
        Cancelled,
        Refunded,
        Paying,
        Aborted
    }

    /// A worker's bond in one token: `active` backs the tasks it may claim; `unbonding` waits
    /// until `unlockAt` to be credited back, and can still be slashed until then.
    struct Bond {
        uint128 active;
        uint128 unbonding;
        uint64 unlockAt;
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
        /// Progress the validator recorded for a Started federated job (`recordProgress`): the
        /// share of the stake its completed rounds earned, in basis points; 0 = none. Packed
        /// beside `token` and `tokenIndex`, so it costs no slot of its own. While it is not 0, a
        /// deadline refund waits PAYOUT_GRACE, so the requester cannot race the work's payout.
        uint16 earnedBps;
        /// Who receives the fee, fixed at creation like the fee itself.
        address treasury;
        uint256 stake;
        /// keccak256 of the spec CID, so anyone can check a CID against the job.
        bytes32 specHash;
    }

    /// A federated payout in progress (batched) or done. `totalWeight` is the divisor every
    /// batch uses; the contributors of all batches together are strictly increasing, so nobody
    /// is paid twice, and `paid` never exceeds the pool. The weights are the reputations as
    /// they were when the payout began (the batches carry them); `weighed` and `qualitySum`
    /// add up what the batches so far carried, and the last batch must bring them to
    /// `totalWeight` and `totalQuality` exactly.
    struct Payout {
        address lastContributor;
        uint32 expected;
        uint32 paidCount;
        uint16 reputationStepBps;
        uint128 paid;
        uint64 totalWeight;
        /// The share of the stake this payout pays out (fee included): BPS for a completion,
        /// less for an abort that pays the completed rounds (`beginFederatedAbort`). Packed
        /// beside `paid` and `totalWeight`, so announcing it costs no extra storage write.
        uint16 earnedBps;
        /// The sum of the contributors' qualities: the divisor of the share by quality alone.
        uint64 totalQuality;
        uint64 weighed;
        uint64 qualitySum;
        /// The block the payout began in: where a resumed payout looks for what changed since.
        uint64 beganAt;
    }

    /// The weights and qualities of a list of contributors, added up.
    struct Sums {
        uint256 weight;
        uint256 quality;
    }

    /// What every contributor's payout in one batch shares; a struct only because the stack
    /// cannot hold these beside the calldata arrays. Layout matters: `_distribute` reads it.
    struct Round {
        uint256 jobId;
        uint8 tokenIndex;
        uint256 pool;
        uint256 divisor;
        uint256 reputationStepBps;
        uint256 remaining;
        /// The sum of qualities: a share by quality alone is pool x quality / totalQuality.
        uint256 totalQuality;
        /// The token's reputation unit (the bonus budget's scale); 0: no bonus, no budget.
        uint256 reputationUnit;
        /// The fee this payout takes, in the token: what the shares' budgets grow by half of.
        uint256 fee;
    }

    // ---------------------------------------------------------------------------- storage

    uint256 public jobCount;
    uint16 public feeBps;
    address public treasury;

    mapping(uint256 jobId => Job) private _jobs;
    mapping(uint256 jobId => Payout) private _payouts;
    /// Why a batched abort (`beginFederatedAbort`) ends the job, kept until its last batch logs
    /// it in `JobAborted`: a batched payout pays hundreds of contributors per transaction, so
    /// the few slots of a reason are noise, and every abort then reads the same way in the logs.
    mapping(uint256 jobId => string) private _abortReasons;
    /// Per token index: the share worth a full reputation step (see MAX_REPUTATION_STEP_BPS).
    mapping(uint8 tokenIndex => uint256) private _reputationUnit;
    mapping(address account => uint256 packed) private _accounts;
    mapping(address token => mapping(address account => uint256)) private _parked;

    /// Per worker and token index: its bond.
    mapping(address worker => mapping(uint8 tokenIndex => Bond)) private _bonds;
    /// A worker's bond is slashed at most once per job, so a repeated call changes nothing.
    mapping(uint256 jobId => mapping(address worker => bool)) public slashed;

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
    /// A completion began: the result, how many contributors it pays and the weight it divides
    /// the pool by. One-transaction completions emit it too, so every job reads the same way.
    event PayoutStarted(
        uint256 indexed jobId, string adapterCid, string manifestCid, uint256 contributors, uint256 totalWeight
    );
    /// One batch of contributors paid. `payouts` holds two words per contributor:
    /// `contributor | reputation << 160 | previous << 176` (its reputation after this job and
    /// before it) and the amount credited.
    /// One event per batch rather than one per contributor: a 3-topic log per contributor cost
    /// ~2k gas, this ~0.5k, which is what brings a new contributor under 25k gas.
    event ContributorsPaid(uint256 indexed jobId, uint256[] payouts);
    /// The last batch landed: totals of the whole payout.
    event JobCompleted(uint256 indexed jobId, uint256 contributors, uint256 paid, uint256 fee, uint256 dust);
    event JobCancelled(uint256 indexed jobId, uint256 stake);
    /// `stake` is what went back: the whole stake, or what a stalled batched payout had not paid.
    event JobRefunded(uint256 indexed jobId, address indexed triggeredBy, uint256 stake);
    /// The job ended early. `stake` is what went back to the requester: the whole stake for a
    /// plain `abortJob`, the unearned part plus rounding dust when the completed rounds were
    /// paid (`abortFederatedJob`, or the last batch of `beginFederatedAbort`).
    event JobAborted(uint256 indexed jobId, uint256 stake, string reason);
    /// The validator recorded that a Started job's completed rounds earned `earnedBps` of it.
    event ProgressRecorded(uint256 indexed jobId, uint16 earnedBps);
    event ReputationUnitChanged(address indexed token, uint256 unit);
    event Withdrawn(address indexed account, address indexed token, address to, uint256 amount);
    event FeeChanged(uint16 oldFeeBps, uint16 newFeeBps);
    event TreasuryChanged(address oldTreasury, address newTreasury);
    event TokenAllowed(address indexed token, bool allowed, uint8 index);
    /// A bond changed (bonded, unbonding asked, unbonded, slashed): its state after.
    event BondChanged(
        address indexed worker, address indexed token, uint256 active, uint256 unbonding, uint64 unlockAt
    );
    /// A forfeited job took `amount` of the worker's bond, credited to the job's requester.
    event BondSlashed(uint256 indexed jobId, address indexed worker, uint256 amount);

    // ----------------------------------------------------------------------------- errors

    error ZeroAddress();
    error FeeTooHigh(uint256 feeBps, uint256 maxFeeBps);
    /// The fee now is above the highest the requester accepted in `createJob`.
    error FeeAboveMaximum(uint256 feeBps, uint256 requesterMaxFeeBps);
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
    /// A requester cannot earn from (or build reputation on) its own job.
    error RequesterIsContributor(uint256 index);
    error TooManyContributors(uint256 announced, uint256 paidWithThisBatch);
    error PayoutGraceNotPassed(uint256 jobId, uint256 until);
    /// An earned share must be 1 ..= BPS basis points of the stake.
    error EarnedOutOfRange(uint256 earnedBps);
    /// Recorded progress only grows: a round once paid for stays earned.
    error ProgressDecreased(uint256 jobId, uint256 recorded, uint256 earnedBps);
    error QualityOutOfRange(uint256 index, uint256 quality);
    error ReputationOutOfRange(uint256 index, uint256 reputation);
    /// A batch must carry one reputation per contributor (two bytes each): the one it had when
    /// the payout began.
    error ReputationsMissing(uint256 contributors, uint256 reputationBytes);
    /// The batches carried more weight (or quality) than the payout announced, or the last
    /// batch left the sums short of it: the reputations are not the ones the payout began with.
    error WeightsDoNotAddUp(uint256 announced, uint256 carried);
    error NothingToWithdraw(address account, address token);
    /// More unbonding asked than the bond holds, or a bond pushed past MAX_STAKE.
    error BondOutOfRange(uint256 amount, uint256 available);
    error BondLocked(uint256 unlockAt);
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
        _reputationUnit[0] = DEFAULT_ETH_REPUTATION_UNIT;
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

    /// @notice The share of a job (`token`, address(0) for ETH) a contributor must earn for a
    /// full reputation step; smaller shares move reputation proportionally less, 0 disables
    /// reputation for the token (and its bonuses, see REP_FLOOR). Applies to payouts from now
    /// on. At most MAX_STAKE, so the bonus budget's arithmetic cannot overflow.
    function setReputationUnit(address token, uint256 unit) external onlyRole(DEFAULT_ADMIN_ROLE) {
        uint8 index = _tokenIndex[token];
        if (token != address(0) && index == 0) revert TokenNotAllowed(token);
        if (unit > MAX_STAKE) revert StakeTooLarge(unit, MAX_STAKE);
        _reputationUnit[index] = unit;
        emit ReputationUnitChanged(token, unit);
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
    /// @param maxFeeBps the highest platform fee the requester accepts: a fee raised between
    /// signing and mining reverts the creation instead of applying.
    /// @return jobId the new job's id, counting from 1.
    function createJob(
        address token,
        uint256 stake,
        string calldata specCid,
        uint64 deadline,
        JobKind kind,
        uint16 maxFeeBps
    ) external payable whenNotPaused nonReentrant returns (uint256 jobId) {
        if (feeBps > maxFeeBps) revert FeeAboveMaximum(feeBps, maxFeeBps);
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
            earnedBps: 0,
            treasury: treasury,
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
    /// requester (as a credit; the requester withdraws it). A batched payout that stalled is
    /// refunded what it had not paid, and a Started job with recorded progress its whole stake,
    /// once PAYOUT_GRACE past the deadline has passed too: until then the validator may still
    /// pay the work done (`abortFederatedJob`), which a requester racing to refund at the
    /// deadline would otherwise keep for nothing.
    function refund(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        uint256 amount = job.stake;
        JobStatus status = job.status;
        if (status == JobStatus.Paying || (status == JobStatus.Started && job.earnedBps != 0)) {
            uint256 until = uint256(job.deadline) + PAYOUT_GRACE;
            if (block.timestamp <= until) revert PayoutGraceNotPassed(jobId, until);
            if (status == JobStatus.Paying) {
                amount -= _payouts[jobId].paid;
                delete _abortReasons[jobId];
            }
        } else if (status != JobStatus.Open && status != JobStatus.Started) {
            revert WrongJobStatus(jobId, status);
        }
        if (block.timestamp <= job.deadline) revert DeadlineNotPassed(jobId, job.deadline);
        job.status = JobStatus.Refunded;
        _credit(job.requester, job.tokenIndex, amount);
        emit JobRefunded(jobId, msg.sender, amount);
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

    /// @notice Record that a Started federated job's completed rounds earned `earnedBps` of its
    /// stake (the API sends it when a round's merge is accepted). Monotonic: a repeat of the
    /// recorded value changes nothing, a lower one reverts. Once recorded, the deadline refund
    /// waits PAYOUT_GRACE, the window in which `abortFederatedJob` pays that work. Only up to
    /// the deadline, like a completion, so it never races a refund.
    function recordProgress(uint256 jobId, uint16 earnedBps) external onlyRole(VALIDATOR_ROLE) {
        if (earnedBps == 0 || earnedBps > BPS) revert EarnedOutOfRange(earnedBps);
        Job storage job = _completable(jobId, JobKind.Federated);
        uint16 recorded = job.earnedBps;
        if (earnedBps < recorded) revert ProgressDecreased(jobId, recorded, earnedBps);
        if (earnedBps == recorded) return;
        job.earnedBps = earnedBps;
        emit ProgressRecorded(jobId, earnedBps);
    }

    /// @notice End a job that cannot finish (a task used up its attempts, its model cannot be
    /// loaded) and give the requester the whole stake back now, not at the deadline. Only before
    /// a payout begins; no fee is taken, since nothing was delivered. A job whose completed
    /// rounds hold accepted work is ended with `abortFederatedJob` instead, which pays it.
    function abortJob(uint256 jobId, string calldata reason) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != JobStatus.Open && job.status != JobStatus.Started) {
            revert WrongJobStatus(jobId, job.status);
        }
        job.status = JobStatus.Aborted;
        _credit(job.requester, job.tokenIndex, job.stake);
        emit JobAborted(jobId, job.stake, reason);
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
        if (contributor == job.requester) revert RequesterIsContributor(0);
        job.status = JobStatus.Completed;
        (, uint256 pool,) = _split(job, BPS);
        uint256 share = qualityScore == 0 ? 0 : pool;
        uint256 packed = _accounts[contributor];
        uint256 step = _reputationStep(job.tokenIndex, pool, 1);
        uint256 reputation = _nextReputation(packed >> REP_SHIFT, qualityScore, step);
        emit PayoutStarted(jobId, adapterCid, "", 1, qualityScore * (REP_FLOOR + (packed >> REP_SHIFT)));
        // A sole contributor's share is its share by quality alone: no bonus, only budget.
        packed = _withBudget(
            _withCredit(contributor, packed, job.tokenIndex, share), share == 0 ? 0 : job.stake - pool, job
        );
        _accounts[contributor] = (packed & ~(uint256(type(uint16).max) << REP_SHIFT)) | (reputation << REP_SHIFT);
        uint256[] memory payouts = new uint256[](2);
        payouts[0] = uint256(uint160(contributor)) | (reputation << 160) | ((packed >> REP_SHIFT) << 176);
        payouts[1] = share;
        emit ContributorsPaid(jobId, payouts);
        _finishLora(jobId, job, pool, share);
    }

    /// The end of `completeJob`, apart only because the stack cannot hold it there.
    function _finishLora(uint256 jobId, Job storage job, uint256 pool, uint256 share) private {
        Round memory round = Round({
            jobId: jobId,
            tokenIndex: job.tokenIndex,
            pool: pool,
            divisor: 1,
            reputationStepBps: 0,
            remaining: pool - share,
            totalQuality: 1,
            reputationUnit: 0,
            fee: 0
        });
        _finish(job, round, BPS, 1, "");
    }

    /// @notice Complete a federated job in one transaction: weight_i = quality_i x (REP_FLOOR +
    /// reputation_i), share_i = floor(pool x weight_i / sum(weight)), where pool = stake - fee.
    /// The rounding dust (and the whole pool if every quality is 0) goes back to the requester.
    /// For more contributors than fit one transaction, see `beginFederatedPayout`.
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
        _checkLengths(contributors.length, qualityScores.length);
        Job storage job = _completable(jobId, JobKind.Federated);
        job.status = JobStatus.Completed;
        (uint256[] memory slots, Sums memory sums) =
            _weigh(contributors, qualityScores, msg.data[0:0], address(0), job.requester);
        emit PayoutStarted(jobId, adapterCid, manifestCid, contributors.length, sums.weight);
        _settleAtOnce(jobId, job, BPS, "", contributors, qualityScores, slots, sums);
    }

    /// @notice End a federated job that cannot finish, paying the work its completed rounds
    /// earned: `earnedBps` of the stake (completed rounds / rounds, in basis points) is paid
    /// exactly as a completion pays the whole stake (the fee on that part only, then shares by
    /// quality x (REP_FLOOR + reputation) among the contributors of those rounds), and the
    /// unearned rest plus the rounding dust goes back to the requester in this transaction.
    /// The job ends Aborted (`JobAborted` with what went back and `reason`); at `earnedBps` =
    /// BPS it is a completion. Allowed while Started up to the deadline, and PAYOUT_GRACE past
    /// it when progress was recorded (`recordProgress`). For more contributors than fit one
    /// transaction, see `beginFederatedAbort`.
    /// @param adapterCid the last completed round's merge: what the requester keeps.
    function abortFederatedJob(
        uint256 jobId,
        uint16 earnedBps,
        string calldata adapterCid,
        string calldata reason,
        address[] calldata contributors,
        uint16[] calldata qualityScores
    ) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        _checkLengths(contributors.length, qualityScores.length);
        Job storage job = _abortable(jobId, earnedBps);
        job.status = earnedBps < BPS ? JobStatus.Aborted : JobStatus.Completed;
        (uint256[] memory slots, Sums memory sums) =
            _weigh(contributors, qualityScores, msg.data[0:0], address(0), job.requester);
        emit PayoutStarted(jobId, adapterCid, "", contributors.length, sums.weight);
        _settleAtOnce(jobId, job, earnedBps, reason, contributors, qualityScores, slots, sums);
    }

    /// The rest of `completeFederatedJob` and `abortFederatedJob`, apart only because the
    /// stack cannot hold it there.
    function _settleAtOnce(
        uint256 jobId,
        Job storage job,
        uint256 earnedBps,
        string memory reason,
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        uint256[] memory slots,
        Sums memory sums
    ) private {
        (uint256 fee, uint256 pool,) = _split(job, earnedBps);
        // With every quality 0 all weights are 0: dividing by 1 then pays 0 to everyone.
        Round memory round = Round({
            jobId: jobId,
            tokenIndex: job.tokenIndex,
            pool: pool,
            divisor: sums.weight == 0 ? 1 : sums.weight,
            reputationStepBps: _reputationStep(job.tokenIndex, pool, contributors.length),
            remaining: pool,
            totalQuality: sums.quality == 0 ? 1 : sums.quality,
            reputationUnit: _reputationUnit[job.tokenIndex],
            fee: fee
        });
        _distribute(round, contributors, qualityScores, slots);
        _finish(job, round, earnedBps, contributors.length, reason);
    }

    /// @notice Begin a federated payout too large for one transaction; `payFederatedBatch`
    /// then pays `contributorCount` contributors in order, and the last batch completes the job.
    /// @param totalWeight sum of quality_i x (REP_FLOOR + reputation_i) over all contributors,
    /// with each reputation as `reputationsOf` reports it now (`weigh` sums it). Every batch
    /// divides by it and carries those same reputations, so the weights are the ones of this
    /// moment however other jobs move reputations meanwhile; the batches' weights and
    /// qualities must add up to `totalWeight` and `totalQuality` exactly.
    /// @param totalQuality sum of quality_i over all contributors.
    function beginFederatedPayout(
        uint256 jobId,
        string calldata adapterCid,
        string calldata manifestCid,
        uint32 contributorCount,
        uint64 totalWeight,
        uint64 totalQuality
    ) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        if (contributorCount == 0) revert NoContributors();
        Job storage job = _completable(jobId, JobKind.Federated);
        // forge-lint: disable-next-line(unsafe-typecast) BPS = 10_000 fits 16 bits
        _beginPayout(jobId, job, uint16(BPS), contributorCount, Sums(totalWeight, totalQuality));
        emit PayoutStarted(jobId, adapterCid, manifestCid, contributorCount, totalWeight);
    }

    /// @notice Begin an abort that pays the completed rounds' work (see `abortFederatedJob`)
    /// in batches: `payFederatedBatch` then pays `contributorCount` contributors in order, and
    /// the last batch credits the fee on the earned part and sends the unearned rest plus the
    /// dust back to the requester, ending the job Aborted with `reason`.
    function beginFederatedAbort(
        uint256 jobId,
        uint16 earnedBps,
        string calldata adapterCid,
        string calldata reason,
        uint32 contributorCount,
        uint64 totalWeight,
        uint64 totalQuality
    ) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        if (contributorCount == 0) revert NoContributors();
        Job storage job = _abortable(jobId, earnedBps);
        _beginPayout(jobId, job, earnedBps, contributorCount, Sums(totalWeight, totalQuality));
        if (earnedBps < BPS) _abortReasons[jobId] = reason;
        emit PayoutStarted(jobId, adapterCid, "", contributorCount, totalWeight);
    }

    function _beginPayout(uint256 jobId, Job storage job, uint16 earnedBps, uint32 contributorCount, Sums memory totals)
        private
    {
        job.status = JobStatus.Paying;
        (, uint256 pool,) = _split(job, earnedBps);
        _payouts[jobId] = Payout({
            lastContributor: address(0),
            expected: contributorCount,
            paidCount: 0,
            // forge-lint: disable-next-line(unsafe-typecast) at most MAX_REPUTATION_STEP_BPS
            reputationStepBps: uint16(_reputationStep(job.tokenIndex, pool, contributorCount)),
            paid: 0,
            // forge-lint: disable-next-line(unsafe-typecast) both came in as uint64
            totalWeight: uint64(totals.weight),
            earnedBps: earnedBps,
            // forge-lint: disable-next-line(unsafe-typecast) both came in as uint64
            totalQuality: uint64(totals.quality),
            weighed: 0,
            qualitySum: 0,
            beganAt: uint64(block.number)
        });
    }

    /// @notice Pay the next batch of a payout begun with `beginFederatedPayout`. Contributors
    /// continue the strictly increasing order of the batches before, so a batch sent twice
    /// reverts instead of paying twice, and a crashed sender resumes from `payoutOf`.
    /// @param reputations each contributor's reputation when the payout began (what
    /// `reputationsOf` said then, or the last `ContributorsPaid` entry before `PayoutStarted`):
    /// its weight. Two bytes each, big-endian, back to back: as 32-byte ABI words they would
    /// cost ~120 gas of calldata per contributor, half a percent of a new contributor's cost.
    /// Reputations still move from what they are now.
    function payFederatedBatch(
        uint256 jobId,
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        bytes calldata reputations
    ) external onlyRole(VALIDATOR_ROLE) nonReentrant {
        _checkLengths(contributors.length, qualityScores.length);
        if (reputations.length != 2 * contributors.length) {
            revert ReputationsMissing(contributors.length, reputations.length);
        }
        Job storage job = _existing(jobId);
        if (job.status != JobStatus.Paying) revert WrongJobStatus(jobId, job.status);
        Payout storage payout = _payouts[jobId];
        uint256 count = uint256(payout.paidCount) + contributors.length;
        if (count > payout.expected) revert TooManyContributors(payout.expected, count);
        (uint256[] memory slots, Sums memory sums) =
            _weigh(contributors, qualityScores, reputations, payout.lastContributor, job.requester);
        payout.lastContributor = contributors[contributors.length - 1];
        // forge-lint: disable-next-line(unsafe-typecast) count <= expected, a uint32
        payout.paidCount = uint32(count);
        _carry(payout, sums, count == payout.expected);
        _payBatch(jobId, job, payout, contributors, qualityScores, slots);
    }

    /// Adds a batch's weight and quality to what the batches before carried: never beyond the
    /// announced totals, and exactly them with the last batch.
    function _carry(Payout storage payout, Sums memory batch, bool last) private {
        uint256 weighed = payout.weighed + batch.weight;
        uint256 qualitySum = payout.qualitySum + batch.quality;
        if (weighed > payout.totalWeight || (last && weighed != payout.totalWeight)) {
            revert WeightsDoNotAddUp(payout.totalWeight, weighed);
        }
        if (qualitySum > payout.totalQuality || (last && qualitySum != payout.totalQuality)) {
            revert WeightsDoNotAddUp(payout.totalQuality, qualitySum);
        }
        // forge-lint: disable-next-line(unsafe-typecast) both at most a uint64 total
        payout.weighed = uint64(weighed);
        // forge-lint: disable-next-line(unsafe-typecast) both at most a uint64 total
        payout.qualitySum = uint64(qualitySum);
    }

    /// The rest of `payFederatedBatch`, apart only because the stack cannot hold it there.
    function _payBatch(
        uint256 jobId,
        Job storage job,
        Payout storage payout,
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        uint256[] memory slots
    ) private {
        uint256 earnedBps = payout.earnedBps;
        (uint256 fee, uint256 pool,) = _split(job, earnedBps);
        Round memory round = Round({
            jobId: jobId,
            tokenIndex: job.tokenIndex,
            pool: pool,
            divisor: payout.totalWeight == 0 ? 1 : payout.totalWeight,
            reputationStepBps: payout.reputationStepBps,
            remaining: pool - payout.paid,
            totalQuality: payout.totalQuality == 0 ? 1 : payout.totalQuality,
            reputationUnit: _reputationUnit[job.tokenIndex],
            fee: fee
        });
        uint256 paid = payout.paid + _distribute(round, contributors, qualityScores, slots);
        // forge-lint: disable-next-line(unsafe-typecast) paid <= pool < 2^128
        payout.paid = uint128(paid);
        if (payout.paidCount == payout.expected) {
            // Nothing unearned exactly when the whole stake was earned (see `_split`).
            if (earnedBps == BPS) {
                job.status = JobStatus.Completed;
                _finish(job, round, BPS, payout.expected, "");
            } else {
                job.status = JobStatus.Aborted;
                string memory reason = _abortReasons[jobId];
                delete _abortReasons[jobId];
                _finish(job, round, earnedBps, payout.expected, reason);
            }
        }
    }

    function _checkLengths(uint256 contributors, uint256 qualityScores) private pure {
        if (contributors == 0) revert NoContributors();
        if (contributors != qualityScores) revert LengthMismatch(contributors, qualityScores);
    }

    /// Pass 1: every weight needs its contributor's reputation before any is updated. The
    /// account slots are kept in memory so pass 2 does not read storage again; this is sound
    /// because contributors are distinct (sorted), so no slot changes between the two reads.
    /// `slots` holds two words per contributor: its account slot and its weight. The weight
    /// uses `reputations` when given (a batch: the reputations when its payout began), else
    /// the stored reputation. `previous` is the last contributor of the batches before (0 for
    /// the first).
    function _weigh(
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        bytes calldata reputations,
        address previous,
        address requester
    ) private view returns (uint256[] memory slots, Sums memory sums) {
        slots = new uint256[](2 * contributors.length);
        sums = Sums(0, 0);
        // Assembly because this loop runs once per contributor and the checked, bounds-checked
        // Solidity version costs about 850 gas per entry beyond the storage read; this one
        // about a third of that. The ABI decoder has already checked that the arrays lie
        // within calldata, and the lengths are equal (checked by the caller), or `reputations`
        // is empty. A refusal is packed into `bad` (the stack has no room for three words):
        // kind | index << 8 | value << 128, where kind 1 is out of order, 2 the requester,
        // 3 a quality out of range, 4 a reputation out of range.
        uint256 bad;
        assembly ("memory-safe") {
            let last := previous
            let totalWeight := 0
            let totalQuality := 0
            for { let i := 0 } lt(i, contributors.length) { i := add(i, 1) } {
                let contributor := calldataload(add(contributors.offset, shl(5, i)))
                // Strictly increasing also rejects duplicates and address(0); dirty high bits
                // (not an address) are rejected the same way.
                if or(shr(160, contributor), iszero(gt(contributor, last))) {
                    bad := or(1, shl(8, i))
                    break
                }
                if eq(contributor, requester) {
                    bad := or(2, shl(8, i))
                    break
                }
                last := contributor
                let quality := calldataload(add(qualityScores.offset, shl(5, i)))
                if gt(quality, MAX_QUALITY) {
                    bad := or(or(3, shl(8, i)), shl(128, quality))
                    break
                }
                mstore(0x00, contributor)
                mstore(0x20, _accounts.slot)
                let packed := sload(keccak256(0x00, 0x40))
                mstore(add(slots, add(0x20, shl(6, i))), packed)
                let reputation := shr(REP_SHIFT, packed)
                if reputations.length {
                    reputation := shr(240, calldataload(add(reputations.offset, shl(1, i))))
                    if gt(reputation, MAX_QUALITY) {
                        bad := or(or(4, shl(8, i)), shl(128, reputation))
                        break
                    }
                }
                // weight <= 10_000 x 20_000 < 2^28; n such terms cannot overflow.
                let weight := mul(quality, add(REP_FLOOR, reputation))
                mstore(add(slots, add(0x40, shl(6, i))), weight)
                totalWeight := add(totalWeight, weight)
                totalQuality := add(totalQuality, quality)
            }
            mstore(sums, totalWeight)
            mstore(add(sums, 0x20), totalQuality)
        }
        if (bad != 0) {
            uint256 kind = bad & 0xff;
            uint256 index = (bad >> 8) & type(uint120).max;
            if (kind == 2) revert RequesterIsContributor(index);
            if (kind == 3) revert QualityOutOfRange(index, bad >> 128);
            if (kind == 4) revert ReputationOutOfRange(index, bad >> 128);
            revert ContributorsNotSorted(index);
        }
    }

    /// Pass 2: shares round down, so their sum never exceeds the pool, and each is capped by
    /// what is left of it (`round.remaining`), which only binds when a batched payout's divisor
    /// was too small. A share above the share by quality alone pays its bonus out of the
    /// contributor's budget (see REP_FLOOR); every share then adds half its fee to the budget.
    /// Per contributor this does what `completeJob` does in plain Solidity, in assembly
    /// because it runs once per contributor: checked Solidity bookkeeping cost ~1.5k gas per
    /// entry on top of the 22.1k of the slot write. Returns what this batch paid.
    function _distribute(
        Round memory round,
        address[] calldata contributors,
        uint16[] calldata qualityScores,
        uint256[] memory slots
    ) private returns (uint256 paid) {
        uint256 n = contributors.length;
        uint256[] memory payouts = new uint256[](n * 2);
        // Round fields are read from memory inside the loop: the stack has no room for them.
        // Layout: jobId @0x00, tokenIndex @0x20, pool @0x40, divisor @0x60, step @0x80,
        // remaining @0xa0, totalQuality @0xc0, reputationUnit @0xe0, fee @0x100. Inner
        // blocks keep each variable's lifetime short for the same reason.
        assembly ("memory-safe") {
            for { let i := 0 } lt(i, n) { i := add(i, 1) } {
                let packed := mload(add(slots, add(0x20, shl(6, i))))
                let newReputation
                {
                    let quality := calldataload(add(qualityScores.offset, shl(5, i)))
                    let step := mload(add(round, 0x80))
                    // rep + (quality - rep) x step / BPS, in unsigned terms.
                    newReputation := div(add(mul(shr(REP_SHIFT, packed), sub(BPS, step)), mul(quality, step)), BPS)
                }
                // pool < 2^128 and weight < 2^28: no overflow; the divisor is never 0.
                let share :=
                    div(mul(mload(add(round, 0x40)), mload(add(slots, add(0x40, shl(6, i))))), mload(add(round, 0x60)))
                // Only a weight with reputation in it can exceed the share by quality alone
                // (W >= REP_FLOOR x the sum of qualities), so a newcomer skips the bonus.
                if gt(
                    mload(add(slots, add(0x40, shl(6, i)))),
                    mul(REP_FLOOR, calldataload(add(qualityScores.offset, shl(5, i))))
                ) {
                    // The share by quality alone; above it, the bonus the budget can pay.
                    let baseline :=
                        div(
                            mul(mload(add(round, 0x40)), calldataload(add(qualityScores.offset, shl(5, i)))),
                            mload(add(round, 0xc0))
                        )
                    if gt(share, baseline) {
                        let unit := mload(add(round, 0xe0))
                        let budget := and(shr(BUDGET_SHIFT, packed), BUDGET_MAX)
                        let bonus := sub(share, baseline)
                        // budget < 2^40 and unit <= 2^128: no overflow.
                        let affordable := div(mul(budget, unit), BONUS_BUDGET_SCALE)
                        if gt(bonus, affordable) { bonus := affordable }
                        share := add(baseline, bonus)
                        if bonus {
                            // Rounded up, so a bonus never costs less budget than it is worth;
                            // bonus <= affordable keeps this within the budget.
                            budget := sub(budget, div(add(mul(bonus, BONUS_BUDGET_SCALE), sub(unit, 1)), unit))
                            packed := or(and(packed, not(shl(BUDGET_SHIFT, BUDGET_MAX))), shl(BUDGET_SHIFT, budget))
                        }
                    }
                }
                {
                    let remaining := mload(add(round, 0xa0))
                    if gt(share, remaining) { share := remaining }
                    mstore(add(round, 0xa0), sub(remaining, share))
                }
                paid := add(paid, share)
                if share {
                    {
                        let unit := mload(add(round, 0xe0))
                        if unit {
                            // The fee this share paid is fee x share / pool, rounded down (both
                            // below 2^128); the budget gains BONUS_BUDGET_FEE_SHARE of it, in
                            // millionths of the unit, rounded down again: all budgets together
                            // never gain more than half the fee. The pool is not 0 here.
                            let budget := mul(mload(add(round, 0x100)), share)
                            budget := div(budget, mload(add(round, 0x40)))
                            budget := div(mul(budget, mul(BONUS_BUDGET_SCALE, BONUS_BUDGET_FEE_SHARE)), mul(BPS, unit))
                            budget := add(budget, and(shr(BUDGET_SHIFT, packed), BUDGET_MAX))
                            if gt(budget, BUDGET_MAX) { budget := BUDGET_MAX }
                            packed := or(and(packed, not(shl(BUDGET_SHIFT, BUDGET_MAX))), shl(BUDGET_SHIFT, budget))
                        }
                    }
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
                        mstore(0x00, calldataload(add(contributors.offset, shl(5, i))))
                        // Parked sums are bounded by this contract's balance of the token.
                        mstore(0x00, keccak256(0x00, 0x40))
                        sstore(mload(0x00), add(sload(mload(0x00)), credit))
                        credit := 0
                    }
                    // credit + share < 2^192: every credit stems from stakes < 2^128. The
                    // budget and reputation bits stay as they are (the old reputation goes
                    // into the entry below).
                    packed := or(
                        and(packed, or(shl(BUDGET_SHIFT, BUDGET_MAX), shl(REP_SHIFT, 0xffff))),
                        or(shl(TOKEN_SHIFT, mload(add(round, 0x20))), add(credit, share))
                    )
                }
                {
                    // The entry: contributor | new reputation << 160 | old reputation << 176
                    // (still in `packed`), then the amount. The old one lets a resumed payout
                    // recover what a contributor weighed when the payout began.
                    let contributor := calldataload(add(contributors.offset, shl(5, i)))
                    let entry := add(payouts, add(0x20, shl(6, i)))
                    mstore(entry, or(or(contributor, shl(160, newReputation)), shl(176, shr(REP_SHIFT, packed))))
                    mstore(add(entry, 0x20), share)
                    packed := or(and(packed, not(shl(REP_SHIFT, 0xffff))), shl(REP_SHIFT, newReputation))
                    mstore(0x00, contributor)
                    mstore(0x20, _accounts.slot)
                    sstore(keccak256(0x00, 0x40), packed)
                }
            }
        }
        emit ContributorsPaid(round.jobId, payouts);
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

    // ----------------------------------------------------------------------- worker bonds

    /// @notice Bond `amount` of `token` (address(0) for ETH, sent as the value; an allow-listed
    /// token, pulled) as a worker: the API leases it tasks worth up to what its active bond
    /// covers, and a job it forfeits by a failed proof of training slashes it.
    function bond(address token, uint256 amount) external payable whenNotPaused nonReentrant {
        uint8 tokenIndex = _checkDeposit(token, amount, uint64(block.timestamp + 1));
        Bond storage b = _bonds[msg.sender][tokenIndex];
        uint256 active = b.active + amount;
        if (active > MAX_STAKE) revert BondOutOfRange(amount, MAX_STAKE - b.active);
        // forge-lint: disable-next-line(unsafe-typecast) checked against MAX_STAKE above
        b.active = uint128(active);
        _emitBond(msg.sender, token, b);
        if (token != address(0)) _pullExactly(token, amount);
    }

    /// @notice Start withdrawing `amount` of the caller's active bond in `token`: it stops
    /// backing claims now and is credited back UNBONDING_DELAY after this call (a later
    /// request moves the whole unbonding amount's unlock to its own delay).
    function requestUnbond(address token, uint256 amount) external {
        Bond storage b = _bonds[msg.sender][_indexOf(token)];
        if (amount == 0 || amount > b.active) revert BondOutOfRange(amount, b.active);
        // forge-lint: disable-next-line(unsafe-typecast) amount <= active, a uint128
        b.active -= uint128(amount);
        // forge-lint: disable-next-line(unsafe-typecast) the sum of two parts of one bond <= MAX_STAKE
        b.unbonding += uint128(amount);
        b.unlockAt = uint64(block.timestamp + UNBONDING_DELAY);
        _emitBond(msg.sender, token, b);
    }

    /// @notice Credit the caller's unbonded amount in `token` once its delay has passed; it
    /// then leaves with `withdraw` like any credit.
    function completeUnbond(address token) external nonReentrant {
        uint8 tokenIndex = _indexOf(token);
        Bond storage b = _bonds[msg.sender][tokenIndex];
        uint256 amount = b.unbonding;
        if (amount == 0) revert NothingToWithdraw(msg.sender, token);
        if (block.timestamp < b.unlockAt) revert BondLocked(b.unlockAt);
        b.unbonding = 0;
        _emitBond(msg.sender, token, b);
        _credit(msg.sender, tokenIndex, amount);
    }

    /// @notice A worker forfeited job `jobId` (a failed proof of training): take up to `amount`
    /// of its bond in the job's token, active first, then unbonding, and credit it to the
    /// job's requester. Once per job and worker; a repeat does nothing. Returns what it took.
    function slashBond(uint256 jobId, address worker, uint256 amount)
        external
        onlyRole(VALIDATOR_ROLE)
        nonReentrant
        returns (uint256 taken)
    {
        Job storage job = _existing(jobId);
        if (slashed[jobId][worker]) return 0;
        slashed[jobId][worker] = true;
        Bond storage b = _bonds[worker][job.tokenIndex];
        uint256 fromActive = amount < b.active ? amount : b.active;
        uint256 rest = amount - fromActive;
        uint256 fromUnbonding = rest < b.unbonding ? rest : b.unbonding;
        // forge-lint: disable-next-line(unsafe-typecast) each part is at most the field it leaves
        b.active -= uint128(fromActive);
        // forge-lint: disable-next-line(unsafe-typecast) as above
        b.unbonding -= uint128(fromUnbonding);
        taken = fromActive + fromUnbonding;
        _emitBond(worker, job.token, b);
        emit BondSlashed(jobId, worker, taken);
        _credit(job.requester, job.tokenIndex, taken);
    }

    /// @notice A worker's bond in `token`.
    function bondOf(address worker, address token) external view returns (Bond memory) {
        return _bonds[worker][_indexOf(token)];
    }

    /// The index of `token`, which must be ETH or have been allow-listed once.
    function _indexOf(address token) private view returns (uint8 tokenIndex) {
        tokenIndex = _tokenIndex[token];
        if (token != address(0) && tokenIndex == 0) revert TokenNotAllowed(token);
    }

    function _emitBond(address worker, address token, Bond storage b) private {
        emit BondChanged(worker, token, b.active, b.unbonding, b.unlockAt);
    }

    // ---------------------------------------------------------------------------- views

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice Where a federated payout stands: announced and paid contributors, the last one
    /// paid (the next batch starts above it), what was paid, the divisor.
    function payoutOf(uint256 jobId) external view returns (Payout memory) {
        return _payouts[jobId];
    }

    /// @notice The sum of weights a batched payout of `jobId` to these contributors divides
    /// by, from the reputations as they are now; checks order, range and the requester as a
    /// payment would. Call it in chunks for long lists (each chunk is sorted on its own).
    function weigh(uint256 jobId, address[] calldata contributors, uint16[] calldata qualityScores)
        external
        view
        returns (uint256 totalWeight)
    {
        _checkLengths(contributors.length, qualityScores.length);
        (, Sums memory sums) =
            _weigh(contributors, qualityScores, msg.data[0:0], address(0), _existing(jobId).requester);
        totalWeight = sums.weight;
    }

    /// @notice The reputations of `accounts` now: what a batched payout begun now weighs them
    /// by, and what its batches must carry (`payFederatedBatch`).
    function reputationsOf(address[] calldata accounts) external view returns (uint16[] memory reputations) {
        reputations = new uint16[](accounts.length);
        for (uint256 i; i < accounts.length; ++i) {
            // forge-lint: disable-next-line(unsafe-typecast) the top 16 bits are the reputation field
            reputations[i] = uint16(_accounts[accounts[i]] >> REP_SHIFT);
        }
    }

    /// @notice What reputation may still add to `account`'s shares, in millionths of a token's
    /// reputation unit (see REP_FLOOR).
    function bonusBudgetOf(address account) external view returns (uint256) {
        return (_accounts[account] >> BUDGET_SHIFT) & BUDGET_MAX;
    }

    /// @notice The reputation step (basis points, at most MAX_REPUTATION_STEP_BPS) a payout of
    /// `pool` in `token` split among `contributors` moves each contributor by: the full step
    /// once the pool per contributor reaches the token's reputation unit, proportionally less
    /// below it. Self-dealing therefore buys reputation only by paying the fee on real value.
    function reputationStepOf(address token, uint256 pool, uint256 contributors) external view returns (uint256) {
        return _reputationStep(_tokenIndex[token], pool, contributors);
    }

    /// @notice The share a contributor must earn in `token` for a full reputation step.
    function reputationUnitOf(address token) external view returns (uint256) {
        return _reputationUnit[_tokenIndex[token]];
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

    /// Completion begins only once the job is Started (so the requester, who may cancel only
    /// while it is Open, can never cancel ahead of a completion) and up to and including the
    /// deadline; refund only strictly after it. The windows never overlap, so they never race.
    /// The caller sets the new status.
    function _completable(uint256 jobId, JobKind kind) private view returns (Job storage job) {
        job = _existing(jobId);
        if (job.status != JobStatus.Started) revert WrongJobStatus(jobId, job.status);
        if (job.kind != kind) revert WrongJobKind(jobId, job.kind);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
    }

    /// An abort that pays work: Started and federated, up to the deadline, or PAYOUT_GRACE past
    /// it once progress was recorded (the same moment from which a refund is allowed, so the
    /// two never race). The caller sets the new status.
    function _abortable(uint256 jobId, uint16 earnedBps) private view returns (Job storage job) {
        if (earnedBps == 0 || earnedBps > BPS) revert EarnedOutOfRange(earnedBps);
        job = _existing(jobId);
        if (job.status != JobStatus.Started) revert WrongJobStatus(jobId, job.status);
        if (job.kind != JobKind.Federated) revert WrongJobKind(jobId, job.kind);
        uint256 until = job.earnedBps == 0 ? job.deadline : uint256(job.deadline) + PAYOUT_GRACE;
        if (block.timestamp > until) revert DeadlinePassed(jobId, until);
    }

    /// See `reputationStepOf`.
    function _reputationStep(uint8 tokenIndex, uint256 pool, uint256 contributors) private view returns (uint256) {
        uint256 unit = _reputationUnit[tokenIndex];
        if (unit == 0) return 0;
        uint256 perContributor = pool / contributors;
        if (perContributor >= unit) return MAX_REPUTATION_STEP_BPS;
        // perContributor < unit, so this stays below the maximum; pool < 2^128 cannot overflow.
        return MAX_REPUTATION_STEP_BPS * perContributor / unit;
    }

    function _nextReputation(uint256 reputation, uint256 quality, uint256 step) private pure returns (uint256) {
        return (reputation * (BPS - step) + quality * step) / BPS;
    }

    /// The earned part of the stake (all of it at `earnedBps` = BPS) splits into the fee and
    /// the contributors' pool; the fee is taken on the earned part only, since the rest was
    /// never delivered. `unearned` goes back to the requester; it is 0 exactly when
    /// `earnedBps` = BPS (below it, floor(stake x earnedBps / BPS) < stake for any stake >= 1).
    function _split(Job storage job, uint256 earnedBps)
        private
        view
        returns (uint256 fee, uint256 pool, uint256 unearned)
    {
        uint256 stake = job.stake;
        // stake < 2^128: no overflow.
        uint256 earned = stake * earnedBps / BPS;
        fee = earned * job.feeBps / BPS;
        pool = earned - fee;
        unearned = stake - earned;
    }

    /// The fee goes to the treasury fixed at the job's creation, not today's. The requester
    /// gets the dust and the unearned part; a payout with an unearned part ends the job
    /// Aborted (`JobAborted`, what went back), any other Completed (`JobCompleted`).
    /// `round.remaining` is what the pool kept: the rounding dust (and the whole pool when
    /// every quality was 0).
    function _finish(Job storage job, Round memory round, uint256 earnedBps, uint256 contributors, string memory reason)
        private
    {
        (uint256 fee,, uint256 unearned) = _split(job, earnedBps);
        uint8 tokenIndex = job.tokenIndex;
        if (fee != 0) _credit(job.treasury, tokenIndex, fee);
        uint256 dust = round.remaining;
        uint256 back = dust + unearned;
        if (back != 0) _credit(job.requester, tokenIndex, back);
        if (unearned == 0) emit JobCompleted(round.jobId, contributors, round.pool - dust, fee, dust);
        else emit JobAborted(round.jobId, back, reason);
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
        return
            (packed & ~((uint256(0xff) << TOKEN_SHIFT) | CREDIT_MASK)) | (uint256(tokenIndex) << TOKEN_SHIFT) | credit;
    }

    /// Adds to a packed account slot's bonus budget half of `paidFee`, the fee its share paid,
    /// in millionths of the job's token's reputation unit (see REP_FLOOR), rounded down.
    function _withBudget(uint256 packed, uint256 paidFee, Job storage job) private view returns (uint256) {
        uint256 unit = _reputationUnit[job.tokenIndex];
        if (unit == 0 || paidFee == 0) return packed;
        uint256 budget = (packed >> BUDGET_SHIFT) & BUDGET_MAX;
        budget += paidFee * BONUS_BUDGET_SCALE * BONUS_BUDGET_FEE_SHARE / (BPS * unit);
        if (budget > BUDGET_MAX) budget = BUDGET_MAX;
        return (packed & ~(BUDGET_MAX << BUDGET_SHIFT)) | (budget << BUDGET_SHIFT);
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
