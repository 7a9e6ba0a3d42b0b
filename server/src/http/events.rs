//! `GET /api/jobs/{id}/events`, `GET /api/events` (SSE) and the inbox:
//! `GET /api/notifications`, `POST /api/notifications/{id}/read`.

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    Json,
};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    auth::CurrentUser,
    error::{ApiError, ApiResult, ErrorBody, Query},
    http::jobs::parse_id,
    inbox,
    notify::{
        self,
        sse::{self, Scope},
    },
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(job_events))
        .routes(routes!(tenant_events))
        .routes(routes!(notifications))
        .routes(routes!(mark_read))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Resume {
    /// Resume after this event id, as the `Last-Event-ID` header does; for
    /// clients that cannot set the header (a fresh `EventSource`).
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

/// One job's events as they happen (server-sent events), after a replay of
/// those missed since `Last-Event-ID`; the stream ends after the job's
/// final event.
#[utoipa::path(
    get,
    path = "/api/jobs/{id}/events",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(
        ("id" = uuid::Uuid, Path, description = "The job id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id"),
        Resume,
    ),
    responses(
        (status = 200, description = "`text/event-stream`: `event: job` frames (`id:` the event id, \
                                      `data:` a `LiveJobEvent`), comments as keep-alives",
         content_type = "text/event-stream", body = String),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's)", body = ErrorBody),
        (status = 429, description = "All of the caller's event streams are open; see `Retry-After`", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn job_events(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Resume>,
) -> ApiResult<impl IntoResponse> {
    let id = parse_id(&id, "job")?;
    let owned: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM jobs WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)",
    )
    .bind(id)
    .bind(user.readable_tenant())
    .fetch_optional(&state.pool)
    .await?;
    owned.ok_or(ApiError::NotFound("job"))?;
    let client = open_stream(&state, &user)?;
    Ok(sse::stream(
        state.pool.clone(),
        &state.hub,
        client,
        &user,
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

/// The caller's tenant's job events and the caller's notifications as they
/// happen (server-sent events), after a replay of those missed since
/// `Last-Event-ID`.
#[utoipa::path(
    get,
    path = "/api/events",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id"),
        Resume,
    ),
    responses(
        (status = 200, description = "`text/event-stream`: `event: job` frames (`data:` a \
                                      `LiveJobEvent`), `event: notification` (`data:` a \
                                      `NotificationDto`), `event: reload` when too much was \
                                      missed to replay; comments as keep-alives",
         content_type = "text/event-stream", body = String),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 429, description = "All of the caller's event streams are open; see `Retry-After`", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
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
        &user,
        scope,
        last_event_id(&headers, &q),
    ))
}

/// The caller's inbox, newest first.
#[utoipa::path(
    get,
    path = "/api/notifications",
    tag = "notifications",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "The inbox", body = app::dto::InboxDto),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn notifications(
    State(state): State<AppState>,
    user: CurrentUser,
) -> ApiResult<Json<app::dto::InboxDto>> {
    Ok(Json(inbox::list(&state.pool, user.id).await?))
}

/// Marks one of the caller's notifications read.
#[utoipa::path(
    post,
    path = "/api/notifications/{id}/read",
    tag = "notifications",
    security(("bearer" = []), ("session" = [])),
    params(("id" = uuid::Uuid, Path, description = "The notification id")),
    responses(
        (status = 204, description = "Marked read"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "A browser request from another site", body = ErrorBody),
        (status = 404, description = "No such notification of the caller's", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
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
