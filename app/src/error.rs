//! `AppError`: what a server function can fail with, serialisable so pages
//! can tell "log in" from "not allowed" from "try again".

use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    /// Not logged in.
    #[error("please log in")]
    Unauthorized,
    /// Logged in, but this needs another role.
    #[error("you are not allowed to do this")]
    Forbidden,
    /// Absent, or another tenant's.
    #[error("not found")]
    NotFound,
    /// Input that must be corrected; the message says how.
    #[error("{0}")]
    Validation(String),
    /// A conflicting state (e.g. already re-enqueued).
    #[error("{0}")]
    Conflict(String),
    /// A dependency is down; try again shortly.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else; the server logged it.
    #[error("something went wrong: {0}")]
    Internal(String),
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        AppError::Internal(value.to_string())
    }
}
