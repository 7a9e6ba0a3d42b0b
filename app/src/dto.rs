//! Data sent to browsers and API clients: plain serde structs shared by the
//! REST API, the server functions and the pages.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The caller, as `POST /api/login` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDto {
    pub email: String,
    /// `admin` or `member`.
    pub role: String,
    /// Tenant slug.
    pub tenant: String,
}

impl UserDto {
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }
}

/// `202 Accepted` answer of an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadAccepted {
    pub job_id: String,
    pub document_id: String,
    pub state: String,
    pub queue: String,
    pub status_url: String,
    pub events_url: String,
}

/// One pipeline step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDto {
    /// `parse`, `chunk`, `embed` or `store`.
    pub name: String,
    /// `pending`, `running`, `done` or `failed`.
    pub state: String,
    /// Times the step was started.
    pub attempts: i32,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProgressDto {
    pub chunks_total: i32,
    pub chunks_embedded: i32,
}

/// A job as `GET /api/jobs/{id}` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDto {
    pub id: String,
    pub document_id: String,
    pub filename: String,
    pub tenant: String,
    pub queue: String,
    pub state: String,
    /// Runs started: 1 for the first.
    pub attempt: i32,
    pub current_step: Option<String>,
    pub steps: Vec<StepDto>,
    pub progress: ProgressDto,
    pub last_error: Option<String>,
    /// When a `retrying` job runs again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub enqueued_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A page of jobs, newest first; `next_before` continues the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPage {
    pub jobs: Vec<JobDto>,
    pub next_before: Option<String>,
}
