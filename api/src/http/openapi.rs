//! The API's OpenAPI 3.1 description, generated from the handlers' `#[utoipa::path]`
//! annotations. Served at `GET /openapi.json` with Swagger UI at `/docs`, and committed as
//! `openapi/openapi.json`: a test fails when the file drifts from the code, and
//! `scripts/openapi` regenerates it.
//!
//! # Registering an endpoint
//!
//! 1. Annotate the handler. The doc comment's first line becomes the summary, the rest the
//!    description. Name its role in `x-shardwork-role` (one of [`DocRole`]), and list the
//!    responses that are the handler's own:
//!
//!    ```ignore
//!    /// Claims the lease of a task.
//!    #[utoipa::path(
//!        post,
//!        path = "/v1/tasks/{id}/claim",
//!        tag = "tasks",
//!        extensions(("x-shardwork-role" = json!("worker"))),
//!        params(("id" = Uuid, Path, description = "The task id")),
//!        request_body = ClaimRequest,
//!        responses(
//!            (status = 200, description = "Leased", body = Lease),
//!            (status = 409, description = "Leased by another worker", body = ProblemBody, content_type = PROBLEM_JSON),
//!            JsonBodyRefused,
//!        )
//!    )]
//!    pub async fn claim(…)
//!    ```
//!
//!    The rows many handlers share word for word are said once, as types that implement
//!    `utoipa::IntoResponses`, named in `responses(...)` beside the handler's own rows:
//!    [`JsonBodyRefused`] (`400` and `413` of a JSON body), [`JsonTooLarge`] (its `413` alone)
//!    and [`IdNotUuid`] (`400` of a malformed `id`). A `500` stays in each handler: it says
//!    what that handler could not read or write.
//!
//!    Derive `utoipa::ToSchema` on its request and response types (`IntoParams` on a query
//!    struct). Schemas reachable from a path are collected by themselves.
//! 2. Add one line, the handler's path, to `paths(...)` of [`ApiDoc`] below.
//! 3. Run `scripts/openapi` and commit `openapi/openapi.json`.
//!
//! What follows from the role is filled in by [`Conventions`], so handlers do not repeat it:
//! the bearer security requirement and `401` for every role but `public`, `403` for `worker`,
//! `validator` and `admin`, `429` on every rate-limited path, and the role named at the top of
//! the description. A test checks each operation's declared role against what its handler
//! actually lets through.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use actix_web::HttpResponse;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{Ref, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, ObjectBuilder, OpenApi as Document, RefOr};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

use crate::http::problem::{PROBLEM_JSON, ProblemBody};
use crate::http::routes::{self, auth, health, jobs, workers};

/// The operation extension naming the role an endpoint requires.
pub const ROLE_EXTENSION: &str = "x-shardwork-role";
/// The name of the security scheme every non-public operation requires.
pub const BEARER: &str = "bearer";

/// The API's OpenAPI document: `ApiDoc::openapi()`, served at `/openapi.json`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Shardwork API",
        description = "The Shardwork marketplace for LoRA and federated fine-tuning: sign in \
            with Ethereum (EIP-4361) for a JWT, post and follow jobs, register workers.\n\n\
            Every error is `application/problem+json` (RFC 7807) with a stable `type`, a human \
            `detail` and, for bad input, the fields at fault in `errors[].path`.\n\n\
            Each operation names the role it requires in `x-shardwork-role`: `public` (no \
            token), `requester` (any signed-in address), `worker`, `validator` or `admin`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    servers((url = "/", description = "The server this document was fetched from")),
    tags(
        (name = "auth", description = "Sign-In with Ethereum and tokens"),
        (name = "jobs", description = "Posting, reading and following jobs"),
        (name = "workers", description = "Worker registration and profile"),
        (name = "health", description = "Probes and metrics"),
        (name = "meta", description = "This description"),
    ),
    // ---------------------------------------------------------------------------------------
    // Every endpoint, one line each (see "Registering an endpoint" above). A test fails when
    // the server routes a path or method that is missing here, or the other way round.
    // ---------------------------------------------------------------------------------------
    paths(
        health::healthz,
        health::readyz,
        health::metrics,
        serve_document,
        auth::nonce,
        auth::verify,
        auth::refresh,
        auth::me,
        jobs::quote::quote,
        jobs::create::create,
        jobs::read::list,
        jobs::read::get,
        jobs::cancel::cancel,
        jobs::events::list,
        jobs::events::stream,
        jobs::progress::progress,
        jobs::heldout::held_out,
        workers::register,
        workers::heartbeat,
        workers::me,
        jobs::dev_fund::dev_fund,
        jobs::result::result,
        jobs::result::file,
        routes::chain::info,
        routes::content::upload,
        routes::content::download,
        routes::tasks::claim,
        routes::tasks::extend,
        routes::tasks::abandon,
        routes::tasks::release,
        routes::tasks::submit,
        routes::validator::pending,
        routes::validator::verdict,
        routes::validator::pending_proofs,
        routes::validator::proof,
        routes::validator::ready_rounds,
        routes::validator::lease,
        routes::validator::aggregate,
        routes::validator::model_failure,
    ),
    // Schemas reachable from the paths are collected automatically; list here only those
    // that no path names (for clients that want them anyway).
    components(schemas(ProblemBody)),
    modifiers(&Conventions),
)]
pub struct ApiDoc;

/// The roles an operation can require, as named in `x-shardwork-role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocRole {
    /// No token.
    Public,
    /// Any signed-in address: sign-in always grants `requester`.
    Requester,
    /// Registers, claims tasks and submits adapters.
    Worker,
    /// Rules on submissions and reads held-out data. Configured addresses only.
    Validator,
    /// Operates the marketplace. Configured addresses only.
    Admin,
}

impl DocRole {
    /// Every role, public first.
    pub const ALL: [DocRole; 5] = [
        DocRole::Public,
        DocRole::Requester,
        DocRole::Worker,
        DocRole::Validator,
        DocRole::Admin,
    ];

    /// The name used in `x-shardwork-role`.
    pub fn as_str(self) -> &'static str {
        match self {
            DocRole::Public => "public",
            DocRole::Requester => "requester",
            DocRole::Worker => "worker",
            DocRole::Validator => "validator",
            DocRole::Admin => "admin",
        }
    }

    /// The role named `text` in `x-shardwork-role`, if any.
    pub fn parse(text: &str) -> Option<DocRole> {
        DocRole::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// The role an operation declares, if it declares a known one.
    pub fn of(operation: &Operation) -> Option<DocRole> {
        operation
            .extensions
            .as_ref()
            .and_then(|e| e.get(ROLE_EXTENSION))
            .and_then(|v| v.as_str())
            .and_then(DocRole::parse)
    }

    fn sentence(self) -> &'static str {
        match self {
            DocRole::Public => "**Role:** public; no token needed.",
            DocRole::Requester => {
                "**Role:** `requester`: any signed-in address (sign-in always grants it)."
            }
            DocRole::Worker => "**Role:** `worker`.",
            DocRole::Validator => "**Role:** `validator` (configured addresses only).",
            DocRole::Admin => "**Role:** `admin` (configured addresses only).",
        }
    }

    /// A valid token can still lack this role (403).
    fn can_be_refused(self) -> bool {
        matches!(self, DocRole::Worker | DocRole::Validator | DocRole::Admin)
    }
}

/// Fills in what follows from each operation's role and path (see the module docs).
pub struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "The `access_token` from `POST /v1/auth/verify` (or `/v1/auth/refresh`).",
                    ))
                    .build(),
            ),
        );
        for (name, response) in shared_responses() {
            components.responses.insert(name.into(), response.into());
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                apply_conventions(path, operation);
            }
        }
    }
}

fn apply_conventions(path: &str, operation: &mut Operation) {
    // An operation without a known role is left alone; the `every_operation_declares_a_role`
    // test names it.
    let Some(role) = DocRole::of(operation) else {
        return;
    };
    operation.description = Some(match operation.description.take() {
        Some(text) if !text.is_empty() => format!("{}\n\n{text}", role.sentence()),
        _ => role.sentence().to_owned(),
    });
    let mut shared = Vec::new();
    if role != DocRole::Public {
        operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        shared.push(("401", "Unauthenticated"));
    }
    if role.can_be_refused() {
        shared.push(("403", "Forbidden"));
    }
    if !crate::http::rate_limit::exempt(path) {
        shared.push(("429", "RateLimited"));
    }
    for (status, name) in shared {
        let responses = &mut operation.responses.responses;
        responses
            .entry(status.to_owned())
            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
    }
}

/// `400` and `413` of a handler that takes a JSON body, as every such handler words them:
/// name it in `responses(...)` beside the handler's own rows.
pub struct JsonBodyRefused;

impl IntoResponses for JsonBodyRefused {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let not_json = "The body is not JSON or a field has the wrong type";
        BTreeMap::from([row("400", not_json), row("413", JSON_TOO_LARGE)])
    }
}

/// `413` alone, for a JSON handler whose own `400` says more about what its body must be.
pub struct JsonTooLarge;

impl IntoResponses for JsonTooLarge {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        BTreeMap::from([row("413", JSON_TOO_LARGE)])
    }
}

/// `400` of a handler whose only input that can fail to parse is the UUID `id` in its path.
pub struct IdNotUuid;

impl IntoResponses for IdNotUuid {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        BTreeMap::from([row("400", "`id` is not a UUID")])
    }
}

const JSON_TOO_LARGE: &str = "The body exceeds the JSON limit";

/// A problem response at `status`, as an [`IntoResponses`] lists it.
fn row(status: &str, description: &str) -> (String, RefOr<utoipa::openapi::Response>) {
    (status.to_owned(), problem(description).build().into())
}

fn problem(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        PROBLEM_JSON,
        Content::new(Some(Ref::from_schema_name(ProblemBody::name()))),
    )
}

/// The responses [`Conventions`] refers to, in `components.responses`.
fn shared_responses() -> [(&'static str, utoipa::openapi::Response); 3] {
    let seconds = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1));
    [
        (
            "Unauthenticated",
            problem("No bearer token, or it is malformed, expired or a refresh token")
                .header(
                    "WWW-Authenticate",
                    HeaderBuilder::new()
                        .schema(ObjectBuilder::new().schema_type(Type::String))
                        .description(Some("`Bearer`"))
                        .build(),
                )
                .build(),
        ),
        (
            "Forbidden",
            problem("The token is valid but lacks the role this endpoint requires").build(),
        ),
        (
            "RateLimited",
            problem("The caller, or its client address over every identity signed in from it, made more requests this minute than the configured limit (or, on an event stream, holds as many open streams as it may)")
                .header(
                    "Retry-After",
                    HeaderBuilder::new()
                        .schema(seconds)
                        .description(Some("Seconds until the next window"))
                        .build(),
                )
                .build(),
        ),
    ]
}

/// The description as served and committed: pretty JSON with a final newline.
pub fn document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .expect("an OpenAPI document always serializes");
    text.push('\n');
    text
}

/// Built once: the document does not change while the process runs.
static DOCUMENT: LazyLock<String> = LazyLock::new(document);

/// Documented methods per path pattern, for the `Allow` header of 405 answers.
static METHODS: LazyLock<HashMap<String, Vec<&'static str>>> = LazyLock::new(|| {
    let doc = ApiDoc::openapi();
    doc.paths
        .paths
        .iter()
        .map(|(path, item)| {
            let methods = [
                ("GET", item.get.is_some()),
                ("POST", item.post.is_some()),
                ("PUT", item.put.is_some()),
                ("PATCH", item.patch.is_some()),
                ("DELETE", item.delete.is_some()),
            ];
            let present = methods.into_iter().filter(|(_, on)| *on).map(|(m, _)| m);
            (path.clone(), present.collect())
        })
        .collect()
});

/// The methods the description documents for a route pattern (`/v1/jobs/{id}`), upper case.
pub fn documented_methods(pattern: &str) -> &'static [&'static str] {
    METHODS.get(pattern).map_or(&[], Vec::as_slice)
}

/// This API's OpenAPI description.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi_document",
    tag = "meta",
    extensions(("x-shardwork-role" = json!("public"))),
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object))
)]
pub async fn serve_document() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(DOCUMENT.as_str())
}

/// Where the interactive documentation lives; every path under it belongs to Swagger UI, not
/// to the API (the route/spec test leaves it out).
pub const DOCS_PREFIX: &str = "/docs";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_declares_a_role() {
        let doc = ApiDoc::openapi();
        for (path, item) in &doc.paths.paths {
            for (method, operation) in [
                ("get", &item.get),
                ("put", &item.put),
                ("post", &item.post),
                ("delete", &item.delete),
                ("patch", &item.patch),
            ] {
                if let Some(operation) = operation {
                    assert!(
                        DocRole::of(operation).is_some(),
                        "{method} {path}: name its role with extensions((\"{ROLE_EXTENSION}\" = \
                         json!(\"public\" | \"requester\" | \"worker\" | \"validator\" | \"admin\")))"
                    );
                }
            }
        }
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = ApiDoc::openapi();
        let mut seen = std::collections::BTreeSet::new();
        for item in doc.paths.paths.values() {
            for operation in [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                .into_iter()
                .flatten()
            {
                let id = operation.operation_id.clone().unwrap_or_default();
                assert!(seen.insert(id.clone()), "operation_id {id:?} is used twice");
            }
        }
    }

    #[test]
    fn roles_decide_security_and_shared_responses() {
        let doc = ApiDoc::openapi();
        let operation = |path: &str| {
            let item = &doc.paths.paths[path];
            item.get
                .clone()
                .or(item.post.clone())
                .expect("an operation")
        };
        let heartbeat = operation("/v1/workers/heartbeat");
        assert!(heartbeat.security.is_some());
        let statuses: Vec<_> = heartbeat.responses.responses.keys().cloned().collect();
        for status in ["204", "401", "403", "404", "429", "500"] {
            assert!(
                statuses.iter().any(|s| s == status),
                "{status} in {statuses:?}"
            );
        }
        let healthz = operation("/healthz");
        assert!(healthz.security.is_none());
        assert_eq!(
            healthz.responses.responses.keys().collect::<Vec<_>>(),
            ["200"],
            "probes are public and never rate limited"
        );
        let me = operation("/v1/auth/me");
        assert!(me.responses.responses.contains_key("401"));
        assert!(
            !me.responses.responses.contains_key("403"),
            "any signed-in caller"
        );
        assert!(
            me.description.unwrap().starts_with("**Role:** `requester`"),
            "the role leads the description"
        );
    }

    #[test]
    fn identifiers_are_patterned_strings() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        for (name, format) in [
            ("ContentId", "cid"),
            ("EthAddress", "eth-address"),
            ("WeiAmount", "uint256"),
        ] {
            assert_eq!(schemas[name]["type"], "string", "{name}");
            assert_eq!(schemas[name]["format"], format, "{name}");
            assert!(schemas[name]["pattern"].is_string(), "{name}");
        }
        assert_eq!(
            schemas["JobView"]["properties"]["requester"]["$ref"],
            "#/components/schemas/EthAddress"
        );
    }

    #[test]
    fn problems_document_their_field_paths() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let problem = &doc["components"]["schemas"]["Problem"];
        assert_eq!(
            problem["properties"]["errors"]["items"]["$ref"],
            "#/components/schemas/FieldError"
        );
        let not_found = &doc["paths"]["/v1/jobs/{id}"]["get"]["responses"]["404"];
        assert_eq!(
            not_found["content"][PROBLEM_JSON]["schema"]["$ref"],
            "#/components/schemas/Problem"
        );
    }
}
