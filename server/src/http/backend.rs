//! `ServerBackend`: the UI's server functions reach PostgreSQL through here,
//! with the same checks as the REST handlers.

use app::{
    backend::Backend,
    dto::{JobDto, UserDto},
    error::AppError,
};
use axum::http::request::Parts;
use tower_sessions::Session;

use crate::{
    auth::{self, CurrentUser},
    error::ApiError,
    jobs::repo::{self, JobFilter},
    state::AppState,
};

pub struct ServerBackend {
    state: AppState,
}

impl ServerBackend {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    async fn user(&self, req: &Parts) -> Result<CurrentUser, AppError> {
        auth::resolve(&self.state, req)
            .await
            .map_err(AppError::from)?
            .ok_or(AppError::Unauthorized)
    }
}

impl From<ApiError> for AppError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Unauthorized(_) => AppError::Unauthorized,
            ApiError::Forbidden(_) => AppError::Forbidden,
            ApiError::NotFound(_) => AppError::NotFound,
            ApiError::Conflict(m) => AppError::Conflict(m),
            ApiError::Unavailable { message, .. } => AppError::Unavailable(message),
            ApiError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "server function failed");
                AppError::Internal("it has been logged".into())
            }
            other => AppError::Validation(other.to_string()),
        }
    }
}

fn session(req: &Parts) -> Result<Session, AppError> {
    req.extensions
        .get::<Session>()
        .cloned()
        .ok_or_else(|| AppError::Internal("no session layer".into()))
}

#[async_trait::async_trait]
impl Backend for ServerBackend {
    async fn current_user(&self, req: &Parts) -> Result<Option<UserDto>, AppError> {
        let user = auth::resolve(&self.state, req).await?;
        Ok(user.as_ref().map(super::auth::user_dto))
    }

    async fn login(&self, req: &Parts, email: &str, password: &str) -> Result<UserDto, AppError> {
        let user = auth::login(&self.state, &session(req)?, email, password)
            .await
            .map_err(|e| match e {
                ApiError::Unauthorized(m) => AppError::Validation(m),
                other => other.into(),
            })?;
        Ok(super::auth::user_dto(&user))
    }

    async fn logout(&self, req: &Parts) -> Result<(), AppError> {
        auth::logout(&session(req)?)
            .await
            .map_err(|e| AppError::from(ApiError::Internal(e)))
    }

    async fn my_jobs(&self, req: &Parts, limit: i64) -> Result<Vec<JobDto>, AppError> {
        let user = self.user(req).await?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let filter = JobFilter {
            tenant_id: Some(user.tenant_id),
            limit: limit.clamp(1, 200),
            ..Default::default()
        };
        Ok(repo::list(&mut conn, &filter)
            .await
            .map_err(ApiError::from)?)
    }

    async fn job(&self, req: &Parts, id: &str) -> Result<JobDto, AppError> {
        let user = self.user(req).await?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let tenant = (!user.is_admin()).then_some(user.tenant_id);
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        repo::get(&mut conn, id, tenant)
            .await
            .map_err(ApiError::from)?
            .ok_or(AppError::NotFound)
    }
}
