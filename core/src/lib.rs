//! Shardwork's shared protocol and its two infrastructure ports.
//!
//! * [`protocol`]: the messages every component exchanges (job spec, shard manifest, task,
//!   submission, adapter metadata), versioned and validated.
//! * [`store`]: the [`store::ContentStore`] port (IPFS) with a Kubo RPC adapter and an embedded
//!   folder blockstore that computes the same CIDs Kubo does.
//! * [`queue`]: the [`queue::TaskQueue`] port with a RabbitMQ adapter and a table-backed adapter
//!   in the application database.
//!
//! No HTTP server, no ML, no chain: those live in the crates that depend on this one.
//!
//! Only [`protocol`] is built by default. Each port and adapter is a feature (`store`, `kubo`,
//! `queue`, `rabbitmq`, `table-queue`, and `siwe` for sign-in messages), so a crate links only
//! the I/O it uses: the trainer links none, a worker no database driver.
#![warn(missing_docs)]

#[cfg(feature = "chat-template")]
pub mod chat_template;
pub mod protocol;
#[cfg(feature = "queue")]
pub mod queue;
#[cfg(feature = "store")]
pub mod store;

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
