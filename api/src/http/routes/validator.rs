//! `/v1/validator/…`: the validator's work — submissions to score, verdicts, proofs of training
//! to replay and their outcomes, rounds ready to merge, the merge that opens the next round or
//! queues the payout, and the report that a job's model cannot be loaded, which ends the job.
//! Validator role only.

use crate::http::openapi::{JsonBodyRefused, JsonTooLarge};
use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use actix_web::{HttpResponse, web};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::flow::failures::{self, ModelFailure, ModelFailureOutcome};
use crate::domain::flow::proofs::{self, ProofCheck};
use crate::domain::flow::rounds::{self, Aggregate, AggregateOutcome};
use crate::domain::flow::validator_leases::{self, ValidatorLease, ValidatorWork};
use crate::domain::flow::verdicts::{self, PendingValidation, ReadyRound, Verdict};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::ValidatorRole;
use crate::http::extract::Json;
use crate::http::problem::ApiError;
use crate::http::routes::tasks::SubmissionView;
use crate::state::AppState;

const DEFAULT_LIMIT: u64 = 50;
const MAX_LIMIT: u64 = 500;

/// How many pending submissions to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PendingQuery {
    /// At most this many submissions, 1..=500; 50 when absent.
    pub limit: Option<u64>,
}

impl PendingQuery {
    /// The limit asked for, or the default; a 422 outside `1..=MAX_LIMIT`.
    fn limit(&self) -> Result<u64, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid(
                "limit",
                format!("{limit} is outside 1..={MAX_LIMIT}"),
            ));
        }
        Ok(limit)
    }
}

/// Submissions waiting for a verdict.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingPage {
    /// The submissions, oldest first.
    pub submissions: Vec<PendingValidation>,
}

/// Submissions waiting for a verdict, oldest first.
#[utoipa::path(
    get,
    path = "/v1/validator/submissions",
    operation_id = "pending_validations",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(PendingQuery),
    responses(
        (status = 200, description = "Submissions awaiting a verdict, oldest first, less those another validator holds", body = PendingPage),
        (status = 400, description = "A query parameter is malformed", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`limit` is outside 1..=500", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The submissions could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn pending(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    query: web::Query<PendingQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = query.limit()?;
    let caller = caller.claims.sub.to_string();
    let submissions = verdicts::pending(&state.db, &caller, limit, Utc::now()).await?;
    Ok(HttpResponse::Ok().json(PendingPage { submissions }))
}

/// Records the verdict on a submission (once).
#[utoipa::path(
    post,
    path = "/v1/validator/submissions/{id}/verdict",
    operation_id = "record_verdict",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(("id" = Uuid, Path, description = "The submission id")),
    request_body = Verdict,
    responses(
        (status = 200, description = "The submission with its verdict", body = SubmissionView),
        JsonBodyRefused,
        (status = 404, description = "No submission has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The submission already has its verdict, or its job is no longer open, or another validator holds its lease", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "Quality outside 0..=1, or a rejection without a reason", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The verdict could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn verdict(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    id: web::Path<Uuid>,
    Json(body): Json<Verdict>,
) -> Result<HttpResponse, ApiError> {
    let stored = verdicts::record(
        &state.db,
        id.into_inner(),
        &body,
        &caller.claims.sub.to_string(),
        Utc::now(),
    )
    .await?;
    tracing::info!(submission = %stored.id, verdict = %stored.verdict, validator = %caller.claims.sub, "verdict recorded");
    Ok(HttpResponse::Ok().json(SubmissionView::from(stored)))
}

/// Takes, or renews, the caller's lease on one piece of the validators' work: a scoring, a
/// proof replay or a round's merge. Ask before starting the work and again (the heartbeat)
/// well before `expires_at`; another validator's lease on the work is a 409, and so is work
/// already done. A validator that stops asking loses the work to the next one after
/// `api.validator_lease_secs`.
#[utoipa::path(
    post,
    path = "/v1/validator/leases",
    operation_id = "lease_validator_work",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    request_body = ValidatorWork,
    responses(
        (status = 200, description = "The caller holds the work until `expires_at`", body = ValidatorLease),
        (status = 400, description = "The body is not JSON or names no kind of work", body = ProblemBody, content_type = PROBLEM_JSON),
        JsonTooLarge,
        (status = 404, description = "No such submission or round", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "Another validator holds the work, it is already done, its job is no longer open, or the lease reached the job's task time limit", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The lease could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn lease(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    Json(work): Json<ValidatorWork>,
) -> Result<HttpResponse, ApiError> {
    let lease = validator_leases::claim(
        &state.db,
        work,
        &caller.claims.sub.to_string(),
        chrono::Duration::seconds(state.config.validator_lease_secs as i64),
        Utc::now(),
    )
    .await?;
    tracing::debug!(%work, validator = %caller.claims.sub, expires_at = %lease.expires_at, "validator lease");
    Ok(HttpResponse::Ok().json(lease))
}

/// Submissions whose proofs of training wait for a replay.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProofPage {
    /// The submissions, in the order their verdicts were given.
    pub submissions: Vec<PendingValidation>,
}

/// Submissions whose proofs of training are due, oldest verdict first: a validator replays a
/// stretch of each run while the next round trains; the job's payout waits for them.
#[utoipa::path(
    get,
    path = "/v1/validator/proofs",
    operation_id = "pending_proofs",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(PendingQuery),
    responses(
        (status = 200, description = "Submissions whose proofs of training are due, oldest verdict first, less those another validator holds", body = ProofPage),
        (status = 400, description = "A query parameter is malformed", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "`limit` is outside 1..=500", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The submissions could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn pending_proofs(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    query: web::Query<PendingQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = query.limit()?;
    let caller = caller.claims.sub.to_string();
    let submissions = proofs::pending(&state.db, &caller, limit, Utc::now()).await?;
    Ok(HttpResponse::Ok().json(ProofPage { submissions }))
}

/// What recording a proof check led to.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProofResponse {
    /// The submission, with its proof decided.
    pub submission: SubmissionView,
    /// The job's proofs still to be checked.
    pub pending: u32,
    /// Whether this was the last proof the job's payout waited for, so it is now queued.
    pub finalization_queued: bool,
}

/// Records the check of a submission's proof of training (once). A failed proof forfeits the
/// worker's job; the last proof of a job whose last round is merged queues its payout.
#[utoipa::path(
    post,
    path = "/v1/validator/submissions/{id}/proof",
    operation_id = "record_proof",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(("id" = Uuid, Path, description = "The submission id")),
    request_body = ProofCheck,
    responses(
        (status = 200, description = "The proof is decided", body = ProofResponse),
        JsonBodyRefused,
        (status = 404, description = "No submission has this id", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "No proof is due for the submission, it is already decided, or its job is no longer open, or another validator holds its lease", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "A failure without a reason, or stretches a run does not have", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The check could not be written", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn proof(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    id: web::Path<Uuid>,
    Json(body): Json<ProofCheck>,
) -> Result<HttpResponse, ApiError> {
    let recorded = proofs::record(
        &state.db,
        id.into_inner(),
        &body,
        &caller.claims.sub.to_string(),
        Utc::now(),
    )
    .await?;
    tracing::info!(submission = %recorded.submission.id, proof = %recorded.submission.proof_status,
        pending = recorded.pending, validator = %caller.claims.sub, "proof of training checked");
    Ok(HttpResponse::Ok().json(ProofResponse {
        submission: SubmissionView::from(recorded.submission),
        pending: recorded.pending,
        finalization_queued: recorded.finalization_queued,
    }))
}

/// Rounds ready to merge.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReadyPage {
    /// The rounds, oldest first, each with its accepted adapters.
    pub rounds: Vec<ReadyRound>,
}

/// Rounds whose adapters are all accepted, with the adapters to merge.
#[utoipa::path(
    get,
    path = "/v1/validator/rounds",
    operation_id = "ready_rounds",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    responses(
        (status = 200, description = "Rounds whose adapters are all accepted, with the adapters to merge, less those another validator holds", body = ReadyPage),
        (status = 500, description = "The rounds could not be read", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn ready_rounds(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
) -> Result<HttpResponse, ApiError> {
    let caller = caller.claims.sub.to_string();
    let rounds = verdicts::ready_rounds(&state.db, &caller, Utc::now()).await?;
    Ok(HttpResponse::Ok().json(ReadyPage { rounds }))
}

/// What recording the merge led to.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AggregateResponse {
    /// Whether the next round opened, the payout was queued or waits for proofs, or the job
    /// ends early for want of improvement (`validation.patience`).
    pub outcome: AggregateOutcome,
}

/// Records the merge of a round: opens the next round from it, queues the payout, or ends the
/// job early when its held-out metric has not improved for `validation.patience` rounds.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/rounds/{round}/aggregate",
    operation_id = "record_aggregate",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(("id" = Uuid, Path, description = "The job id"), ("round" = i32, Path, description = "The round number, from 1")),
    request_body = Aggregate,
    responses(
        (status = 200, description = "Next round opened, or the payout queued", body = AggregateResponse),
        JsonBodyRefused,
        (status = 404, description = "No such job or round", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job is not open, or the round is not waiting for its merge, or another validator holds its lease", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The adapter is not in the content store, or a metric is not finite", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The merge could not be recorded", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn aggregate(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    path: web::Path<(Uuid, i32)>,
    Json(body): Json<Aggregate>,
) -> Result<HttpResponse, ApiError> {
    let (job_id, number) = path.into_inner();
    if !state
        .store
        .has(&body.adapter_cid.0)
        .await
        .map_err(|e| ApiError::internal("content store", e))?
    {
        return Err(ApiError::invalid(
            "adapter_cid",
            format!(
                "{} is not in the content store; upload it first",
                body.adapter_cid
            ),
        ));
    }
    let outcome = rounds::merge_round(
        &state.db,
        job_id,
        number,
        &body,
        &caller.claims.sub.to_string(),
        state.config.task_max_attempts,
        Utc::now(),
    )
    .await?;
    tracing::info!(job = %job_id, round = number, ?outcome, validator = %caller.claims.sub, "round merged");
    Ok(HttpResponse::Ok().json(AggregateResponse { outcome }))
}

/// Reports that the job's model (or held-out set) cannot be loaded: the job is ended now, its
/// completed rounds paid and the rest refunded, instead of waiting for its deadline.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/model-failure",
    operation_id = "report_model_failure",
    tag = "validator",
    extensions(("x-shardwork-role" = json!("validator"))),
    params(("id" = Uuid, Path, description = "The job id")),
    request_body = ModelFailure,
    responses(
        (status = 202, description = "The job is being ended (`abort_recorded` false when it already was)", body = ModelFailureOutcome),
        JsonBodyRefused,
        (status = 404, description = "No such job", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 409, description = "The job is not open", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 422, description = "The reason is empty or longer than 1,000 characters", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 500, description = "The failure could not be recorded", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn model_failure(
    state: web::Data<AppState>,
    caller: Authenticated<ValidatorRole>,
    id: web::Path<Uuid>,
    Json(body): Json<ModelFailure>,
) -> Result<HttpResponse, ApiError> {
    let job_id = id.into_inner();
    let outcome = failures::report_model_failure(&state.db, job_id, &body, Utc::now()).await?;
    tracing::warn!(job = %job_id, reason = %body.reason, recorded = outcome.abort_recorded,
        validator = %caller.claims.sub, "the job's model cannot be loaded; the job is ended");
    Ok(HttpResponse::Accepted().json(outcome))
}
