//! Admin REST API (DESIGN §6): every handler takes `AdminUser`, so members
//! get 403 and anonymous callers 401.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    routing::{get, post},
    Json, Router,
};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use app::dto::{AuditEntryDto, DeadLetterDto, JobPage, SeriesPointDto, StatsDto, WorkerDto};

use crate::{
    admin,
    auth::AdminUser,
    error::{ApiError, ApiResult},
    http::jobs::parse_id,
    jobs::repo::{self, JobFilter},
    state::AppState,
    stats,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/admin/stats", get(get_stats))
        .route("/api/admin/jobs", get(jobs))
        .route("/api/admin/dead-letters", get(dead_letters))
        .route("/api/admin/dead-letters/requeue", post(requeue_many))
        .route("/api/admin/dead-letters/{id}/requeue", post(requeue_one))
        .route("/api/admin/dead-letters/{id}/discard", post(discard))
        .route("/api/admin/workers", get(workers))
        .route("/api/admin/audit", get(audit))
        .route("/api/admin/series", get(series))
}

#[derive(Deserialize)]
struct StatsQuery {
    window: Option<String>,
}

async fn get_stats(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<StatsQuery>,
) -> ApiResult<Json<StatsDto>> {
    let window = match q.window.as_deref() {
        None | Some("") => std::time::Duration::from_secs(3600),
        Some(w) => humantime::parse_duration(w).map_err(|_| {
            ApiError::bad_request(
                "invalid_window",
                "`window` is a duration such as 15m, 1h or 1d",
            )
        })?,
    };
    Ok(Json(stats::collect(&state, window).await?))
}

#[derive(Deserialize)]
struct JobsQuery {
    state: Option<String>,
    queue: Option<String>,
    tenant: Option<String>,
    q: Option<String>,
    limit: Option<i64>,
    before: Option<String>,
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

async fn jobs(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<JobsQuery>,
) -> ApiResult<Json<JobPage>> {
    let filter = JobFilter {
        tenant_id: None,
        tenant_slug: non_empty(q.tenant),
        state: non_empty(q.state)
            .map(|s| s.parse())
            .transpose()
            .map_err(|m| ApiError::bad_request("invalid_state", m))?,
        queue: non_empty(q.queue)
            .map(|s| s.parse())
            .transpose()
            .map_err(|m| ApiError::bad_request("invalid_queue", m))?,
        filename: non_empty(q.q),
        before: non_empty(q.before)
            .map(|b| Uuid::parse_str(&b))
            .transpose()
            .map_err(|_| {
                ApiError::bad_request(
                    "invalid_cursor",
                    "`before` must be a job id from `next_before`",
                )
            })?,
        limit: q.limit.unwrap_or(50).clamp(1, 200),
    };
    let mut conn = state.pool.acquire().await?;
    let jobs = repo::list(&mut conn, &filter).await?;
    let next_before = (jobs.len() as i64 == filter.limit)
        .then(|| jobs.last().map(|j| j.id.clone()))
        .flatten();
    Ok(Json(JobPage { jobs, next_before }))
}

#[derive(Deserialize)]
struct PageQuery {
    limit: Option<i64>,
    before: Option<String>,
}

async fn dead_letters(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<PageQuery>,
) -> ApiResult<Json<Vec<DeadLetterDto>>> {
    let before = non_empty(q.before)
        .map(|b| Uuid::parse_str(&b))
        .transpose()
        .map_err(|_| {
            ApiError::bad_request("invalid_cursor", "`before` must be a dead-letter id")
        })?;
    Ok(Json(
        admin::dead_letters(&state.pool, q.limit.unwrap_or(50).clamp(1, 500), before).await?,
    ))
}

async fn requeue_one(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let id = parse_id(&id, "dead letter")?;
    let job_id = admin::requeue(&state.pool, &state.events, id, &admin).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"job_id": job_id, "state": "pending"})),
    ))
}

#[derive(Deserialize)]
struct Ids {
    ids: Vec<Uuid>,
}

/// Re-enqueues each id in its own transaction; reports each outcome.
async fn requeue_many(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    body: Result<Json<Ids>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let Json(Ids { ids }) = body.map_err(|e| {
        ApiError::bad_request("invalid_body", format!("expected {{\"ids\":[…]}}: {e}"))
    })?;
    if ids.is_empty() || ids.len() > 500 {
        return Err(ApiError::bad_request(
            "invalid_body",
            "give between 1 and 500 ids",
        ));
    }
    let mut requeued = Vec::new();
    let mut failed = Vec::new();
    for id in ids {
        match admin::requeue(&state.pool, &state.events, id, &admin).await {
            Ok(job_id) => requeued.push(json!({"id": id, "job_id": job_id, "state": "pending"})),
            Err(e @ (ApiError::NotFound(_) | ApiError::Conflict(_))) => {
                failed.push(json!({"id": id, "code": e.code(), "message": e.to_string()}))
            }
            Err(e) => return Err(e),
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"requeued": requeued, "failed": failed})),
    ))
}

async fn discard(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "dead letter")?;
    admin::discard(&state.pool, id, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn workers(
    State(state): State<AppState>,
    _admin: AdminUser,
) -> ApiResult<Json<Vec<WorkerDto>>> {
    Ok(Json(admin::workers(&state.pool).await?))
}

#[derive(Deserialize)]
struct AuditQuery {
    limit: Option<i64>,
    before: Option<i64>,
}

async fn audit(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<Vec<AuditEntryDto>>> {
    Ok(Json(
        admin::audit(&state.pool, q.limit.unwrap_or(100).clamp(1, 500), q.before).await?,
    ))
}

#[derive(Deserialize)]
struct SeriesQuery {
    metric: String,
    queue: Option<String>,
    since: Option<String>,
}

/// A dashboard series (`metric` one of `sampler::SERIES`) over `since` (default 1h, at most 7d).
async fn series(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<SeriesQuery>,
) -> ApiResult<Json<Vec<SeriesPointDto>>> {
    if !crate::sampler::SERIES.contains(&q.metric.as_str()) {
        return Err(ApiError::bad_request(
            "invalid_metric",
            format!("`metric` is one of {}", crate::sampler::SERIES.join(", ")),
        ));
    }
    let since = match q.since.as_deref() {
        None | Some("") => std::time::Duration::from_secs(3600),
        Some(s) => humantime::parse_duration(s).map_err(|_| {
            ApiError::bad_request("invalid_since", "`since` is a duration such as 1h or 1d")
        })?,
    }
    .min(std::time::Duration::from_secs(7 * 86_400));
    let queue = q.queue.unwrap_or_default();
    Ok(Json(
        crate::sampler::series(&state.pool, &q.metric, &queue, since).await?,
    ))
}
