//! The transitions made by others than a lease holder: creating a job at
//! upload, the lease sweeper, the dead-letter keeper, administrators and
//! owners (re-enqueue, retry, cancel), and a closing breaker.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::*;
use crate::jobs::{events::JobEvent, outbox, returning_message, JobMessage, JobState, Tier};

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

/// A job whose worker died once too often.
#[derive(sqlx::FromRow)]
pub(super) struct CrashedJob {
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
             finished_at = now(), failure_kind = 'crashed', last_error_code = 'crashed', next_attempt_at = NULL,
             updated_at = now(),
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
             next_attempt_at = NULL, waiting_for = NULL, failure_kind = 'permanent', last_error = $2,
             last_error_code = 'undeliverable', updated_at = now()
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
             last_error = NULL, last_error_code = NULL, next_attempt_at = NULL, current_step = NULL,
             updated_at = now()
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
