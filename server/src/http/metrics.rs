//! `GET /metrics` (Prometheus text exposition) and the request-duration
//! middleware, labelled by matched route, never by raw path.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
    routing::get,
    Router,
};

use sha2::{Digest, Sha256};

use crate::{platform::error::ApiError, state::AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

async fn scrape(
    State(state): State<AppState>,
    headers: header::HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(token) = &state.config.metrics_token {
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Digests of equal length: the comparison tells nothing about the token.
        if Sha256::digest(sent.as_bytes()) != Sha256::digest(token.as_bytes()) {
            return Err(ApiError::Unauthorized(
                "/metrics needs `Authorization: Bearer` with DOCFLOW_METRICS_TOKEN".into(),
            ));
        }
    }
    state.metrics.sse_clients.set(state.hub.clients());
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    ))
}

pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let resp = next.run(req).await;
    state
        .metrics
        .http_request_duration_seconds
        .with_label_values(&[route.as_str(), resp.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    resp
}
