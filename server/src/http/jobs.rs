//! `GET /api/jobs` (the caller's tenant's jobs), `GET /api/jobs/{id}` (any
//! tenant's for an admin), and acting on one: `POST /api/jobs/{id}/cancel`,
//! `POST /api/jobs/{id}/retry` ([`crate::ops::controls`]).

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use app::dto::{JobDto, JobPage};

use crate::{
    identity::auth::CurrentUser,
    jobs::{
        repo::{self, JobFilter},
        view, JobState,
    },
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(one))
        .routes(routes!(cancel))
        .routes(routes!(retry))
}

/// A job's state after an action on it.
#[derive(Serialize, ToSchema)]
pub struct ActedOn {
    pub job_id: Uuid,
    /// `cancelled` after a cancel, `pending` after a retry.
    pub state: &'static str,
}

/// Cancels a `pending`, `retrying` or `processing` job: it stops at its
/// next check (between steps and embedding batches), its partial chunks are
/// removed, and it ends `cancelled`.
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/cancel",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 202, description = "Cancelled", body = ActedOn),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's, for a member)", body = ErrorBody),
        (status = 409, description = "`job_finished`: the job has already ended", body = ErrorBody),
    )
)]
async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<ActedOn>)> {
    let id = parse_id(&id, "job")?;
    let new = crate::ops::controls::cancel(&state.pool, &state.events, id, &user).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(ActedOn {
            job_id: id,
            state: new.as_str(),
        }),
    ))
}

/// Retries a job: a `retrying` one now (skipping its wait), a `failed` one
/// from the step that failed (its dead letter resolved).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/retry",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 202, description = "Pending again", body = ActedOn),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's, for a member)", body = ErrorBody),
        (status = 409, description = "`not_retryable`: the job is neither failed nor retrying", body = ErrorBody),
    )
)]
async fn retry(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<ActedOn>)> {
    let id = parse_id(&id, "job")?;
    let new = crate::ops::controls::retry(&state.pool, &state.events, id, &user).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(ActedOn {
            job_id: id,
            state: new.as_str(),
        }),
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only jobs in this state: `pending`, `processing`, `retrying`, `done` or `failed`.
    state: Option<String>,
    /// Jobs per page, 1 to 200 (default 50).
    limit: Option<i64>,
    /// Keyset cursor: `next_before` of the previous page.
    before: Option<String>,
}

/// Parses a path or query id; a malformed id is simply not found.
pub fn parse_id(s: &str, what: &'static str) -> ApiResult<Uuid> {
    Uuid::parse_str(s).map_err(|_| ApiError::NotFound(what))
}

/// The caller's tenant's jobs, newest first.
#[utoipa::path(
    get,
    path = "/api/jobs",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = 400, description = "An unknown `state` or a bad `before`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<JobPage>> {
    let filter = JobFilter {
        tenant_id: Some(user.tenant_id),
        state: q
            .state
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(str::parse::<JobState>)
            .transpose()
            .map_err(|m| ApiError::bad_request("invalid_state", m))?,
        before: q
            .before
            .as_deref()
            .map(Uuid::parse_str)
            .transpose()
            .map_err(|_| {
                ApiError::bad_request(
                    "invalid_cursor",
                    "`before` must be a job id from `next_before`",
                )
            })?,
        limit: q.limit.unwrap_or(50).clamp(1, 200),
        ..Default::default()
    };
    let mut conn = state.pool.acquire().await?;
    let mut jobs = repo::list(&mut conn, &filter).await?;
    if !user.is_operator() {
        view::hide_uploaders(&mut jobs);
    }
    let next_before = (jobs.len() as i64 == filter.limit)
        .then(|| jobs.last().map(|j| j.id.clone()))
        .flatten();
    Ok(Json(JobPage { jobs, next_before }))
}

/// One job of the caller's tenant (of any tenant, for an admin).
#[utoipa::path(
    get,
    path = "/api/jobs/{id}",
    tag = "jobs",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job", body = JobDto),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's)", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn one(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<Json<JobDto>> {
    let id = parse_id(&id, "job")?;
    let mut conn = state.pool.acquire().await?;
    let mut job = repo::get(&mut conn, id, user.readable_tenant())
        .await?
        .ok_or(ApiError::NotFound("job"))?;
    if !user.is_operator() {
        view::hide_uploaders(std::slice::from_mut(&mut job));
    }
    Ok(Json(job))
}
