//! Whole-system tests that drive Shardwork as its users do (a federated job to payout, crash
//! and restart drills, a malicious worker, deadline refunds). They arrive with the end-to-end
//! issue; until then this crate holds no tests and claims none.
