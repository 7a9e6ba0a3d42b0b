//! The dead-letter keeper: consumes `docflow.dead` and records every message
//! in `dead_letters` (reason, error, attempts, payload, queue) — including
//! messages that never reached a worker's logic (malformed payloads, the
//! quorum delivery limit) — then acks. Admins act on that table. Also the
//! lease sweeper: jobs whose worker died go back to `pending`, and those
//! that killed their workers too often are dead-lettered as `crashed`.

use std::time::Duration;

use futures::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions},
    types::{AMQPValue, FieldTable},
};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    broker::{self, Broker},
    jobs::{repo, JobMessage, JobState, Tier},
    outbox,
    pipeline::{self, events::EventSink},
};

/// What RabbitMQ says about why a message died (first `x-death` entry).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Death {
    pub reason: String,
    pub queue: String,
    pub count: i64,
}

fn field<'a>(t: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
    t.inner()
        .iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v)
}

fn as_string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

fn as_i64(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::Timestamp(n) => i64::try_from(*n).ok(),
        _ => None,
    }
}

pub fn death_of(delivery: &Delivery) -> Death {
    let Some(headers) = delivery.properties.headers() else {
        return Death::default();
    };
    let Some(AMQPValue::FieldArray(deaths)) = field(headers, "x-death") else {
        return Death::default();
    };
    let Some(AMQPValue::FieldTable(first)) = deaths.as_slice().first() else {
        return Death::default();
    };
    Death {
        reason: field(first, "reason")
            .and_then(as_string)
            .unwrap_or_default(),
        queue: field(first, "queue")
            .and_then(as_string)
            .unwrap_or_default(),
        count: field(first, "count").and_then(as_i64).unwrap_or(0),
    }
}

/// Runs the keeper until `shutdown`; reconnects after broker loss.
pub async fn run_keeper(
    pool: PgPool,
    broker: Broker,
    events: EventSink,
    shutdown: CancellationToken,
) {
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        match keep_once(&pool, &broker, &events, &shutdown).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::warn!(
                    error = format!("{e:#}"),
                    "dead-letter keeper lost its consumer; reconnecting"
                );
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(broker::backoff(failures)) => {}
                }
            }
        }
    }
}

async fn keep_once(
    pool: &PgPool,
    broker: &Broker,
    events: &EventSink,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let ch = broker.channel().await?;
    ch.basic_qos(50, BasicQosOptions::default()).await?;
    let mut consumer = ch
        .basic_consume(
            broker::DEAD_QUEUE.into(),
            "docflow-keeper".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    loop {
        let delivery = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            d = consumer.next() => match d {
                Some(d) => d?,
                None => anyhow::bail!("dead-letter consumer ended"),
            },
        };
        match record(pool, events, &delivery).await {
            Ok(()) => {
                delivery.ack(BasicAckOptions::default()).await?;
            }
            Err(e) => {
                // PostgreSQL trouble: keep the message on the queue for later.
                tracing::warn!(error = %e, "could not record a dead letter; requeueing it");
                tokio::time::sleep(Duration::from_secs(1)).await;
                delivery
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    })
                    .await?;
            }
        }
    }
}

#[derive(sqlx::FromRow)]
struct FailedJob {
    tenant_id: Uuid,
    state: JobState,
    attempt: i32,
    failure_kind: Option<String>,
    last_error: Option<String>,
}

/// Writes the dead letter (once per open job) and, for a job that died
/// outside the executor (delivery limit), marks the job failed.
async fn record(pool: &PgPool, events: &EventSink, delivery: &Delivery) -> sqlx::Result<()> {
    let death = death_of(delivery);
    let payload = String::from_utf8_lossy(&delivery.data).into_owned();
    let queue = if death.queue.is_empty() {
        "unknown".to_string()
    } else {
        death.queue.clone()
    };
    let msg: Option<JobMessage> = serde_json::from_slice(&delivery.data).ok();
    let mut tx = pool.begin().await?;
    let job: Option<FailedJob> = match &msg {
        Some(m) => sqlx::query_as(
            "SELECT tenant_id, state, attempt, failure_kind, last_error FROM jobs WHERE id = $1 FOR UPDATE",
        )
        .bind(m.job_id)
        .fetch_optional(&mut *tx)
        .await?,
        None => None,
    };
    let mut event = None;
    let (job_id, tenant_id, reason, error, attempts) = match (&msg, job) {
        (None, _) => (
            None,
            None,
            "malformed".to_string(),
            format!(
                "the message is not a job message: {}",
                truncate(&payload, 200)
            ),
            death.count as i32,
        ),
        (Some(m), None) => (
            None,
            None,
            "malformed".to_string(),
            format!("job {} does not exist", m.job_id),
            death.count as i32,
        ),
        (Some(m), Some(j)) if j.state == JobState::Failed => (
            Some(m.job_id),
            Some(j.tenant_id),
            j.failure_kind.unwrap_or_else(|| "permanent".into()),
            j.last_error.unwrap_or_else(|| "failed".into()),
            j.attempt,
        ),
        (Some(m), Some(j)) if j.state == JobState::Done => {
            // A stale copy of a finished job: nothing to keep.
            tracing::info!(job_id = %m.job_id, "dead message of a finished job ignored");
            tx.commit().await?;
            return Ok(());
        }
        (Some(m), Some(j)) => {
            // Died without the executor deciding (delivery limit: a message that
            // kills or outlives every worker that takes it). The job fails here.
            let reason = if death.reason.is_empty() {
                "rejected".to_string()
            } else {
                death.reason.replace('-', "_")
            };
            let error = format!(
                "RabbitMQ dead-lettered the message ({reason}) after {} deliveries",
                death.count.max(1)
            );
            sqlx::query(
                "UPDATE jobs SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_until = NULL,
                     failure_kind = 'permanent', last_error = $2, updated_at = now() WHERE id = $1",
            )
            .bind(m.job_id)
            .bind(&error)
            .execute(&mut *tx)
            .await?;
            event = Some(
                repo::record_state_change(&mut tx, m.job_id, j.tenant_id, JobState::Failed, &error)
                    .await?,
            );
            (Some(m.job_id), Some(j.tenant_id), reason, error, j.attempt)
        }
    };
    insert_dead_letter(
        &mut tx,
        &NewDeadLetter {
            job_id,
            tenant_id,
            queue: &queue,
            reason: &reason,
            error: &error,
            attempts,
            payload: &payload,
        },
    )
    .await?;
    tx.commit().await?;
    if let Some(e) = event {
        events.send(e);
    }
    tracing::info!(?job_id, %reason, "dead letter recorded");
    Ok(())
}

/// One row of `dead_letters`.
struct NewDeadLetter<'a> {
    /// `None` when the message could not even be read.
    job_id: Option<Uuid>,
    tenant_id: Option<Uuid>,
    queue: &'a str,
    reason: &'a str,
    error: &'a str,
    attempts: i32,
    payload: &'a str,
}

/// Records a dead letter, at most one unresolved per job.
async fn insert_dead_letter(conn: &mut PgConnection, d: &NewDeadLetter<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO dead_letters (id, job_id, tenant_id, queue, reason, error, attempts, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (job_id) WHERE resolved_at IS NULL DO NOTHING",
    )
    .bind(Uuid::now_v7())
    .bind(d.job_id)
    .bind(d.tenant_id)
    .bind(d.queue)
    .bind(d.reason)
    .bind(d.error)
    .bind(d.attempts)
    .bind(d.payload)
    .execute(conn)
    .await?;
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Takes back jobs whose lease ran out (their worker died without the
/// broker noticing): each such expiry is a crash of that job. Below
/// `max_crashes` the job goes back to `pending` and is re-published; at
/// `max_crashes` it is a poison pill: failed as `crashed`, dead-lettered,
/// and never claimed again. Safe to run in many processes.
pub async fn run_sweeper(
    pool: PgPool,
    events: EventSink,
    every: Duration,
    max_crashes: i32,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match sweep(&pool, &events, max_crashes).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(jobs = n, "expired leases: crashes counted, jobs taken back"),
            Err(e) => tracing::debug!(error = %e, "lease sweep failed"),
        }
    }
}

/// A job whose worker died once too often.
#[derive(sqlx::FromRow)]
struct CrashedJob {
    id: Uuid,
    tenant_id: Uuid,
    document_id: Uuid,
    queue: Tier,
    attempt: i32,
    enqueued_at: chrono::DateTime<chrono::Utc>,
    step: String,
    last_error: String,
    uploaded_by: Uuid,
    filename: String,
}

pub async fn sweep(pool: &PgPool, events: &EventSink, max_crashes: i32) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    let mut sent = Vec::new();
    let crashed: Vec<CrashedJob> = sqlx::query_as(
        "UPDATE jobs j SET state = 'failed', crashes = j.crashes + 1, lease_owner = NULL, lease_until = NULL,
             finished_at = now(), failure_kind = 'crashed', next_attempt_at = NULL, updated_at = now(),
             last_error = format('%s: the worker processing this document stopped %s times while on it, so it is not tried again automatically',
                                 coalesce(j.current_step, 'parse'), j.crashes + 1)
         FROM documents d
         WHERE d.id = j.document_id
           AND j.id IN (SELECT id FROM jobs WHERE state = 'processing' AND lease_until < now() AND crashes + 1 >= $1
                        ORDER BY lease_until LIMIT 500 FOR UPDATE SKIP LOCKED)
         RETURNING j.id, j.tenant_id, j.document_id, j.queue, j.attempt, j.enqueued_at,
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
        .bind(job.id)
        .bind(&job.last_error)
        .execute(&mut *tx)
        .await?;
        let payload = serde_json::to_string(&JobMessage {
            job_id: job.id,
            tenant_id: job.tenant_id,
            document_id: job.document_id,
            queue: job.queue,
            attempt: job.attempt,
            enqueued_at: job.enqueued_at,
        })
        .unwrap_or_default();
        // No message of the job reaches docflow.dead (the broker handed it
        // back when its worker's connection died), so the row is written here.
        insert_dead_letter(
            &mut tx,
            &NewDeadLetter {
                job_id: Some(job.id),
                tenant_id: Some(job.tenant_id),
                queue: &job.queue.queue_name(),
                reason: "crashed",
                error: &job.last_error,
                attempts: job.attempt,
                payload: &payload,
            },
        )
        .await?;
        let text = format!("failed at {}", job.last_error);
        let mut ev =
            repo::record_state_change(&mut tx, job.id, job.tenant_id, JobState::Failed, &text)
                .await?;
        ev.notification = Some(
            pipeline::notify(
                &mut tx,
                pipeline::Finished {
                    job_id: job.id,
                    uploaded_by: job.uploaded_by,
                    filename: &job.filename,
                },
                false,
                Some(&text),
            )
            .await?,
        );
        tracing::error!(job_id = %job.id, step = %job.step, "job crashed its worker too often; dead-lettered as crashed");
        sent.push(ev);
    }
    // Each other expired job goes out again as its next attempt.
    let expired: Vec<JobMessage> = sqlx::query_as(
        "UPDATE jobs SET state = 'pending', crashes = crashes + 1, lease_owner = NULL, lease_until = NULL, updated_at = now()
         WHERE id IN (SELECT id FROM jobs WHERE state = 'processing' AND lease_until < now()
                      ORDER BY lease_until LIMIT 500 FOR UPDATE SKIP LOCKED)
         RETURNING id AS job_id, tenant_id, document_id, queue, attempt + 1 AS attempt, enqueued_at",
    )
    .fetch_all(&mut *tx)
    .await?;
    for msg in &expired {
        sqlx::query(
            "UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state = 'running'",
        )
        .bind(msg.job_id)
        .execute(&mut *tx)
        .await?;
        let message =
            "worker lost while running the job (counted as a crash); the job was re-queued";
        sent.push(
            repo::record_state_change(
                &mut tx,
                msg.job_id,
                msg.tenant_id,
                JobState::Pending,
                message,
            )
            .await?,
        );
        outbox::enqueue_job(&mut tx, msg, None).await?;
    }
    tx.commit().await?;
    sent.into_iter().for_each(|e| events.send(e));
    Ok(crashed.len() + expired.len())
}
