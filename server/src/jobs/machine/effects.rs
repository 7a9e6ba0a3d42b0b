//! What every transition writes beside the job's row, in its transaction:
//! the `job_events` row (and the event to publish after commit), the inbox
//! entry, the dead letter.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::jobs::{
    events::{JobEvent, NotificationRef, Progress},
    repo, ClaimedJob, JobMessage, JobState, Step,
};

/// A `job_events` row about a claimed job, and the event to publish after commit.
pub async fn record(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    state: JobState,
    step: Option<Step>,
    progress: Option<(i32, i32)>,
    message: &str,
) -> sqlx::Result<JobEvent> {
    let (id, at) = repo::insert_event(
        conn,
        &repo::NewEvent {
            job_id: job.id,
            tenant_id: job.tenant_id,
            state,
            step,
            progress,
            message,
        },
    )
    .await?;
    Ok(event_of(job, id, at, state, step, progress, message.into()))
}

/// The job an inbox entry is about.
pub struct Finished<'a> {
    pub job_id: Uuid,
    pub uploaded_by: Uuid,
    pub filename: &'a str,
}

impl<'a> From<&'a ClaimedJob> for Finished<'a> {
    fn from(job: &'a ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            uploaded_by: job.uploaded_by,
            filename: &job.filename,
        }
    }
}

/// The message of a job that is done.
pub(super) const DONE: &str = "done: the document is searchable";

/// How a job ended, as its uploader's inbox tells it.
pub(super) enum Ended<'a> {
    Done,
    Failed(&'a str),
    /// Stopped by someone else: their words, and the step it was at.
    Cancelled {
        message: &'a str,
        at: Option<&'a str>,
    },
}

/// The uploader's inbox entry for a finished job (not yet written).
pub(super) fn inbox_entry(job: &Finished<'_>, ended: Ended<'_>) -> NotificationRef {
    let (kind, title, body) = match ended {
        Ended::Done => (
            "job_done",
            format!("{} is ready", job.filename),
            "Its text is indexed and searchable.".to_string(),
        ),
        Ended::Failed(error) => (
            "job_failed",
            format!("{} could not be processed", job.filename),
            error.to_string(),
        ),
        Ended::Cancelled { message, at } => (
            "job_cancelled",
            format!("{} was cancelled", job.filename),
            format!(
                "{}{}: it is not searchable. Upload it again to have it processed.",
                app::format::capitalised(message),
                at.map_or_else(|| " before it started".into(), |step| format!(" at {step}"))
            ),
        ),
    };
    NotificationRef {
        id: Uuid::now_v7(),
        kind: kind.into(),
        title,
        body,
        link: format!("/jobs/{}", job.job_id),
    }
}

/// Writes the uploader's inbox entry for a finished job, and returns it
/// when it is unread (to be announced on the live stream).
///
/// A document has at most one failure notice: when a job fails again (an
/// administrator's re-enqueue that did not help, a retry), the notice it
/// already has is brought up to date and to the top of the inbox, read or
/// unread as it was, instead of a new "could not be processed" each time.
pub(super) async fn notify(
    conn: &mut PgConnection,
    job: Finished<'_>,
    ended: Ended<'_>,
) -> sqlx::Result<Option<NotificationRef>> {
    let mut n = inbox_entry(&job, ended);
    if n.kind == "job_failed" {
        let earlier = sqlx::query!(
            r#"UPDATE notifications SET title = $3, body = $4, created_at = now()
               WHERE id = (SELECT id FROM notifications
                           WHERE user_id = $1 AND job_id = $2 AND kind = 'job_failed'
                           ORDER BY created_at DESC LIMIT 1)
               RETURNING id, read_at IS NULL AS "unread!""#,
            job.uploaded_by,
            job.job_id,
            &n.title,
            &n.body
        )
        .map(|r| (r.id, r.unread))
        .fetch_optional(&mut *conn)
        .await?;
        if let Some((id, unread)) = earlier {
            n.id = id;
            return Ok(unread.then_some(n));
        }
    }
    sqlx::query!(
        "INSERT INTO notifications (id, user_id, job_id, kind, title, body, link) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        n.id,
        job.uploaded_by,
        job.job_id,
        &n.kind,
        &n.title,
        &n.body,
        &n.link
    )
    .execute(conn)
    .await?;
    Ok(Some(n))
}

/// One row of `dead_letters`.
pub struct NewDeadLetter<'a> {
    /// `None` when the message could not even be read.
    pub job_id: Option<Uuid>,
    pub tenant_id: Option<Uuid>,
    pub queue: &'a str,
    pub reason: &'a str,
    pub error: &'a str,
    pub attempts: i32,
    pub payload: &'a str,
}

/// Records a dead letter, at most one unresolved per job.
pub async fn insert_dead_letter(
    conn: &mut PgConnection,
    d: &NewDeadLetter<'_>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO dead_letters (id, job_id, tenant_id, queue, reason, error, attempts, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (job_id) WHERE resolved_at IS NULL DO NOTHING",
        Uuid::now_v7(),
        d.job_id,
        d.tenant_id,
        d.queue,
        d.reason,
        d.error,
        d.attempts,
        d.payload
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The dead letter of a job that fails now, its message as the payload.
pub(super) async fn dead_letter_for(
    conn: &mut PgConnection,
    msg: &JobMessage,
    reason: &str,
    error: &str,
) -> sqlx::Result<()> {
    let payload = serde_json::to_string(msg).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    insert_dead_letter(
        conn,
        &NewDeadLetter {
            job_id: Some(msg.job_id),
            tenant_id: Some(msg.tenant_id),
            queue: &msg.queue.queue_name(),
            reason,
            error,
            attempts: msg.attempt,
            payload: &payload,
        },
    )
    .await
}

/// Records a state change without step or progress (admin actions, the
/// sweeper, the keeper) and returns the event to publish once committed.
pub(super) async fn state_change(
    conn: &mut PgConnection,
    job_id: Uuid,
    tenant_id: Uuid,
    state: JobState,
    message: &str,
) -> sqlx::Result<JobEvent> {
    let (id, at) = repo::insert_event(
        conn,
        &repo::NewEvent {
            job_id,
            tenant_id,
            state,
            step: None,
            progress: None,
            message,
        },
    )
    .await?;
    Ok(JobEvent::state_change(
        id,
        at,
        job_id,
        tenant_id,
        state.as_str(),
        message,
    ))
}

/// The event to publish for a `job_events` row written about `job`.
pub(super) fn event_of(
    job: &ClaimedJob,
    id: i64,
    at: DateTime<Utc>,
    state: JobState,
    step: Option<Step>,
    progress: Option<(i32, i32)>,
    message: String,
) -> JobEvent {
    JobEvent {
        id,
        job_id: job.id,
        tenant_id: job.tenant_id,
        user_id: Some(job.uploaded_by),
        state: state.as_str().into(),
        step: step.map(|s| s.as_str().to_string()),
        progress: progress.map(|(done, total)| Progress { done, total }),
        message,
        at,
        notification: None,
    }
}
