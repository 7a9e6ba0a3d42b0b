//! The HTTP surface: REST API under `/api`, server functions under `/sfn`,
//! Leptos pages, static files, probes. Each noun has its own `router()`;
//! those under `/api` are documented by `openapi` (`GET /api/openapi.json`).

mod admin;
mod auth;
pub mod backend;
mod batches;
mod documents;
mod events;
mod hardening;
mod health;
pub(crate) mod jobs;
mod metrics;
pub mod openapi;
mod search;
mod webhooks;

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::State,
    http::{Method, Request, StatusCode, Uri},
    response::Response,
    Router,
};
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower::ServiceExt;
use tower_http::{
    compression::{CompressionLayer, CompressionLevel},
    services::ServeDir,
    trace::TraceLayer,
};
use tower_sessions::{cookie::SameSite, Expiry, SessionManagerLayer};
use tower_sessions_sqlx_store::PostgresStore;

use crate::{identity::sessions::Sessions, state::AppState};

/// Multipart framing allowed on top of the file itself.
pub(crate) const MULTIPART_OVERHEAD: u64 = 64 * 1024;

pub fn router(state: AppState) -> Router {
    let session_store = Sessions::new(
        PostgresStore::new(state.pool.clone()),
        state.signed_in.clone(),
    );
    // Over https the cookie is `Secure`, and the `__Host-` prefix makes
    // browsers refuse it unless it is also host-only with `Path=/`.
    let https = state.config.https();
    let sessions = SessionManagerLayer::new(session_store)
        .with_name(if https {
            "__Host-docflow_session"
        } else {
            "docflow_session"
        })
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(https)
        .with_path("/")
        // Besides this idle lifetime, `auth` ends a session
        // `DOCFLOW_SESSION_MAX` after its login.
        .with_expiry(Expiry::OnInactivity(
            tower_sessions::cookie::time::Duration::try_from(state.config.session_idle)
                .unwrap_or(tower_sessions::cookie::time::Duration::DAY),
        ));

    let backend: app::backend::SharedBackend = Arc::new(backend::ServerBackend::new(state.clone()));
    let routes = generate_route_list(app::App);
    let leptos_options = state.leptos.clone();

    // The REST API and its OpenAPI document, built once, together.
    let (api, _) = openapi::api(state.config.max_upload_bytes);
    let api = api.merge(metrics::router());

    Router::new()
        .merge(api)
        .merge(health::router())
        .leptos_routes_with_context(
            &state,
            routes,
            {
                let backend = backend.clone();
                move || {
                    provide_context(backend.clone());
                    hardening::provide_page_policy();
                }
            },
            move || app::shell(leptos_options.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .fallback({
            let pages = leptos_axum::file_and_error_handler_with_context::<AppState, _>(
                move || {
                    provide_context(backend.clone());
                    hardening::provide_page_policy();
                },
                app::shell,
            );
            let site = ServeDir::new(&*state.leptos.site_root)
                .precompressed_br()
                .precompressed_gzip();
            move |uri: Uri, state: State<AppState>, req: Request<Body>| {
                let (pages, site) = (pages.clone(), site.clone());
                // Asked for before the first await: a request's body is not
                // `Sync`, so a reference to it may not be held across one.
                let file = file_request(&req);
                async move {
                    match built_file(site, file).await {
                        Some(file) => file,
                        None => pages(uri, state, req).await,
                    }
                }
            }
        })
        .layer(axum::middleware::from_fn(page_redirect))
        .layer(sessions)
        .layer(axum::middleware::from_fn_with_state(
            state.config.public_url.clone(),
            hardening::same_origin,
        ))
        .layer(axum::middleware::map_response_with_state(
            https,
            hardening::security_headers,
        ))
        // Pages and API answers are compressed as they are sent, quickly:
        // brotli's default (its best, quality 11) costs seconds of CPU per
        // megabyte. The browser bundle comes compressed (`built_file`).
        .layer(CompressionLayer::new().quality(CompressionLevel::Precise(4)))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &axum::http::Request<_>| {
                    let route = req
                        .extensions()
                        .get::<axum::extract::MatchedPath>()
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_default();
                    tracing::info_span!("http", method = %req.method(), route, uri = %req.uri())
                })
                .on_response(
                    |res: &axum::http::Response<_>, latency: Duration, _span: &tracing::Span| {
                        tracing::debug!(
                            status = res.status().as_u16(),
                            latency_ms = latency.as_millis() as u64,
                            "response"
                        );
                    },
                ),
        )
        .with_state(state)
}

/// A file of the built site (`scripts/build-site.sh`): the browser bundle,
/// its style sheet, the icons. Served as compressed when the site was built
/// (the `.br` or `.gz` beside it that the visitor accepts), so no visitor's
/// download of the 2 to 8 MB bundle is compressed again; `None` when there
/// is no such file, for the pages' own not-found answer.
async fn built_file(site: ServeDir, file: Option<Request<Body>>) -> Option<Response> {
    let res = match site.oneshot(file?).await {
        Ok(res) => res,
        Err(never) => match never {},
    };
    (res.status().is_success() || res.status() == StatusCode::NOT_MODIFIED)
        .then(|| res.map(Body::new))
}

/// `req` without its body, for [`built_file`]; `None` unless it reads.
fn file_request(req: &Request<Body>) -> Option<Request<Body>> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return None;
    }
    let mut file = Request::new(Body::empty());
    *file.method_mut() = req.method().clone();
    *file.uri_mut() = req.uri().clone();
    *file.headers_mut() = req.headers().clone();
    Some(file)
}

/// `/metrics` and `/healthz` alone, for processes without the web role.
/// A page that sends its visitor elsewhere (an anonymous visitor to the
/// login page with `?next=`) says so in its component, which sets
/// `Location` while the page streams with `200 OK`: browsers follow it only
/// once the WebAssembly has loaded, and clients without JavaScript, link
/// previews and `curl` never do. Such a response becomes a `303 See Other`
/// with no body.
async fn page_redirect(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, Method, StatusCode};
    let page = request.method() == Method::GET && !request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    if !page
        || response.status() != StatusCode::OK
        || !response.headers().contains_key(header::LOCATION)
    {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    parts.status = StatusCode::SEE_OTHER;
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::TRANSFER_ENCODING);
    axum::response::Response::from_parts(parts, axum::body::Body::empty())
}

pub fn metrics_only(state: AppState) -> Router {
    Router::new()
        .merge(metrics::router())
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .with_state(state)
}
