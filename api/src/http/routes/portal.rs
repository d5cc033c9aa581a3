//! The requester portal: the production build of `frontend/` (`scripts/frontend build`), served
//! from `ApiConfig::portal_dir` at `/`, so `shardwork up` is a complete product with no CDN and
//! no second server.
//!
//! Paths the API owns (`/v1/…`, `/healthz`, `/readyz`, `/metrics`) are routes and never reach
//! it. Everything else is a file of the build, or, for a path with no
//! file extension, the single-page app's `index.html` (its router reads the path). A missing
//! asset (`/assets/x.js`) is a 404, never `index.html`: HTML served as a script only produces a
//! confusing syntax error in the browser.
//!
//! Vite names every file under `assets/` by a hash of its content, so those are cached for a
//! year as immutable; `index.html` and the other top-level files must be revalidated, or a new
//! deployment would keep serving stale asset names.

use std::path::{Path, PathBuf};

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{HttpRequest, HttpResponse, web};

use crate::http::problem::ApiError;
use crate::state::AppState;

/// Cache policy for files whose name carries a hash of their content.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache policy for everything else: use a copy only after checking it is current.
const REVALIDATE: &str = "no-cache";
/// Folder of the build whose files are content-hashed.
const HASHED_DIR: &str = "assets";
/// The portal talks only to its own origin; wallets inject their provider as extensions, which
/// a page's CSP does not restrict.
const CSP: &str = "default-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// The application's default service: GET and HEAD of a path no route claimed are the portal's;
/// anything else, and any path under the API's own `/v1`, keeps the API's 404 problem.
///
/// A default service rather than a catch-all route, so the portal's pages share the
/// `unmatched` metrics label and the API's routes need no exclusion pattern.
pub async fn fallback(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let path = req.path();
    let api_path = path == "/v1" || path.starts_with("/v1/");
    if api_path || !(req.method() == Method::GET || req.method() == Method::HEAD) {
        return Err(ApiError::not_found("no such endpoint"));
    }
    serve(&state, &req).await
}

/// What a request path resolves to inside the portal folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A file of the build.
    File {
        /// The file, inside the portal folder.
        path: PathBuf,
        /// Under `assets/`, named by a hash of its content: cached for a year as immutable.
        immutable: bool,
    },
    /// A client-side route: answer with `index.html`.
    App,
    /// A path that names a file the build does not have, or that is not allowed.
    NotFound,
}

/// Maps a URL path to what should answer it. Only plain segments are accepted: `..`, `.`,
/// dot-files, backslashes and NUL never name a file, so no path can leave `dir`.
pub fn resolve(dir: &Path, url_path: &str) -> Resolved {
    let segments: Vec<&str> = url_path.split('/').filter(|s| !s.is_empty()).collect();
    if segments
        .iter()
        .any(|s| s.starts_with('.') || s.contains(['\\', '\0']))
    {
        return Resolved::NotFound;
    }
    if segments.is_empty() {
        return Resolved::App;
    }
    let path = segments.iter().fold(dir.to_path_buf(), |p, s| p.join(s));
    if path.is_file() {
        return Resolved::File {
            immutable: segments.len() > 1 && segments[0] == HASHED_DIR,
            path,
        };
    }
    let last = segments[segments.len() - 1];
    if segments[0] == HASHED_DIR || last.contains('.') {
        Resolved::NotFound
    } else {
        Resolved::App
    }
}

/// The `Content-Type` of a build file, by extension: the few kinds Vite emits.
pub fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    match ext.as_str() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "wasm" => "application/wasm",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Shown when the portal has not been built: the API itself works, so say how to get the rest.
/// A 404: the page asked for is not there, and a probe must not mistake this for the portal.
fn not_built_page(dir: &Path) -> HttpResponse {
    let dir = html_escape(&dir.display().to_string());
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Shardwork: portal not built</title></head><body>\
         <h1>The Shardwork portal is not built</h1>\
         <p>The API is running, but there is no portal in <code>{dir}</code>.</p>\
         <p>Build it with <code>scripts/frontend build</code> (needs Node.js 20 and npm), or point \
         <code>api.portal_dir</code> (<code>SHARDWORK_API__PORTAL_DIR</code>) at a built portal, \
         then reload this page.</p>\
         <p>The API itself answers under <code>/v1</code>; its health is at \
         <a href=\"/healthz\">/healthz</a>.</p></body></html>\n"
    );
    HttpResponse::build(StatusCode::NOT_FOUND)
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, REVALIDATE))
        .body(body)
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn serve(state: &AppState, req: &HttpRequest) -> Result<HttpResponse, ApiError> {
    let dir = &state.config.portal_dir;
    let index = dir.join("index.html");
    let (path, immutable) = match resolve(dir, req.path()) {
        Resolved::File { path, immutable } => (path, immutable),
        Resolved::App if index.is_file() => (index, false),
        Resolved::App => return Ok(not_built_page(dir)),
        Resolved::NotFound => {
            return Err(ApiError::not_found(format!(
                "{} is not a file of the portal",
                req.path()
            )));
        }
    };
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| ApiError::internal(&format!("reading {}", path.display()), e))?;
    let kind = content_type(&path);
    let mut response = HttpResponse::Ok();
    response
        .insert_header((header::CONTENT_TYPE, kind))
        .insert_header((
            header::CACHE_CONTROL,
            if immutable { IMMUTABLE } else { REVALIDATE },
        ))
        .insert_header((
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ));
    if kind.starts_with("text/html") {
        response.insert_header((header::CONTENT_SECURITY_POLICY, CSP));
    }
    if req.method() == Method::HEAD {
        response.insert_header((header::CONTENT_LENGTH, bytes.len()));
        return Ok(response.finish());
    }
    Ok(response.body(bytes))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use actix_web::test::{self, TestRequest};
    use sea_orm::Database;
    use shardwork_core::queue::table::TableQueue;
    use shardwork_core::store::embedded::{EmbeddedConfig, EmbeddedStore};

    use super::*;
    use crate::configuration::{ApiConfig, Secret};
    use crate::http::app::app;
    use crate::state::Ports;

    /// A folder laid out as `vite build` lays it out.
    fn built_portal() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("assets")).unwrap();
        std::fs::write(
            dir.path().join("index.html"),
            "<!doctype html><title>portal</title>",
        )
        .unwrap();
        std::fs::write(dir.path().join("assets/index-abc123.js"), "console.log(1)").unwrap();
        std::fs::write(dir.path().join("favicon.svg"), "<svg/>").unwrap();
        dir
    }

    #[test]
    fn paths_resolve_to_files_routes_or_nothing() {
        let dir = built_portal();
        let d = dir.path();
        assert_eq!(resolve(d, "/"), Resolved::App);
        assert_eq!(resolve(d, "/jobs/0190-aa/"), Resolved::App);
        assert_eq!(
            resolve(d, "/assets/index-abc123.js"),
            Resolved::File {
                path: d.join("assets/index-abc123.js"),
                immutable: true
            }
        );
        assert_eq!(
            resolve(d, "/favicon.svg"),
            Resolved::File {
                path: d.join("favicon.svg"),
                immutable: false
            }
        );
        assert_eq!(resolve(d, "/assets/gone-123.js"), Resolved::NotFound);
        assert_eq!(resolve(d, "/assets/chunk"), Resolved::NotFound);
        assert_eq!(resolve(d, "/robots.txt"), Resolved::NotFound);
    }

    #[test]
    fn no_path_leaves_the_folder() {
        let dir = built_portal();
        std::fs::write(dir.path().join(".env"), "secret").unwrap();
        for path in [
            "/../etc/passwd",
            "/assets/../../etc/passwd",
            "/./index.html",
            "/.env",
            "/assets\\..\\x",
            "/a\0b",
        ] {
            assert_eq!(resolve(dir.path(), path), Resolved::NotFound, "{path:?}");
        }
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(
            content_type(Path::new("a/index-x.JS")),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type(Path::new("x.css")), "text/css; charset=utf-8");
        assert_eq!(content_type(Path::new("x.svg")), "image/svg+xml");
        assert_eq!(content_type(Path::new("x.bin")), "application/octet-stream");
    }

    async fn service_for(
        portal_dir: PathBuf,
    ) -> impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
    > {
        // The portal reads no table, so an unmigrated in-memory database is enough.
        let db = Database::connect("sqlite::memory:").await.unwrap();
        let store_dir = tempfile::tempdir().unwrap().keep();
        let store = EmbeddedStore::open(EmbeddedConfig::new(store_dir))
            .await
            .unwrap();
        let config = ApiConfig {
            jwt_secret: Secret::new("portal-test-jwt-secret-32-bytes-long"),
            sealing_secret: Secret::new("portal-test-sealing-secret-32-bytes!"),
            portal_dir,
            ..ApiConfig::default()
        };
        let ports = Ports {
            queue: Arc::new(TableQueue::new(db.clone())),
            db,
            store: Arc::new(store),
            chain: None,
        };
        let state = crate::state::AppState::new(config, ports).unwrap();
        test::init_service(app(state)).await
    }

    fn header<B>(response: &actix_web::dev::ServiceResponse<B>, name: &str) -> String {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    #[actix_web::test]
    async fn app_routes_get_index_and_assets_are_cached_forever() {
        let dir = built_portal();
        let service = service_for(dir.path().to_path_buf()).await;

        let page =
            test::call_service(&service, TestRequest::get().uri("/jobs/42").to_request()).await;
        assert_eq!(page.status(), 200);
        assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(&page, "cache-control"), "no-cache");
        assert!(header(&page, "content-security-policy").contains("default-src 'self'"));
        assert_eq!(
            test::read_body(page).await,
            "<!doctype html><title>portal</title>"
        );

        let asset = test::call_service(
            &service,
            TestRequest::get()
                .uri("/assets/index-abc123.js")
                .to_request(),
        )
        .await;
        assert_eq!(asset.status(), 200);
        assert_eq!(
            header(&asset, "content-type"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header(&asset, "cache-control"), IMMUTABLE);

        let missing = test::call_service(
            &service,
            TestRequest::get().uri("/assets/old-999.js").to_request(),
        )
        .await;
        assert_eq!(missing.status(), 404);
        assert_eq!(header(&missing, "content-type"), "application/problem+json");
    }

    #[actix_web::test]
    async fn api_paths_and_other_methods_keep_their_problem_answers() {
        let dir = built_portal();
        let service = service_for(dir.path().to_path_buf()).await;
        for req in [
            TestRequest::get().uri("/v1/no-such-thing"),
            TestRequest::post().uri("/jobs/42"),
        ] {
            let response = test::call_service(&service, req.to_request()).await;
            assert_eq!(response.status(), 404);
            assert_eq!(
                header(&response, "content-type"),
                "application/problem+json"
            );
        }
        let health =
            test::call_service(&service, TestRequest::get().uri("/healthz").to_request()).await;
        assert_eq!(health.status(), 200);
    }

    #[actix_web::test]
    async fn a_missing_build_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let service = service_for(dir.path().join("dist")).await;
        let response = test::call_service(&service, TestRequest::get().uri("/").to_request()).await;
        assert_eq!(response.status(), 404);
        assert_eq!(
            header(&response, "content-type"),
            "text/html; charset=utf-8"
        );
        let body = test::read_body(response).await;
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("scripts/frontend build"), "{text}");
    }
}
