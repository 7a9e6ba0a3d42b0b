//! Admin REST API (DESIGN §6): every read takes `OperatorUser` (admins and
//! viewers), every action `AdminUser`, so members get 403 everywhere,
//! viewers on every action, and anonymous callers 401.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use app::dto::{AuditEntryDto, DeadLetterDto, JobPage, SeriesPointDto, StatsDto, WorkerDto};

use crate::{
    http::jobs::parse_id,
    identity::auth::{AdminUser, OperatorUser},
    jobs::repo,
    ops::admin,
    ops::controls::{self, Matching},
    ops::stats,
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    state::AppState,
    worker::queues,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_stats))
        .routes(routes!(jobs))
        .routes(routes!(dead_letters))
        .routes(routes!(requeue_many))
        .routes(routes!(requeue_matching))
        .routes(routes!(requeue_one))
        .routes(routes!(discard))
        .routes(routes!(pause_queue))
        .routes(routes!(resume_queue))
        .routes(routes!(pause_reembed))
        .routes(routes!(resume_reembed))
        .routes(routes!(retry_reembeds))
        .routes(routes!(workers))
        .routes(routes!(audit))
        .routes(routes!(series))
        .routes(routes!(cancel_matching))
        .routes(routes!(retry_matching))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct StatsQuery {
    /// What the numbers cover: a duration such as 15m, 1h (default) or 1d.
    window: Option<String>,
}

/// Queue, step and retry numbers over a window.
#[utoipa::path(
    get,
    path = "/api/admin/stats",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(StatsQuery),
    responses(
        (status = 200, description = "The numbers", body = StatsDto),
        (status = 400, description = "`window` is not a duration", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn get_stats(
    State(state): State<AppState>,
    _operator: OperatorUser,
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct JobsQuery {
    /// Only jobs in this state: `pending`, `processing`, `retrying`, `done`, `failed` or `cancelled`.
    state: Option<String>,
    /// Only jobs of this queue.
    queue: Option<String>,
    /// Only jobs of tenants whose slug starts with this (`acm` for `acme`; any case).
    tenant: Option<String>,
    /// Part of the filename, or the start (4 or more hex digits) of a job or document id.
    q: Option<String>,
    /// Only jobs enqueued within this long before now: `1h`, `24h`, `7d` (any duration).
    since: Option<String>,
    /// Only jobs that failed at this step at least once: `parse`, `chunk`, `embed` or `store`.
    step: Option<String>,
    /// Order, newest first: `enqueued` (default), `started` or `finished`.
    sort: Option<String>,
    /// Jobs per page, 1 to 200 (default 50).
    limit: Option<i64>,
    /// Keyset cursor: `next_before` of the previous page.
    before: Option<String>,
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

/// Every tenant's jobs, newest first, filtered.
#[utoipa::path(
    get,
    path = "/api/admin/jobs",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(JobsQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = 400, description = "An unknown `state`, `queue`, `since`, `step` or `sort`, or a bad `before`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn jobs(
    State(state): State<AppState>,
    _operator: OperatorUser,
    Query(q): Query<JobsQuery>,
) -> ApiResult<Json<JobPage>> {
    let matching = Matching::parse(
        q.state.as_deref().unwrap_or_default(),
        q.queue.as_deref().unwrap_or_default(),
        q.tenant.as_deref().unwrap_or_default(),
        q.q.as_deref().unwrap_or_default(),
    )?
    .within(q.since.as_deref().unwrap_or_default())?
    .failed_at(q.step.as_deref().unwrap_or_default())?
    .sorted_by(q.sort.as_deref().unwrap_or_default())?;
    let before = non_empty(q.before)
        .map(|b| Uuid::parse_str(&b))
        .transpose()
        .map_err(|_| {
            ApiError::bad_request(
                "invalid_cursor",
                "`before` must be a job id from `next_before`",
            )
        })?;
    let filter = matching.filter(before, q.limit.unwrap_or(50).clamp(1, 200));
    let mut conn = state.pool.acquire().await?;
    let jobs = repo::list(&mut conn, &filter).await?;
    let next_before = (jobs.len() as i64 == filter.limit)
        .then(|| jobs.last().map(|j| j.id.clone()))
        .flatten();
    Ok(Json(JobPage { jobs, next_before }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// Dead letters per page, 1 to 500 (default 50).
    limit: Option<i64>,
    /// Keyset cursor: the last dead-letter id of the previous page.
    before: Option<String>,
    /// Only this reason: `permanent`, `exhausted`, `crashed`, `malformed`, …
    reason: Option<String>,
    /// Only this queue, named as on the dashboard: `high`, `normal`, `slow`.
    queue: Option<String>,
    /// Only this tenant (its slug).
    tenant: Option<String>,
}

/// Unresolved dead letters, newest first, by reason, queue and tenant if
/// given; queues named as on the dashboard (`high`).
#[utoipa::path(
    get,
    path = "/api/admin/dead-letters",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(PageQuery),
    responses(
        (status = 200, description = "A page of dead letters", body = Vec<DeadLetterDto>),
        (status = 400, description = "A bad `before`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn dead_letters(
    State(state): State<AppState>,
    _operator: OperatorUser,
    Query(q): Query<PageQuery>,
) -> ApiResult<Json<Vec<DeadLetterDto>>> {
    let before = non_empty(q.before)
        .map(|b| Uuid::parse_str(&b))
        .transpose()
        .map_err(|_| {
            ApiError::bad_request("invalid_cursor", "`before` must be a dead-letter id")
        })?;
    let filter = admin::DeadLetterFilter {
        reason: non_empty(q.reason),
        queue: non_empty(q.queue),
        tenant: non_empty(q.tenant),
        before,
        limit: q.limit.unwrap_or(50).clamp(1, 500),
    };
    Ok(Json(admin::dead_letters(&state.pool, &filter).await?))
}

/// A dead letter's job, pending again.
#[derive(Serialize, ToSchema)]
struct RequeuedJob {
    job_id: Uuid,
    /// `pending`.
    state: &'static str,
}

/// Re-enqueues a dead letter's job (attempts reset, checkpoints kept).
#[utoipa::path(
    post,
    path = "/api/admin/dead-letters/{id}/requeue",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The dead-letter id")),
    responses(
        (status = 202, description = "The job is pending again", body = RequeuedJob),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        (status = 409, description = "Already resolved, no job to re-enqueue (malformed), or the job is no longer failed", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn requeue_one(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<RequeuedJob>)> {
    let id = parse_id(&id, "dead letter")?;
    let job_id = admin::requeue(&state.pool, &state.events, id, &admin).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RequeuedJob {
            job_id,
            state: "pending",
        }),
    ))
}

/// The dead letters to re-enqueue.
#[derive(Deserialize, ToSchema)]
struct Ids {
    /// 1 to 500 dead-letter ids.
    #[schema(min_items = 1, max_items = 500)]
    ids: Vec<Uuid>,
}

/// A re-enqueued dead letter.
#[derive(Serialize, ToSchema)]
struct RequeuedDeadLetter {
    id: Uuid,
    job_id: Uuid,
    /// `pending`.
    state: &'static str,
}

/// A dead letter that was not re-enqueued, and why.
#[derive(Serialize, ToSchema)]
struct RequeueRefused {
    id: Uuid,
    /// `not_found` or `conflict`.
    code: &'static str,
    message: String,
}

/// The outcome of each id.
#[derive(Serialize, ToSchema)]
struct RequeueOutcome {
    requeued: Vec<RequeuedDeadLetter>,
    failed: Vec<RequeueRefused>,
}

/// Re-enqueues each id in its own transaction; reports each outcome.
#[utoipa::path(
    post,
    path = "/api/admin/dead-letters/requeue",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    request_body = Ids,
    responses(
        (status = 202, description = "Each id's outcome", body = RequeueOutcome),
        (status = 400, description = "Not `{\"ids\":[…]}` with 1 to 500 ids", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn requeue_many(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    body: Result<Json<Ids>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<RequeueOutcome>)> {
    let Json(Ids { ids }) = body.map_err(|e| {
        ApiError::bad_request("invalid_body", format!("expected {{\"ids\":[…]}}: {e}"))
    })?;
    if ids.is_empty() || ids.len() > 500 {
        return Err(ApiError::bad_request(
            "invalid_body",
            "give between 1 and 500 ids",
        ));
    }
    let outcome = admin::requeue_each(&state.pool, &state.events, ids, &admin).await?;
    Ok((StatusCode::ACCEPTED, Json(outcome.into())))
}

impl From<admin::Requeued> for RequeueOutcome {
    fn from(r: admin::Requeued) -> Self {
        RequeueOutcome {
            requeued: r
                .requeued
                .into_iter()
                .map(|(id, job_id)| RequeuedDeadLetter {
                    id,
                    job_id,
                    state: "pending",
                })
                .collect(),
            failed: r
                .refused
                .into_iter()
                .map(|(id, e)| RequeueRefused {
                    id,
                    code: e.code(),
                    message: e.to_string(),
                })
                .collect(),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct MatchingDeadLetters {
    /// Only this reason: `permanent`, `exhausted`, `crashed`, `malformed`, …
    reason: Option<String>,
    /// Only this queue, named as on the dashboard: `high`, `normal`, `slow`.
    queue: Option<String>,
    /// Only this tenant (its slug).
    tenant: Option<String>,
}

/// Re-enqueues every unresolved dead letter matching the dead-letter
/// list's filters, on every page (none given: all of them), oldest first
/// and at most 5,000 at a time, each in its own transaction; reports each
/// outcome.
#[utoipa::path(
    post,
    path = "/api/admin/dead-letters/requeue-matching",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(MatchingDeadLetters),
    responses(
        (status = 202, description = "Each matching dead letter's outcome", body = RequeueOutcome),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn requeue_matching(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Query(q): Query<MatchingDeadLetters>,
) -> ApiResult<(StatusCode, Json<RequeueOutcome>)> {
    let filter = admin::DeadLetterFilter {
        reason: non_empty(q.reason),
        queue: non_empty(q.queue),
        tenant: non_empty(q.tenant),
        ..Default::default()
    };
    let outcome = admin::requeue_matching(&state.pool, &state.events, &filter, &admin).await?;
    Ok((StatusCode::ACCEPTED, Json(outcome.into())))
}

/// Discards a dead letter; its job stays failed.
#[utoipa::path(
    post,
    path = "/api/admin/dead-letters/{id}/discard",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The dead-letter id")),
    responses(
        (status = 204, description = "Discarded"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        (status = 409, description = "Already resolved", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn discard(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "dead letter")?;
    admin::discard(&state.pool, id, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pauses a queue: workers cancel their consumer of it within a second and
/// its messages stay ready in RabbitMQ; jobs already running finish.
/// Pausing a paused queue changes nothing.
#[utoipa::path(
    post,
    path = "/api/admin/queues/{queue}/pause",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(("queue" = String, Path, description = "`high`, `normal` or `slow`")),
    responses(
        (status = 204, description = "Paused (or already paused)"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such queue", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn pause_queue(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(queue): Path<String>,
) -> ApiResult<StatusCode> {
    let tier = queues::parse(&queue)?;
    crate::ops::controls::set_queue_paused(&state.pool, tier, true, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes a paused queue: workers consume it again within a second.
/// Resuming a running queue changes nothing.
#[utoipa::path(
    post,
    path = "/api/admin/queues/{queue}/resume",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(("queue" = String, Path, description = "`high`, `normal` or `slow`")),
    responses(
        (status = 204, description = "Running (or already running)"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such queue", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn resume_queue(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(queue): Path<String>,
) -> ApiResult<StatusCode> {
    let tier = queues::parse(&queue)?;
    crate::ops::controls::set_queue_paused(&state.pool, tier, false, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pauses the re-embedding after a model change: workers finish the
/// document in hand and take no further one; search keeps answering from
/// both models' vectors. Pausing a paused run changes nothing.
#[utoipa::path(
    post,
    path = "/api/admin/reembed/pause",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 204, description = "Paused (or already paused)"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 409, description = "No re-embedding is running (`no_reembedding`)", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn pause_reembed(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
) -> ApiResult<StatusCode> {
    controls::set_reembed_paused(&state.pool, true, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes a paused re-embedding.
#[utoipa::path(
    post,
    path = "/api/admin/reembed/resume",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 204, description = "Running (or already running)"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 409, description = "No re-embedding is running (`no_reembedding`)", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn resume_reembed(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
) -> ApiResult<StatusCode> {
    controls::set_reembed_paused(&state.pool, false, &admin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Re-embeds again the documents whose re-embedding failed every retry
/// (once the cause is fixed).
#[utoipa::path(
    post,
    path = "/api/admin/reembed/retry",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 202, description = "How many documents are due again", body = Count),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin, or a browser request from another site", body = ErrorBody),
        (status = 409, description = "No re-embedding is running (`no_reembedding`)", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn retry_reembeds(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
) -> ApiResult<(StatusCode, Json<Count>)> {
    let count = controls::retry_reembeds(&state.pool, &admin).await?;
    Ok((StatusCode::ACCEPTED, Json(Count { count })))
}

/// Worker processes that sent a heartbeat recently.
#[utoipa::path(
    get,
    path = "/api/admin/workers",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "The workers", body = Vec<WorkerDto>),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn workers(
    State(state): State<AppState>,
    _operator: OperatorUser,
) -> ApiResult<Json<Vec<WorkerDto>>> {
    Ok(Json(admin::workers(&state.pool).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditQuery {
    /// Entries per page, 1 to 500 (default 100).
    limit: Option<i64>,
    /// Keyset cursor: the last entry id of the previous page.
    before: Option<i64>,
    /// Only this actor's entries (an e-mail).
    actor: Option<String>,
    /// Only this action: `dead_letter.requeue`, `job.cancel`, …
    action: Option<String>,
    /// Only entries of the last `since`: `1h`, `24h`, `7d`, any duration up
    /// to 100 years.
    since: Option<String>,
}

/// Admin actions, newest first, by actor and action if given; each with the
/// job its target leads to and that job's file name.
#[utoipa::path(
    get,
    path = "/api/admin/audit",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of the audit log", body = Vec<AuditEntryDto>),
        (status = 400, description = "`limit` or `before` is not a number, or `since` is not a duration", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn audit(
    State(state): State<AppState>,
    _operator: OperatorUser,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<Vec<AuditEntryDto>>> {
    let filter = admin::AuditFilter {
        actor: non_empty(q.actor),
        action: non_empty(q.action),
        since: crate::ops::controls::parse_since(q.since.as_deref().unwrap_or_default())?,
        before: q.before,
        limit: q.limit.unwrap_or(100).clamp(1, 500),
    };
    Ok(Json(admin::audit(&state.pool, &filter).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SeriesQuery {
    /// One of the sampled series (`sampler::SERIES`).
    metric: String,
    /// The queue, for a per-queue series.
    queue: Option<String>,
    /// How far back: a duration such as 1h (default) or 1d; at most 7d.
    since: Option<String>,
}

/// A dashboard series (`metric` one of `sampler::SERIES`) over `since` (default 1h, at most 7d).
#[utoipa::path(
    get,
    path = "/api/admin/series",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    params(SeriesQuery),
    responses(
        (status = 200, description = "The samples, oldest first", body = Vec<SeriesPointDto>),
        (status = 400, description = "No or an unknown `metric`, or `since` is not a duration", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or a viewer", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn series(
    State(state): State<AppState>,
    _operator: OperatorUser,
    Query(q): Query<SeriesQuery>,
) -> ApiResult<Json<Vec<SeriesPointDto>>> {
    if !crate::ops::sampler::SERIES.contains(&q.metric.as_str()) {
        return Err(ApiError::bad_request(
            "invalid_metric",
            format!(
                "`metric` is one of {}",
                crate::ops::sampler::SERIES.join(", ")
            ),
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
        crate::ops::sampler::series(&state.pool, &q.metric, &queue, since).await?,
    ))
}

/// The admin job list's filter, as the body of a bulk action.
#[derive(Deserialize, ToSchema)]
struct JobsFilter {
    /// `pending`, `processing`, `retrying`, `done`, `failed`, `cancelled`, or empty for any.
    #[serde(default)]
    state: String,
    /// `high`, `normal`, `slow`, or empty for any.
    #[serde(default)]
    queue: String,
    /// The start of a tenant's slug, or empty for any.
    #[serde(default)]
    tenant: String,
    /// Part of the filename, or empty.
    #[serde(default)]
    q: String,
    /// Only jobs enqueued within this long before now (`1h`, `24h`, `7d`), or empty for any time.
    #[serde(default)]
    since: String,
    /// Only jobs that failed at this step at least once (`parse`, `chunk`, `embed`, `store`), or empty.
    #[serde(default)]
    step: String,
}

/// How many jobs a bulk action changed.
#[derive(Serialize, ToSchema)]
struct Count {
    count: u64,
}

async fn bulk_action(
    state: &AppState,
    admin: &crate::identity::auth::CurrentUser,
    body: Result<Json<JobsFilter>, axum::extract::rejection::JsonRejection>,
    cancel: bool,
) -> ApiResult<(StatusCode, Json<Count>)> {
    let Json(f) = body.map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"state\",\"queue\",\"tenant\",\"q\",\"since\",\"step\"}}: {e}"),
        )
    })?;
    let m = Matching::parse(&f.state, &f.queue, &f.tenant, &f.q)?
        .within(&f.since)?
        .failed_at(&f.step)?;
    let count = if cancel {
        controls::cancel_matching(&state.pool, &state.events, &m, admin).await?
    } else {
        controls::retry_matching(&state.pool, &state.events, &m, admin).await?
    };
    Ok((StatusCode::ACCEPTED, Json(Count { count })))
}

/// Cancels every unfinished (pending, retrying, processing) job matching
/// the admin job list's filter, up to 10,000 per call.
#[utoipa::path(
    post,
    path = "/api/admin/jobs/cancel",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    request_body = JobsFilter,
    responses(
        (status = 202, description = "How many were cancelled", body = Count),
        (status = 400, description = "An unknown `state`, `queue`, `since` or `step`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
async fn cancel_matching(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    body: Result<Json<JobsFilter>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<Count>)> {
    bulk_action(&state, &admin, body, true).await
}

/// Retries every failed or retrying job matching the admin job list's
/// filter, up to 10,000 per call.
#[utoipa::path(
    post,
    path = "/api/admin/jobs/retry",
    tag = "admin",
    security(("bearer" = []), ("session" = [])),
    request_body = JobsFilter,
    responses(
        (status = 202, description = "How many were retried", body = Count),
        (status = 400, description = "An unknown `state`, `queue`, `since` or `step`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
async fn retry_matching(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    body: Result<Json<JobsFilter>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<Count>)> {
    bulk_action(&state, &admin, body, false).await
}
