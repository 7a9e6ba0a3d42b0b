use leptos::prelude::*;

use crate::{
    dto::{JobDetail, JobDto},
    error::AppError,
};

/// The caller's tenant's recent jobs.
#[server(prefix = "/sfn")]
pub async fn my_jobs(limit: i64) -> Result<Vec<JobDto>, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.my_jobs(&req, limit).await
}

#[server(prefix = "/sfn")]
pub async fn job(id: String) -> Result<JobDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.job(&req, &id).await
}

/// A job with its event timeline; admins may read any tenant's.
#[server(prefix = "/sfn")]
pub async fn job_with_events(id: String) -> Result<JobDetail, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.job_detail(&req, &id).await
}

/// Cancels a job; its new state.
#[server(prefix = "/sfn")]
pub async fn cancel_job(id: String) -> Result<String, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.cancel_job(&req, &id).await
}

/// Retries a failed job, or a retrying one now; its new state.
#[server(prefix = "/sfn")]
pub async fn retry_job(id: String) -> Result<String, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.retry_job(&req, &id).await
}

/// Deletes a document (its jobs stay as history).
#[server(prefix = "/sfn")]
pub async fn delete_document(id: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.delete_document(&req, &id).await
}

/// The newest event id of the caller's tenant; the live stream resumes after it.
#[server(prefix = "/sfn")]
pub async fn live_cursor() -> Result<i64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.live_cursor(&req).await
}
