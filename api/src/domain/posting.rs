//! Posting a job: the whole workflow behind `POST /v1/jobs`, knowing nothing of HTTP.
//!
//! Order of work, so bad input never half-writes: validate the spec, the dataset, the stake's
//! token, the model, the split and the adapter it continues from first; then write the content
//! (the sealed dataset, job.json, shards, the sealed held-out set, the manifest, the starting
//! adapter sealed to the job) to the store; then the job, its shards, its
//! `created` event and its content claims in one database transaction. A failure between the
//! two leaves only unreferenced blobs.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveValue::Set, DatabaseConnection, EntityTrait, TransactionTrait};
use shardwork_core::protocol::bundle::Bundle;
use shardwork_core::protocol::{
    ContentId, FieldError, HeldOutRef, JobEvent, JobSpec, PROTOCOL_VERSION, ShardManifest,
    ShardRef, SpecErrors, events,
};
use shardwork_core::store::{ContentStore, StoreError, seal};
use uuid::Uuid;

use crate::chain::Chain;
use crate::domain::error::DomainError;
use crate::domain::jobs::find_job;
use crate::domain::lifecycle::{JobStatus, record_event};
use crate::domain::{capacity, content, models, pipeline, sealing, sizing, starting};
use crate::entities::{job, shard};
use crate::stake_tokens::{self, StakeTokenError};

/// Where a posted job's dataset comes from.
pub enum DatasetSource {
    /// Uploaded with the spec.
    Uploaded(Bytes),
    /// Named by CID: stored before, by the requester or someone it may read from.
    Stored(cid::Cid),
}

/// What posting needs of the deployment.
pub struct Posting<'a> {
    /// The database.
    pub db: &'a DatabaseConnection,
    /// The content store.
    pub store: &'a dyn ContentStore,
    /// The chain, when the API follows one (to check the stake's token).
    pub chain: Option<&'a Chain>,
    /// The secret a job's keys are derived from.
    pub sealing_secret: &'a str,
    /// The most bytes a dataset may have.
    pub upload_limit_bytes: usize,
    /// The most memory a job's training may need.
    pub max_job_memory_mb: u64,
}

/// Why a job was not posted. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum PostingError {
    /// The spec breaks a rule, or (`decoded` false) does not decode at all.
    #[error("the spec: {errors}")]
    Spec {
        /// Each field at fault.
        errors: SpecErrors,
        /// Whether the spec decoded as JSON of the right shape.
        decoded: bool,
    },
    /// The dataset named by CID is another requester's private one (a job's dataset, a
    /// held-out set, another account's upload).
    #[error("{0}")]
    DatasetForbidden(String),
    /// The adapter the spec continues from (`base_model.adapter`) is one the requester may
    /// not read: another requester's sealed result, or another account's private upload.
    #[error("{0}")]
    AdapterForbidden(String),
    /// The dataset named by CID is not in the store.
    #[error("{0} is not in the content store")]
    DatasetMissing(cid::Cid),
    /// The dataset named by CID is larger than an upload may be.
    #[error("the dataset exceeds the limit of {limit} bytes")]
    DatasetTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Lines of the dataset are not records of the job's kind; never empty.
    #[error("the dataset has {} bad line(s); the first: {}", .0.len(), .0[0].message)]
    DatasetLines(Vec<FieldError>),
    /// The stake's token is not accepted, or the chain did not say.
    #[error(transparent)]
    Stake(#[from] StakeTokenError),
    /// The content store failed.
    #[error("content store: {0}")]
    Store(#[from] StoreError),
    /// A domain rule refused the job (the model, the capacity, the split, the dataset's
    /// owner), or the database failed.
    #[error(transparent)]
    Domain(#[from] DomainError),
}

impl Posting<'_> {
    /// Posts the job `spec_bytes` describes for `requester`, with its dataset from `dataset`:
    /// everything is checked, then stored, then recorded awaiting funding. Returns the job.
    pub async fn post(
        &self,
        requester: &str,
        spec_bytes: &[u8],
        dataset: DatasetSource,
        now: DateTime<Utc>,
    ) -> Result<job::Model, PostingError> {
        // 1. Everything is checked before anything is written.
        let spec = JobSpec::parse(spec_bytes, now).map_err(|errors| PostingError::Spec {
            errors,
            decoded: serde_json::from_slice::<JobSpec>(spec_bytes).is_ok(),
        })?;
        let (data, stored_cid) = match dataset {
            DatasetSource::Uploaded(bytes) => (bytes, None),
            DatasetSource::Stored(cid) => {
                // Someone else's private dataset is refused before a byte of it is read.
                content::check_claim(self.db, requester, &cid, "dataset")
                    .await
                    .map_err(|e| match e {
                        DomainError::Forbidden(message) => PostingError::DatasetForbidden(message),
                        other => PostingError::Domain(other),
                    })?;
                let limit = self.upload_limit_bytes;
                let bytes =
                    self.store
                        .get_bytes(&cid, limit as u64)
                        .await
                        .map_err(|e| match e {
                            StoreError::NotFound(_) => PostingError::DatasetMissing(cid),
                            StoreError::TooLarge { .. } => PostingError::DatasetTooLarge { limit },
                            other => PostingError::Store(other),
                        })?;
                (bytes, Some(cid))
            }
        };
        stake_tokens::check_stake(self.chain, &spec.stake).await?;
        let model = models::inspect(self.store, &spec).await?;
        let memory_mb =
            sizing::training_memory_mb(&spec, &model.shape, model.vocab_size, model.parameters);
        capacity::check_fits(self.db, memory_mb, self.max_job_memory_mb).await?;
        let records = pipeline::parse_records(&data, &spec, model.has_chat_template)
            .map_err(PostingError::DatasetLines)?;
        let split = pipeline::split(&records, &spec)
            .map_err(|e| DomainError::invalid(e.path, e.message))?;
        let start = starting::read_start(
            self.db,
            self.store,
            self.sealing_secret,
            requester,
            &spec,
            &model,
        )
        .await
        .map_err(|e| match e {
            DomainError::Forbidden(message) => PostingError::AdapterForbidden(message),
            other => PostingError::Domain(other),
        })?;

        // 2. Content, addressed by CID.
        let job_id = Uuid::now_v7();
        let store = self.store;
        // An uploaded dataset holds the held-out records: it is kept sealed under a key no
        // endpoint gives out, so a public store shows it to no one. (A dataset named by CID
        // was stored by the requester, as public as they made it.)
        let dataset_cid = match stored_cid {
            Some(cid) => cid,
            None => {
                let sealed = seal::seal(
                    &sealing::dataset_key(self.sealing_secret, job_id),
                    &data,
                    &sealing::dataset_associated_data(job_id),
                );
                store.put(Bytes::from(sealed)).await?
            }
        };
        let spec_json = serde_json::to_vec_pretty(&spec)
            .map_err(|e| DomainError::internal("encoding job.json", e))?;
        let spec_cid = store.put(Bytes::from(spec_json)).await?;
        let mut shard_refs = Vec::with_capacity(split.shards.len());
        for (index, (bytes, records)) in split.shards.into_iter().enumerate() {
            let size = bytes.len() as u64;
            let cid = store.put(Bytes::from(bytes)).await?;
            shard_refs.push(ShardRef {
                index: index as u32,
                cid: ContentId(cid),
                records,
                bytes: size,
            });
        }
        let key = sealing::held_out_key(self.sealing_secret, job_id);
        let sealed = seal::seal(&key, &split.held_out, &sealing::associated_data(job_id));
        let sealed_cid = store.put(Bytes::from(sealed)).await?;
        let manifest = ShardManifest {
            version: PROTOCOL_VERSION,
            job_id,
            dataset_cid: ContentId(dataset_cid),
            job_spec_cid: ContentId(spec_cid),
            seed: spec.training.seed,
            held_out: HeldOutRef {
                sealed_cid: ContentId(sealed_cid),
                records: split.held_out_records,
            },
            shards: shard_refs,
        };
        manifest
            .validate()
            .map_err(|e| DomainError::internal("building the shard manifest", e))?;
        let manifest_json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| DomainError::internal("encoding the manifest", e))?;
        let manifest_cid = store.put(Bytes::from(manifest_json)).await?;
        let start_adapter_cid = match &start {
            Some(start) => Some(
                start
                    .store_for(store, self.sealing_secret, job_id)
                    .await?
                    .to_string(),
            ),
            None => None,
        };

        let largest_shard = manifest.shards.iter().map(|s| s.records).max().unwrap_or(0);
        let task_time_limit_secs =
            sizing::task_time_limit_secs(&spec, model.parameters, largest_shard);

        // 3. The record: job, shards, its first event and its content claims, all or nothing.
        let spec_value = serde_json::to_value(&spec)
            .map_err(|e| DomainError::internal("encoding the spec", e))?;
        let named = named_content(store, &spec).await;
        let txn = self.db.begin().await.map_err(DomainError::from)?;
        job::Entity::insert(job::ActiveModel {
            id: Set(job_id),
            requester: Set(requester.to_owned()),
            kind: Set(spec.kind),
            status: Set(JobStatus::AwaitingFunding),
            spec: Set(spec_value),
            spec_cid: Set(Some(spec_cid.to_string())),
            dataset_cid: Set(Some(dataset_cid.to_string())),
            manifest_cid: Set(Some(manifest_cid.to_string())),
            heldout_cid: Set(Some(sealed_cid.to_string())),
            result_adapter_cid: Set(None),
            escrow_job_id: Set(None),
            escrow_address: Set(None),
            stake_wei: Set(spec.stake.amount.to_string()),
            shards: Set(spec.shards as i32),
            rounds: Set(spec.rounds as i32),
            current_round: Set(0),
            deadline: Set(spec.deadline),
            dev_funded: Set(false),
            memory_mb: Set(Some(i64::try_from(memory_mb).unwrap_or(i64::MAX))),
            task_time_limit_secs: Set(Some(
                i64::try_from(task_time_limit_secs).unwrap_or(i64::MAX),
            )),
            start_adapter_cid: Set(start_adapter_cid),
            version: Set(0),
            created_at: Set(now),
            updated_at: Set(now),
        })
        .exec(&txn)
        .await
        .map_err(DomainError::from)?;
        let shard_rows: Vec<shard::ActiveModel> = manifest
            .shards
            .iter()
            .map(|s| shard::ActiveModel {
                id: Set(Uuid::now_v7()),
                job_id: Set(job_id),
                index: Set(s.index as i32),
                cid: Set(s.cid.to_string()),
                sample_count: Set(s.records as i64),
                size_bytes: Set(s.bytes as i64),
            })
            .collect();
        shard::Entity::insert_many(shard_rows)
            .exec(&txn)
            .await
            .map_err(DomainError::from)?;
        record_event(
            &txn,
            job_id,
            &JobEvent::Created(events::Created {
                to: JobStatus::AwaitingFunding,
                manifest_cid: manifest_cid.to_string(),
                spec_cid: spec_cid.to_string(),
                dataset_cid: dataset_cid.to_string(),
                held_out_records: manifest.held_out.records,
                shard_records: manifest.shards.iter().map(|s| s.records).collect(),
            }),
            false,
            now,
        )
        .await?;
        content::claim_job_content(
            &txn,
            job_id,
            requester,
            &dataset_cid,
            &sealed_cid,
            &named,
            now,
        )
        .await?;
        let job = find_job(&txn, job_id).await?;
        txn.commit().await.map_err(DomainError::from)?;
        tracing::info!(job = %job_id, %requester, %manifest_cid, "job posted");
        Ok(job)
    }
}

/// The content a job names besides its dataset: the model bundle and each of its files. An
/// upload among them is in use from now on (it no longer expires or counts against its
/// uploader's quota).
async fn named_content(store: &dyn ContentStore, spec: &JobSpec) -> Vec<cid::Cid> {
    let bundle_cid = spec.base_model.cid.0;
    let mut named = vec![bundle_cid];
    // The bundle was read and checked by `models::inspect` a moment ago.
    if let Ok(doc) = store.get_bytes(&bundle_cid, 1 << 20).await
        && let Ok(bundle) = Bundle::decode(&doc)
    {
        named.extend(bundle.files.values().map(|c| c.0));
    }
    named
}
