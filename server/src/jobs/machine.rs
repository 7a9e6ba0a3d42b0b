//! The job state machine: the only code that writes `jobs.state` (a unit
//! test below reads every other source file to keep it so).
//!
//! Each transition is one guarded `UPDATE … WHERE state = … [AND
//! lease_owner = …]` that returns whether it happened (`Option` / `bool`),
//! and writes its `job_events` row, its outbox row, its dead letter and its
//! inbox entry in the caller's transaction. What to do when a run ends is
//! [`decide`]: a pure function of the job, the error and the budget.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    events::{JobEvent, NotificationRef, Progress},
    repo, returning_message, ClaimedJob, JobMessage, JobState, Step, Tier,
};
use crate::jobs::outbox;

// ---------------------------------------------------------------------------
// The decision
// ---------------------------------------------------------------------------

/// Why a run did not finish, as far as the decision is concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Retrying cannot help (corrupt file, refused request, internal error).
    Permanent,
    /// The document's own transient failure (timeout, 5xx below the
    /// breaker's threshold, a step past its deadline): spends a retry.
    Transient,
    /// A dependency asked to wait this long (429 `Retry-After`).
    RetryAfter(Duration),
    /// A dependency is down (its circuit breaker is open) until `until`.
    Unavailable { until: DateTime<Utc> },
    /// The worker is shutting down.
    Shutdown,
    /// Another worker or the sweeper took the job over.
    LeaseLost,
}

/// The retries a job may spend on its own faults.
#[derive(Debug, Clone, Copy)]
pub struct Budget<'a> {
    /// Retries spent since the job was (re-)enqueued.
    pub spent: i32,
    /// One delay per retry; their count is the limit (`DOCFLOW_RETRY_DELAYS`).
    pub delays: &'a [Duration],
}

/// How a failed job is recorded (`jobs.failure_kind`, `dead_letters.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    Permanent,
    Exhausted,
    Crashed,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Permanent => "permanent",
            FailureKind::Exhausted => "exhausted",
            FailureKind::Crashed => "crashed",
        }
    }
}

/// What happens to a job whose run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Every step has its checkpoint.
    Done,
    /// Retry number `retry` after `delay` (jitter applied).
    Retry { retry: i32, delay: Duration },
    /// Wait for a dependency until `until`, spending nothing.
    Wait { until: DateTime<Utc> },
    /// Back to `pending`, untouched (shutdown).
    Release,
    /// Failed and dead-lettered.
    Fail(FailureKind),
    /// Not this worker's job any more: change nothing.
    Abandon,
}

/// Done, retry, wait, release, fail or abandon: the job's `state` and
/// whether this worker still holds its lease (`ours`), how the run ended,
/// the budget, a jitter factor (0.8–1.2 in production) and the time now.
pub fn decide(
    state: JobState,
    ours: bool,
    end: Result<(), &Fault>,
    budget: Budget<'_>,
    jitter: f64,
    now: DateTime<Utc>,
) -> Decision {
    if state != JobState::Processing || !ours {
        return Decision::Abandon;
    }
    let fault = match end {
        Ok(()) => return Decision::Done,
        Err(f) => f,
    };
    match fault {
        Fault::LeaseLost => Decision::Abandon,
        Fault::Shutdown => Decision::Release,
        Fault::Permanent => Decision::Fail(FailureKind::Permanent),
        Fault::Unavailable { until } => Decision::Wait {
            until: (*until).max(now),
        },
        // A wait too long to represent is as good as a day.
        Fault::RetryAfter(d) => Decision::Wait {
            until: chrono::Duration::from_std(*d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(now + chrono::Duration::days(1)),
        },
        Fault::Transient => {
            let retry = budget.spent.max(0) + 1;
            match usize::try_from(retry - 1)
                .ok()
                .and_then(|i| budget.delays.get(i))
            {
                Some(base) => Decision::Retry {
                    retry,
                    delay: base.mul_f64(jitter.clamp(0.0, 10.0)),
                },
                None => Decision::Fail(FailureKind::Exhausted),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Events and inbox entries (written with the transitions)
// ---------------------------------------------------------------------------

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
const DONE: &str = "done: the document is searchable";

/// How a job ended, as its uploader's inbox tells it.
enum Ended<'a> {
    Done,
    Failed(&'a str),
    /// Stopped by someone else: their words, and the step it was at.
    Cancelled {
        message: &'a str,
        at: Option<&'a str>,
    },
}

/// The uploader's inbox entry for a finished job (not yet written).
fn inbox_entry(job: &Finished<'_>, ended: Ended<'_>) -> NotificationRef {
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
async fn notify(
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
async fn dead_letter_for(
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
async fn state_change(
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

// ---------------------------------------------------------------------------
// create, claim, renew
// ---------------------------------------------------------------------------

/// A job about to be created with its document.
pub struct NewJob {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub document_id: Uuid,
    pub queue: Tier,
    pub enqueued_at: DateTime<Utc>,
}

/// Creates a `pending` job with its first event and its outbox row.
/// Puts a new job into a batch (after `batches::admit`, in the upload's
/// transaction); the batch's state follows its jobs by trigger from then on.
pub async fn join_batch(conn: &mut PgConnection, job: Uuid, batch: Uuid) -> sqlx::Result<()> {
    sqlx::query!("UPDATE jobs SET batch_id = $1 WHERE id = $2", batch, job)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn create(conn: &mut PgConnection, j: &NewJob) -> sqlx::Result<JobEvent> {
    sqlx::query!(
        "INSERT INTO jobs (id, tenant_id, document_id, queue, state, enqueued_at)
         VALUES ($1, $2, $3, $4, 'pending', $5)",
        j.id,
        j.tenant_id,
        j.document_id,
        j.queue as _,
        j.enqueued_at as _
    )
    .execute(&mut *conn)
    .await?;
    let event = state_change(
        conn,
        j.id,
        j.tenant_id,
        JobState::Pending,
        &app::format::queued_on(j.queue),
    )
    .await?;
    let msg = JobMessage {
        job_id: j.id,
        tenant_id: j.tenant_id,
        document_id: j.document_id,
        queue: j.queue,
        attempt: 1,
        enqueued_at: j.enqueued_at,
    };
    outbox::enqueue_job(conn, &msg, None).await?;
    Ok(event)
}

/// `pending` (or due `retrying`) → `processing` with a lease for `worker`,
/// in one statement that also starts the run's first step (the first
/// without a checkpoint) and writes the event "attempt N started" (a step
/// starting is no event of its own: its row in `job_steps` says so, and
/// the event before it, the claim's or the previous step's, announces it).
/// Returns the job, that event and that step (`None` when every step
/// already has its checkpoint). `None` when the job is
/// done, failed, leased, or not due, or when its queue is paused: the
/// pause is read in the claim's own statement, so no job starts once the
/// pause has committed, however long the workers take to notice it
/// ([`queue_paused`] tells the cases apart). An expired lease is not taken
/// over here: the sweeper counts it as a crash first.
pub async fn claim<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    job_id: Uuid,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<Option<(ClaimedJob, JobEvent, Option<Step>)>> {
    #[derive(sqlx::FromRow)]
    struct Claimed {
        #[sqlx(flatten)]
        job: ClaimedJob,
        first_step: Option<String>,
        event_id: i64,
        event_at: DateTime<Utc>,
    }
    let row: Option<Claimed> = sqlx::query_as(
        "WITH claimed AS (
             UPDATE jobs j SET state = 'processing', lease_owner = $2, lease_until = statement_timestamp() + $3 * interval '1 millisecond',
                 attempt = attempt + 1, started_at = coalesce(started_at, statement_timestamp()), next_attempt_at = NULL,
                 waiting_for = NULL, updated_at = statement_timestamp(),
                 current_step = (
                     SELECT s.step FROM unnest(ARRAY['parse', 'chunk', 'embed', 'store']) WITH ORDINALITY AS s(step, n)
                     WHERE NOT EXISTS (SELECT 1 FROM job_steps js
                                       WHERE js.job_id = j.id AND js.step = s.step AND js.state = 'done')
                     ORDER BY s.n LIMIT 1)
             WHERE id = $1
               AND (state = 'pending'
                    OR (state = 'retrying' AND next_attempt_at <= statement_timestamp() + interval '1 second'))
               AND NOT EXISTS (SELECT 1 FROM paused_queues p WHERE p.queue = j.queue)
             RETURNING id, tenant_id, document_id, queue, attempt, retries, enqueued_at, current_step),
         started AS (
             INSERT INTO job_steps (job_id, step, state, attempts, started_at)
             SELECT id, current_step, 'running', 1, statement_timestamp() FROM claimed WHERE current_step IS NOT NULL
             ON CONFLICT (job_id, step) DO UPDATE SET state = 'running', attempts = job_steps.attempts + 1,
                 started_at = statement_timestamp(), finished_at = NULL, error = NULL),
         ev AS (
             INSERT INTO job_events (job_id, tenant_id, state, step, message)
             SELECT id, tenant_id, 'processing'::job_state, NULL, format('attempt %s started', attempt) FROM claimed
             RETURNING id, at)
         SELECT c.id, c.tenant_id, c.document_id, d.uploaded_by, c.queue, c.attempt, c.retries, d.filename, d.content_type,
                d.blob_key, d.text_blob_key, c.enqueued_at, c.current_step AS first_step,
                ev.id AS event_id, ev.at AS event_at
         FROM claimed c JOIN documents d ON d.id = c.document_id CROSS JOIN ev",
    )
    .bind(job_id)
    .bind(worker)
    .bind(lease.as_millis() as i64)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let first = Step::ALL
            .into_iter()
            .find(|s| r.first_step.as_deref() == Some(s.as_str()));
        let message = format!("attempt {} started", r.job.attempt);
        let event = event_of(
            &r.job,
            r.event_id,
            r.event_at,
            JobState::Processing,
            None,
            None,
            message,
        );
        (r.job, event, first)
    }))
}

/// Whether the queue `job_id` belongs to is paused: why [`claim`] took
/// nothing, when it took nothing from a pending job.
pub async fn queue_paused(conn: impl sqlx::PgExecutor<'_>, job_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM jobs j JOIN paused_queues p ON p.queue = j.queue WHERE j.id = $1)
               AS "paused!""#,
        job_id
    )
    .fetch_one(conn)
    .await
}

/// What a step produced, written by the statement that ends the step, so
/// that the output, the checkpoint and the events commit together in one
/// round trip. Every write of the output is guarded by the lease like the
/// rest of the statement: a worker that lost the job writes nothing.
#[derive(Clone, Debug)]
pub enum Output {
    /// Written earlier in the step's own transaction, or nothing to write.
    None,
    /// `parse`: where the text is, and the page count when the format has pages.
    Text { key: String, pages: Option<i32> },
    /// `chunk`: the chunks, replacing those of an earlier run (which may
    /// have had more); the job's chunk count starts over. Shared with the
    /// `embed` step that follows in the same run.
    Chunks {
        texts: std::sync::Arc<[String]>,
        /// The PDF page each chunk starts on, from 1; `None` without pages.
        pages: Option<std::sync::Arc<[i32]>>,
    },
    /// `embed`'s last batch: `flat` holds one vector of `dim` numbers per
    /// chunk index, made by the model `model_id`; afterwards every chunk
    /// has its vector.
    Vectors {
        indexes: Vec<i32>,
        flat: Vec<f32>,
        dim: i32,
        model_id: i16,
    },
    /// `store`: the document is searchable.
    Indexed,
}

impl Output {
    /// `head` (a `WITH held AS (…)` list whose last CTE is `ev`, with
    /// `params` parameters) with this output's CTEs added, then the events.
    fn statement(&self, head: &str, params: usize) -> String {
        let cte = match self {
            Output::None => "",
            Output::Text { .. } => {
                ", text AS (
                 UPDATE documents SET text_blob_key = #2, pages = coalesce(#3, pages)
                 WHERE id = #1 AND EXISTS (SELECT 1 FROM held))"
            }
            Output::Chunks { .. } => {
                ", stale AS (
                 DELETE FROM chunks WHERE document_id = #1 AND chunk_index >= cardinality(#3::text[])
                     AND EXISTS (SELECT 1 FROM held)),
               chunked AS (
                 INSERT INTO chunks (document_id, tenant_id, chunk_index, text, page)
                 SELECT #1, #2, c.n - 1, c.t, (#4::int[])[c.n]
                 FROM unnest(#3::text[]) WITH ORDINALITY AS c(t, n)
                 WHERE EXISTS (SELECT 1 FROM held)
                 ON CONFLICT (document_id, chunk_index)
                 DO UPDATE SET text = EXCLUDED.text, page = EXCLUDED.page, embedding = NULL,
                     model_id = NULL)"
            }
            Output::Vectors { .. } => {
                ", stored AS (
                 UPDATE chunks c SET embedding = ((#3::real[])[(v.n - 1) * #4 + 1 : v.n * #4])::vector,
                     model_id = #5
                 FROM unnest(#2::int[]) WITH ORDINALITY AS v(i, n)
                 WHERE c.document_id = #1 AND c.chunk_index = v.i AND c.embedding IS NULL
                     AND EXISTS (SELECT 1 FROM held))"
            }
            Output::Indexed => {
                ", indexed AS (
                 UPDATE documents SET indexed_at = statement_timestamp() WHERE id = #1 AND EXISTS (SELECT 1 FROM held))"
            }
        };
        let mut cte = cte.to_string();
        for n in (1..=5).rev() {
            cte = cte.replace(&format!("#{n}"), &format!("${}", params + n));
        }
        format!("{head}{cte}\n SELECT id, at FROM ev ORDER BY id")
    }

    /// Binds this output's parameters after the statement's own.
    fn bind<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
        job: &ClaimedJob,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match self {
            Output::None => query,
            Output::Text { key, pages } => query.bind(job.document_id).bind(key).bind(*pages),
            Output::Chunks { texts, pages } => query
                .bind(job.document_id)
                .bind(job.tenant_id)
                .bind(&texts[..])
                .bind(pages.as_deref()),
            Output::Vectors {
                indexes,
                flat,
                dim,
                model_id,
            } => query
                .bind(job.document_id)
                .bind(indexes)
                .bind(flat)
                .bind(*dim)
                .bind(*model_id),
            Output::Indexed => query.bind(job.document_id),
        }
    }
}

/// Ends `step` of a job this worker holds and starts the next, in one
/// statement: the step's `output`, its checkpoint, its event `message`
/// (with `progress`), the next step `running` and the job's
/// `current_step`. After `store` the job is done instead:
/// its state, the event and the uploader's inbox entry. Guarded by the
/// lease: `None` (and nothing written) when `worker` no longer holds the
/// job.
pub async fn step_done<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    progress: Option<(i32, i32)>,
    message: &str,
    output: &Output,
) -> sqlx::Result<Option<Vec<JobEvent>>> {
    let (done, total) = (progress.map(|p| p.0), progress.map(|p| p.1));
    let Some(next) = step.next() else {
        return last_step_done(conn, job, worker, step, progress, message, output).await;
    };
    // New chunks start the embedded count over; the last batch of vectors
    // leaves every chunk embedded.
    let (chunks_total, chunks_embedded) = match &output {
        Output::Chunks { texts, .. } => (
            Some(i32::try_from(texts.len()).unwrap_or(i32::MAX)),
            Some(0),
        ),
        Output::Vectors { .. } => (None, done),
        _ => (None, None),
    };
    let sql = output.statement(
        "WITH held AS (
             UPDATE jobs SET current_step = $4, updated_at = statement_timestamp(),
                 chunks_total = coalesce($8, chunks_total),
                 chunks_embedded = coalesce($9, chunks_embedded)
             WHERE id = $1 AND state = 'processing' AND lease_owner = $2
             RETURNING id, tenant_id),
         checkpoint AS (
             UPDATE job_steps SET state = 'done', finished_at = statement_timestamp(), error = NULL,
                 duration_ms = (extract(epoch FROM statement_timestamp() - started_at) * 1000)::bigint
             WHERE job_id = (SELECT id FROM held) AND step = $3),
         started AS (
             INSERT INTO job_steps (job_id, step, state, attempts, started_at)
             SELECT id, $4, 'running', 1, statement_timestamp() FROM held
             ON CONFLICT (job_id, step) DO UPDATE SET state = 'running', attempts = job_steps.attempts + 1,
                 started_at = statement_timestamp(), finished_at = NULL, error = NULL),
         ev AS (
             INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
             SELECT id, tenant_id, 'processing', $3::text, $5::int, $6::int, $7::text FROM held
             RETURNING id, at)",
        9,
    );
    let query = sqlx::query_as(&sql)
        .bind(job.id)
        .bind(worker)
        .bind(step.as_str())
        .bind(next.as_str())
        .bind(done)
        .bind(total)
        .bind(message)
        .bind(chunks_total)
        .bind(chunks_embedded);
    let rows: Vec<(i64, DateTime<Utc>)> = output.bind(query, job).fetch_all(conn).await?;
    let [(id, at)] = rows[..] else {
        return Ok(None);
    };
    Ok(Some(vec![event_of(
        job,
        id,
        at,
        JobState::Processing,
        Some(step),
        progress,
        message.to_string(),
    )]))
}

/// The last step's end: its output, its checkpoint, the job `done`, both
/// events and the inbox entry, in one statement.
async fn last_step_done<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    progress: Option<(i32, i32)>,
    message: &str,
    output: &Output,
) -> sqlx::Result<Option<Vec<JobEvent>>> {
    let notification = inbox_entry(&job.into(), Ended::Done);
    let sql = output.statement(
        "WITH held AS (
             UPDATE jobs SET state = 'done', finished_at = statement_timestamp(), lease_owner = NULL, lease_until = NULL,
                 current_step = NULL, last_error = NULL, updated_at = statement_timestamp()
             WHERE id = $1 AND state = 'processing' AND lease_owner = $2
             RETURNING id, tenant_id),
         checkpoint AS (
             UPDATE job_steps SET state = 'done', finished_at = statement_timestamp(), error = NULL,
                 duration_ms = (extract(epoch FROM statement_timestamp() - started_at) * 1000)::bigint
             WHERE job_id = (SELECT id FROM held) AND step = $3),
         inbox AS (
             INSERT INTO notifications (id, user_id, job_id, kind, title, body, link)
             SELECT $8, $9, id, 'job_done', $10, $11, $12 FROM held),
         ev AS (
             INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
             SELECT f.id, f.tenant_id, e.state::job_state, e.step, e.done, e.total, e.message
             FROM held f,
                  (VALUES (1, 'processing', $3::text, $4::int, $5::int, $6::text), (2, 'done', NULL, NULL, NULL, $7::text))
                      AS e(n, state, step, done, total, message)
             ORDER BY e.n
             RETURNING id, at)",
        12,
    );
    let query = sqlx::query_as(&sql)
        .bind(job.id)
        .bind(worker)
        .bind(step.as_str())
        .bind(progress.map(|p| p.0))
        .bind(progress.map(|p| p.1))
        .bind(message)
        .bind(DONE)
        .bind(notification.id)
        .bind(job.uploaded_by)
        .bind(&notification.title)
        .bind(&notification.body)
        .bind(&notification.link);
    let rows: Vec<(i64, DateTime<Utc>)> = output.bind(query, job).fetch_all(conn).await?;
    let [(step_id, step_at), (done_id, done_at)] = rows[..] else {
        return Ok(None);
    };
    let mut done = event_of(
        job,
        done_id,
        done_at,
        JobState::Done,
        None,
        None,
        DONE.into(),
    );
    done.notification = Some(notification);
    Ok(Some(vec![
        event_of(
            job,
            step_id,
            step_at,
            JobState::Processing,
            Some(step),
            progress,
            message.into(),
        ),
        done,
    ]))
}

/// The event to publish for a `job_events` row written about `job`.
fn event_of(
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

/// Extends the lease of a job `worker` holds; `false` when it holds it no more.
pub async fn renew(
    pool: &PgPool,
    job_id: Uuid,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE jobs SET lease_until = now() + $3 * interval '1 millisecond'
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        job_id,
        worker,
        lease.as_millis() as f64
    )
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Locks the job's row for the rest of the transaction if `worker` holds
/// its lease; `false` when it does not.
pub async fn hold(conn: &mut PgConnection, job_id: Uuid, worker: &str) -> sqlx::Result<bool> {
    let held = sqlx::query_scalar!(
        "SELECT id FROM jobs WHERE id = $1 AND state = 'processing' AND lease_owner = $2 FOR UPDATE",
        job_id,
        worker
    )
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

// ---------------------------------------------------------------------------
// Progress columns (not the state): kept here so that only this module
// updates `jobs` at all.
// ---------------------------------------------------------------------------

/// Stores one batch of vectors of the model `model_id` (`flat` holds `dim`
/// values per chunk of `indexes`, in order) and counts them into the job's progress, in one
/// statement. Guarded by the lease: `None` when `worker` no longer holds the
/// job (the caller rolls back).
pub async fn store_vectors(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    indexes: &[i32],
    flat: &[f32],
    dim: i32,
    model_id: i16,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar!(
        "WITH stored AS (
             UPDATE chunks c SET embedding = (($4::real[])[(v.n - 1) * $5 + 1 : v.n * $5])::vector,
                 model_id = $7
             FROM unnest($3::int[]) WITH ORDINALITY AS v(i, n)
             WHERE c.document_id = $2 AND c.chunk_index = v.i AND c.embedding IS NULL
             RETURNING 1)
         UPDATE jobs SET chunks_embedded = chunks_embedded + (SELECT count(*) FROM stored)
         WHERE id = $1 AND state = 'processing' AND lease_owner = $6
         RETURNING chunks_embedded",
        job.id,
        job.document_id,
        indexes,
        flat,
        i64::from(dim),
        worker,
        model_id
    )
    .fetch_optional(conn)
    .await
}

/// Recounts the embedded chunks of a job `worker` holds; `None` when it
/// holds it no more.
pub async fn count_embedded(
    conn: &mut PgConnection,
    job_id: Uuid,
    document_id: Uuid,
    worker: &str,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar!(
        "UPDATE jobs SET chunks_embedded = (SELECT count(*) FROM chunks WHERE document_id = $2 AND embedding IS NOT NULL)
         WHERE id = $1 AND state = 'processing' AND lease_owner = $3 RETURNING chunks_embedded",
        job_id,
        document_id,
        worker
    )
    .fetch_optional(conn)
    .await
}

// ---------------------------------------------------------------------------
// The end of a run (guarded by the lease)
// ---------------------------------------------------------------------------

/// `processing` → `done`, with its event and inbox entry.
pub async fn complete(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let r = sqlx::query!(
        "UPDATE jobs SET state = 'done', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             current_step = NULL, last_error = NULL, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        job.id,
        worker
    )
    .execute(&mut *conn)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(None);
    }
    let mut ev = record(conn, job, JobState::Done, None, None, DONE).await?;
    ev.notification = notify(conn, job.into(), Ended::Done).await?;
    Ok(Some(ev))
}

/// Marks the step that ended the run.
async fn end_step(
    conn: &mut PgConnection,
    job_id: Uuid,
    step: Step,
    state: &str,
    error: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_steps SET state = $3, error = $4, finished_at = now(),
             duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint
         WHERE job_id = $1 AND step = $2",
        job_id,
        step.as_str() as _,
        state as _,
        error
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A run that does not count as an attempt does not count as a start of
/// its step either, so the step's attempts stay within the job's.
async fn uncount_step(conn: &mut PgConnection, job_id: Uuid, step: Step) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_steps SET attempts = greatest(attempts - 1, 0) WHERE job_id = $1 AND step = $2",
        job_id,
        step.as_str() as _
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// `processing` → `retrying`: the document's own transient failure spends
/// retry number `retry`; the outbox re-publishes the job after `delay`.
pub async fn retry(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    error: &str,
    retry: i32,
    delay: Duration,
) -> sqlx::Result<Option<JobEvent>> {
    let due = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
    let r = sqlx::query!(
        "UPDATE jobs SET state = 'retrying', lease_owner = NULL, lease_until = NULL, next_attempt_at = $3,
             retries = $4, last_error = $5, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        job.id,
        worker,
        due as _,
        retry as _,
        format!("{step}: {error}")
    )
    .execute(&mut *conn)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(None);
    }
    end_step(conn, job.id, step, "failed", Some(error)).await?;
    outbox::enqueue_job(conn, &job.next_attempt(), Some(due)).await?;
    let text = format!(
        "{step} failed: {error}; retry {retry} in {:.1} s",
        delay.as_secs_f64()
    );
    record(conn, job, JobState::Retrying, Some(step), None, &text)
        .await
        .map(Some)
}

/// `processing` → `retrying` without spending anything: a dependency is
/// down (`dependency` names its breaker) or asked to wait. The run does not
/// count as an attempt; the step goes back to `pending` with its progress
/// kept, and the outbox re-publishes the job at `until` (or earlier, when
/// the breaker closes: [`resume_waiting`]).
#[allow(clippy::too_many_arguments)]
pub async fn wait(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    dependency: Option<&str>,
    reason: &str,
    until: DateTime<Utc>,
) -> sqlx::Result<Option<JobEvent>> {
    let msg = returning_message!(
        "UPDATE jobs SET state = 'retrying', lease_owner = NULL, lease_until = NULL, next_attempt_at = $3,
             waiting_for = $4, attempt = greatest(attempt - 1, 0), last_error = $5, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        "attempt + 1",
        job.id,
        worker,
        until as _,
        dependency,
        reason
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(msg) = msg else { return Ok(None) };
    end_step(conn, job.id, step, "pending", None).await?;
    uncount_step(conn, job.id, step).await?;
    outbox::enqueue_job(conn, &msg, Some(until)).await?;
    let text = format!("{reason}; the job waits without spending its retries");
    record(conn, job, JobState::Retrying, Some(step), None, &text)
        .await
        .map(Some)
}

/// `processing` → `failed`, with its dead letter, event and inbox entry in
/// the same transaction: no failed job is ever without its dead letter.
pub async fn fail(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    kind: FailureKind,
    error: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let last_error = format!("{step}: {error}");
    let msg = returning_message!(
        "UPDATE jobs SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             failure_kind = $3, last_error = $4, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        "attempt",
        job.id,
        worker,
        kind.as_str() as _,
        &last_error
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(msg) = msg else { return Ok(None) };
    end_step(conn, job.id, step, "failed", Some(error)).await?;
    dead_letter_for(conn, &msg, kind.as_str(), &last_error).await?;
    let text = match kind {
        FailureKind::Exhausted => {
            format!("failed at {step} after {} attempts: {error}", job.attempt)
        }
        _ => format!("failed at {step}: {error}"),
    };
    let mut ev = record(conn, job, JobState::Failed, Some(step), None, &text).await?;
    ev.notification = notify(conn, job.into(), Ended::Failed(&text)).await?;
    Ok(Some(ev))
}

/// `processing` → `pending`, untouched (the worker is shutting down): the
/// run does not count, checkpoints stay, the running step is `pending`
/// again. The delivery is requeued by the worker, so no outbox row.
pub async fn release(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let r = sqlx::query!(
        "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_until = NULL,
             attempt = greatest(attempt - 1, 0), updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        job.id,
        worker
    )
    .execute(&mut *conn)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(None);
    }
    // Like the job's attempt, the step's start does not count.
    let step = sqlx::query_scalar!(
        r#"UPDATE job_steps SET state = 'pending', attempts = greatest(attempts - 1, 0)
           WHERE job_id = $1 AND state = 'running' RETURNING step AS "step: String""#,
        job.id
    )
    .fetch_optional(&mut *conn)
    .await?;
    let step = Step::ALL
        .into_iter()
        .find(|s| step.as_deref() == Some(s.as_str()));
    record(
        conn,
        job,
        JobState::Pending,
        step,
        None,
        "worker shutting down; the job will resume",
    )
    .await
    .map(Some)
}

/// `processing` → `pending` on another queue (a long document to `slow`),
/// its checkpoints kept and its message re-published there. The run ends
/// without a failure: it does not count as an attempt.
pub async fn hand_over(
    conn: &mut PgConnection,
    job_id: Uuid,
    worker: &str,
    to: Tier,
    why: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let msg = returning_message!(
        "UPDATE jobs SET queue = $3, state = 'pending', lease_owner = NULL, lease_until = NULL,
             attempt = greatest(attempt - 1, 0), current_step = NULL, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        "attempt + 1",
        job_id,
        worker,
        to as _
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(msg) = msg else { return Ok(None) };
    outbox::enqueue_job(conn, &msg, None).await?;
    state_change(
        conn,
        job_id,
        msg.tenant_id,
        JobState::Pending,
        &app::format::handed_over(why, to),
    )
    .await
    .map(Some)
}

// ---------------------------------------------------------------------------
// Transitions made by others: sweeper, keeper, admins, breakers
// ---------------------------------------------------------------------------

/// A job whose worker died once too often.
#[derive(sqlx::FromRow)]
struct CrashedJob {
    #[sqlx(flatten)]
    msg: JobMessage,
    step: String,
    last_error: String,
    uploaded_by: Uuid,
    filename: String,
}

/// Expired leases (the worker died without the broker noticing), each a
/// crash of its job. Below `max_crashes` the job goes back to `pending` and
/// is re-published; at `max_crashes` it is a poison pill: failed as
/// `crashed`, dead-lettered, never claimed again. Rows are taken with
/// `SKIP LOCKED`, so every process may sweep. Returns the events to publish.
pub async fn expire_leases(pool: &PgPool, max_crashes: i32) -> sqlx::Result<Vec<JobEvent>> {
    let mut tx = pool.begin().await?;
    let mut events = Vec::new();
    let crashed: Vec<CrashedJob> = sqlx::query_as(
        "UPDATE jobs j SET state = 'failed', crashes = j.crashes + 1, lease_owner = NULL, lease_until = NULL,
             finished_at = now(), failure_kind = 'crashed', next_attempt_at = NULL, updated_at = now(),
             last_error = format('%s: the worker processing this document stopped %s times while on it, so it is not tried again automatically',
                                 coalesce(j.current_step, 'parse'), j.crashes + 1)
         FROM documents d
         WHERE d.id = j.document_id
           AND j.id IN (SELECT id FROM jobs WHERE state = 'processing' AND lease_until < now() AND crashes + 1 >= $1
                        ORDER BY lease_until LIMIT 500 FOR UPDATE SKIP LOCKED)
         RETURNING j.id AS job_id, j.tenant_id, j.document_id, j.queue, j.attempt, j.enqueued_at,
                   coalesce(j.current_step, 'parse') AS step, j.last_error, d.uploaded_by, d.filename",
    )
    .bind(max_crashes)
    .fetch_all(&mut *tx)
    .await?;
    for job in &crashed {
        sqlx::query(
            "UPDATE job_steps SET state = 'failed', error = $2, finished_at = now()
             WHERE job_id = $1 AND state = 'running'",
        )
        .bind(job.msg.job_id)
        .bind(&job.last_error)
        .execute(&mut *tx)
        .await?;
        // No message of the job reaches docflow.dead (the broker handed it
        // back when its worker's connection died), so the row is written here.
        dead_letter_for(
            &mut tx,
            &job.msg,
            FailureKind::Crashed.as_str(),
            &job.last_error,
        )
        .await?;
        let text = format!("failed at {}", job.last_error);
        let mut ev = state_change(
            &mut tx,
            job.msg.job_id,
            job.msg.tenant_id,
            JobState::Failed,
            &text,
        )
        .await?;
        ev.notification = notify(
            &mut tx,
            Finished {
                job_id: job.msg.job_id,
                uploaded_by: job.uploaded_by,
                filename: &job.filename,
            },
            Ended::Failed(&text),
        )
        .await?;
        tracing::error!(job_id = %job.msg.job_id, step = %job.step, "job crashed its worker too often; dead-lettered as crashed");
        events.push(ev);
    }
    // Each other expired job goes out again as its next attempt.
    let expired = returning_message!(
        "UPDATE jobs SET state = 'pending', crashes = crashes + 1, lease_owner = NULL, lease_until = NULL, updated_at = now()
         WHERE id IN (SELECT id FROM jobs WHERE state = 'processing' AND lease_until < now()
                      ORDER BY lease_until LIMIT 500 FOR UPDATE SKIP LOCKED)",
        "attempt + 1"
    )
    .fetch_all(&mut *tx)
    .await?;
    for msg in &expired {
        sqlx::query!(
            "UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state = 'running'",
            msg.job_id
        )
        .execute(&mut *tx)
        .await?;
        events.push(
            state_change(
                &mut tx,
                msg.job_id,
                msg.tenant_id,
                JobState::Pending,
                "worker lost while running the job (counted as a crash); the job was re-queued",
            )
            .await?,
        );
        outbox::enqueue_job(&mut tx, msg, None).await?;
    }
    tx.commit().await?;
    Ok(events)
}

/// What RabbitMQ dead-lettered on its own (delivery limit, TTL), for a
/// job no live worker holds.
pub struct BrokerDeath<'a> {
    pub job_id: Uuid,
    /// `delivery_limit`, `expired`, …
    pub reason: &'a str,
    pub deliveries: i64,
    pub queue: &'a str,
    pub payload: &'a str,
}

/// `pending`, `retrying`, or `processing` with an expired lease → `failed`,
/// because RabbitMQ itself dead-lettered the job's message. A job that is
/// done, failed, or held by a live worker is left alone (`None`): its
/// message was a stale copy.
pub async fn dead_by_broker(
    conn: &mut PgConnection,
    d: &BrokerDeath<'_>,
) -> sqlx::Result<Option<JobEvent>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        tenant_id: Uuid,
        attempt: i32,
        uploaded_by: Uuid,
        filename: String,
    }
    let error = format!(
        "RabbitMQ dead-lettered the message ({}) after {} deliveries",
        d.reason,
        d.deliveries.max(1)
    );
    let row: Option<Row> = sqlx::query_as(
        "UPDATE jobs j SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             next_attempt_at = NULL, waiting_for = NULL, failure_kind = 'permanent', last_error = $2, updated_at = now()
         FROM documents doc
         WHERE j.id = $1 AND doc.id = j.document_id
           AND (j.state IN ('pending', 'retrying') OR (j.state = 'processing' AND j.lease_until < now()))
         RETURNING j.tenant_id, j.attempt, doc.uploaded_by, doc.filename",
    )
    .bind(d.job_id)
    .bind(&error)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    sqlx::query(
        "UPDATE job_steps SET state = 'failed', error = $2, finished_at = now()
         WHERE job_id = $1 AND state = 'running'",
    )
    .bind(d.job_id)
    .bind(&error)
    .execute(&mut *conn)
    .await?;
    insert_dead_letter(
        conn,
        &NewDeadLetter {
            job_id: Some(d.job_id),
            tenant_id: Some(row.tenant_id),
            queue: d.queue,
            reason: d.reason,
            error: &error,
            attempts: row.attempt,
            payload: d.payload,
        },
    )
    .await?;
    let mut ev = state_change(conn, d.job_id, row.tenant_id, JobState::Failed, &error).await?;
    ev.notification = notify(
        conn,
        Finished {
            job_id: d.job_id,
            uploaded_by: row.uploaded_by,
            filename: &row.filename,
        },
        Ended::Failed(&error),
    )
    .await?;
    Ok(Some(ev))
}

/// `failed` → `pending` (an admin re-enqueues it, or its user retries
/// it): its retry budget (retries spent, crashes) reset, checkpoints kept,
/// failed steps `pending` again, an outbox row; `message` says who acted,
/// in the tenant's words. `attempt` counts on, so the next run is "attempt
/// N + 1" on the job page, in its steps and in a later dead letter alike.
/// `None` when the job is not failed.
pub async fn requeue(
    conn: &mut PgConnection,
    job_id: Uuid,
    message: &str,
) -> sqlx::Result<Option<(JobMessage, JobEvent)>> {
    let msg = returning_message!(
        "UPDATE jobs SET state = 'pending', retries = 0, crashes = 0, finished_at = NULL, failure_kind = NULL,
             last_error = NULL, next_attempt_at = NULL, current_step = NULL, updated_at = now()
         WHERE id = $1 AND state = 'failed'",
        "attempt + 1",
        job_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(msg) = msg else { return Ok(None) };
    sqlx::query!(
        "UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state IN ('failed', 'running')",
        job_id
    )
    .execute(&mut *conn)
        .await?;
    let event = state_change(conn, job_id, msg.tenant_id, JobState::Pending, message).await?;
    outbox::enqueue_job(conn, &msg, None).await?;
    Ok(Some((msg, event)))
}

/// `retrying` → `pending` now (retry now, skipping the wait): the unsent
/// outbox row that would re-publish it later is due at once. Retries spent
/// stay spent. `None` when the job is not retrying.
pub async fn retry_now(
    conn: &mut PgConnection,
    job_id: Uuid,
    message: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let tenant: Option<Uuid> = sqlx::query_scalar(
        "UPDATE jobs SET state = 'pending', next_attempt_at = NULL, waiting_for = NULL, updated_at = now()
         WHERE id = $1 AND state = 'retrying' RETURNING tenant_id",
    )
    .bind(job_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(tenant) = tenant else {
        return Ok(None);
    };
    sqlx::query("UPDATE outbox SET available_at = now() WHERE sent_at IS NULL AND job_id = $1")
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    state_change(conn, job_id, tenant, JobState::Pending, message)
        .await
        .map(Some)
}

/// `pending`, `retrying` or `processing` → `cancelled` (by its user or an
/// administrator; `message` says which): the lease dropped, a running step
/// back to `pending`, its unsent messages withdrawn, and the document's
/// partial chunks removed. A worker running it finds at its next guarded
/// write (between steps, between embedding batches) that the job is no
/// longer its own, and stops; a message still queued is skipped by the
/// claim. `None` when the job is not unfinished. `by` is the user who
/// cancelled it (`None` when its document was deleted): when that is not
/// its uploader, the uploader finds a notice in the inbox that says who and
/// where it stopped.
pub async fn cancel(
    conn: &mut PgConnection,
    job_id: Uuid,
    message: &str,
    by: Option<Uuid>,
) -> sqlx::Result<Option<JobEvent>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        tenant_id: Uuid,
        document_id: Uuid,
        current_step: Option<String>,
        uploaded_by: Uuid,
        filename: String,
    }
    let row: Option<Row> = sqlx::query_as(
        "UPDATE jobs j SET state = 'cancelled', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             next_attempt_at = NULL, waiting_for = NULL, updated_at = now()
         FROM documents d
         WHERE j.id = $1 AND j.state IN ('pending', 'retrying', 'processing') AND d.id = j.document_id
         RETURNING j.tenant_id, j.document_id, j.current_step, d.uploaded_by, d.filename",
    )
    .bind(job_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    sqlx::query("UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state = 'running'")
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM outbox WHERE sent_at IS NULL AND job_id = $1")
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM chunks WHERE document_id = $1")
        .bind(row.document_id)
        .execute(&mut *conn)
        .await?;
    let mut ev = state_change(conn, job_id, row.tenant_id, JobState::Cancelled, message).await?;
    if by.is_some_and(|by| by != row.uploaded_by) {
        let job = Finished {
            job_id,
            uploaded_by: row.uploaded_by,
            filename: &row.filename,
        };
        let at = row.current_step.as_deref();
        ev.user_id = Some(row.uploaded_by);
        ev.notification = notify(conn, job, Ended::Cancelled { message, at }).await?;
    }
    Ok(Some(ev))
}

/// Jobs waiting for `dependency` are due now (its breaker closed): their
/// `next_attempt_at` and their unsent outbox rows move to now. The state
/// stays `retrying` until a worker claims them. Returns how many.
pub async fn resume_waiting(pool: &PgPool, dependency: &str) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE jobs SET next_attempt_at = now(), updated_at = now()
         WHERE state = 'retrying' AND waiting_for = $1 AND next_attempt_at > now()
         RETURNING id",
    )
    .bind(dependency)
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query("UPDATE outbox SET available_at = now() WHERE sent_at IS NULL AND job_id = ANY($1) AND available_at > now()")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(ids.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAYS: [Duration; 3] = [
        Duration::from_secs(1),
        Duration::from_secs(4),
        Duration::from_secs(16),
    ];

    fn now() -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::days(20_000)
    }

    fn budget(spent: i32) -> Budget<'static> {
        Budget {
            spent,
            delays: &DELAYS,
        }
    }

    /// Every fault a run can end with, and success.
    fn ends() -> Vec<Result<(), Fault>> {
        vec![
            Ok(()),
            Err(Fault::Permanent),
            Err(Fault::Transient),
            Err(Fault::RetryAfter(Duration::from_secs(2))),
            Err(Fault::Unavailable {
                until: now() + chrono::Duration::seconds(8),
            }),
            Err(Fault::Shutdown),
            Err(Fault::LeaseLost),
        ]
    }

    #[test]
    fn a_job_this_worker_no_longer_holds_is_never_touched() {
        for state in JobState::ALL {
            for end in ends() {
                for spent in 0..=4 {
                    // Under another worker's lease (or none), in any state.
                    assert_eq!(
                        decide(
                            state,
                            false,
                            end.as_ref().map(|_| ()),
                            budget(spent),
                            1.0,
                            now()
                        ),
                        Decision::Abandon,
                        "{state:?} {end:?} {spent}"
                    );
                    // Not processing at all.
                    if state != JobState::Processing {
                        assert_eq!(
                            decide(
                                state,
                                true,
                                end.as_ref().map(|_| ()),
                                budget(spent),
                                1.0,
                                now()
                            ),
                            Decision::Abandon,
                            "{state:?} {end:?} {spent}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_held_job_ends_by_its_fault_and_budget() {
        let at = |s: i64| now() + chrono::Duration::seconds(s);
        for spent in 0..=4 {
            for end in ends() {
                let got = decide(
                    JobState::Processing,
                    true,
                    end.as_ref().map(|_| ()),
                    budget(spent),
                    1.0,
                    now(),
                );
                let want = match &end {
                    Ok(()) => Decision::Done,
                    Err(Fault::Permanent) => Decision::Fail(FailureKind::Permanent),
                    // The document's own transient failure spends the budget.
                    Err(Fault::Transient) => match spent {
                        0 => Decision::Retry {
                            retry: 1,
                            delay: DELAYS[0],
                        },
                        1 => Decision::Retry {
                            retry: 2,
                            delay: DELAYS[1],
                        },
                        2 => Decision::Retry {
                            retry: 3,
                            delay: DELAYS[2],
                        },
                        _ => Decision::Fail(FailureKind::Exhausted),
                    },
                    // A dependency's trouble spends nothing, whatever was spent.
                    Err(Fault::RetryAfter(_)) => Decision::Wait { until: at(2) },
                    Err(Fault::Unavailable { .. }) => Decision::Wait { until: at(8) },
                    Err(Fault::Shutdown) => Decision::Release,
                    Err(Fault::LeaseLost) => Decision::Abandon,
                };
                assert_eq!(got, want, "spent {spent}, {end:?}");
            }
        }
    }

    #[test]
    fn jitter_scales_the_delay_and_a_past_probe_time_means_now() {
        let d = decide(
            JobState::Processing,
            true,
            Err(&Fault::Transient),
            budget(1),
            1.2,
            now(),
        );
        assert_eq!(
            d,
            Decision::Retry {
                retry: 2,
                delay: Duration::from_millis(4800)
            }
        );
        let late = Fault::Unavailable {
            until: now() - chrono::Duration::seconds(5),
        };
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&late),
                budget(0),
                1.0,
                now()
            ),
            Decision::Wait { until: now() }
        );
        // A Retry-After beyond any date still decides (a day from now).
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&Fault::RetryAfter(Duration::MAX)),
                budget(0),
                1.0,
                now()
            ),
            Decision::Wait {
                until: now() + chrono::Duration::days(1)
            }
        );
        // No delays configured: the first transient failure is final.
        let none = Budget {
            spent: 0,
            delays: &[],
        };
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&Fault::Transient),
                none,
                1.0,
                now()
            ),
            Decision::Fail(FailureKind::Exhausted)
        );
    }

    /// `grep` for the rule: outside `server/src/jobs/`, no source file
    /// updates or inserts into `jobs` (so none writes its state).
    #[test]
    fn only_the_jobs_module_writes_jobs() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let jobs_dir = src.join("jobs");
        let mut offenders = Vec::new();
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    if path != jobs_dir {
                        stack.push(path);
                    }
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("read file");
                let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
                for pattern in [
                    "UPDATE jobs ",
                    "UPDATE jobs\"",
                    "INSERT INTO jobs ",
                    "INSERT INTO jobs(",
                ] {
                    if flat.contains(pattern) {
                        offenders.push(format!("{}: {pattern}", path.display()));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "jobs written outside jobs/: {offenders:?}"
        );
    }
}
