use leptos::prelude::*;

use crate::{dto::InboxDto, error::AppError};

/// The caller's notifications, newest first.
#[server(prefix = "/sfn")]
pub async fn inbox() -> Result<InboxDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.inbox(&req).await
}

#[server(prefix = "/sfn")]
pub async fn mark_read(id: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.mark_read(&req, &id).await
}

/// Returns how many notifications were unread.
#[server(prefix = "/sfn")]
pub async fn mark_all_read() -> Result<u64, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.mark_all_read(&req).await
}
