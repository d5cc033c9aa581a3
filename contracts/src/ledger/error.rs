//! What can go wrong talking to the escrow, named so a user can act on it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, B256, Bytes};
use alloy::sol_types::SolInterface;

use crate::bindings::{JobEscrow::JobEscrowErrors, MockERC20::MockERC20Errors};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The EVM rejected the call; `reason` is the decoded revert (custom error or message).
    #[error("{action} reverted: {reason}")]
    Reverted { action: String, reason: Revert },
    #[error("no private key for account {0} in this ledger")]
    UnknownSigner(Address),
    #[error("transaction {tx_hash} not mined within {waited:?} (re-sent {resends} times)")]
    ReceiptTimeout {
        tx_hash: B256,
        waited: Duration,
        resends: u32,
    },
    #[error("JSON-RPC {method}: {detail}")]
    Rpc {
        method: &'static str,
        detail: String,
    },
    #[error("embedded EVM: {0}")]
    Evm(String),
    #[error("ledger state file {}: {source}", path.display())]
    StateIo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ledger state file {} is not a ledger snapshot: {source}", path.display())]
    StateCorrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("ledger state file {} belongs to chain {found}, this ledger runs chain {expected}", path.display())]
    WrongChain {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error("cannot decode {what}: {detail}")]
    Decode { what: &'static str, detail: String },
    #[error("{field}: {problem}")]
    InvalidInput {
        field: &'static str,
        problem: String,
    },
    #[error("{what} expected in the receipt of {tx_hash} is missing")]
    MissingFromReceipt { what: &'static str, tx_hash: B256 },
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

pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
