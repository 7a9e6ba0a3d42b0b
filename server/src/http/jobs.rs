//! `GET /api/jobs`, `GET /api/jobs/{id}`: the caller's tenant's jobs.

use axum::{
    extract::{Path, Query, State},
    routing::get,
    Json, Router,
};
use serde::Deserialize;
use uuid::Uuid;

use app::dto::{JobDto, JobPage};

use crate::{
    auth::CurrentUser,
    error::{ApiError, ApiResult},
    jobs::{
        repo::{self, JobFilter},
        JobState,
    },
    state::AppState,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/jobs", get(list))
        .route("/api/jobs/{id}", get(one))
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    limit: Option<i64>,
    before: Option<String>,
}

/// Parses a path or query id; a malformed id is simply not found.
pub fn parse_id(s: &str, what: &'static str) -> ApiResult<Uuid> {
    Uuid::parse_str(s).map_err(|_| ApiError::NotFound(what))
}

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
    let jobs = repo::list(&mut conn, &filter).await?;
    let next_before = (jobs.len() as i64 == filter.limit)
        .then(|| jobs.last().map(|j| j.id.clone()))
        .flatten();
    Ok(Json(JobPage { jobs, next_before }))
}

async fn one(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> ApiResult<Json<JobDto>> {
    let id = parse_id(&id, "job")?;
    let mut conn = state.pool.acquire().await?;
    repo::get(&mut conn, id, Some(user.tenant_id))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("job"))
}
