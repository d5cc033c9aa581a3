//! The message queued for each shard of each round: everything a worker needs to fetch its
//! inputs from the content store, and nothing it must not see (no held-out data, no keys).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::PROTOCOL_VERSION;
use super::ids::ContentId;
use super::validation::{SpecErrors, decode_json};

/// The queue every training task is published to and every worker consumes.
pub const TASK_QUEUE: &str = "shardwork.tasks";

/// One shard's training task of one round, as published to [`TASK_QUEUE`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskMessage {
    /// The protocol version it was written with.
    pub version: u32,
    /// The task, as the API knows it: a worker claims and submits it by this id.
    pub task_id: Uuid,
    /// The job it belongs to.
    pub job_id: Uuid,
    /// Rounds count from 1.
    pub round: u32,
    /// Which of the job's shards it trains on, counted from 0.
    pub shard_index: u32,
    /// The shard's records, as JSONL, in the content store.
    pub shard_cid: ContentId,
    /// The job spec document (job.json).
    pub job_spec_cid: ContentId,
    /// The base model's bundle.
    pub base_model_cid: ContentId,
    /// The adapter the round starts from: the previous round's merge, or in round 1 the
    /// adapter the job continues from (absent when round 1 starts from the bare base model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_adapter_cid: Option<ContentId>,
    /// A preference job's reference policy when it continues from an adapter: that adapter
    /// (the job's start, in every round). Absent for other jobs, and for a preference job
    /// from the bare base model, which is then the reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_adapter_cid: Option<ContentId>,
}

impl TaskMessage {
    /// The queue's idempotency key: one logical task per job, round and shard, however often
    /// it is published.
    pub fn idempotency_key(&self) -> String {
        format!(
            "job/{}/round/{}/shard/{}",
            self.job_id, self.round, self.shard_index
        )
    }

    /// The key of one publication of the task: a task requeued after a lost lease or a
    /// rejected adapter is a new message (its earlier one was settled), while a publish
    /// repeated by the outbox after a crash is the same message and the queue drops it. A task
    /// released by a stopping worker gets its attempt back, so its release count tells that
    /// publication from the one before it.
    pub fn publication_key(&self, attempt: i32, releases: i32) -> String {
        match releases {
            0 => format!("{}/attempt/{attempt}", self.idempotency_key()),
            n => format!("{}/attempt/{attempt}/release/{n}", self.idempotency_key()),
        }
    }

    /// Decodes a task from a queue payload and checks it.
    pub fn decode(payload: &[u8]) -> Result<TaskMessage, SpecErrors> {
        let task: TaskMessage = decode_json(payload)?;
        let mut e = SpecErrors::default();
        e.check(task.version == PROTOCOL_VERSION, "version", || {
            format!("version {} is not supported", task.version)
        });
        e.check(task.round >= 1, "round", || "rounds count from 1".into());
        // Round 1 starts from the base model, or from the adapter the job continues from.
        e.check(
            task.round == 1 || task.previous_adapter_cid.is_some(),
            "previous_adapter_cid",
            || "a round after the first starts from the previous round's merge".into(),
        );
        e.into_result().map(|()| task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(round: u32, previous: Option<&str>) -> TaskMessage {
        let cid: ContentId = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
            .parse()
            .unwrap();
        TaskMessage {
            version: PROTOCOL_VERSION,
            task_id: Uuid::nil(),
            job_id: Uuid::nil(),
            round,
            shard_index: 2,
            shard_cid: cid,
            job_spec_cid: cid,
            base_model_cid: cid,
            previous_adapter_cid: previous.map(|p| p.parse().unwrap()),
            reference_adapter_cid: None,
        }
    }

    #[test]
    fn decodes_what_it_encodes() {
        let t = task(1, None);
        let bytes = serde_json::to_vec(&t).unwrap();
        assert_eq!(TaskMessage::decode(&bytes).unwrap(), t);
        assert_eq!(
            t.idempotency_key(),
            "job/00000000-0000-0000-0000-000000000000/round/1/shard/2"
        );
    }

    #[test]
    fn later_round_without_previous_adapter_is_refused() {
        let bytes = serde_json::to_vec(&task(2, None)).unwrap();
        let err = TaskMessage::decode(&bytes).unwrap_err();
        assert_eq!(err.errors()[0].path, "previous_adapter_cid");
    }

    #[test]
    fn a_first_round_may_continue_from_an_adapter() {
        let cid = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";
        let t = task(1, Some(cid));
        assert_eq!(
            TaskMessage::decode(&serde_json::to_vec(&t).unwrap()).unwrap(),
            t
        );
    }

    #[test]
    fn malformed_payload_names_the_field() {
        let err = TaskMessage::decode(br#"{"version":1,"task_id":"nope"}"#).unwrap_err();
        assert_eq!(err.errors()[0].path, "task_id");
        let err = TaskMessage::decode(b"\xff\xfe").unwrap_err();
        assert!(!err.to_string().is_empty());
    }
}
