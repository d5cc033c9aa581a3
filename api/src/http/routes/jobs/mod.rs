//! `/v1/jobs`: quote, create (with the dataset pipeline), list, get, cancel, the event feed,
//! the training progress, and the held-out key (validator only).

pub mod cancel;
pub mod create;
pub mod dev_fund;
pub mod events;
pub mod heldout;
pub mod progress;
pub mod quote;
pub mod read;
pub mod result;
pub mod view;

pub use view::{FundingTerms, JobView};
