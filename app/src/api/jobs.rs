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

/// The newest event id of the caller's tenant; the live stream resumes after it.
#[server(prefix = "/sfn")]
pub async fn live_cursor() -> Result<i64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.live_cursor(&req).await
}
