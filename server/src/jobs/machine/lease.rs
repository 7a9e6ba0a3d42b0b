//! The transitions the worker holding a job's lease makes: claim, renew,
//! a step's end with its output and checkpoint, progress, and the run's end
//! (done, retry, wait, fail, release, hand-over). Each is guarded by the
//! lease: a worker that lost the job changes nothing.

use std::time::Duration;

use app::dto::FailureCode;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::*;
use crate::jobs::{events::JobEvent, outbox, returning_message, ClaimedJob, JobState, Step, Tier};

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
    /// Appends this output's CTEs (after the statement's own, the last of
    /// which is `ev`; each guarded by `held`), then the events' select.
    fn push_ctes<'q>(&'q self, q: &mut QueryBuilder<'q, Postgres>, job: &ClaimedJob) {
        match self {
            Output::None => {}
            Output::Text { key, pages } => {
                q.push(", text AS (UPDATE documents SET text_blob_key = ")
                    .push_bind(key)
                    .push(", pages = coalesce(")
                    .push_bind(*pages)
                    .push(", pages) WHERE id = ")
                    .push_bind(job.document_id)
                    .push(" AND EXISTS (SELECT 1 FROM held))");
            }
            Output::Chunks { texts, pages } => {
                let count = i32::try_from(texts.len()).unwrap_or(i32::MAX);
                q.push(", stale AS (DELETE FROM chunks WHERE document_id = ")
                    .push_bind(job.document_id)
                    .push(" AND chunk_index >= ")
                    .push_bind(count)
                    .push(" AND EXISTS (SELECT 1 FROM held)), chunked AS (")
                    .push("INSERT INTO chunks (document_id, tenant_id, chunk_index, text, page) SELECT ")
                    .push_bind(job.document_id)
                    .push(", ")
                    .push_bind(job.tenant_id)
                    .push(", c.n - 1, c.t, (")
                    .push_bind(pages.as_deref())
                    .push("::int[])[c.n] FROM unnest(")
                    .push_bind(&texts[..])
                    .push(
                        "::text[]) WITH ORDINALITY AS c(t, n) WHERE EXISTS (SELECT 1 FROM held)
                         ON CONFLICT (document_id, chunk_index)
                         DO UPDATE SET text = EXCLUDED.text, page = EXCLUDED.page, embedding = NULL,
                             model_id = NULL)",
                    );
            }
            Output::Vectors {
                indexes,
                flat,
                dim,
                model_id,
            } => {
                q.push(", stored AS (UPDATE chunks c SET embedding = ((")
                    .push_bind(flat)
                    .push("::real[])[(v.n - 1) * ")
                    .push_bind(*dim)
                    .push(" + 1 : v.n * ")
                    .push_bind(*dim)
                    .push("])::vector, model_id = ")
                    .push_bind(*model_id)
                    .push(" FROM unnest(")
                    .push_bind(indexes)
                    .push("::int[]) WITH ORDINALITY AS v(i, n) WHERE c.document_id = ")
                    .push_bind(job.document_id)
                    .push(
                        " AND c.chunk_index = v.i AND c.embedding IS NULL
                         AND EXISTS (SELECT 1 FROM held))",
                    );
            }
            Output::Indexed => {
                q.push(", indexed AS (UPDATE documents SET indexed_at = statement_timestamp() WHERE id = ")
                    .push_bind(job.document_id)
                    .push(" AND EXISTS (SELECT 1 FROM held))");
            }
        }
        q.push(" SELECT id, at FROM ev ORDER BY id");
    }
}

/// Ends the `held` CTE of a step's end (the job's row, updated only while
/// `worker` holds its lease) and adds `checkpoint`, the step done with its
/// duration.
fn push_held_checkpoint<'q>(
    q: &mut QueryBuilder<'q, Postgres>,
    job: &ClaimedJob,
    worker: &'q str,
    step: Step,
) {
    q.push(" WHERE id = ")
        .push_bind(job.id)
        .push(" AND state = 'processing' AND lease_owner = ")
        .push_bind(worker)
        .push(
            " RETURNING id, tenant_id),
         checkpoint AS (
             UPDATE job_steps SET state = 'done', finished_at = statement_timestamp(), error = NULL,
                 duration_ms = (extract(epoch FROM statement_timestamp() - started_at) * 1000)::bigint
             WHERE job_id = (SELECT id FROM held) AND step = ",
        )
        .push_bind(step.as_str());
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
    // A parsed document's pages are all read.
    let pages = match &output {
        Output::Text { pages, .. } => *pages,
        _ => None,
    };
    let mut q = QueryBuilder::new("WITH held AS (UPDATE jobs SET current_step = ");
    q.push_bind(next.as_str())
        .push(", updated_at = statement_timestamp(), chunks_total = coalesce(")
        .push_bind(chunks_total)
        .push(", chunks_total), chunks_embedded = coalesce(")
        .push_bind(chunks_embedded)
        .push(", chunks_embedded), pages_parsed = coalesce(")
        .push_bind(pages)
        .push(", pages_parsed), pages_total = coalesce(")
        .push_bind(pages)
        .push(", pages_total)");
    push_held_checkpoint(&mut q, job, worker, step);
    q.push(
            "), started AS (
             INSERT INTO job_steps (job_id, step, state, attempts, started_at)
             SELECT id, ",
        )
        .push_bind(next.as_str())
        .push(
            ", 'running', 1, statement_timestamp() FROM held
             ON CONFLICT (job_id, step) DO UPDATE SET state = 'running', attempts = job_steps.attempts + 1,
                 started_at = statement_timestamp(), finished_at = NULL, error = NULL),
         ev AS (
             INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
             SELECT id, tenant_id, 'processing', ",
        )
        .push_bind(step.as_str())
        .push("::text, ")
        .push_bind(done)
        .push("::int, ")
        .push_bind(total)
        .push("::int, ")
        .push_bind(message)
        .push("::text FROM held RETURNING id, at)");
    output.push_ctes(&mut q, job);
    let rows: Vec<(i64, DateTime<Utc>)> = q.build_query_as().fetch_all(conn).await?;
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
pub(super) async fn last_step_done<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    job: &ClaimedJob,
    worker: &str,
    step: Step,
    progress: Option<(i32, i32)>,
    message: &str,
    output: &Output,
) -> sqlx::Result<Option<Vec<JobEvent>>> {
    let notification = inbox_entry(&job.into(), Ended::Done);
    let mut q = QueryBuilder::new(
        "WITH held AS (
             UPDATE jobs SET state = 'done', finished_at = statement_timestamp(), lease_owner = NULL, lease_until = NULL,
                 current_step = NULL, last_error = NULL, last_error_code = NULL, updated_at = statement_timestamp()
            ",
    );
    push_held_checkpoint(&mut q, job, worker, step);
    q.push(
            "), inbox AS (
             INSERT INTO notifications (id, user_id, job_id, kind, title, body, link)
             SELECT ",
        )
        .push_bind(notification.id)
        .push(", ")
        .push_bind(job.uploaded_by)
        .push(", id, 'job_done', ")
        .push_bind(&notification.title)
        .push(", ")
        .push_bind(&notification.body)
        .push(", ")
        .push_bind(&notification.link)
        .push(
            " FROM held),
         ev AS (
             INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
             SELECT f.id, f.tenant_id, e.state::job_state, e.step, e.done, e.total, e.message
             FROM held f,
                  (VALUES (1, 'processing', ",
        )
        .push_bind(step.as_str())
        .push("::text, ")
        .push_bind(progress.map(|p| p.0))
        .push("::int, ")
        .push_bind(progress.map(|p| p.1))
        .push("::int, ")
        .push_bind(message)
        .push("::text), (2, 'done', NULL, NULL, NULL, ")
        .push_bind(DONE)
        .push(
            "::text))
                      AS e(n, state, step, done, total, message)
             ORDER BY e.n
             RETURNING id, at)",
        );
    output.push_ctes(&mut q, job);
    let rows: Vec<(i64, DateTime<Utc>)> = q.build_query_as().fetch_all(conn).await?;
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

// Progress columns (not the state): kept here so that only `jobs/` updates
// `jobs` at all.

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

/// Records that the parse step of a job `worker` holds has read `done` of
/// `total` pages; `None` when it holds it no more.
pub async fn pages_parsed(
    conn: &mut PgConnection,
    job_id: Uuid,
    worker: &str,
    done: i32,
    total: i32,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "UPDATE jobs SET pages_parsed = $3, pages_total = $4
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2 RETURNING id",
        job_id,
        worker,
        done,
        total
    )
    .fetch_optional(conn)
    .await
}

/// How a run ended, besides the decision: the step it reached, the
/// error's text and code, and the dependency a waiting job waits for.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    pub step: Step,
    pub error: &'a str,
    pub code: Option<FailureCode>,
    pub dependency: Option<&'a str>,
}

/// Applies the end of a run of a job this worker holds, as [`decide`]
/// decided it, through the one transition it calls for (done, retry, wait,
/// fail or release). `None` when nothing changed: abandoned, or the lease
/// was lost meanwhile.
pub async fn apply(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    decision: Decision,
    end: RunEnd<'_>,
) -> sqlx::Result<Option<JobEvent>> {
    match decision {
        Decision::Abandon => Ok(None),
        Decision::Done => complete(conn, job, worker).await,
        Decision::Release => release(conn, job, worker).await,
        Decision::Retry { retry: n, delay } => retry(conn, job, worker, &end, n, delay).await,
        Decision::Wait { until } => wait(conn, job, worker, &end, until).await,
        Decision::Fail(kind) => fail(conn, job, worker, &end, kind).await,
    }
}

/// `processing` → `done`, with its event and inbox entry.
async fn complete(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
) -> sqlx::Result<Option<JobEvent>> {
    let r = sqlx::query!(
        "UPDATE jobs SET state = 'done', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             current_step = NULL, last_error = NULL, last_error_code = NULL, updated_at = now()
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
pub(super) async fn end_step(
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
pub(super) async fn uncount_step(
    conn: &mut PgConnection,
    job_id: Uuid,
    step: Step,
) -> sqlx::Result<()> {
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
async fn retry(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    end: &RunEnd<'_>,
    retry: i32,
    delay: Duration,
) -> sqlx::Result<Option<JobEvent>> {
    let RunEnd { step, error, .. } = *end;
    let due = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
    let r = sqlx::query!(
        "UPDATE jobs SET state = 'retrying', lease_owner = NULL, lease_until = NULL, next_attempt_at = $3,
             retries = $4, last_error = $5, last_error_code = $6, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        job.id,
        worker,
        due as _,
        retry as _,
        format!("{step}: {error}"),
        end.code.map(FailureCode::as_str)
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
async fn wait(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    end: &RunEnd<'_>,
    until: DateTime<Utc>,
) -> sqlx::Result<Option<JobEvent>> {
    let RunEnd {
        step,
        error: reason,
        dependency,
        ..
    } = *end;
    let msg = returning_message!(
        "UPDATE jobs SET state = 'retrying', lease_owner = NULL, lease_until = NULL, next_attempt_at = $3,
             waiting_for = $4, attempt = greatest(attempt - 1, 0), last_error = $5, last_error_code = $6,
             updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        "attempt + 1",
        job.id,
        worker,
        until as _,
        dependency,
        reason,
        end.code.map(FailureCode::as_str)
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
async fn fail(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    worker: &str,
    end: &RunEnd<'_>,
    kind: FailureKind,
) -> sqlx::Result<Option<JobEvent>> {
    let RunEnd { step, error, .. } = *end;
    let last_error = format!("{step}: {error}");
    let msg = returning_message!(
        "UPDATE jobs SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_until = NULL,
             failure_kind = $3, last_error = $4, last_error_code = $5, updated_at = now()
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        "attempt",
        job.id,
        worker,
        kind.as_str() as _,
        &last_error,
        end.code.map(FailureCode::as_str)
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
async fn release(
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
