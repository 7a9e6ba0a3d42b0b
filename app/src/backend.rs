//! The service interface the UI's server functions call. `server` implements
//! it over PostgreSQL and RabbitMQ and provides it as Leptos context, so the
//! pages and the REST API share the same code and authorization checks.

use std::sync::Arc;

use http::request::Parts;

use crate::{
    dto::{JobDto, UserDto},
    error::AppError,
};

#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The caller of this request, if logged in.
    async fn current_user(&self, req: &Parts) -> Result<Option<UserDto>, AppError>;
    /// Checks credentials and starts a session (rotating its id).
    async fn login(&self, req: &Parts, email: &str, password: &str) -> Result<UserDto, AppError>;
    /// Ends the session.
    async fn logout(&self, req: &Parts) -> Result<(), AppError>;
    /// The caller's tenant's recent jobs, newest first.
    async fn my_jobs(&self, req: &Parts, limit: i64) -> Result<Vec<JobDto>, AppError>;
    /// One job of the caller's tenant (any tenant for admins).
    async fn job(&self, req: &Parts, id: &str) -> Result<JobDto, AppError>;
}

/// How the backend travels in Leptos context.
pub type SharedBackend = Arc<dyn Backend>;
