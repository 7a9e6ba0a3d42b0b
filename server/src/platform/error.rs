//! `ApiError`: every HTTP error docflow answers, as
//! `{"error":{"code","message"}}`. 4xx messages say what to fix; 5xx bodies
//! are opaque and the cause is logged once, here.

use std::time::Duration;

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

/// The body of every error answer: `{"error":{"code","message"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"error": {"code": "not_found", "message": "job not found"}}))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable and machine-readable: `unauthorized`, `forbidden`,
    /// `not_found`, `conflict`, `payload_too_large`,
    /// `unsupported_media_type`, `too_many_requests`, `unavailable`,
    /// `internal`, or a 400's own code (`invalid_body`, `missing_file`…).
    pub code: &'static str,
    /// For people: what to fix (4xx), or nothing about the cause (5xx).
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; the message says how.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// No valid session or token.
    #[error("{0}")]
    Unauthorized(String),
    /// Authenticated, but the role does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// Absent, or another tenant's.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The target is in a state that forbids the action.
    #[error("{0}")]
    Conflict(String),
    /// The same, with its own code (`job_finished`, `not_retryable`).
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    /// Upload over `DOCFLOW_MAX_UPLOAD_BYTES`.
    #[error("file is larger than the limit of {0} bytes")]
    PayloadTooLarge(u64),
    /// Not a PDF, text, Markdown or HTML file.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Tenant over its quota.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after: Duration,
    },
    /// Backlog full or a dependency down; try again later.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after: Duration,
    },
    /// A bug or an unexpected failure; logged, never shown.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) | ApiError::Refused { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { code, .. } => code,
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Refused { code, .. } => code,
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::TooManyRequests { .. } => "too_many_requests",
            ApiError::Unavailable { .. } => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

/// `axum`'s `Query`, whose refusal (a missing or malformed parameter) is
/// docflow's error body: 400 `invalid_query`.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::bad_request("invalid_query", e.body_text())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if is_unavailable(&e) {
            return ApiError::Unavailable {
                message: "the database is unreachable; try again shortly".into(),
                retry_after: Duration::from_secs(5),
            };
        }
        if is_unstorable_text(&e) {
            return ApiError::bad_request(
                "invalid_text",
                "the request holds a NUL character (U+0000), which docflow can neither store nor search for",
            );
        }
        ApiError::Internal(anyhow::Error::new(e))
    }
}

/// True when PostgreSQL refused text of the request itself: a NUL
/// character, which its `text` and `jsonb` cannot hold (22021
/// `character_not_in_repertoire`, 22P05 `untranslatable_character`).
/// Only the caller's input reaches a query as such text, so it is the
/// caller's 400, not docflow's 500, wherever the text is used.
fn is_unstorable_text(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().is_some_and(|c| c == "22021" || c == "22P05"))
}

/// True when the error means PostgreSQL could not be reached (rather than a bad query).
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        // Class 08 (connection exception) and 57P (server shutting down or starting).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            ApiError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "request failed");
                "internal error; it has been logged".to_string()
            }
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message,
            },
        };
        let mut resp = (status, Json(body)).into_response();
        if let ApiError::TooManyRequests { retry_after, .. }
        | ApiError::Unavailable { retry_after, .. } = &self
        {
            let secs = retry_after.as_secs().max(1).to_string();
            if let Ok(v) = HeaderValue::from_str(&secs) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
