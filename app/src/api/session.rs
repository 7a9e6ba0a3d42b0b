use leptos::prelude::*;

use crate::{dto::UserDto, error::AppError};

/// The logged-in user, or `None`.
#[server(prefix = "/sfn")]
pub async fn whoami() -> Result<Option<UserDto>, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.current_user(&req).await
}

/// Logs in; the session cookie comes with the answer.
#[server(prefix = "/sfn")]
pub async fn login(email: String, password: String) -> Result<UserDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.login(&req, &email, &password).await
}

#[server(prefix = "/sfn")]
pub async fn logout() -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.logout(&req).await
}
