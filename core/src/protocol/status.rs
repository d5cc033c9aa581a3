//! The statuses of a job, its rounds, its tasks and its submissions: one definition each, read
//! by the API's state machine, stored in its database columns (feature `orm`: sea-orm active
//! enums over the same text the columns always held), served in its JSON and OpenAPI, and read
//! back by the CLI and the portal.
//!
//! Which status may follow which is the API's business (`api/src/domain/lifecycle.rs` for
//! jobs, `api/src/domain/flow/` for the rest); this module only names them.

#[cfg(feature = "orm")]
use sea_orm::sea_query::StringLen;

/// Defines a status enum over its database and JSON text, with `ALL`, `as_str`, `parse` and
/// `Display`, so the text of a status is written exactly once.
macro_rules! status_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[cfg_attr(feature = "orm", derive(sea_orm::EnumIter, sea_orm::DeriveActiveEnum))]
        #[cfg_attr(
            feature = "orm",
            sea_orm(rs_type = "String", db_type = "String(StringLen::None)")
        )]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $(
                $(#[$vmeta])*
                #[cfg_attr(feature = "orm", sea_orm(string_value = $text))]
                $variant,
            )+
        }

        impl $name {
            /// Every status, in the order the definition lists them.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The text stored in the database and sent in JSON.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The status whose text is `text`, if any.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|s| s.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status_enum! {
    /// Where a job stands.
    pub enum JobStatus {
        /// Posted and stored; waiting for its escrow to be funded on chain.
        AwaitingFunding = "awaiting_funding",
        /// Funded; rounds are running.
        Open = "open",
        /// Finalized on chain with a result adapter.
        Completed = "completed",
        /// Withdrawn by the requester before funding.
        Cancelled = "cancelled",
        /// Deadline passed unfinished; the stake went back to the requester.
        Refunded = "refunded",
    }
}

impl JobStatus {
    /// No transition leaves a terminal status.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Cancelled | JobStatus::Refunded
        )
    }
}

status_enum! {
    /// Where one shard's task of one round stands.
    pub enum TaskStatus {
        /// Published (or about to be) and waiting for a worker.
        Queued = "queued",
        /// A worker holds the lease.
        Leased = "leased",
        /// The adapter is in; waiting for the validator.
        Submitted = "submitted",
        /// The validator accepted the adapter.
        Accepted = "accepted",
        /// Every attempt failed (lease expiries and rejections); the job cannot finish this round.
        Failed = "failed",
    }
}

status_enum! {
    /// Where a federated round stands.
    pub enum RoundStatus {
        /// Tasks are out.
        Open = "open",
        /// Every shard has an accepted adapter; the validator merges them.
        Aggregating = "aggregating",
        /// Merged.
        Completed = "completed",
    }
}

status_enum! {
    /// The validator's verdict on a submission.
    pub enum VerdictStatus {
        /// Not scored yet.
        Pending = "pending",
        /// The adapter passed the validator's checks.
        Accepted = "accepted",
        /// The adapter failed them; the task goes back to the queue until its attempts run out.
        Rejected = "rejected",
    }
}

status_enum! {
    /// Where a submission's proof of training stands. The verdict does not wait for it: the
    /// replay runs after the verdict, off the round's critical path, and the job's payout waits
    /// until every due proof is decided (docs/decisions/0042).
    pub enum ProofStatus {
        /// No proof is checked: the adapter was not scored (malformed, not finite, oversized),
        /// so there is no run's end to replay to, or no verdict yet.
        NotDue = "not_due",
        /// Scored: a stretch of its run is to be trained again; the payout waits for it.
        Pending = "pending",
        /// The replayed stretches ended where the submission said.
        Passed = "passed",
        /// The proof is missing, malformed or does not replay: the worker forfeits the job.
        Failed = "failed",
    }
}

impl ProofStatus {
    /// Whether the proof is decided (passed, failed, or never due).
    pub fn is_decided(self) -> bool {
        self != ProofStatus::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_text_and_json() {
        for s in JobStatus::ALL {
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.as_str().into())
            );
        }
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(&s.to_string()), Some(s));
        }
        for s in RoundStatus::ALL {
            assert_eq!(RoundStatus::parse(s.as_str()), Some(s));
        }
        for s in VerdictStatus::ALL {
            assert_eq!(VerdictStatus::parse(s.as_str()), Some(s));
        }
        for s in ProofStatus::ALL {
            assert_eq!(ProofStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobStatus::parse("running"), None);
    }
}
