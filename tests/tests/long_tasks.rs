//! A task that trains for longer than RabbitMQ's consumer timeout.
//!
//! RabbitMQ closes a channel that holds a delivery unacknowledged for longer than its consumer
//! timeout (30 minutes by default) and redelivers the message, counting towards the dead-letter
//! limit; an LLM task can train for hours. The worker acknowledges a task's message as soon as
//! its claim succeeds, the API's lease being the task's source of truth from then on.
//!
//! Here the timeout is cut to 2 s for the worker's channel only (RabbitMQ 3.10 reads it from the
//! broker's settings when a channel opens; the test sets it around the worker's subscription and
//! puts it back at once), with the broker checking it every 500 ms, and one task trains for
//! several seconds. Checked: each task's message was delivered once, the worker's subscription
//! survived, and the job completed.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::json;
use shardwork_client::ApiClient;
use shardwork_contracts::dev_keys::dev_signers;
use shardwork_core::protocol::{JobEvent, TASK_QUEUE, TaskMessage};
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::{
    Consumer, Delivery, OutgoingMessage, QueueError, QueueOptions, TaskQueue,
};
use shardwork_core::testkit::services::{Service, service_url, services_required};
use shardwork_node::content::ApiBlobs;
use shardwork_node::models::WorkDir;
use shardwork_node::worker::{Honest, TrainingSlot, WorkerNode};

/// The consumer timeout the worker's channel gets.
const CONSUMER_TIMEOUT_MS: u64 = 2_000;
/// How often the broker checks it during the test (60 s by default).
const CHECK_EVERY_MS: u64 = 500;

/// Sets a broker setting with `rabbitmqctl eval`; false when rabbitmqctl cannot.
fn broker_setting(name: &str, value: u64) -> bool {
    Command::new("rabbitmqctl")
        .args([
            "eval",
            &format!("application:set_env(rabbit, {name}, {value})."),
        ])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Puts the broker's defaults back, even when the test fails.
struct BrokerDefaults;

impl Drop for BrokerDefaults {
    fn drop(&mut self) {
        broker_setting("consumer_timeout", 1_800_000);
        broker_setting("channel_tick_interval", 60_000);
    }
}

/// The worker's queue: RabbitMQ, with the short consumer timeout on its subscription and a
/// count of deliveries per task.
struct Counted {
    inner: RabbitQueue,
    deliveries: Arc<Mutex<HashMap<uuid::Uuid, u32>>>,
}

struct CountedConsumer {
    inner: Box<dyn Consumer>,
    waiting: Option<Delivery>,
    deliveries: Arc<Mutex<HashMap<uuid::Uuid, u32>>>,
}

#[async_trait]
impl TaskQueue for Counted {
    async fn declare(&self, queue: &str, options: &QueueOptions) -> Result<(), QueueError> {
        self.inner.declare(queue, options).await
    }
    async fn publish(&self, queue: &str, message: OutgoingMessage) -> Result<(), QueueError> {
        self.inner.publish(queue, message).await
    }
    async fn consume(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        let mut inner = self.inner.consume(queue).await?;
        // The channel opens with the first `next`: subscribe while the short timeout is set,
        // then put the broker's default back for every other channel.
        assert!(broker_setting("consumer_timeout", CONSUMER_TIMEOUT_MS));
        let first = inner.next(Duration::from_millis(500)).await;
        assert!(broker_setting("consumer_timeout", 1_800_000));
        Ok(Box::new(CountedConsumer {
            inner,
            waiting: first?,
            deliveries: self.deliveries.clone(),
        }))
    }
    async fn consume_dead_letters(&self, queue: &str) -> Result<Box<dyn Consumer>, QueueError> {
        self.inner.consume_dead_letters(queue).await
    }
    async fn ready_count(&self, queue: &str) -> Result<u64, QueueError> {
        self.inner.ready_count(queue).await
    }
}

#[async_trait]
impl Consumer for CountedConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<Delivery>, QueueError> {
        let delivery = match self.waiting.take() {
            Some(d) => Some(d),
            None => self.inner.next(timeout).await?,
        };
        if let Some(d) = &delivery
            && let Ok(message) = TaskMessage::decode(&d.payload)
        {
            *self
                .deliveries
                .lock()
                .unwrap()
                .entry(message.task_id)
                .or_default() += 1;
        }
        Ok(delivery)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_longer_than_the_consumer_timeout_is_trained_once_and_not_redelivered() {
    let suite = "tasks longer than RabbitMQ's consumer timeout";
    let Some(amqp) = service_url(Service::RabbitMq, suite) else {
        return;
    };
    if !broker_setting("channel_tick_interval", CHECK_EVERY_MS) {
        assert!(
            !services_required(),
            "{suite}: rabbitmqctl cannot change the broker's settings"
        );
        eprintln!("skipping {suite}: rabbitmqctl cannot change the broker's settings");
        return;
    }
    let _defaults = BrokerDefaults;

    // The API and the validator in one process (SQLite, the embedded chain and store), on
    // RabbitMQ; the one worker runs in this test.
    let dir = tempfile::tempdir().unwrap();
    let (up, api_url) = shardwork_tests::up_on_rabbitmq(&amqp, dir.path()).await;

    let deliveries = Arc::new(Mutex::new(HashMap::new()));
    let queue = Counted {
        inner: RabbitQueue::connect(&amqp, RabbitSettings::default())
            .await
            .unwrap(),
        deliveries: deliveries.clone(),
    };
    queue
        .declare(TASK_QUEUE, &QueueOptions::default())
        .await
        .unwrap();
    let worker_api =
        Arc::new(ApiClient::new(&api_url, dev_signers()[5].clone(), &["worker"]).unwrap());
    let worker = WorkerNode {
        api: worker_api.clone(),
        blobs: Arc::new(ApiBlobs(worker_api)),
        queue: Arc::new(queue),
        device: candle_core::Device::Cpu,
        work_dir: WorkDir::new(dir.path().join("worker")),
        heartbeat: Duration::from_secs(1),
        conduct: Arc::new(Honest),
        memory_limit_mb: None,
        training_slot: TrainingSlot::new(),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { worker.run(stopped).await });

    let requester = Arc::new(ApiClient::new(&api_url, dev_signers()[3].clone(), &[]).unwrap());
    let model_cid = shardwork_tests::put_sample_model(&requester, dir.path()).await;
    // One shard, trained for many epochs: seconds of training, several consumer timeouts.
    let spec = json!({
        "version": 1, "kind": "federated",
        "base_model": { "cid": model_cid, "format": "safetensors", "architecture": "bert",
                        "task": "sequence_classification", "num_labels": 2 },
        "lora": { "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"] },
        "training": { "epochs": 60, "learning_rate": 0.01, "batch_size": 16, "max_seq_len": 16, "seed": 42 },
        "shards": 1, "rounds": 1, "held_out_fraction": 0.2,
        "deadline": (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339(),
        "stake": { "amount": "1000000000000000000" }
    });
    let job = requester
        .post_job(
            &spec,
            Bytes::from(shardwork_trainer::sample::dataset(600, 7)),
        )
        .await
        .unwrap();
    let job_id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    requester.dev_fund(job_id).await.unwrap();

    let status = shardwork_tests::job_end(&requester, job_id, Duration::from_secs(300))
        .await
        .as_str();
    assert_eq!(status, "completed", "log:\n{}", up.log_text());

    // The task trained for longer than the timeout took to be enforced...
    let events = requester.events(job_id, 0).await.unwrap();
    let at = |pick: fn(&JobEvent) -> bool| {
        events
            .iter()
            .find(|e| pick(&e.event))
            .map(|e| e.created_at)
            .unwrap()
    };
    let trained =
        at(|e| matches!(e, JobEvent::Submitted(_))) - at(|e| matches!(e, JobEvent::TaskClaimed(_)));
    let enforced_after = CONSUMER_TIMEOUT_MS + 2 * CHECK_EVERY_MS;
    assert!(
        trained.num_milliseconds() > enforced_after as i64,
        "the task trained for {trained} only, under the {enforced_after} ms it takes the broker \
         to enforce the timeout: train longer or the test proves nothing"
    );
    // ...yet its message was delivered once, and the worker's subscription lived on.
    let task_ids: Vec<uuid::Uuid> = events
        .iter()
        .filter_map(|e| match &e.event {
            JobEvent::TaskClaimed(c) => Some(c.task_id),
            _ => None,
        })
        .collect();
    assert_eq!(task_ids.len(), 1, "one claim: {events:?}");
    let counted = deliveries.lock().unwrap().clone();
    assert_eq!(counted.get(&task_ids[0]), Some(&1), "{counted:?}");
    assert!(!running.is_finished(), "the worker's loop ended early");
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    println!("trained for {trained} under a {CONSUMER_TIMEOUT_MS} ms consumer timeout");
}
