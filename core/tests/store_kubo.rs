//! The Kubo adapter against the ContentStore conformance suite, twice:
//!
//! * `emulated`: against a small Kubo-RPC-compatible HTTP server written below, backed by an
//!   EmbeddedStore. There is no Kubo binary on our machines. The emulator checks the *wire
//!   format* (paths, query options, multipart upload, JSON replies and error bodies as Kubo
//!   sends them) and lets the suite damage blocks behind the adapter's back. It is not a
//!   substitute for real Kubo: it implements only the five endpoints the adapter calls, behaves
//!   like a node that is always offline, and cannot catch a difference between its reading of
//!   Kubo's docs and Kubo's behaviour.
//! * `real`: against a real node when `SHARDWORK_TEST_KUBO_URL` names one (skipped, loudly,
//!   otherwise). That is the check that matters before production use.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper014::service::{make_service_fn, service_fn};
use hyper014::{Body, Method, Request, Response, Server, StatusCode};
use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};
use shardwork_core::store::kubo::{KuboConfig, KuboStore};
use shardwork_core::store::verify::BlockSource;
use shardwork_core::store::{ContentStore, parse_cid};
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_core::testkit::store_suite::{SUITE_MAX_PUT, StoreHarness, damage_file};

/// The emulated node: a folder blockstore behind Kubo's RPC wire format.
#[derive(Clone)]
struct Emulator {
    blocks: EmbeddedStore,
}

/// A failed RPC call, answered with Kubo's error body (go-ipfs-cmds): the status (500 for
/// command errors) and `{"Message", "Code": 0, "Type": "error"}`.
struct RpcError {
    status: StatusCode,
    message: String,
}

fn kubo_error(status: StatusCode, message: &str) -> RpcError {
    RpcError {
        status,
        message: message.to_owned(),
    }
}

impl RpcError {
    fn into_response(self) -> Response<Body> {
        let body = serde_json::json!({ "Message": self.message, "Code": 0, "Type": "error" });
        Response::builder()
            .status(self.status)
            .header("Content-Type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("static response parts")
    }
}

fn json_line(value: serde_json::Value) -> Response<Body> {
    Response::builder()
        .header("Content-Type", "application/json")
        .header("X-Chunked-Output", "1")
        .header("Trailer", "X-Stream-Error")
        .body(Body::from(format!("{value}\n")))
        .expect("static response parts")
}

fn query(req: &Request<Body>) -> Vec<(String, String)> {
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Global options Kubo accepts on every command (the adapter sends `timeout` and `offline`).
const GLOBAL_OPTIONS: &[&str] = &["timeout", "offline", "stream-channels", "encoding"];

impl Emulator {
    async fn handle(self, req: Request<Body>) -> Result<Response<Body>, Infallible> {
        // Kubo's RPC refuses anything but POST (since 0.5, as a CSRF defence).
        if req.method() != Method::POST {
            let refusal = kubo_error(StatusCode::METHOD_NOT_ALLOWED, "405 - Method Not Allowed");
            return Ok(refusal.into_response());
        }
        let params = query(&req);
        let options: HashMap<&str, &str> = params
            .iter()
            .filter(|(key, _)| key != "arg")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let args: Vec<&str> = params
            .iter()
            .filter(|(k, _)| k == "arg")
            .map(|(_, v)| v.as_str())
            .collect();
        let path = req.uri().path().to_owned();
        let response = match path.as_str() {
            "/api/v0/add" => self.add(&options, req).await,
            "/api/v0/block/get" => self.block_get(&options, &args).await,
            "/api/v0/block/stat" => self.block_stat(&options, &args).await,
            "/api/v0/pin/add" => self.pin_add(&options, &args).await,
            "/api/v0/pin/ls" => self.pin_ls(&options, &args).await,
            "/api/v0/pin/rm" => self.pin_rm(&options, &args).await,
            other => Err(kubo_error(
                StatusCode::NOT_FOUND,
                &format!("404 page not found: {other}"),
            )),
        };
        Ok(response.unwrap_or_else(RpcError::into_response))
    }

    /// Refuses options the emulator does not implement, so adapter drift fails loudly here.
    fn expect_options(
        options: &HashMap<&str, &str>,
        allowed: &[(&str, &str)],
    ) -> Result<(), RpcError> {
        for (key, value) in options {
            if GLOBAL_OPTIONS.contains(key) {
                continue;
            }
            match allowed.iter().find(|(name, _)| name == key) {
                Some((_, expected)) if expected.is_empty() || expected == value => {}
                _ => {
                    return Err(kubo_error(
                        StatusCode::BAD_REQUEST,
                        &format!("emulator does not implement option {key}={value}"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn one_cid(args: &[&str]) -> Result<cid::Cid, RpcError> {
        match args {
            [arg] => parse_cid(arg).map_err(|err| {
                kubo_error(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid path {arg:?}: {err}"),
                )
            }),
            _ => Err(kubo_error(
                StatusCode::BAD_REQUEST,
                "argument \"cid\" is required",
            )),
        }
    }

    async fn add(
        &self,
        options: &HashMap<&str, &str>,
        req: Request<Body>,
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(
            options,
            &[
                ("cid-version", "1"),
                ("raw-leaves", "true"),
                ("chunker", "size-262144"),
                ("hash", "sha2-256"),
                ("pin", "true"),
                ("trickle", "false"),
                ("inline", "false"),
            ],
        )?;
        let boundary = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split("boundary=").nth(1))
            .map(|b| b.trim_matches('"').to_owned())
            .ok_or_else(|| {
                kubo_error(StatusCode::BAD_REQUEST, "file argument 'path' is required")
            })?;
        // An aborted upload (the adapter failing its body) never reaches the store.
        let body = hyper014::body::to_bytes(req.into_body())
            .await
            .map_err(|err| {
                kubo_error(
                    StatusCode::BAD_REQUEST,
                    &format!("reading request body: {err}"),
                )
            })?;
        let content = first_part(&body, &boundary)
            .ok_or_else(|| kubo_error(StatusCode::BAD_REQUEST, "malformed multipart body"))?;
        let data = body.slice_ref(content);
        let (imported, blocks) = shardwork_core::store::unixfs::import(&data);
        let cid = self
            .blocks
            .put(data)
            .await
            .map_err(|err| kubo_error(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()))?;
        assert_eq!(
            cid, imported.root,
            "the backing store and the importer disagree"
        );
        // Size: the cumulative size of the DAG (the root link's Tsize), as a string.
        let size: usize = blocks.iter().map(|b| b.data.len()).sum();
        Ok(json_line(
            serde_json::json!({ "Name": cid.to_string(), "Hash": cid.to_string(), "Size": size.to_string() }),
        ))
    }

    fn not_found(cid: &cid::Cid) -> RpcError {
        kubo_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("block was not found locally (offline): ipld: could not find {cid}"),
        )
    }

    async fn block_get(
        &self,
        options: &HashMap<&str, &str>,
        args: &[&str],
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(options, &[])?;
        let cid = Self::one_cid(args)?;
        // Served as stored, unverified: verification is the adapter's job, and the suite damages
        // blocks precisely to see that it does it.
        match self.blocks.block(&cid).await {
            Ok(Some(data)) => Ok(Response::builder()
                .header("Content-Type", "text/plain")
                .header("X-Stream-Output", "1")
                .body(Body::from(data))
                .expect("static response parts")),
            Ok(None) => Err(Self::not_found(&cid)),
            Err(err) => Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &err.to_string(),
            )),
        }
    }

    async fn block_stat(
        &self,
        options: &HashMap<&str, &str>,
        args: &[&str],
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(options, &[])?;
        let cid = Self::one_cid(args)?;
        match self.blocks.block(&cid).await {
            Ok(Some(data)) => Ok(json_line(
                serde_json::json!({ "Key": cid.to_string(), "Size": data.len() }),
            )),
            Ok(None) => Err(Self::not_found(&cid)),
            Err(err) => Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &err.to_string(),
            )),
        }
    }

    async fn pin_add(
        &self,
        options: &HashMap<&str, &str>,
        args: &[&str],
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(options, &[("recursive", "true"), ("progress", "false")])?;
        let cid = Self::one_cid(args)?;
        match self.blocks.pin(&cid).await {
            Ok(()) => Ok(json_line(serde_json::json!({ "Pins": [cid.to_string()] }))),
            Err(shardwork_core::store::StoreError::NotFound(missing)) => {
                Err(Self::not_found(&missing))
            }
            Err(err) => Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &err.to_string(),
            )),
        }
    }

    async fn pin_rm(
        &self,
        options: &HashMap<&str, &str>,
        args: &[&str],
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(options, &[("recursive", "true")])?;
        let cid = Self::one_cid(args)?;
        let pinned = self.blocks.stat(&cid).await.is_ok_and(|stat| stat.pinned);
        if !pinned {
            // Kubo's answer for a CID with no recursive pin.
            return Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "not pinned or pinned indirectly",
            ));
        }
        match self.blocks.unpin(&cid).await {
            Ok(()) => Ok(json_line(serde_json::json!({ "Pins": [cid.to_string()] }))),
            Err(err) => Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &err.to_string(),
            )),
        }
    }

    async fn pin_ls(
        &self,
        options: &HashMap<&str, &str>,
        args: &[&str],
    ) -> Result<Response<Body>, RpcError> {
        Self::expect_options(options, &[("type", "recursive")])?;
        let cid = Self::one_cid(args)?;
        let stat = self
            .blocks
            .stat(&cid)
            .await
            .map_err(|err| kubo_error(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()))?;
        if stat.pinned {
            Ok(json_line(
                serde_json::json!({ "Keys": { cid.to_string(): { "Type": "recursive" } } }),
            ))
        } else {
            Err(kubo_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("path '{cid}' is not pinned"),
            ))
        }
    }
}

/// The content of the first part of a multipart/form-data body.
fn first_part<'a>(body: &'a [u8], boundary: &str) -> Option<&'a [u8]> {
    let delimiter = format!("--{boundary}");
    let start = find(body, delimiter.as_bytes())? + delimiter.len();
    let headers_end = start + find(&body[start..], b"\r\n\r\n")? + 4;
    let closing = format!("\r\n--{boundary}");
    let end = headers_end + find(&body[headers_end..], closing.as_bytes())?;
    Some(&body[headers_end..end])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Starts the emulator on a random port; returns its URL and the store behind it.
async fn start_emulator(blocks: EmbeddedStore) -> SocketAddr {
    let emulator = Emulator { blocks };
    let make = make_service_fn(move |_| {
        let emulator = emulator.clone();
        async move { Ok::<_, Infallible>(service_fn(move |req| emulator.clone().handle(req))) }
    });
    let server = Server::bind(&SocketAddr::from(([127, 0, 0, 1], 0))).serve(make);
    let addr = server.local_addr();
    tokio::spawn(server);
    addr
}

mod emulated {
    use super::*;

    pub async fn harness() -> Option<StoreHarness> {
        let dir = tempfile::tempdir().expect("temp dir");
        // The node's own limit is far above the suite's: the adapter must enforce its own.
        let config = EmbeddedConfig {
            max_put_size: 1 << 30,
            sync_writes: false,
            ..EmbeddedConfig::new(dir.path())
        };
        let blocks = EmbeddedStore::open(config)
            .await
            .expect("open backing store");
        let addr = start_emulator(blocks.clone()).await;
        let kubo = KuboConfig {
            max_put_size: SUITE_MAX_PUT,
            fetch_timeout: Duration::from_secs(5),
            ..KuboConfig::new(format!("http://{addr}"))
        };
        let store = KuboStore::new(&kubo).expect("client");
        Some(
            StoreHarness::new(Arc::new(store))
                .with_damage(move |cid, how| damage_file(&blocks.block_path(cid), how))
                .keep(dir),
        )
    }

    shardwork_core::content_store_conformance!(harness);

    #[tokio::test]
    async fn kubo_answering_with_another_cid_fails_the_put() {
        // A node that chunks differently (here: a handler that stores with other settings is
        // simulated by an emulator whose answer we rewrite) must not have its CID accepted.
        let dir = tempfile::tempdir().expect("temp dir");
        let blocks = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .expect("open");
        let lying = make_service_fn(move |_| {
            let blocks = blocks.clone();
            async move {
                Ok::<_, Infallible>(service_fn(move |req: Request<Body>| {
                    let emulator = Emulator {
                        blocks: blocks.clone(),
                    };
                    async move {
                        let is_add = req.uri().path() == "/api/v0/add";
                        let response = emulator.handle(req).await?;
                        if !is_add {
                            return Ok::<_, Infallible>(response);
                        }
                        let other = shardwork_core::store::unixfs::raw_cid(b"something else");
                        Ok(json_line(
                            serde_json::json!({ "Name": "x", "Hash": other.to_string(), "Size": "1" }),
                        ))
                    }
                }))
            }
        });
        let server = Server::bind(&SocketAddr::from(([127, 0, 0, 1], 0))).serve(lying);
        let addr = server.local_addr();
        tokio::spawn(server);
        let store = KuboStore::new(&KuboConfig::new(format!("http://{addr}"))).expect("client");
        let err = store
            .put(Bytes::from_static(b"hello world"))
            .await
            .expect_err("must refuse");
        let message = err.to_string();
        assert!(
            message.contains("bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"),
            "{message}"
        );
        assert!(message.contains("Import settings"), "{message}");
    }

    #[tokio::test]
    async fn unreachable_node_is_a_backend_error_naming_the_url() {
        // Port 9 (discard) on localhost: nothing listens there in our environments.
        let store = KuboStore::new(&KuboConfig::new("http://127.0.0.1:9")).expect("client");
        let err = store
            .has(&shardwork_core::store::unixfs::raw_cid(b"x"))
            .await
            .expect_err("no node");
        assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
        let err = KuboStore::new(&KuboConfig::new("not a url")).expect_err("bad URL");
        assert!(err.to_string().contains("not a url"), "{err}");
    }
}

mod real {
    use super::*;

    pub async fn harness() -> Option<StoreHarness> {
        let url = service_url(Service::Kubo, "ContentStore conformance (real Kubo)")?;
        let config = KuboConfig {
            max_put_size: SUITE_MAX_PUT,
            // Unknown CIDs make a real node search the network; keep that short in tests.
            fetch_timeout: Duration::from_secs(3),
            ..KuboConfig::new(url)
        };
        let store = KuboStore::new(&config).expect("client");
        store.check().await.expect("the Kubo node answers version");
        Some(StoreHarness::new(Arc::new(store)))
    }

    shardwork_core::content_store_conformance!(harness);
}
