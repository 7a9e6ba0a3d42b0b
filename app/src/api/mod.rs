//! Server functions, one file per noun; each body is thin: who is asking,
//! call the backend, map the error.

pub mod admin;
pub mod batches;
pub mod inbox;
pub mod jobs;
pub mod search;
pub mod session;
pub mod webhooks;

#[cfg(feature = "ssr")]
pub(crate) async fn ctx(
) -> Result<(crate::backend::SharedBackend, http::request::Parts), crate::error::AppError> {
    use crate::error::AppError;
    let backend = leptos::prelude::use_context::<crate::backend::SharedBackend>()
        .ok_or_else(|| AppError::Internal("backend missing from context".into()))?;
    let parts = leptos::prelude::use_context::<http::request::Parts>()
        .ok_or_else(|| AppError::Internal("request missing from context".into()))?;
    Ok((backend, parts))
}
