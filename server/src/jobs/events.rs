//! What happened to a job, as the state machine records it and every
//! layer above carries it: a `job_events` row, then a message on
//! `docflow.events` ([`crate::pipeline::events`] publishes it), then an
//! SSE event.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub done: i32,
    pub total: i32,
}

/// A notification created with a terminal event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationRef {
    pub id: Uuid,
    pub kind: String,
    pub title: String,
    pub body: String,
    pub link: String,
}

/// One event as it travels over RabbitMQ to the web processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// The `job_events` row id: the SSE event id.
    pub id: i64,
    pub job_id: Uuid,
    pub tenant_id: Uuid,
    /// The uploader, who gets the notification.
    pub user_id: Option<Uuid>,
    pub state: String,
    pub step: Option<String>,
    pub progress: Option<Progress>,
    pub message: String,
    pub at: DateTime<Utc>,
    pub notification: Option<NotificationRef>,
}

impl JobEvent {
    /// A state-change event without progress or notification (sweeper,
    /// keeper, admin actions).
    pub fn state_change(
        id: i64,
        at: DateTime<Utc>,
        job_id: Uuid,
        tenant_id: Uuid,
        state: &str,
        message: &str,
    ) -> Self {
        JobEvent {
            id,
            job_id,
            tenant_id,
            user_id: None,
            state: state.into(),
            step: None,
            progress: None,
            message: message.into(),
            at,
            notification: None,
        }
    }

    pub fn routing_key(&self) -> String {
        if self.progress.is_some() {
            "job.progress".into()
        } else {
            format!("job.{}", self.state)
        }
    }
}
