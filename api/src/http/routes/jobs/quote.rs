//! `POST /v1/jobs/quote`: what a job would cost and how large its adapter would be, before it
//! is posted.

use actix_web::{HttpResponse, web};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use shardwork_core::protocol::{JobSpec, WeiAmount};

use crate::domain::sizing::{ModelShape, adapter_params, held_out_count};
use crate::http::auth::Authenticated;
use crate::http::auth::extractor::RequesterRole;
use crate::http::extract::Json;
use crate::http::openapi::JsonTooLarge;
use crate::http::problem::{ApiError, PROBLEM_JSON, ProblemBody, join_path};
use crate::stake_tokens;
use crate::state::AppState;

/// A job to quote: its spec and the size of its dataset.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuoteRequest {
    /// The job spec as it would be posted.
    #[schema(value_type = JobSpec)]
    pub spec: serde_json::Value,
    /// Records (JSONL lines) in the dataset: at least one held out and one to train on.
    #[schema(minimum = 2)]
    pub dataset_records: u64,
    /// The base model's dimensions; a reference model per architecture when absent.
    #[serde(default)]
    pub model: Option<ModelShape>,
}

/// What the job would cost and how large its adapter would be.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuoteResponse {
    /// Trainable parameters, a decimal string (it can exceed 2^53).
    #[schema(pattern = "^[0-9]+$")]
    pub adapter_params: String,
    /// float32 safetensors size of the adapter weights, a decimal string.
    #[schema(pattern = "^[0-9]+$")]
    pub adapter_bytes: String,
    /// `request`, or the reference model assumed (e.g. `bert-base-uncased`).
    pub model_shape_source: String,
    /// The model dimensions the sizes were computed for.
    pub model_shape: ModelShape,
    /// Records held out for the validator.
    pub held_out_records: u64,
    /// Records left for training.
    pub training_records: u64,
    /// Training records per shard, in shard order.
    pub shard_records: Vec<u64>,
    /// adapter_params × training_records × epochs × the configured price per parameter-record.
    #[schema(value_type = WeiAmount)]
    pub price_wei: String,
    /// The stake the spec offers.
    #[schema(value_type = WeiAmount)]
    pub stake_wei: String,
    /// Whether the stake is at least `price_wei`. Null for a stake in an ERC-20 token: the
    /// price is in wei and the API knows no exchange rate.
    pub stake_covers_price: Option<bool>,
}

/// What a job would cost and how large its adapter would be, before it is posted.
#[utoipa::path(
    post,
    path = "/v1/jobs/quote",
    operation_id = "quote_job",
    tag = "jobs",
    extensions(("x-shardwork-role" = json!("requester"))),
    request_body = QuoteRequest,
    responses(
        (status = 200, description = "The quote", body = QuoteResponse),
        (status = 400, description = "The body is not JSON or a field has the wrong type (`errors[].path` names it)", body = ProblemBody, content_type = PROBLEM_JSON),
        JsonTooLarge,
        (status = 422, description = "The spec, model shape or record count breaks a rule, or the stake's token is not one the escrow accepts; every field at fault is in `errors`", body = ProblemBody, content_type = PROBLEM_JSON),
        (status = 503, description = "The chain did not answer whether the stake's token is accepted", body = ProblemBody, content_type = PROBLEM_JSON),
    )
)]
pub async fn quote(
    state: web::Data<AppState>,
    _caller: Authenticated<RequesterRole>,
    Json(body): Json<QuoteRequest>,
) -> Result<HttpResponse, ApiError> {
    let spec_bytes = serde_json::to_vec(&body.spec)
        .map_err(|e| ApiError::internal("re-encoding the spec", e))?;
    let spec = JobSpec::parse(&spec_bytes, Utc::now()).map_err(|errors| {
        // A decoding error has one entry; rule violations may have many. Either way the paths
        // are rooted at `spec`.
        let decoded = serde_json::from_slice::<JobSpec>(&spec_bytes).is_ok();
        ApiError::from_spec_errors(errors, decoded, "spec")
    })?;
    stake_tokens::check_stake(state.chain.as_ref(), &spec.stake).await?;
    let (source, shape) = match body.model {
        Some(shape) => ("request".to_owned(), shape),
        None => {
            let (name, shape) = ModelShape::reference(spec.base_model.architecture);
            (name.to_owned(), shape)
        }
    };
    shape
        .validate()
        .map_err(|(field, message)| ApiError::invalid(format!("model.{field}"), message))?;
    let params = adapter_params(&spec, &shape)
        .map_err(|(path, message)| ApiError::invalid(join_path("spec", &path), message))?;

    let records = body.dataset_records;
    if records < 2 {
        return Err(ApiError::invalid(
            "dataset_records",
            format!("{records} records cannot give both a held-out set and training data"),
        ));
    }
    let held_out = held_out_count(records, spec.held_out_fraction);
    let training = records - held_out;
    let shard_records = spec
        .shard_sizes(training)
        .map_err(|message| ApiError::invalid("dataset_records", message))?;
    let price = params
        .saturating_mul(u128::from(training))
        .saturating_mul(u128::from(spec.training.epochs))
        .saturating_mul(u128::from(state.config.price_wei_per_param_record));
    let stake = spec.stake.amount.as_decimal();
    // A stake too long for u128 exceeds any saturated price.
    let covers = spec
        .stake
        .token
        .is_none()
        .then(|| stake.parse::<u128>().map_or(true, |s| s >= price));
    Ok(HttpResponse::Ok().json(QuoteResponse {
        adapter_params: params.to_string(),
        adapter_bytes: params.saturating_mul(4).to_string(),
        model_shape_source: source,
        model_shape: shape,
        held_out_records: held_out,
        training_records: training,
        shard_records,
        price_wei: price.to_string(),
        stake_wei: stake.to_owned(),
        stake_covers_price: covers,
    }))
}
