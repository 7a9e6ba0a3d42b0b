//! The dead-letter keeper: consumes `docflow.dead` and records every message
//! in `dead_letters` (reason, error, attempts, payload, queue) — including
//! messages that never reached a worker's logic (malformed payloads, the
//! quorum delivery limit) — then acks. Admins act on that table. Also the
//! lease sweeper: jobs whose worker died go back to `pending`.

use std::time::Duration;

use futures::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions},
    types::{AMQPValue, FieldTable},
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    broker::{self, Broker},
    jobs::{repo, JobMessage, JobState},
    outbox,
    pipeline::events::EventSink,
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
    sqlx::query(
        "INSERT INTO dead_letters (id, job_id, tenant_id, queue, reason, error, attempts, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (job_id) WHERE resolved_at IS NULL DO NOTHING",
    )
    .bind(Uuid::now_v7())
    .bind(job_id)
    .bind(tenant_id)
    .bind(queue)
    .bind(&reason)
    .bind(&error)
    .bind(attempts)
    .bind(&payload)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    if let Some(e) = event {
        events.send(e);
    }
    tracing::info!(?job_id, %reason, "dead letter recorded");
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Returns jobs whose lease ran out (their worker died without the broker
/// noticing) to `pending` and re-publishes them. Safe to run in many processes.
pub async fn run_sweeper(
    pool: PgPool,
    events: EventSink,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match sweep(&pool, &events).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(jobs = n, "expired leases: jobs re-queued"),
            Err(e) => tracing::debug!(error = %e, "lease sweep failed"),
        }
    }
}

pub async fn sweep(pool: &PgPool, events: &EventSink) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    // Each expired job goes out again as its next attempt.
    let expired: Vec<JobMessage> = sqlx::query_as(
        "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_until = NULL, updated_at = now()
         WHERE id IN (SELECT id FROM jobs WHERE state = 'processing' AND lease_until < now()
                      ORDER BY lease_until LIMIT 500 FOR UPDATE SKIP LOCKED)
         RETURNING id AS job_id, tenant_id, document_id, queue, attempt + 1 AS attempt, enqueued_at",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut sent = Vec::with_capacity(expired.len());
    for msg in &expired {
        sqlx::query(
            "UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state = 'running'",
        )
        .bind(msg.job_id)
        .execute(&mut *tx)
        .await?;
        let message = "worker lost; the job was re-queued";
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
    Ok(expired.len())
}
