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

use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

async fn scrape(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.sse_clients.set(state.hub.clients());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
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
