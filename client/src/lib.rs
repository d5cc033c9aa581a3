//! The HTTP client of the API used by the worker and validator services and by the CLI's
//! requester commands (`shardwork demo`, `job …`): Sign-In with Ethereum with its own key, a
//! fresh sign-in when the access token expires, and one typed method per endpoint it uses. Workers are untrusted third parties: this, the queue and the content store
//! are all they reach.
#![warn(missing_docs)]

use std::time::Duration;

use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use bytes::Bytes;
use chrono::Utc;
use serde::Deserialize;
use serde::de::DeserializeOwned;
pub use shardwork_core::protocol::node::{
    AcceptedAdapter, Aggregate, EarlierSubmission, Lease, LeaseKeys, PendingValidation, Progress,
    ProofCheck, ReadyRound, StretchReplay, ValidatorLease, ValidatorWork, Verdict,
};
use shardwork_core::protocol::problem::ProblemType;
use shardwork_core::protocol::siwe::SiweMessage;
use shardwork_core::protocol::{EthAddress, EventView, Submission};
use tokio::sync::Mutex;
use uuid::Uuid;

/// Why a call to the API failed. `Problem` carries the API's RFC 7807 answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API answered with an error status.
    #[error("{method} {path}: HTTP {status}: {detail}")]
    Problem {
        /// The request's HTTP method.
        method: &'static str,
        /// The request's path and query.
        path: String,
        /// The HTTP status, 400 or above.
        status: u16,
        /// The problem's kind from its `type`, or guessed from the status when the answer had
        /// no problem body (a proxy's 502, say).
        kind: Option<ProblemType>,
        /// The problem's `detail`, or the body as text.
        detail: String,
    },
    /// The request never got an answer (connection refused, timeout, broken body).
    #[error("{method} {path}: {source}")]
    Transport {
        /// The request's HTTP method.
        method: &'static str,
        /// The request's path and query.
        path: String,
        /// What the HTTP client reported.
        source: reqwest::Error,
    },
    /// The answer was not what the endpoint promises (an API of another version?).
    #[error("{path}: unexpected response: {detail}")]
    Decode {
        /// The request's path and query.
        path: String,
        /// What did not decode.
        detail: String,
    },
    /// Sign-in with Ethereum failed before any token was issued.
    #[error("signing in: {0}")]
    SignIn(String),
}

impl ApiError {
    /// The error for an answer with status `status` >= 400 and body `body` (problem+json from
    /// the API; anything else from a proxy in front of it).
    fn problem(method: &'static str, path: &str, status: u16, body: &[u8]) -> ApiError {
        let problem = serde_json::from_slice::<serde_json::Value>(body).ok();
        let detail = problem
            .as_ref()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let kind = problem
            .as_ref()
            .and_then(|v| v["type"].as_str())
            .and_then(ProblemType::from_type_uri)
            .or_else(|| ProblemType::from_status(status));
        ApiError::Problem {
            method,
            path: path.to_owned(),
            status,
            kind,
            detail,
        }
    }

    /// The HTTP status the API answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Problem { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The kind of problem the API answered with.
    pub fn kind(&self) -> Option<ProblemType> {
        match self {
            ApiError::Problem { kind, .. } => *kind,
            _ => None,
        }
    }

    /// The state does not allow it: done, failed, or held by someone else.
    pub fn is_conflict(&self) -> bool {
        self.kind() == Some(ProblemType::Conflict)
    }

    /// This caller's role or standing may not do it.
    pub fn is_forbidden(&self) -> bool {
        self.kind() == Some(ProblemType::Forbidden)
    }

    /// No such job, task, submission or content.
    pub fn is_not_found(&self) -> bool {
        self.kind() == Some(ProblemType::NotFound)
    }

    /// The token was refused (expired): sign in again.
    pub fn is_unauthenticated(&self) -> bool {
        self.kind() == Some(ProblemType::Unauthenticated)
    }

    /// The API could not be reached, said it is not ready (502/503), or closed the connection
    /// before the request arrived whole (408: the server never read it, so sending it again is
    /// safe; seen when a 2-core machine training three adapters delays the request's bytes past
    /// the server's 5 s read deadline): worth retrying.
    pub fn is_unavailable(&self) -> bool {
        match self {
            ApiError::Transport { source, .. } => {
                source.is_connect()
                    || source.is_request()
                    || source.is_timeout()
                    || source.is_body()
            }
            ApiError::Problem { status, kind, .. } => {
                *kind == Some(ProblemType::Unavailable) || matches!(status, 408 | 502 | 503)
            }
            _ => false,
        }
    }
}

/// How long an idempotent call keeps retrying while the API is unreachable.
pub const TRANSPORT_RETRY_WINDOW: Duration = Duration::from_secs(90);

/// How long an idle connection is kept for the next call: under the API's own keep-alive (75 s)
/// and the 60 s idle timeout common to load balancers, so the client gives a connection up
/// before the other end can close it under a request being sent.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// What every call of the client returns.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

#[derive(Debug, Deserialize)]
struct NonceResponse {
    nonce: String,
    domain: String,
    chain_id: u64,
}

#[derive(Debug, Deserialize)]
struct TokenResponse {
    access_token: String,
}

/// The API client of one node (one key).
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
    signer: PrivateKeySigner,
    roles: Vec<&'static str>,
    token: Mutex<Option<String>>,
}

impl ApiClient {
    /// `base` is the API's root URL (`http://127.0.0.1:8080`); `roles` those to ask for beyond
    /// `requester` (`worker`, `validator`).
    pub fn new(base: &str, signer: PrivateKeySigner, roles: &[&'static str]) -> Result<ApiClient> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .map_err(|source| ApiError::Transport {
                method: "BUILD",
                path: base.to_owned(),
                source,
            })?;
        Ok(ApiClient {
            base: base.trim_end_matches('/').to_owned(),
            http,
            signer,
            roles: roles.to_vec(),
            token: Mutex::new(None),
        })
    }

    /// The API's root URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The address this client signs in as.
    pub fn address(&self) -> EthAddress {
        EthAddress(self.signer.address().into_array())
    }

    async fn sign_in(&self) -> Result<String> {
        let nonce: NonceResponse = self
            .send_raw("POST", "/v1/auth/nonce", None, None, None)
            .await?;
        let now = Utc::now();
        let message = SiweMessage {
            scheme: None,
            domain: nonce.domain.clone(),
            address: self.address(),
            statement: Some("Sign in to Shardwork".into()),
            uri: format!("http://{}", nonce.domain),
            version: "1".into(),
            chain_id: nonce.chain_id,
            nonce: nonce.nonce,
            issued_at: now,
            expiration_time: Some(now + chrono::Duration::minutes(10)),
            not_before: None,
            request_id: None,
            resources: Vec::new(),
        }
        .render();
        let signature = self
            .signer
            .sign_message_sync(message.as_bytes())
            .map_err(|e| ApiError::SignIn(e.to_string()))?;
        let body = serde_json::json!({
            "message": message,
            "signature": format!("0x{}", hex::encode(signature.as_bytes())),
            "roles": self.roles,
        });
        let tokens: TokenResponse = self
            .send_raw("POST", "/v1/auth/verify", Some(body), None, None)
            .await?;
        Ok(tokens.access_token)
    }

    /// The current access token, signing in first when there is none (for callers that make
    /// their own requests, such as the API benchmark).
    pub async fn access_token(&self) -> Result<String> {
        self.token(false).await
    }

    async fn token(&self, refresh: bool) -> Result<String> {
        let mut guard = self.token.lock().await;
        if refresh || guard.is_none() {
            *guard = Some(self.sign_in().await?);
        }
        Ok(guard.clone().unwrap_or_default())
    }

    async fn send_raw<T: DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        json: Option<serde_json::Value>,
        body: Option<Bytes>,
        token: Option<&str>,
    ) -> Result<T> {
        let bytes = self.send_bytes(method, path, json, body, token).await?;
        let bytes = if bytes.is_empty() {
            Bytes::from_static(b"null")
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Decode {
            path: path.to_owned(),
            detail: e.to_string(),
        })
    }

    async fn send_bytes(
        &self,
        method: &'static str,
        path: &str,
        json: Option<serde_json::Value>,
        body: Option<Bytes>,
        token: Option<&str>,
    ) -> Result<Bytes> {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "GET" => self.http.get(&url),
            _ => self.http.post(&url),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(json) = json {
            request = request
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&json).unwrap_or_default());
        } else if let Some(body) = body {
            request = request
                .header("content-type", "application/octet-stream")
                .body(body);
        }
        let transport = |source| ApiError::Transport {
            method,
            path: path.to_owned(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(transport)?;
        if status >= 400 {
            return Err(ApiError::problem(method, path, status, &bytes));
        }
        Ok(bytes)
    }

    /// POSTs `json` to `path` for its effect: the reply's body is read only to be checked as
    /// JSON, never used.
    async fn post_for_effect(&self, path: &str, json: serde_json::Value) -> Result<()> {
        let _: serde_json::Value = self.call("POST", path, Some(json), None).await?;
        Ok(())
    }

    /// The `submissions` of a validator's page (`PendingPage`, `ProofPage`) at `path`.
    async fn submissions_page(&self, path: &str) -> Result<Vec<PendingValidation>> {
        #[derive(Deserialize)]
        struct Page {
            submissions: Vec<PendingValidation>,
        }
        let page: Page = self.call("GET", path, None, None).await?;
        Ok(page.submissions)
    }

    /// An authenticated call; signs in again once when the token was refused (expired).
    ///
    /// While the API cannot be reached (restarting, say) the call is retried with backoff for
    /// up to [`TRANSPORT_RETRY_WINDOW`], so a worker keeps its finished adapter instead of
    /// losing the task: every call but a claim is idempotent on the server (a submit, an
    /// extension, a verdict or an aggregate repeated is answered as the first was, or 409). A
    /// claim is not retried: its message goes back to the queue instead.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        json: Option<serde_json::Value>,
        body: Option<Bytes>,
    ) -> Result<T> {
        let retry = !path.ends_with("/claim");
        let started = std::time::Instant::now();
        let mut backoff = Duration::from_millis(250);
        loop {
            match self
                .call_once(method, path, json.clone(), body.clone())
                .await
            {
                Err(e)
                    if retry
                        && e.is_unavailable()
                        && started.elapsed() < TRANSPORT_RETRY_WINDOW =>
                {
                    tracing::warn!(error = %e, "API unavailable; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(4));
                }
                other => return other,
            }
        }
    }

    async fn call_once<T: DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        json: Option<serde_json::Value>,
        body: Option<Bytes>,
    ) -> Result<T> {
        let token = self.token(false).await?;
        match self
            .send_raw(method, path, json.clone(), body.clone(), Some(&token))
            .await
        {
            Err(e) if e.is_unauthenticated() => {
                let token = self.token(true).await?;
                self.send_raw(method, path, json, body, Some(&token)).await
            }
            other => other,
        }
    }

    /// Registers this address as a worker with what it can run (worker role).
    pub async fn register(&self, capabilities: serde_json::Value) -> Result<serde_json::Value> {
        self.call(
            "POST",
            "/v1/workers/register",
            Some(serde_json::json!({ "capabilities": capabilities })),
            None,
        )
        .await
    }

    /// The caller's worker profile: reputation, earnings mirrored from chain, submissions by
    /// verdict (worker role).
    pub async fn worker_profile(&self) -> Result<serde_json::Value> {
        self.call("GET", "/v1/workers/me", None, None).await
    }

    /// The chain and escrow contract the API follows (public).
    pub async fn chain_info(&self) -> Result<serde_json::Value> {
        self.call("GET", "/v1/chain", None, None).await
    }

    /// Claims the lease on a task taken from the queue (worker role).
    pub async fn claim(&self, task_id: Uuid) -> Result<Lease> {
        self.call("POST", &format!("/v1/tasks/{task_id}/claim"), None, None)
            .await
    }

    /// Extends a held lease and reports training progress (the worker's heartbeat).
    pub async fn extend(
        &self,
        task_id: Uuid,
        lease_token: Uuid,
        progress: &Progress,
    ) -> Result<()> {
        self.post_for_effect(
            &format!("/v1/tasks/{task_id}/extend"),
            serde_json::json!({ "lease_token": lease_token, "progress": progress }),
        )
        .await
    }

    /// Gives a held task back with the reason it could not be trained; returns where it went
    /// (`queued` for another attempt, or `failed` once its attempts are used up).
    pub async fn abandon(&self, task_id: Uuid, lease_token: Uuid, reason: &str) -> Result<String> {
        // The API caps the reason; an error chain longer than that is cut here, not refused.
        let reason: String = reason.chars().take(2_000).collect();
        let answer: serde_json::Value = self
            .call(
                "POST",
                &format!("/v1/tasks/{task_id}/abandon"),
                Some(serde_json::json!({ "lease_token": lease_token, "reason": reason })),
                None,
            )
            .await?;
        Ok(answer["status"].as_str().unwrap_or_default().to_owned())
    }

    /// Gives a held task back unfinished because this worker is stopping; returns where it
    /// went and whether its attempt was returned (the first two releases of a task).
    pub async fn release(&self, task_id: Uuid, lease_token: Uuid) -> Result<(String, bool)> {
        let answer: serde_json::Value = self
            .call(
                "POST",
                &format!("/v1/tasks/{task_id}/release"),
                Some(serde_json::json!({ "lease_token": lease_token })),
                None,
            )
            .await?;
        Ok((
            answer["status"].as_str().unwrap_or_default().to_owned(),
            answer["attempt_returned"].as_bool().unwrap_or(false),
        ))
    }

    /// Hands in a trained adapter for a leased task (worker role).
    pub async fn submit(&self, submission: &Submission) -> Result<serde_json::Value> {
        self.call(
            "POST",
            &format!("/v1/tasks/{}/submit", submission.task_id),
            Some(serde_json::to_value(submission).unwrap_or_default()),
            None,
        )
        .await
    }

    /// Stores `data` in the content store through the API; returns its CID.
    pub async fn upload(&self, data: Bytes) -> Result<String> {
        #[derive(Deserialize)]
        struct Uploaded {
            cid: String,
        }
        let uploaded: Uploaded = self.call("POST", "/v1/content", None, Some(data)).await?;
        Ok(uploaded.cid)
    }

    /// Reads content by CID through the API (verified against the CID by the API's store).
    pub async fn download(&self, cid: &str) -> Result<Bytes> {
        self.get_bytes(&format!("/v1/content/{cid}")).await
    }

    /// One file of a completed job's final adapter, opened by the API (the job's requester,
    /// validators and admins).
    pub async fn result_file(&self, job_id: Uuid, name: &str) -> Result<Bytes> {
        self.get_bytes(&format!("/v1/jobs/{job_id}/result/files/{name}"))
            .await
    }

    /// The bytes a GET of `path` answers, signing in again once if the token lapsed.
    async fn get_bytes(&self, path: &str) -> Result<Bytes> {
        let token = self.token(false).await?;
        match self.send_bytes("GET", path, None, None, Some(&token)).await {
            Err(e) if e.is_unauthenticated() => {
                let token = self.token(true).await?;
                self.send_bytes("GET", path, None, None, Some(&token)).await
            }
            other => other,
        }
    }

    /// Submissions waiting for a verdict, oldest first (validator role).
    pub async fn pending_validations(&self, limit: u32) -> Result<Vec<PendingValidation>> {
        self.submissions_page(&format!("/v1/validator/submissions?limit={limit}"))
            .await
    }

    /// Records the verdict on a submission (validator role).
    pub async fn verdict(&self, submission_id: Uuid, verdict: &Verdict) -> Result<()> {
        self.post_for_effect(
            &format!("/v1/validator/submissions/{submission_id}/verdict"),
            serde_json::to_value(verdict).unwrap_or_default(),
        )
        .await
    }

    /// Submissions whose proofs of training are due, oldest verdict first (validator role).
    pub async fn pending_proofs(&self, limit: u32) -> Result<Vec<PendingValidation>> {
        self.submissions_page(&format!("/v1/validator/proofs?limit={limit}"))
            .await
    }

    /// Records the check of a submission's proof of training (validator role).
    pub async fn proof(&self, submission_id: Uuid, check: &ProofCheck) -> Result<()> {
        self.post_for_effect(
            &format!("/v1/validator/submissions/{submission_id}/proof"),
            serde_json::to_value(check).unwrap_or_default(),
        )
        .await
    }

    /// Takes, or renews, this validator's lease on one piece of work (validator role): a
    /// conflict when another validator holds it or it is already done.
    pub async fn lease_validator_work(&self, work: &ValidatorWork) -> Result<ValidatorLease> {
        self.call(
            "POST",
            "/v1/validator/leases",
            Some(serde_json::to_value(work).unwrap_or_default()),
            None,
        )
        .await
    }

    /// Rounds whose adapters are all accepted and wait for a merge (validator role).
    pub async fn ready_rounds(&self) -> Result<Vec<ReadyRound>> {
        #[derive(Deserialize)]
        struct Page {
            rounds: Vec<ReadyRound>,
        }
        let page: Page = self.call("GET", "/v1/validator/rounds", None, None).await?;
        Ok(page.rounds)
    }

    /// Reports a round's merge, which opens the next round or queues the payout (validator role).
    pub async fn aggregate(&self, job_id: Uuid, round: i32, aggregate: &Aggregate) -> Result<()> {
        self.post_for_effect(
            &format!("/v1/jobs/{job_id}/rounds/{round}/aggregate"),
            serde_json::to_value(aggregate).unwrap_or_default(),
        )
        .await
    }

    /// Reports that a job's model (or held-out set) cannot be loaded, which ends the job
    /// (validator role). Returns whether this report recorded the end (false: it already was).
    pub async fn report_model_failure(&self, job_id: Uuid, reason: &str) -> Result<bool> {
        #[derive(Deserialize)]
        struct Outcome {
            abort_recorded: bool,
        }
        let outcome: Outcome = self
            .call(
                "POST",
                &format!("/v1/jobs/{job_id}/model-failure"),
                Some(serde_json::json!({ "reason": reason })),
                None,
            )
            .await?;
        Ok(outcome.abort_recorded)
    }

    /// Posts a job: the spec and the dataset as `multipart/form-data` (requester role).
    pub async fn post_job(
        &self,
        spec: &serde_json::Value,
        dataset: Bytes,
    ) -> Result<serde_json::Value> {
        let boundary = format!("shardwork-{}", Uuid::new_v4().simple());
        let mut body = Vec::with_capacity(dataset.len() + 4096);
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"spec\"\r\nContent-Type: application/json\r\n\r\n").as_bytes());
        body.extend_from_slice(&serde_json::to_vec(spec).unwrap_or_default());
        body.extend_from_slice(format!("\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"dataset\"; filename=\"dataset.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n").as_bytes());
        body.extend_from_slice(&dataset);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let path = "/v1/jobs";
        let token = self.token(false).await?;
        let send = |token: String, body: Vec<u8>| {
            self.http
                .post(format!("{}{path}", self.base))
                .bearer_auth(token)
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .body(body)
                .send()
        };
        let transport = |source| ApiError::Transport {
            method: "POST",
            path: path.to_owned(),
            source,
        };
        let response = send(token, body).await.map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(transport)?;
        if status >= 400 {
            return Err(ApiError::problem("POST", path, status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Decode {
            path: path.to_owned(),
            detail: e.to_string(),
        })
    }

    /// Development mode: the server funds the job's escrow from its development account.
    pub async fn dev_fund(&self, job_id: Uuid) -> Result<serde_json::Value> {
        self.call("POST", &format!("/v1/jobs/{job_id}/dev-fund"), None, None)
            .await
    }

    /// The job as the API shows it (`JobView`).
    pub async fn job(&self, job_id: Uuid) -> Result<serde_json::Value> {
        self.call("GET", &format!("/v1/jobs/{job_id}"), None, None)
            .await
    }

    /// The job's events after event id `after`, oldest first.
    pub async fn events(&self, job_id: Uuid, after: i64) -> Result<Vec<EventView>> {
        #[derive(Deserialize)]
        struct Page {
            events: Vec<EventView>,
        }
        let page: Page = self
            .call(
                "GET",
                &format!("/v1/jobs/{job_id}/events?after={after}&limit=500"),
                None,
                None,
            )
            .await?;
        Ok(page.events)
    }

    /// The signed-in requester's jobs, newest first (one page of at most 100).
    pub async fn my_jobs(&self, status: Option<&str>) -> Result<Vec<serde_json::Value>> {
        let mut path = format!("/v1/jobs?limit=100&requester={:#x}", self.signer.address());
        if let Some(status) = status {
            path.push_str(&format!("&status={status}"));
        }
        let page: serde_json::Value = self.call("GET", &path, None, None).await?;
        Ok(page["jobs"].as_array().cloned().unwrap_or_default())
    }

    /// Open jobs (funded, not yet completed), newest first (one page of at most 100).
    pub async fn open_jobs(&self) -> Result<Vec<serde_json::Value>> {
        let page: serde_json::Value = self
            .call("GET", "/v1/jobs?limit=100&status=open", None, None)
            .await?;
        Ok(page["jobs"].as_array().cloned().unwrap_or_default())
    }

    /// Cancels a job that has not started (requester role, own jobs only).
    pub async fn cancel_job(&self, job_id: Uuid) -> Result<serde_json::Value> {
        self.call("POST", &format!("/v1/jobs/{job_id}/cancel"), None, None)
            .await
    }

    /// The final adapter of a completed job.
    pub async fn result(&self, job_id: Uuid) -> Result<serde_json::Value> {
        self.call("GET", &format!("/v1/jobs/{job_id}/result"), None, None)
            .await
    }

    /// The job's sealing keys, hex (validator role): the held-out set's and the root of its
    /// adapter keys.
    pub async fn job_keys(&self, job_id: Uuid) -> Result<JobKeys> {
        let value: serde_json::Value = self
            .call(
                "GET",
                &format!("/v1/jobs/{job_id}/held-out-key"),
                None,
                None,
            )
            .await?;
        let field = |name: &str| {
            value[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ApiError::Decode {
                    path: "held-out-key".into(),
                    detail: format!("no `{name}` in the answer"),
                })
        };
        Ok(JobKeys {
            held_out: field("key")?,
            job: field("job_key")?,
            start_adapter: value["start_adapter_cid"].as_str().map(str::to_owned),
        })
    }
}

/// A job's sealing keys as the validator gets them, 64 hex digits each.
#[derive(Debug, Clone)]
pub struct JobKeys {
    /// Opens the sealed held-out set.
    pub held_out: String,
    /// The root of the job's adapter keys.
    pub job: String,
    /// The adapter the job continues from, sealed to it as round 0's result, if any.
    pub start_adapter: Option<String>,
}
