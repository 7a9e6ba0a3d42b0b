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
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    broker::{self, Broker},
    jobs::{
        machine::{self, insert_dead_letter, BrokerDeath, NewDeadLetter},
        JobMessage, JobState,
    },
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
    crate::platform::reconnect::supervise("dead-letter keeper", &shutdown, |connected| {
        keep_once(&pool, &broker, &events, &shutdown, connected)
    })
    .await;
}

async fn keep_once(
    pool: &PgPool,
    broker: &Broker,
    events: &EventSink,
    shutdown: &CancellationToken,
    connected: crate::platform::reconnect::Connected,
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
    connected.mark();
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

/// Records what RabbitMQ dead-lettered. A worker's own `nack` (reason
/// `rejected`) needs nothing: the job's `failed` transition wrote its dead
/// letter, or the message is a stale copy of a job that lives on. What the
/// broker killed by itself (delivery limit, TTL) fails its job through the
/// state machine, which leaves jobs that are finished or held by a live
/// worker alone. Unreadable messages and unknown jobs are kept as
/// `malformed`.
async fn record(pool: &PgPool, events: &EventSink, delivery: &Delivery) -> sqlx::Result<()> {
    let death = death_of(delivery);
    let payload = String::from_utf8_lossy(&delivery.data).into_owned();
    let queue = if death.queue.is_empty() {
        "unknown".to_string()
    } else {
        death.queue.clone()
    };
    let reason = if death.reason.is_empty() {
        "rejected".to_string()
    } else {
        death.reason.replace('-', "_")
    };
    let mut tx = pool.begin().await?;
    let Ok(msg) = serde_json::from_slice::<JobMessage>(&delivery.data) else {
        let error = format!(
            "the message is not a job message: {}",
            truncate(&payload, 200)
        );
        record_malformed(&mut tx, &queue, &payload, &error, death.count as i32).await?;
        tx.commit().await?;
        tracing::info!("malformed dead letter recorded");
        return Ok(());
    };
    let exists = sqlx::query_scalar!(
        r#"SELECT state AS "state: JobState" FROM jobs WHERE id = $1"#,
        msg.job_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if exists.is_none() {
        let error = format!("job {} does not exist", msg.job_id);
        record_malformed(&mut tx, &queue, &payload, &error, death.count as i32).await?;
        tx.commit().await?;
        tracing::info!(job_id = %msg.job_id, "dead letter of an unknown job recorded");
        return Ok(());
    }
    if reason == "rejected" {
        tracing::debug!(job_id = %msg.job_id, "a worker's dead-lettered message: recorded with its job");
        return Ok(());
    }
    let death = BrokerDeath {
        job_id: msg.job_id,
        reason: &reason,
        deliveries: death.count,
        queue: &queue,
        payload: &payload,
    };
    match machine::dead_by_broker(&mut tx, &death).await? {
        Some(ev) => {
            tx.commit().await?;
            events.send(ev);
            tracing::warn!(job_id = %msg.job_id, %reason, "RabbitMQ dead-lettered a job; failed and recorded");
        }
        None => {
            tracing::info!(job_id = %msg.job_id, %reason, "dead message of a job that is finished or running ignored");
        }
    }
    Ok(())
}

/// A dead letter without a job.
async fn record_malformed(
    conn: &mut sqlx::PgConnection,
    queue: &str,
    payload: &str,
    error: &str,
    attempts: i32,
) -> sqlx::Result<()> {
    insert_dead_letter(
        conn,
        &NewDeadLetter {
            job_id: None,
            tenant_id: None,
            queue,
            reason: "malformed",
            error,
            attempts,
            payload,
        },
    )
    .await
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Takes back jobs whose lease ran out ([`machine::expire_leases`]). Safe
/// to run in many processes.
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
        match machine::expire_leases(&pool, max_crashes).await {
            Ok(sent) if sent.is_empty() => {}
            Ok(sent) => {
                tracing::warn!(
                    jobs = sent.len(),
                    "expired leases: crashes counted, jobs taken back"
                );
                sent.into_iter().for_each(|e| events.send(e));
            }
            Err(e) => tracing::debug!(error = %e, "lease sweep failed"),
        }
    }
}
