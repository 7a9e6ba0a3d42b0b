//! The reconciler: PostgreSQL is the source of truth, so a job that waits
//! for a message that no longer exists (a purged queue, broker data lost,
//! a confirmed publish lost with a node) is found there and re-published.
//!
//! A job waits for a message when it is `pending`, or `retrying` and due,
//! and has no unsent outbox row. Per queue, the reconciler compares how many
//! such jobs there are with the ready messages RabbitMQ holds; when jobs
//! outnumber messages, the difference is missing, and that many jobs (past
//! the grace period, and not re-published within it) get a new outbox row.
//! A deep backlog whose messages are all there costs one count per queue
//! and re-publishes nothing; a duplicate message is harmless (the claim
//! skips a job that is not due). Safe in every process: one round at a time
//! holds a transaction-scoped advisory lock, and rows are taken with
//! `SKIP LOCKED`.
//!
//! The count says how many are missing, not which, so two rules keep a
//! round from picking jobs whose message is there while one that has none
//! waits on (every re-publish beyond the missing ones hides a missing one
//! from the next count, until a worker has taken the duplicate):
//! - jobs not yet re-published while they wait go first, then the ones
//!   waited on longest; a job re-published a grace period ago whose message
//!   is on the queue would otherwise, being older, go before them;
//! - a job whose message the relay confirmed after the round read the
//!   queues is not counted as waiting, as that message was not counted as
//!   ready (the relay stamps `sent_at` after the confirm).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{JobMessage, Tier};
use crate::{
    broker::{self, Broker},
    jobs::outbox,
};

/// The advisory lock of a reconciliation round ("docflow reconcile").
const LOCK: i64 = 0x646f_6366_6c6f_7772;
/// Jobs re-published per queue and round at most.
const BATCH: i64 = 500;

/// Jobs of `queue` waiting for a message (`$1` the queue), leaving out those
/// whose message was confirmed after `$2` (when the queues were read).
const WAITING: &str = "j.queue = $1
    AND (j.state = 'pending' OR (j.state = 'retrying' AND j.next_attempt_at <= now()))
    AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.sent_at IS NULL AND o.job_id = j.id)
    AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.sent_at >= $2 AND o.job_id = j.id)";

/// When job `j` began its current wait for a message: its last change, or
/// when its retry fell due.
const WAIT_BEGAN: &str = "greatest(j.updated_at, coalesce(j.next_attempt_at, j.updated_at))";

/// Runs a round every half grace period (1 to 30 s) until `shutdown`.
pub async fn run(
    pool: PgPool,
    broker: Broker,
    repaired: prometheus::IntCounter,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let every = (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match reconcile(&pool, &broker, grace).await {
            Ok(0) => {}
            Ok(n) => {
                repaired.inc_by(n);
                tracing::warn!(
                    jobs = n,
                    "reconciler re-published jobs whose message was lost"
                );
            }
            Err(e) => tracing::debug!(error = format!("{e:#}"), "reconciliation skipped"),
        }
    }
}

/// One round; returns how many jobs were re-published.
pub async fn reconcile(pool: &PgPool, broker: &Broker, grace: Duration) -> anyhow::Result<u64> {
    // The clock, then the messages, then the jobs: one delivered between the
    // reads makes its job look processing, never missing; one published
    // after `read_at` is left out of the jobs. Nothing is held open while the
    // broker answers.
    let read_at = sqlx::query_scalar!(r#"SELECT clock_timestamp() AS "now!: DateTime<Utc>""#)
        .fetch_one(pool)
        .await?;
    let ch = broker.channel().await?;
    let mut ready = Vec::with_capacity(Tier::ALL.len());
    for tier in Tier::ALL {
        ready.push(broker::queue_stats(&ch, &tier.queue_name()).await?.0);
    }
    let _ = ch.close(200, "reconciled".into()).await;
    let mut tx = pool.begin().await?;
    let ours = sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "ours!""#, LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !ours {
        return Ok(0);
    }
    let mut total = 0u64;
    for (tier, ready) in Tier::ALL.into_iter().zip(ready) {
        let waiting: i64 =
            sqlx::query_scalar(&format!("SELECT count(*) FROM jobs j WHERE {WAITING}"))
                .bind(tier)
                .bind(read_at)
                .fetch_one(&mut *tx)
                .await?;
        let missing = waiting - i64::from(ready);
        if missing <= 0 {
            continue;
        }
        let lost: Vec<JobMessage> = sqlx::query_as(&format!(
            "UPDATE jobs SET reconciled_at = now()
             WHERE id IN (
                 SELECT j.id FROM jobs j
                 WHERE {WAITING}
                   AND greatest({WAIT_BEGAN}, coalesce(j.reconciled_at, j.updated_at))
                       < now() - $3 * interval '1 millisecond'
                 ORDER BY coalesce(j.reconciled_at >= {WAIT_BEGAN}, false),
                          j.enqueued_at, j.id
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED)
             RETURNING id AS job_id, tenant_id, document_id, queue, attempt + 1 AS attempt, enqueued_at"
        ))
        .bind(tier)
        .bind(read_at)
        .bind(grace.as_millis() as i64)
        .bind(missing.min(BATCH))
        .fetch_all(&mut *tx)
        .await?;
        for msg in &lost {
            outbox::enqueue_job(&mut tx, msg, None).await?;
        }
        if !lost.is_empty() {
            tracing::warn!(queue = %tier, waiting, ready, republished = lost.len(), "jobs without a message found");
        }
        total += lost.len() as u64;
    }
    tx.commit().await?;
    Ok(total)
}
