//! A batch's page and its actions.

use leptos::prelude::*;

use crate::{
    dto::{BatchDto, BatchView},
    error::AppError,
};

/// A batch with its jobs.
#[server(prefix = "/sfn")]
pub async fn batch(id: String) -> Result<BatchView, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.batch(&req, &id).await
}

/// `cancel` or `retry` the whole batch.
#[server(prefix = "/sfn")]
pub async fn act_on_batch(id: String, action: String) -> Result<BatchView, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.act_on_batch(&req, &id, &action).await
}

/// Opens a batch: a drop of several files is one.
#[server(prefix = "/sfn")]
pub async fn create_batch(name: String) -> Result<BatchDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.create_batch(&req, &name).await
}

/// Closes a batch: it is done once every job in it has ended.
#[server(prefix = "/sfn")]
pub async fn close_batch(id: String) -> Result<BatchDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.close_batch(&req, &id).await
}
