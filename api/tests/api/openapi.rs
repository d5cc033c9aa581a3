//! The OpenAPI description against the code and the running application: the committed
//! `openapi/openapi.json` is current, every route the server answers is documented (and every
//! documented operation is routed), and each operation's declared role is the one its handler
//! enforces.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;

use actix_web::dev::Service;
use actix_web::http::Method;
use actix_web::test::{self, TestRequest};
use shardwork_api::http::app::app;
use shardwork_api::http::openapi::{self, DOCS_PREFIX, DocRole};
use utoipa::OpenApi;

use crate::helpers::*;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json")
}

#[test]
fn committed_document_matches_the_code() {
    let generated = openapi::document();
    let path = committed_path();
    if std::env::var("SHARDWORK_UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first_difference = committed
            .lines()
            .zip(generated.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| {
                format!(
                    "first difference at line {}:\n  committed: {a}\n  code:      {b}",
                    i + 1
                )
            })
            .unwrap_or_else(|| "one is a prefix of the other".into());
        panic!(
            "openapi/openapi.json does not match the code: run scripts/openapi and commit the file.\n{first_difference}"
        );
    }
}

/// `(METHOD, /path/{param})` of every documented operation.
fn documented_operations() -> BTreeSet<(String, String)> {
    let doc = serde_json::to_value(openapi::ApiDoc::openapi()).unwrap();
    let mut operations = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.insert((method.to_uppercase(), path.clone()));
        }
    }
    operations
}

/// A ResourceMap node as its `Debug` output shows it: its own pattern and its children.
#[derive(Debug, Default)]
struct RouteNode {
    pattern: String,
    children: Vec<RouteNode>,
}

/// Reads the route tree out of actix's `ResourceMap` `Debug` text. actix offers no public way
/// to list routes; if its `Debug` layout ever changes, this parser finds no routes and the
/// test below fails saying so, rather than passing vacuously.
fn parse_resource_map(text: &str) -> Option<RouteNode> {
    fn node(text: &str, at: &mut usize) -> Option<RouteNode> {
        // Positioned just after "ResourceMap {". Its first field is its own `ResourceDef`, so
        // the first pattern met is this node's; child maps follow in `nodes`.
        let mut result = RouteNode::default();
        let mut own_pattern_seen = false;
        let mut depth = 1usize;
        let bytes = text.as_bytes();
        while *at < bytes.len() && depth > 0 {
            let rest = &text[*at..];
            if let Some(literal) = rest.strip_prefix('"') {
                // Skip a string literal (patterns hold no escaped quotes we care about).
                let end = literal.find('"')? + 2;
                *at += end;
                continue;
            }
            if !own_pattern_seen && rest.starts_with("patterns: Single(\"") {
                let start = "patterns: Single(\"".len();
                let end = rest[start..].find('"')?;
                result.pattern = rest[start..start + end].to_owned();
                own_pattern_seen = true;
                *at += start + end + 1;
                continue;
            }
            if rest.starts_with("ResourceMap {") {
                *at += "ResourceMap {".len();
                result.children.push(node(text, at)?);
                continue;
            }
            match bytes[*at] {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            *at += 1;
        }
        Some(result)
    }
    let start = text.find("ResourceMap {")? + "ResourceMap {".len();
    let mut at = start;
    node(text, &mut at)
}

/// Full patterns of the leaves (resources, not scopes).
fn leaf_patterns(node: &RouteNode, prefix: &str, out: &mut Vec<String>) {
    let path = format!("{prefix}{}", node.pattern);
    if node.children.is_empty() {
        out.push(path);
    } else {
        for child in &node.children {
            leaf_patterns(child, &path, out);
        }
    }
}

/// A concrete path for a pattern: every `{param}` becomes the nil UUID.
fn concrete(pattern: &str) -> String {
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("balanced pattern") + open;
        out.push_str("00000000-0000-0000-0000-000000000000");
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

#[actix_web::test]
async fn served_routes_and_documented_operations_agree() {
    let Some(test_app) = TestApp::start(Backend::Sqlite).await else {
        return;
    };
    // Records the route tree and, per request, the pattern the router matched.
    let routes: Rc<RefCell<String>> = Rc::default();
    let matched: Rc<RefCell<Option<String>>> = Rc::default();
    let (routes_in, matched_in) = (routes.clone(), matched.clone());
    let service = test::init_service(app(test_app.state.clone()).wrap_fn(move |req, srv| {
        *routes_in.borrow_mut() = format!("{:?}", req.resource_map());
        let matched = matched_in.clone();
        let call = srv.call(req);
        async move {
            let response = call.await?;
            *matched.borrow_mut() = response.request().match_pattern();
            Ok(response)
        }
    }))
    .await;
    test::call_service(&service, TestRequest::get().uri("/healthz").to_request()).await;

    let tree = parse_resource_map(&routes.borrow()).expect("a ResourceMap in the Debug text");
    let mut patterns = Vec::new();
    leaf_patterns(&tree, "", &mut patterns);
    patterns.retain(|p| !p.starts_with(DOCS_PREFIX));
    assert!(
        patterns.iter().any(|p| p == "/v1/jobs/{id}"),
        "the route tree parser found {patterns:?}; has actix's ResourceMap Debug layout changed?"
    );

    // A method is served on a pattern when the router matched that pattern and the resource
    // did not answer 405.
    let mut served = BTreeSet::new();
    for pattern in &patterns {
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            let request = TestRequest::default()
                .method(method.clone())
                .uri(&concrete(pattern))
                .to_request();
            let response = test::call_service(&service, request).await;
            let routed = matched.borrow().as_deref() == Some(pattern.as_str());
            if routed && response.status().as_u16() != 405 {
                served.insert((method.to_string(), pattern.clone()));
            }
        }
    }

    let documented = documented_operations();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in the OpenAPI description (annotate the handler and add it to \
         ApiDoc's paths in api/src/openapi.rs): {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented but not routed (api/src/routes/mod.rs): {unrouted:?}"
    );
}

#[actix_web::test]
async fn declared_roles_are_the_roles_handlers_enforce() {
    let Some(test_app) = TestApp::start(Backend::Sqlite).await else {
        return;
    };
    let service = test_app.service().await;
    // A plain sign-in holds `requester` only; each other key adds its role.
    let requester = access_token(&service, &requester_key(), &[]).await;
    let holders = [
        (DocRole::Requester, requester.clone()),
        (
            DocRole::Worker,
            access_token(&service, &worker_key(), &["worker"]).await,
        ),
        (
            DocRole::Validator,
            access_token(&service, &validator_key(), &["validator"]).await,
        ),
        (
            DocRole::Admin,
            access_token(&service, &admin_key(), &["admin"]).await,
        ),
    ];
    let doc = openapi::ApiDoc::openapi();
    let mut checked = 0;
    for (path, item) in &doc.paths.paths {
        for (method, operation) in [
            (Method::GET, &item.get),
            (Method::POST, &item.post),
            (Method::PUT, &item.put),
            (Method::PATCH, &item.patch),
            (Method::DELETE, &item.delete),
        ] {
            let Some(operation) = operation else { continue };
            let role = DocRole::of(operation).expect("every operation declares a role");
            let call = |token: Option<&str>| {
                let mut request = TestRequest::default()
                    .method(method.clone())
                    .uri(&concrete(path));
                if let Some(token) = token {
                    request = request.insert_header(bearer(token));
                }
                send(&service, request)
            };
            let anonymous = call(None).await.status;
            let label = format!("{method} {path} (declared {})", role.as_str());
            if role == DocRole::Public {
                assert!(
                    anonymous != 401 && anonymous != 403,
                    "{label}: refused without a token ({anonymous})"
                );
                checked += 1;
                continue;
            }
            assert_eq!(anonymous, 401, "{label}: answers without a token");
            let holder = &holders.iter().find(|(r, _)| *r == role).unwrap().1;
            let status = call(Some(holder)).await.status;
            assert!(
                status != 401 && status != 403,
                "{label}: refuses a holder of the role ({status})"
            );
            if role != DocRole::Requester {
                let status = call(Some(&requester)).await.status;
                assert_eq!(status, 403, "{label}: lets a plain requester through");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, documented_operations().len());
}

#[actix_web::test]
async fn the_document_and_the_docs_page_are_served() {
    let Some(test_app) = TestApp::start(Backend::Sqlite).await else {
        return;
    };
    let service = test_app.service().await;
    let reply = send(&service, TestRequest::get().uri("/openapi.json")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(reply.text, openapi::document(), "serves what is committed");
    assert_eq!(reply.body["info"]["title"], "Shardwork API");

    let reply = send(&service, TestRequest::get().uri("/docs")).await;
    assert_eq!(reply.status, 308);
    assert_eq!(reply.header("location"), "/docs/");
    let reply = send(&service, TestRequest::get().uri("/docs/")).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.content_type.starts_with("text/html"),
        "{}",
        reply.content_type
    );
    assert!(reply.text.contains("swagger-ui"), "{}", reply.text);
    // The page's script and the initializer naming our document come from the binary.
    let reply = send(
        &service,
        TestRequest::get().uri("/docs/swagger-ui-bundle.js"),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(reply.text.len() > 100_000, "the bundle is embedded");
    let reply = send(
        &service,
        TestRequest::get().uri("/docs/swagger-initializer.js"),
    )
    .await;
    assert!(reply.text.contains("/openapi.json"), "{}", reply.text);
}
