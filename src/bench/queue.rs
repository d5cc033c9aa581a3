//! Queue throughput: publish + consume + ack, end to end, on any TaskQueue adapter.
//!
//! One publisher sends `messages` in pipelined batches while `consumers` consumers take and ack
//! them concurrently; the figure is messages over the wall time from the first publish to the
//! last ack, which is what a round of tasks costs the marketplace.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use shardwork_core::queue::{OutgoingMessage, QueueError, QueueOptions, TaskQueue};

/// What to run.
#[derive(Debug, Clone)]
pub struct QueueBenchConfig {
    /// Label for the report, e.g. "RabbitMQ" or "table (SQLite)".
    pub adapter: String,
    /// A queue name of its own: the bench declares it and leaves it empty.
    pub queue: String,
    pub messages: usize,
    pub consumers: usize,
    /// Messages per `publish_batch` call.
    pub batch: usize,
    /// Prefetch per consumer.
    pub prefetch: u16,
    /// Payload bytes per message (a task message is a few hundred bytes of JSON).
    pub payload_bytes: usize,
}

impl QueueBenchConfig {
    pub fn new(adapter: &str, queue: &str) -> Self {
        QueueBenchConfig {
            adapter: adapter.to_owned(),
            queue: queue.to_owned(),
            messages: 10_000,
            consumers: 4,
            batch: 500,
            prefetch: 50,
            payload_bytes: 256,
        }
    }
}

/// Measured figures.
#[derive(Debug, Clone)]
pub struct QueueBenchReport {
    pub adapter: String,
    pub messages: usize,
    /// Time until the publisher had every message confirmed.
    pub publish: Duration,
    /// Time from the first publish to the last ack.
    pub total: Duration,
}

impl QueueBenchReport {
    /// End-to-end tasks per second (publish + consume + ack).
    pub fn tasks_per_sec(&self) -> f64 {
        self.messages as f64 / self.total.as_secs_f64().max(f64::EPSILON)
    }

    pub fn publish_per_sec(&self) -> f64 {
        self.messages as f64 / self.publish.as_secs_f64().max(f64::EPSILON)
    }
}

impl std::fmt::Display for QueueBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<22} {:>7} tasks in {:>7.2} s: {:>8.0} tasks/s end to end (publish alone {:>8.0}/s)",
            self.adapter,
            self.messages,
            self.total.as_secs_f64(),
            self.tasks_per_sec(),
            self.publish_per_sec()
        )
    }
}

/// Runs the benchmark on `queue`. Fails if any message is not acked within a minute of the
/// last publish, so a lossy adapter cannot report a figure.
pub async fn bench_queue(
    queue: Arc<dyn TaskQueue>,
    config: &QueueBenchConfig,
) -> Result<QueueBenchReport, QueueError> {
    let options = QueueOptions {
        max_deliveries: 5,
        visibility_timeout: Duration::from_secs(60),
        prefetch: config.prefetch.max(1),
    };
    queue.declare(&config.queue, &options).await?;
    let acked = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();

    let mut consumers = Vec::with_capacity(config.consumers.max(1));
    for _ in 0..config.consumers.max(1) {
        let (queue, acked, name, total) = (
            queue.clone(),
            acked.clone(),
            config.queue.clone(),
            config.messages,
        );
        consumers.push(tokio::spawn(async move {
            let mut consumer = queue.consume(&name).await?;
            let mut idle_since = Instant::now();
            while acked.load(Ordering::Acquire) < total {
                match consumer.next(Duration::from_millis(200)).await? {
                    Some(delivery) => {
                        delivery.ack().await?;
                        acked.fetch_add(1, Ordering::AcqRel);
                        idle_since = Instant::now();
                    }
                    None if idle_since.elapsed() > Duration::from_secs(60) => {
                        return Err(QueueError::Backend(format!(
                            "benchmark stalled at {} of {total} acks",
                            acked.load(Ordering::Acquire)
                        )));
                    }
                    None => {}
                }
            }
            Ok::<(), QueueError>(())
        }));
    }

    let payload = vec![b'x'; config.payload_bytes];
    let mut sent = 0;
    while sent < config.messages {
        let end = (sent + config.batch.max(1)).min(config.messages);
        let batch = (sent..end)
            .map(|i| OutgoingMessage {
                idempotency_key: format!("{}/{i}", config.queue),
                payload: payload.clone().into(),
                delay: None,
            })
            .collect();
        queue.publish_batch(&config.queue, batch).await?;
        sent = end;
    }
    let publish = start.elapsed();

    for consumer in consumers {
        consumer
            .await
            .map_err(|err| QueueError::Backend(format!("consumer task failed: {err}")))??;
    }
    Ok(QueueBenchReport {
        adapter: config.adapter.clone(),
        messages: config.messages,
        publish,
        total: start.elapsed(),
    })
}
