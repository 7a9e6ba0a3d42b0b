//! Admin server functions; the backend checks the admin role in each.

use leptos::prelude::*;

use crate::{
    dto::{
        AdminJobQuery, AuditPage, DashboardDto, DeadLetterPage, JobPage, MatchingCounts,
        RequeueReport,
    },
    error::AppError,
};

/// Stats of the last hour, series since `since_s` seconds, workers.
#[server(prefix = "/sfn")]
pub async fn dashboard(since_s: u64) -> Result<DashboardDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_dashboard(&req, since_s).await
}

/// Cancels every unfinished job matching the filter; how many.
#[server(prefix = "/sfn")]
pub async fn cancel_matching(query: AdminJobQuery) -> Result<u64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_cancel_matching(&req, query).await
}

/// Retries every failed or retrying job matching the filter; how many.
#[server(prefix = "/sfn")]
pub async fn retry_matching(query: AdminJobQuery) -> Result<u64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_retry_matching(&req, query).await
}

/// How many jobs matching the filter a bulk cancel and a bulk retry would
/// change now: what the confirmation states.
#[server(prefix = "/sfn")]
pub async fn count_matching(query: AdminJobQuery) -> Result<MatchingCounts, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_count_matching(&req, query).await
}

#[server(prefix = "/sfn")]
pub async fn admin_jobs(query: AdminJobQuery) -> Result<JobPage, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_jobs(&req, query).await
}

/// Unresolved dead letters, newest first; each filter (a reason, a queue
/// such as `high`, a tenant's slug) is optional.
#[server(prefix = "/sfn")]
pub async fn dead_letters(
    before: Option<String>,
    reason: Option<String>,
    queue: Option<String>,
    tenant: Option<String>,
) -> Result<DeadLetterPage, AppError> {
    let (backend, req) = super::ctx().await?;
    let query = crate::dto::DeadLetterQuery::from_fields(reason, queue, tenant, before);
    backend.admin_dead_letters(&req, query).await
}

/// Re-enqueues each dead letter on its own; reports each outcome.
#[server(prefix = "/sfn")]
pub async fn requeue(ids: Vec<String>) -> Result<RequeueReport, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_requeue(&req, ids).await
}

/// Re-enqueues every unresolved dead letter matching the filters, on
/// every page; reports each outcome.
#[server(prefix = "/sfn")]
pub async fn requeue_matching(
    reason: Option<String>,
    queue: Option<String>,
    tenant: Option<String>,
) -> Result<RequeueReport, AppError> {
    let (backend, req) = super::ctx().await?;
    // Every page: no cursor.
    let query = crate::dto::DeadLetterQuery::from_fields(reason, queue, tenant, None);
    backend.admin_requeue_matching(&req, query).await
}

#[server(prefix = "/sfn")]
pub async fn discard(id: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_discard(&req, &id).await
}

/// Pauses a queue: workers stop taking its messages; running jobs finish.
#[server(prefix = "/sfn")]
pub async fn pause_queue(queue: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_set_queue_paused(&req, &queue, true).await
}

/// Resumes a paused queue.
#[server(prefix = "/sfn")]
pub async fn resume_queue(queue: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_set_queue_paused(&req, &queue, false).await
}

/// Pauses (`paused`) or resumes the re-embedding after a model change.
#[server(prefix = "/sfn")]
pub async fn set_reembed_paused(paused: bool) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_set_reembed_paused(&req, paused).await
}

/// The audit log, newest first; by one actor (e-mail), one action and a
/// time range (`24h`) if given.
#[server(prefix = "/sfn")]
pub async fn audit(
    before: Option<i64>,
    actor: Option<String>,
    action: Option<String>,
    since: Option<String>,
) -> Result<AuditPage, AppError> {
    let (backend, req) = super::ctx().await?;
    let query = crate::dto::AuditQuery {
        actor: actor.unwrap_or_default(),
        action: action.unwrap_or_default(),
        since: since.unwrap_or_default(),
        before,
    };
    backend.admin_audit(&req, query).await
}

/// Re-embeds again the documents whose re-embedding failed; how many.
#[server(prefix = "/sfn")]
pub async fn retry_reembeds() -> Result<i64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_retry_reembeds(&req).await
}
