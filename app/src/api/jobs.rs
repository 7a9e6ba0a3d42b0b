use leptos::prelude::*;

use crate::{dto::JobDto, error::AppError};

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
