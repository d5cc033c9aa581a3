//! One AMQP connection, re-established with backoff whenever it is found dropped.
//!
//! Every operation asks the link for a channel; a channel or connection that is no longer open
//! is replaced, so a broker restart or network cut costs callers a retry, not a restart.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::ConfirmSelectOptions;
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::queue::QueueError;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(super) struct Link {
    uri: AMQPUri,
    /// How long one operation keeps trying to reconnect before it reports the broker down.
    reconnect_within: Duration,
    state: Mutex<Option<Live>>,
}

struct Live {
    connection: Arc<Connection>,
    /// The channel in confirm mode that every publish goes through.
    publisher: Option<Channel>,
}

impl Link {
    pub(super) fn new(uri: AMQPUri, reconnect_within: Duration) -> Self {
        Link {
            uri,
            reconnect_within,
            state: Mutex::new(None),
        }
    }

    pub(super) fn reconnect_within(&self) -> Duration {
        self.reconnect_within
    }

    /// The open connection, connecting (with backoff) if there is none.
    async fn live<'a>(&self, state: &'a mut Option<Live>) -> Result<&'a mut Live, QueueError> {
        let open = state
            .as_ref()
            .is_some_and(|live| live.connection.status().connected());
        if !open {
            if state.take().is_some() {
                tracing::warn!("AMQP connection lost; reconnecting");
            }
            let connection = self.connect_with_backoff().await?;
            *state = Some(Live {
                connection: Arc::new(connection),
                publisher: None,
            });
        }
        state
            .as_mut()
            .ok_or_else(|| QueueError::Disconnected("connection vanished while in use".into()))
    }

    async fn connect_with_backoff(&self) -> Result<Connection, QueueError> {
        let deadline = Instant::now() + self.reconnect_within;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let properties =
                ConnectionProperties::default().with_connection_name("shardwork".into());
            match Connection::connect_uri(self.uri.clone(), properties).await {
                Ok(connection) => return Ok(connection),
                Err(err) if Instant::now() + backoff < deadline => {
                    tracing::debug!(%err, ?backoff, "AMQP connect failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(err) => {
                    return Err(QueueError::Disconnected(format!(
                        "could not connect to {}:{} within {:?}: {err}",
                        self.uri.authority.host, self.uri.authority.port, self.reconnect_within
                    )));
                }
            }
        }
    }

    /// The shared publishing channel (confirm mode).
    pub(super) async fn publisher(&self) -> Result<Channel, QueueError> {
        let mut state = self.state.lock().await;
        let live = self.live(&mut state).await?;
        if let Some(channel) = live.publisher.as_ref().filter(|c| c.status().connected()) {
            return Ok(channel.clone());
        }
        let channel = live
            .connection
            .create_channel()
            .await
            .map_err(disconnected)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(disconnected)?;
        live.publisher = Some(channel.clone());
        Ok(channel)
    }

    /// A fresh channel of its own (consumers, declarations): closed when dropped.
    pub(super) async fn channel(&self) -> Result<Channel, QueueError> {
        let mut state = self.state.lock().await;
        let live = self.live(&mut state).await?;
        live.connection.create_channel().await.map_err(disconnected)
    }

    /// Closes the connection as a network failure or broker restart would, for tests and
    /// operational drills; the next operation reconnects.
    pub async fn sever(&self) {
        let live = self.state.lock().await.take();
        if let Some(live) = live {
            let _ = live
                .connection
                .close(320, "severed on purpose".into())
                .await;
        }
    }
}

pub(super) fn disconnected(err: lapin::Error) -> QueueError {
    QueueError::Disconnected(err.to_string())
}

/// Whether an error may go away on a new connection: everything but the broker refusing the
/// operation itself (a soft error such as a queue declared with other arguments).
pub(super) fn is_transient(err: &lapin::Error) -> bool {
    !err.is_amqp_soft_error()
}
