//! Admin server functions; the backend checks the admin role in each.

use leptos::prelude::*;

use crate::{
    dto::{AdminJobQuery, AuditPage, DashboardDto, DeadLetterPage, JobPage, RequeueReport},
    error::AppError,
};

/// Stats of the last hour, series since `since_s` seconds, workers.
#[server(prefix = "/sfn")]
pub async fn dashboard(since_s: u64) -> Result<DashboardDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_dashboard(&req, since_s).await
}

#[server(prefix = "/sfn")]
pub async fn admin_jobs(query: AdminJobQuery) -> Result<JobPage, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_jobs(&req, query).await
}

#[server(prefix = "/sfn")]
pub async fn dead_letters(before: Option<String>) -> Result<DeadLetterPage, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_dead_letters(&req, before).await
}

/// Re-enqueues each dead letter on its own; reports each outcome.
#[server(prefix = "/sfn")]
pub async fn requeue(ids: Vec<String>) -> Result<RequeueReport, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_requeue(&req, ids).await
}

#[server(prefix = "/sfn")]
pub async fn discard(id: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_discard(&req, &id).await
}

#[server(prefix = "/sfn")]
pub async fn audit(before: Option<i64>) -> Result<AuditPage, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.admin_audit(&req, before).await
}
