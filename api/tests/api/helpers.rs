//! The test harness: the real application (routes, middleware, extractors) over a fresh
//! database, an embedded content store and the table queue, driven through HTTP requests.

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{self, TestRequest};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use chrono::{Duration, Utc};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::Value;
use shardwork_api::ApiConfig;
use shardwork_api::configuration::Secret;
use shardwork_api::http::app::app;
use shardwork_api::http::auth::siwe::SiweMessage;
use shardwork_api::state::{AppState, Ports};
use shardwork_core::protocol::EthAddress;
use shardwork_core::queue::table::TableQueue;
use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};
use shardwork_core::testkit::services::{Service as External, service_url};
use shardwork_migrations::{Migrator, MigratorTrait};

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs one test body on SQLite and on PostgreSQL (skipped, loudly, without a server).
#[macro_export]
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[actix_web::test] async fn $name() { super::$name($crate::helpers::Backend::Sqlite).await })*
        }
        mod postgres {
            $(#[actix_web::test] async fn $name() { super::$name($crate::helpers::Backend::Postgres).await })*
        }
    };
}

/// A PostgreSQL database created for one test and dropped when the test ends, pass or fail.
struct PgDatabase {
    admin_url: String,
    name: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime; a fresh thread gets a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let admin = Database::connect(&url)
                    .await
                    .map_err(std::io::Error::other)?;
                admin
                    .execute_raw(Statement::from_string(
                        admin.get_database_backend(),
                        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                    ))
                    .await
                    .map_err(std::io::Error::other)?;
                Ok::<_, std::io::Error>(())
            })
        })
        .join();
    }
}

pub struct TestApp {
    pub state: Arc<AppState>,
    pub db: DatabaseConnection,
    _dir: tempfile::TempDir,
    _pg: Option<PgDatabase>,
}

pub fn config() -> ApiConfig {
    ApiConfig {
        jwt_secret: Secret::new("test-jwt-secret-of-at-least-32-bytes!"),
        sealing_secret: Secret::new("test-sealing-secret-of-32-bytes-or-more"),
        rate_limit_per_minute: 0,
        validator_addresses: vec![address(&validator_key())],
        admin_addresses: vec![address(&admin_key())],
        ..ApiConfig::default()
    }
}

/// An in-memory chain with a freshly deployed escrow and development funding from dev
/// account 2.
pub async fn test_chain() -> shardwork_api::chain::Chain {
    use shardwork_contracts::ledger::embedded::EmbeddedLedger;
    let dev = shardwork_contracts::dev_keys::dev_addresses();
    chain_with_escrow(Arc::new(EmbeddedLedger::in_memory()), Some(dev[2])).await
}

/// An escrow deployed on `ledger`'s chain (development account 0 its admin, 1 its validator)
/// and the API's view of it, read with no confirmation depth; `dev_funder` may fund any job.
pub async fn chain_with_escrow(
    ledger: Arc<dyn shardwork_contracts::Ledger>,
    dev_funder: Option<alloy::primitives::Address>,
) -> shardwork_api::chain::Chain {
    use shardwork_contracts::ledger::DeployParams;
    let dev = shardwork_contracts::dev_keys::dev_addresses();
    let escrow = ledger
        .deploy_escrow(
            dev[0],
            &DeployParams {
                admin: dev[0],
                validator: dev[1],
                fee_manager: dev[0],
                treasury: dev[0],
                fee_bps: 250,
            },
        )
        .await
        .expect("deploy the escrow");
    shardwork_api::chain::Chain {
        ledger,
        chain_id: 31337,
        escrow,
        operator: dev[1],
        dev_funder,
        poll_interval: std::time::Duration::from_millis(50),
        confirmations: 0,
        start_block: 0,
        payout_limits: Default::default(),
    }
}

pub fn requester_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x11; 32].into()).unwrap()
}
pub fn worker_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x22; 32].into()).unwrap()
}
pub fn validator_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x33; 32].into()).unwrap()
}
pub fn admin_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x44; 32].into()).unwrap()
}
pub fn address(key: &PrivateKeySigner) -> EthAddress {
    EthAddress(key.address().into_array())
}

impl TestApp {
    /// `None` when the backend's server is unavailable (the skip is recorded).
    pub async fn start(backend: Backend) -> Option<TestApp> {
        Self::with_config(backend, config()).await
    }

    /// The app with an in-memory EVM: the escrow deployed (dev account 0 admin, 1 operator)
    /// and development funding from dev account 2.
    pub async fn with_chain(backend: Backend) -> Option<TestApp> {
        Self::with_config_and_chain(backend, config(), true).await
    }

    pub async fn with_config(backend: Backend, config: ApiConfig) -> Option<TestApp> {
        Self::with_config_and_chain(backend, config, false).await
    }

    pub async fn with_config_and_chain(
        backend: Backend,
        config: ApiConfig,
        with_chain: bool,
    ) -> Option<TestApp> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (db, pg) = match backend {
            Backend::Sqlite => {
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("api.db").display());
                (Database::connect(&url).await.expect("open sqlite"), None)
            }
            Backend::Postgres => {
                let url = service_url(External::Postgres, "api HTTP tests on PostgreSQL")?;
                let admin = Database::connect(&url)
                    .await
                    .expect("connect to PostgreSQL");
                let name = format!("shardwork_api_{}", uuid::Uuid::new_v4().simple());
                admin
                    .execute_raw(Statement::from_string(
                        admin.get_database_backend(),
                        format!("CREATE DATABASE {name}"),
                    ))
                    .await
                    .expect("create database");
                let pg = PgDatabase {
                    admin_url: url.clone(),
                    name: name.clone(),
                };
                let slash = url.rfind('/').expect("PostgreSQL URL names a database");
                let db = Database::connect(&format!("{}/{name}", &url[..slash]))
                    .await
                    .expect("connect to the test database");
                (db, Some(pg))
            }
        };
        Migrator::up(&db, None).await.expect("migrate");
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("store")))
            .await
            .expect("open store");
        let ports = Ports {
            db: db.clone(),
            store: Arc::new(store),
            queue: Arc::new(TableQueue::new(db.clone())),
            chain: if with_chain {
                Some(test_chain().await)
            } else {
                None
            },
        };
        // The model bundles the tests' specs name, as a requester would have put them first.
        for (architecture, chat) in [("bert", false), ("llama", true), ("llama", false)] {
            for blob in model_bundle(architecture, chat).1 {
                ports
                    .store
                    .put(blob.into())
                    .await
                    .expect("store a model file");
            }
        }
        let state = AppState::new(config, ports).expect("valid config");
        Some(TestApp {
            state,
            db,
            _dir: dir,
            _pg: pg,
        })
    }

    pub async fn service(
        &self,
    ) -> impl Service<
        actix_http::Request,
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
    > {
        test::init_service(app(self.state.clone())).await
    }
}

/// A response as the tests look at it.
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub headers: actix_web::http::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

pub async fn send<S, B>(service: &S, req: TestRequest) -> Reply
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = test::call_service(service, req.to_request()).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = test::read_body(response).await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        content_type,
        headers,
        body,
        text,
    }
}

impl Reply {
    /// Asserts a problem+json answer of `status` and `slug`; returns it for further checks.
    #[track_caller]
    pub fn problem(&self, status: u16, slug: &str) -> &Value {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.text
        );
        assert_eq!(
            self.body["type"],
            format!("urn:shardwork:problem:{slug}"),
            "{}",
            self.text
        );
        assert_eq!(self.body["status"], status, "{}", self.text);
        &self.body
    }

    /// A response header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The `path`s of a problem's field errors.
    pub fn paths(&self) -> Vec<String> {
        self.body["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["path"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A sign-in message for `key` with `nonce`, valid for ten minutes.
pub fn siwe_message(key: &PrivateKeySigner, nonce: &str) -> SiweMessage {
    let now = Utc::now();
    SiweMessage {
        scheme: None,
        domain: "localhost:8080".into(),
        address: address(key),
        statement: Some("Sign in to Shardwork".into()),
        uri: "http://localhost:8080".into(),
        version: "1".into(),
        chain_id: 31337,
        nonce: nonce.into(),
        issued_at: now,
        expiration_time: Some(now + Duration::minutes(10)),
        not_before: None,
        request_id: None,
        resources: vec![],
    }
}

pub fn sign(key: &PrivateKeySigner, message: &str) -> String {
    let signature = key.sign_message_sync(message.as_bytes()).expect("sign");
    format!("0x{}", hex::encode(signature.as_bytes()))
}

pub async fn fresh_nonce<S, B>(service: &S) -> String
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let reply = send(service, TestRequest::post().uri("/v1/auth/nonce")).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.body["nonce"].as_str().expect("nonce").to_owned()
}

/// Signs in through the API and returns the token response.
pub async fn sign_in<S, B>(service: &S, key: &PrivateKeySigner, roles: &[&str]) -> Value
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let nonce = fresh_nonce(service).await;
    let message = siwe_message(key, &nonce).render();
    let reply = send(
        service,
        TestRequest::post()
            .uri("/v1/auth/verify")
            .set_json(serde_json::json!({
                "message": message, "signature": sign(key, &message), "roles": roles,
            })),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body
}

pub async fn access_token<S, B>(service: &S, key: &PrivateKeySigner, roles: &[&str]) -> String
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    sign_in(service, key, roles).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

/// A small, well-formed model bundle of the family `architecture` names, as the API checks it
/// at posting: for `bert` a Hugging Face folder (config.json, tokenizer.json, a safetensors file
/// whose tensors end where the file does); for `llama` one GGUF file whose header carries the
/// dimensions, a byte-level BPE tokenizer and, with `chat_template`, a chat template. Returns
/// the bundle's CID and every blob to store (the files, then the bundle document).
pub fn model_bundle(architecture: &str, chat_template: bool) -> (String, Vec<Vec<u8>>) {
    let files: Vec<(&str, Vec<u8>)> = match architecture {
        "bert" => {
            let header = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
            let mut weights = (header.len() as u64).to_le_bytes().to_vec();
            weights.extend_from_slice(header);
            weights.extend_from_slice(&1f32.to_le_bytes());
            vec![
                (
                    "config.json",
                    serde_json::to_vec(&serde_json::json!({
                        "model_type": "bert", "hidden_size": 32, "intermediate_size": 64,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100
                    }))
                    .unwrap(),
                ),
                ("model.safetensors", weights),
                (
                    "tokenizer.json",
                    br#"{"model":{"type":"WordPiece","vocab":{}}}"#.to_vec(),
                ),
            ]
        }
        _ => vec![("model.gguf", gguf_header(chat_template))],
    };
    bundle_of(files)
}

/// A model bundle of `files`: its CID and every blob to store (the files, then the bundle).
pub fn bundle_of(files: Vec<(&str, Vec<u8>)>) -> (String, Vec<Vec<u8>>) {
    use shardwork_core::protocol::{Bundle, ContentId};
    use shardwork_core::store::unixfs::hash_reader;
    let mut bundle = Bundle::new("model");
    let mut blobs = Vec::new();
    for (name, bytes) in files {
        let cid = hash_reader(bytes.as_slice()).unwrap().root;
        bundle.files.insert(name.to_owned(), ContentId(cid));
        blobs.push(bytes);
    }
    let doc = serde_json::to_vec_pretty(&bundle).unwrap();
    let cid = hash_reader(doc.as_slice()).unwrap().root.to_string();
    blobs.push(doc);
    (cid, blobs)
}

/// A tiny Llama-family GGUF file with every tensor its header declares (hidden 16, 2 layers,
/// 32 tokens): the API checks the declared sizes against the tensors present.
pub fn gguf_header(chat_template: bool) -> Vec<u8> {
    shardwork_core::testkit::gguf::TinyGguf::llama(chat_template).bytes()
}
