//! The kinds of work a job asks of the nodes.
pub mod classify;
