//! The HTTP surface: REST API under `/api`, server functions under `/sfn`,
//! Leptos pages, static files, probes. Each noun has its own `router()`.

mod admin;
mod auth;
pub mod backend;
mod documents;
mod events;
mod health;
pub(crate) mod jobs;
mod metrics;
mod search;

use std::{sync::Arc, time::Duration};

use axum::{extract::DefaultBodyLimit, Router};
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower_http::{compression::CompressionLayer, trace::TraceLayer};
use tower_sessions::{cookie::SameSite, Expiry, SessionManagerLayer};
use tower_sessions_sqlx_store::PostgresStore;

use crate::state::AppState;

/// Multipart framing allowed on top of the file itself.
const MULTIPART_OVERHEAD: u64 = 64 * 1024;

pub fn router(state: AppState) -> Router {
    let session_store = PostgresStore::new(state.pool.clone());
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
        .with_expiry(Expiry::OnInactivity(
            tower_sessions::cookie::time::Duration::days(7),
        ));

    let backend: app::backend::SharedBackend = Arc::new(backend::ServerBackend::new(state.clone()));
    let routes = generate_route_list(app::App);
    let leptos_options = state.leptos.clone();
    let body_limit = (state.config.max_upload_bytes + MULTIPART_OVERHEAD) as usize;

    let api = Router::new()
        .merge(auth::router())
        .merge(documents::router().layer(DefaultBodyLimit::max(body_limit)))
        .merge(jobs::router())
        .merge(search::router())
        .merge(admin::router())
        .merge(events::router())
        .merge(metrics::router());

    Router::new()
        .merge(api)
        .merge(health::router())
        .leptos_routes_with_context(
            &state,
            routes,
            {
                let backend = backend.clone();
                move || provide_context(backend.clone())
            },
            move || app::shell(leptos_options.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(
            move || provide_context(backend.clone()), app::shell
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn_with_state(
            state.config.public_url.clone(),
            same_origin,
        ))
        .layer(axum::middleware::map_response_with_state(
            https,
            security_headers,
        ))
        .layer(CompressionLayer::new())
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

/// Headers on every answer: no MIME sniffing, no framing by other sites,
/// no full URLs in the `Referer` of links that leave docflow; over https,
/// HSTS.
async fn security_headers(
    axum::extract::State(https): axum::extract::State<bool>,
    mut res: axum::response::Response,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let h = res.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CONTENT_SECURITY_POLICY, "frame-ancestors 'none'"),
    ] {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    }
    if https {
        h.entry(header::STRICT_TRANSPORT_SECURITY)
            .or_insert(HeaderValue::from_static("max-age=31536000"));
    }
    res
}

/// Refuses state-changing requests that a browser sent from another site
/// (cross-site request forgery, login CSRF through a server function): when
/// a request names where it comes from (`Origin`, else `Referer`), that must
/// be this site (its `Host`). Clients that name nothing (curl, API clients
/// with a bearer token) are not browsers acting for another site.
async fn same_origin(
    axum::extract::State(public_url): axum::extract::State<Option<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::{
        http::{header, Method, StatusCode},
        response::IntoResponse,
    };
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let source = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .map(|v| v.to_str().unwrap_or("null"));
    let Some(source) = source else {
        return next.run(req).await;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // This site: the host the request was sent to, or the public origin.
    let public = public_url.as_deref().and_then(origin_host);
    let ours = |h: &str| origin_host(source).is_some_and(|o| o.eq_ignore_ascii_case(h));
    if host.is_some_and(ours) || public.is_some_and(ours) {
        return next.run(req).await;
    }
    tracing::warn!(%source, ?host, path = %req.uri().path(), "cross-site request refused");
    (
        StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({"error": {
            "code": "cross_origin",
            "message": "this request came from another site; docflow only accepts changes made from its own pages",
        }})),
    )
        .into_response()
}

/// `host[:port]` of an `Origin` or `Referer` value (`None` for `null`).
fn origin_host(source: &str) -> Option<&str> {
    let rest = source.split_once("://")?.1;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then_some(host)
}

/// `/metrics` and `/healthz` alone, for processes without the web role.
pub fn metrics_only(state: AppState) -> Router {
    Router::new()
        .merge(metrics::router())
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::origin_host;

    #[test]
    fn the_host_of_an_origin_or_referer() {
        assert_eq!(origin_host("http://127.0.0.1:3000"), Some("127.0.0.1:3000"));
        assert_eq!(
            origin_host("https://docs.example/login?next=/"),
            Some("docs.example")
        );
        assert_eq!(origin_host("null"), None);
        assert_eq!(origin_host("https://"), None);
    }
}
