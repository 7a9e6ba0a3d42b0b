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

use self::frames::{JobFrame, TenantStreamFrame};

use crate::{
    http::jobs::parse_id,
    identity::auth::CurrentUser,
    jobs::inbox,
    notify::{
        self,
        sse::{self, Scope},
    },
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(job_events))
        .routes(routes!(tenant_events))
        .routes(routes!(notifications))
        .routes(routes!(mark_read))
}

mod frames {
    //! What the event streams send, for the OpenAPI document only: each frame
    //! of a `text/event-stream` is an `id:` line (where it has one), an `event:`
    //! line naming its type and a `data:` line of JSON, written by
    //! `notify::sse`. OpenAPI 3.1 has no schema for a stream's items; a `oneOf`
    //! of the frames, one per event type, is how this document describes them.
    #![expect(
        dead_code,
        reason = "described in the OpenAPI document, written by notify::sse"
    )]

    use serde::Serialize;
    use utoipa::ToSchema;

    /// The name on a frame's `event:` line.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub enum JobEventName {
        Job,
    }

    /// See [`JobEventName`].
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub enum NotificationEventName {
        Notification,
    }

    /// See [`JobEventName`].
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub enum ReloadEventName {
        Reload,
    }

    /// A job event: a state change or a step's progress.
    #[derive(Serialize, ToSchema)]
    pub struct JobFrame {
        /// `id:` the event's id; a client resumes after it with
        /// `Last-Event-ID` (or `last_event_id`).
        id: i64,
        /// `event: job`.
        event: JobEventName,
        /// `data:` the event, one line of JSON.
        data: app::dto::LiveJobEvent,
    }

    /// A notification to the caller (a job of theirs done or failed); it has no
    /// `id:` line, and the unread ones are sent again when a stream starts.
    #[derive(Serialize, ToSchema)]
    pub struct NotificationFrame {
        /// `event: notification`.
        event: NotificationEventName,
        /// `data:` the notification as `GET /api/notifications` lists it, one line of JSON.
        data: app::dto::NotificationDto,
    }

    /// Why the page should reload instead of replaying.
    #[derive(Serialize, ToSchema)]
    pub struct ReloadData {
        reason: String,
    }

    /// More events were missed than a stream replays: reload the page's data,
    /// then go on from this frame's id.
    #[derive(Serialize, ToSchema)]
    pub struct ReloadFrame {
        /// `id:` the newest event's id: the stream goes on after it.
        id: i64,
        /// `event: reload`.
        event: ReloadEventName,
        /// `data:` one line of JSON.
        data: ReloadData,
    }

    /// A frame of `GET /api/events`; keep-alives are comment lines (`:keep-alive`).
    #[derive(Serialize, ToSchema)]
    #[serde(untagged)]
    pub enum TenantStreamFrame {
        Job(JobFrame),
        Notification(NotificationFrame),
        Reload(ReloadFrame),
    }
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
        (status = 200, description = "`text/event-stream`: one `JobFrame` per event (`id:`, \
                                      `event: job`, `data:` a `LiveJobEvent`), comment lines \
                                      as keep-alives; the stream ends after the job's final event",
         content_type = "text/event-stream", body = JobFrame),
        (status = 400, description = "`invalid_query`: `last_event_id` is not a whole number up to 2^63 - 1", body = ErrorBody),
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
    let owned = sqlx::query_scalar!(
        "SELECT id FROM jobs WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)",
        id,
        user.readable_tenant()
    )
    .fetch_optional(&state.pool)
    .await?;
    owned.ok_or(ApiError::NotFound("job"))?;
    let client = open_stream(&state, &user)?;
    Ok(sse::stream(
        state.pool.clone(),
        &state.hub,
        client,
        user.stream_holder(),
        Scope::Job(id),
        last_event_id(&headers, &q),
    ))
}

/// A stream slot of `user`; 429 when all of theirs are taken.
pub(crate) fn open_stream(state: &AppState, user: &CurrentUser) -> ApiResult<notify::ClientGuard> {
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
        (status = 200, description = "`text/event-stream`: one frame per event, each one of \
                                      `TenantStreamFrame`: `event: job` (`data:` a `LiveJobEvent`), \
                                      `event: notification` (`data:` a `NotificationDto`), \
                                      `event: reload` when too much was missed to replay; \
                                      comment lines as keep-alives",
         content_type = "text/event-stream", body = TenantStreamFrame),
        (status = 400, description = "`invalid_query`: `last_event_id` is not a whole number up to 2^63 - 1", body = ErrorBody),
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
        user.stream_holder(),
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
