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
    notify::sse::{self, Scope},
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
    Ok(sse::stream(
        state.pool.clone(),
        &state.hub,
        Scope::Job(id),
        last_event_id(&headers, &q),
    ))
}

async fn tenant_events(
    State(state): State<AppState>,
    user: CurrentUser,
    headers: HeaderMap,
    Query(q): Query<Resume>,
) -> impl IntoResponse {
    let scope = Scope::Tenant {
        tenant_id: user.tenant_id,
        user_id: user.id,
    };
    sse::stream(
        state.pool.clone(),
        &state.hub,
        scope,
        last_event_id(&headers, &q),
    )
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
