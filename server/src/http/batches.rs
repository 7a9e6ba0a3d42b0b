//! `POST /api/batches` and a batch's reads and actions: its counts, its
//! jobs, its live stream, close, cancel and retry ([`crate::batches`]).

use std::{convert::Infallible, time::Duration};

use tokio::sync::broadcast::error::RecvError;

use axum::{
    body::Body,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    Json,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use app::dto::{BatchDto, JobDto};

use crate::{
    batches,
    http::jobs::parse_id,
    identity::auth::CurrentUser,
    jobs::repo,
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(one))
        .routes(routes!(jobs))
        .routes(routes!(events))
        .routes(routes!(close))
        .routes(routes!(cancel))
        .routes(routes!(retry))
}

/// A new batch.
#[derive(Deserialize, ToSchema)]
struct NewBatch {
    /// 1 to 200 characters: the folder's name, a sync run's label.
    name: String,
}

/// Creates an open batch; upload into it with the multipart field (or
/// query parameter) `batch_id`, then close it: it is `done`, and
/// `batch.done` is sent to webhooks, once every job in it has ended.
#[utoipa::path(
    post,
    path = "/api/batches",
    tag = "batches",
    security(("bearer" = []), ("session" = [])),
    request_body = NewBatch,
    responses(
        (status = 201, description = "Created, open", body = BatchDto),
        (status = 400, description = "`invalid_body` or `invalid_name`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "A viewer, or a browser request from another site", body = ErrorBody),
    )
)]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    body: Result<Json<NewBatch>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<BatchDto>)> {
    let Json(new) = body.map_err(|e| {
        ApiError::bad_request("invalid_body", format!("expected {{\"name\"}}: {e}"))
    })?;
    let batch = batches::create(&state.pool, &user, &new.name).await?;
    Ok((StatusCode::CREATED, Json(batch)))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Batches to return, 1 to 200 (default 50).
    limit: Option<i64>,
}

/// The caller's tenant's batches, newest first.
#[utoipa::path(
    get,
    path = "/api/batches",
    tag = "batches",
    security(("bearer" = []), ("session" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "Newest first", body = Vec<BatchDto>),
        (status = 401, description = "Not logged in", body = ErrorBody),
    )
)]
async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Vec<BatchDto>>> {
    Ok(Json(
        batches::list(&state.pool, &user, q.limit.unwrap_or(50)).await?,
    ))
}

/// A batch: its state, counts of its jobs by state, and an ETA.
#[utoipa::path(
    get,
    path = "/api/batches/{id}",
    tag = "batches",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The batch id")),
    responses(
        (status = 200, description = "The batch", body = BatchDto),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's, for a member)", body = ErrorBody),
    )
)]
async fn one(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<Json<BatchDto>> {
    let id = parse_id(&id, "batch")?;
    Ok(Json(batches::get(&state.pool, &user, id).await?))
}

/// The batch's jobs, newest first (at most 1,000).
#[utoipa::path(
    get,
    path = "/api/batches/{id}/jobs",
    tag = "batches",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The batch id")),
    responses(
        (status = 200, description = "Its jobs", body = Vec<JobDto>),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's, for a member)", body = ErrorBody),
    )
)]
async fn jobs(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<JobDto>>> {
    let id = parse_id(&id, "batch")?;
    batches::get(&state.pool, &user, id).await?;
    let mut conn = state.pool.acquire().await?;
    let mut jobs = repo::list_of_batch(&mut conn, id, 1000).await?;
    if !user.is_operator() {
        crate::jobs::view::hide_uploaders(&mut jobs);
    }
    Ok(Json(jobs))
}

macro_rules! action {
    ($name:ident, $path:literal, $doc:literal, |$s:ident, $u:ident, $id:ident| $call:expr) => {
        #[doc = $doc]
        #[utoipa::path(
            post,
            path = $path,
            tag = "batches",
            security(("bearer" = []), ("session" = [])),
            params(("id" = Uuid, Path, description = "The batch id")),
            responses(
                (status = 200, description = "The batch after the action", body = BatchDto),
                (status = 401, description = "Not logged in", body = ErrorBody),
                (status = 403, description = "A viewer, or a browser request from another site", body = ErrorBody),
                (status = 404, description = "No such batch (or another tenant's, for a member)", body = ErrorBody),
                (status = 409, description = "`not_retryable` (retry): no job of the batch failed", body = ErrorBody),
            )
        )]
        async fn $name(
            State($s): State<AppState>,
            $u: CurrentUser,
            Path($id): Path<String>,
        ) -> ApiResult<Json<BatchDto>> {
            let $id = parse_id(&$id, "batch")?;
            Ok(Json($call.await?))
        }
    };
}

action!(
    close,
    "/api/batches/{id}/close",
    "Closes the batch to uploads; it is `done` as soon as every job in it has ended (at once when all have).",
    |s, u, id| batches::close(&s.pool, &u, id)
);
action!(
    cancel,
    "/api/batches/{id}/cancel",
    "Cancels every unfinished job of the batch and closes it; it ends `cancelled`.",
    |s, u, id| batches::cancel(&s.pool, &s.events, &u, id)
);
action!(
    retry,
    "/api/batches/{id}/retry",
    "Retries every failed job of the batch (and runs its retrying ones now); a finished batch runs again.",
    |s, u, id| batches::retry(&s.pool, &s.events, &u, id)
);

/// How often a batch stream looks again without a job event.
const RECHECK: Duration = Duration::from_secs(2);
/// A comment line this often keeps proxies from closing the stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The batch live: an `event: batch` frame with the batch (as `GET
/// /api/batches/{id}`) at once and whenever its counts or state change;
/// the stream ends after the frame that says it is `done` or `cancelled`.
#[utoipa::path(
    get,
    path = "/api/batches/{id}/events",
    tag = "batches",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The batch id")),
    responses(
        (status = 200, description = "`text/event-stream` of `event: batch` frames, `data:` a batch", content_type = "text/event-stream", body = BatchDto),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's, for a member)", body = ErrorBody),
        (status = 429, description = "All of the caller's live streams are open", body = ErrorBody),
    )
)]
async fn events(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id = parse_id(&id, "batch")?;
    let first = batches::get(&state.pool, &user, id).await?;
    let client = crate::http::events::open_stream(&state, &user)?;
    struct Live {
        _client: crate::notify::ClientGuard,
        hub: tokio::sync::broadcast::Receiver<std::sync::Arc<crate::notify::Published>>,
        /// Credentials that ended: the stream ends with the caller's.
        ended_credentials: tokio::sync::broadcast::Receiver<crate::notify::ended::Ended>,
        /// When the caller's credential expires, if it does.
        expires: Option<tokio::time::Instant>,
        pool: sqlx::PgPool,
        user: CurrentUser,
        id: Uuid,
        last: Option<BatchDto>,
        first: Option<BatchDto>,
        ended: bool,
        /// When the stream last sent anything.
        sent: tokio::time::Instant,
    }
    let live = Live {
        _client: client,
        hub: state.hub.subscribe(),
        ended_credentials: state.hub.subscribe_ended(),
        expires: crate::notify::ended::until(user.credential.ends_at())
            .map(|d| tokio::time::Instant::now() + d),
        pool: state.pool.clone(),
        user,
        id,
        last: None,
        first: Some(first),
        ended: false,
        sent: tokio::time::Instant::now(),
    };
    let body = futures::stream::unfold(live, |mut live| async move {
        if live.ended {
            return None;
        }
        let next = match live.first.take() {
            Some(b) => Some(b),
            None => loop {
                if live
                    .expires
                    .is_some_and(|at| tokio::time::Instant::now() >= at)
                {
                    return None;
                }
                // Until a job event of the caller's tenant, or the recheck.
                let (tenant, holder) = (
                    live.user.readable_tenant(),
                    (live.user.id, live.user.credential.id()),
                );
                let wake = tokio::time::timeout(RECHECK, async {
                    loop {
                        tokio::select! {
                            r = live.hub.recv() => match r {
                                Ok(p) if tenant.is_none_or(|t| t == p.event.tenant_id) => return true,
                                Ok(_) => {}
                                Err(RecvError::Lagged(_)) => return true,
                                Err(RecvError::Closed) => std::future::pending::<()>().await,
                            },
                            e = live.ended_credentials.recv() => {
                                // A lagging receiver may have missed its own ending.
                                if e.is_err() || e.is_ok_and(|e| e.ends(holder.0, holder.1)) {
                                    return false;
                                }
                            }
                        }
                    }
                });
                if let Ok(false) = wake.await {
                    return None;
                }
                match batches::get(&live.pool, &live.user, live.id).await {
                    Ok(b) if Some(&b) != live.last.as_ref() => break Some(b),
                    Ok(_) if live.sent.elapsed() >= KEEP_ALIVE => {
                        live.sent = tokio::time::Instant::now();
                        return Some((
                            Ok::<_, Infallible>(bytes::Bytes::from_static(b":keep-alive\n\n")),
                            live,
                        ));
                    }
                    Ok(_) => continue,
                    Err(_) => break None,
                }
            },
        };
        let b = next?;
        live.ended = matches!(b.state.as_str(), "done" | "cancelled");
        let frame = format!(
            "event: batch\ndata: {}\n\n",
            serde_json::to_string(&b).unwrap_or_default()
        );
        live.last = Some(b);
        live.sent = tokio::time::Instant::now();
        Some((Ok(bytes::Bytes::from(frame)), live))
    });
    Ok(crate::notify::sse::response(Body::from_stream(body)))
}
