//! `GET /api/jobs/{id}/events`, `GET /api/events` (SSE) and the inbox:
//! `GET /api/notifications`, `POST /api/notifications/{id}/read`.

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::{get, post},
    Json, Router,
};
use serde::Deserialize;

use crate::{
    auth::CurrentUser,
    error::{ApiError, ApiResult},
    http::jobs::parse_id,
    inbox,
    notify::{
        self,
        sse::{self, Scope},
    },
    state::AppState,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/jobs/{id}/events", get(job_events))
        .route("/api/events", get(tenant_events))
        .route("/api/notifications", get(notifications))
        .route("/api/notifications/{id}/read", post(mark_read))
}

#[derive(Deserialize)]
struct Resume {
    /// For clients that cannot set the header (a fresh `EventSource`).
    last_event_id: Option<i64>,
}

fn last_event_id(headers: &HeaderMap, q: &Resume) -> i64 {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(q.last_event_id)
        .unwrap_or(0)
        .max(0)
}

async fn job_events(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Resume>,
) -> ApiResult<impl IntoResponse> {
    let id = parse_id(&id, "job")?;
    let owned: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM jobs WHERE id = $1 AND tenant_id = $2")
            .bind(id)
            .bind(user.tenant_id)
            .fetch_optional(&state.pool)
            .await?;
    owned.ok_or(ApiError::NotFound("job"))?;
    let client = open_stream(&state, &user)?;
    Ok(sse::stream(
        state.pool.clone(),
        &state.hub,
        client,
        Scope::Job(id),
        last_event_id(&headers, &q),
    ))
}

/// A stream slot of `user`; 429 when all of theirs are taken.
fn open_stream(state: &AppState, user: &CurrentUser) -> ApiResult<notify::ClientGuard> {
    let cap = state.config.sse_per_user;
    state
        .hub
        .client_guard(user.id, cap)
        .ok_or_else(|| ApiError::TooManyRequests {
            message: format!(
                "you already have {cap} live event streams open here (other tabs?); close one first"
            ),
            retry_after: std::time::Duration::from_secs(5),
        })
}

async fn tenant_events(
    State(state): State<AppState>,
    user: CurrentUser,
    headers: HeaderMap,
    Query(q): Query<Resume>,
) -> ApiResult<impl IntoResponse> {
    let client = open_stream(&state, &user)?;
    let scope = Scope::Tenant {
        tenant_id: user.tenant_id,
        user_id: user.id,
    };
    Ok(sse::stream(
        state.pool.clone(),
        &state.hub,
        client,
        scope,
        last_event_id(&headers, &q),
    ))
}

async fn notifications(
    State(state): State<AppState>,
    user: CurrentUser,
) -> ApiResult<Json<app::dto::InboxDto>> {
    Ok(Json(inbox::list(&state.pool, user.id).await?))
}

async fn mark_read(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "notification")?;
    if !inbox::mark_read(&state.pool, user.id, id).await? {
        return Err(ApiError::NotFound("notification"));
    }
    Ok(StatusCode::NO_CONTENT)
}
