use leptos::prelude::*;

use crate::{dto::SearchHitDto, error::AppError};

/// The caller's tenant's best chunks for `q`.
#[server(prefix = "/sfn")]
pub async fn search(q: String, k: usize) -> Result<Vec<SearchHitDto>, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.search(&req, &q, k).await
}
