//! What can go wrong talking to the escrow, named so a user can act on it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, B256, Bytes};
use alloy::sol_types::SolInterface;

use crate::bindings::{JobEscrow::JobEscrowErrors, MockERC20::MockERC20Errors};

/// Why a [`Ledger`](super::Ledger) operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The EVM rejected the call; `reason` is the decoded revert (custom error or message).
    #[error("{action} reverted: {reason}")]
    Reverted {
        /// What reverted: the escrow call (`createJob`, `cancel(7)`, ...) or, outside one, the
        /// transaction or the RPC method.
        action: String,
        /// The decoded revert reason.
        reason: Revert,
    },
    /// The sender is not one of the accounts this ledger holds keys for.
    #[error("no private key for account {0} in this ledger")]
    UnknownSigner(Address),
    /// A sent transaction had no receipt within
    /// [`RpcConfig::receipt_timeout`](super::rpc::RpcConfig::receipt_timeout).
    #[error("transaction {tx_hash} not mined within {waited:?} (re-sent {resends} times)")]
    ReceiptTimeout {
        /// Hash of the transaction waited for.
        tx_hash: B256,
        /// How long the ledger waited for it.
        waited: Duration,
        /// How often its signed bytes were re-sent meanwhile.
        resends: u32,
    },
    /// The node failed or refused a request, other than with a revert (unreachable, a method it
    /// lacks, an answer missing a field).
    #[error("JSON-RPC {method}: {detail}")]
    Rpc {
        /// The JSON-RPC method, e.g. `eth_getLogs`.
        method: &'static str,
        /// The transport's or the node's message.
        detail: String,
    },
    /// The embedded EVM rejected a transaction as invalid (e.g. its sender lacks the funds for
    /// its value), so nothing was mined, or failed otherwise.
    #[error("embedded EVM: {0}")]
    Evm(String),
    /// Reading or writing the embedded chain's state file failed.
    #[error("ledger state file {}: {source}", path.display())]
    StateIo {
        /// The state file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The state file holds no readable snapshot (or the snapshot could not be serialized).
    #[error("ledger state file {} is not a ledger snapshot: {source}", path.display())]
    StateCorrupt {
        /// The state file.
        path: PathBuf,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// The state file is of another chain than this ledger's.
    #[error("ledger state file {} belongs to chain {found}, this ledger runs chain {expected}", path.display())]
    WrongChain {
        /// The state file.
        path: PathBuf,
        /// Chain id this ledger runs.
        expected: u64,
        /// Chain id recorded in the file.
        found: u64,
    },
    /// A call's return value or an event does not decode with the bindings.
    #[error("cannot decode {what}: {detail}")]
    Decode {
        /// What was being decoded (`getJob`, `escrow event`, ...).
        what: &'static str,
        /// Why decoding failed.
        detail: String,
    },
    /// An argument, or the transaction built from it, is unusable; nothing was sent.
    #[error("{field}: {problem}")]
    InvalidInput {
        /// Which argument (`spec_cid`, `rpc url`, ...).
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A mined transaction lacks what its call promises (the `JobCreated` event, a contract
    /// address).
    #[error("{what} expected in the receipt of {tx_hash} is missing")]
    MissingFromReceipt {
        /// What was expected.
        what: &'static str,
        /// The transaction whose receipt lacks it.
        tx_hash: B256,
    },
}

impl LedgerError {
    /// Names the escrow action a revert came from (`createJob`, `withdraw`, ...), so the message
    /// says which call failed rather than "transaction reverted".
    pub(crate) fn during(self, action: impl Into<String>) -> Self {
        match self {
            LedgerError::Reverted { reason, .. } => LedgerError::Reverted {
                action: action.into(),
                reason,
            },
            other => other,
        }
    }

    /// The escrow's custom error, if this is an escrow revert.
    pub fn escrow_error(&self) -> Option<&JobEscrowErrors> {
        match self {
            LedgerError::Reverted {
                reason: Revert::Escrow(e),
                ..
            } => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// A decoded revert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revert {
    /// One of JobEscrow's custom errors, with its arguments. Boxed, as is `Token`: the largest
    /// error is ~100 bytes, and every `Result` of the ledger would otherwise carry that size.
    Escrow(Box<JobEscrowErrors>),
    /// An ERC-20 error (OpenZeppelin's IERC20Errors), bubbled up through SafeERC20.
    Token(Box<MockERC20Errors>),
    /// `Error(string)`, a `Panic(uint256)`, or another standard reason, already readable.
    Message(String),
    /// No revert data: out of gas, an invalid opcode, or a call to an address without code.
    Empty,
    /// Revert data nothing here knows how to decode.
    Unknown(Bytes),
}

impl Revert {
    /// Decodes revert data: JobEscrow's custom errors first, then the token's, then the standard
    /// reasons; whatever remains is [`Revert::Unknown`].
    pub fn decode(data: &[u8]) -> Self {
        if data.is_empty() {
            return Revert::Empty;
        }
        if let Ok(e) = JobEscrowErrors::abi_decode(data) {
            return Revert::Escrow(Box::new(e));
        }
        if let Ok(e) = MockERC20Errors::abi_decode(data) {
            return Revert::Token(Box::new(e));
        }
        match alloy::sol_types::decode_revert_reason(data) {
            Some(message) => Revert::Message(message),
            None => Revert::Unknown(Bytes::copy_from_slice(data)),
        }
    }
}

impl fmt::Display for Revert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The generated error types' Debug form is `Name { field: value }`: exactly the readable
        // shape wanted, e.g. `DeadlineNotInFuture { deadline: 5, nowTs: 10 }`.
        match self {
            Revert::Escrow(e) => write!(f, "JobEscrow.{}", strip_wrapper(&format!("{e:?}"))),
            Revert::Token(e) => write!(f, "ERC20.{}", strip_wrapper(&format!("{e:?}"))),
            Revert::Message(m) => f.write_str(m),
            Revert::Empty => f.write_str("no revert data (out of gas, invalid opcode or no code)"),
            Revert::Unknown(data) => write!(f, "undecodable revert data {data}"),
        }
    }
}

/// `UnknownJob(UnknownJob { jobId: 7 })` -> `UnknownJob { jobId: 7 }`.
fn strip_wrapper(debug: &str) -> &str {
    match debug.split_once('(') {
        Some((_, inner)) if debug.ends_with(')') => &inner[..inner.len() - 1],
        _ => debug,
    }
}

/// The ledger's result, [`LedgerError`] unless another error is named.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
