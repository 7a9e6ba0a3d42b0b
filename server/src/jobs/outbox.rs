//! The transactional outbox and its relay. Rows are written in the same
//! transaction as the job change they announce; the relay publishes due rows
//! with publisher confirms and `mandatory`, and marks them sent only after
//! the broker confirmed. Rows are claimed with `FOR UPDATE SKIP LOCKED`, so
//! any number of relays may run at once without publishing a row twice.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::{postgres::PgListener, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::{
    broker::{self, Broker, Publisher},
    jobs::JobMessage,
};

/// Rows published per transaction.
const BATCH: i64 = 500;
/// Polling interval when no notification arrives (lost NOTIFY, relay restart).
const POLL: Duration = Duration::from_secs(1);

/// Queues a job message for publishing at `available_at` (now when `None`).
pub async fn enqueue_job(
    conn: &mut PgConnection,
    msg: &JobMessage,
    available_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    let payload = serde_json::to_value(msg).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query!(
        "INSERT INTO outbox (exchange, routing_key, payload, available_at, job_id)
         VALUES ($1, $2, $3, coalesce($4, now()), $5)",
        broker::JOBS_EXCHANGE,
        msg.queue.as_str(),
        payload,
        available_at as _,
        msg.job_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

struct Row {
    id: i64,
    exchange: String,
    routing_key: String,
    payload: serde_json::Value,
}

/// Runs the relay until `shutdown`; survives PostgreSQL and RabbitMQ outages.
pub async fn run_relay(pool: PgPool, broker: Broker, shutdown: CancellationToken) {
    let mut publisher: Option<Publisher> = None;
    let mut listener: Option<PgListener> = None;
    let mut backoff = crate::platform::reconnect::Backoff::new();
    let mut claims = RecentClaims::default();
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        if listener.is_none() {
            listener = listen(&pool)
                .await
                .map_err(|e| tracing::debug!(error = %e, "outbox listener unavailable"))
                .ok();
        }
        match relay_once(&pool, &broker, &mut publisher).await {
            Ok(claimed) => {
                backoff.reset();
                claims.note(&claimed);
                if claimed.len() as i64 == BATCH {
                    continue;
                }
            }
            Err(e) => {
                publisher = None;
                let wait = backoff.next_wait();
                tracing::warn!(
                    error = format!("{e:#}"),
                    retry_in_ms = wait.as_millis() as u64,
                    "outbox relay failed"
                );
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        }
        // Sleep until a notice of a row not published yet, or the poll
        // interval. A row's notice often arrives after the claim that took
        // it (the row committed just before that claim began): claiming again
        // for it would only find nothing, at the cost of a commit.
        let deadline = tokio::time::Instant::now() + POLL;
        let wait = async {
            let Some(l) = listener.as_mut() else {
                tokio::time::sleep_until(deadline).await;
                return true;
            };
            loop {
                match tokio::time::timeout_at(deadline, l.recv()).await {
                    Ok(Ok(notice)) if claims.covers(notice.payload()) => continue,
                    Ok(Ok(_)) | Err(_) => return true,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "outbox listener lost");
                        return false;
                    }
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            alive = wait => if !alive { listener = None },
        }
    }
}

/// The rows this relay claimed lately, so that their late notices are
/// skipped. Bounded: the oldest are forgotten first, and a forgotten row's
/// notice costs one claim that finds nothing, never a lost message.
#[derive(Default)]
struct RecentClaims {
    ids: HashSet<i64>,
    order: VecDeque<i64>,
}

/// Claimed rows remembered; far more than arrive within a notice's delay.
const REMEMBERED: usize = 4_096;

impl RecentClaims {
    fn note(&mut self, ids: &[i64]) {
        for &id in ids {
            if self.ids.insert(id) {
                self.order.push_back(id);
            }
        }
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }

    /// Whether a notice's payload (the newest id its statement inserted)
    /// names a row claimed here. Rows of one statement commit together, so
    /// the claim that took the newest saw them all.
    fn covers(&self, payload: &str) -> bool {
        payload
            .parse::<i64>()
            .is_ok_and(|id| self.ids.contains(&id))
    }
}

async fn listen(pool: &PgPool) -> sqlx::Result<PgListener> {
    let mut l = PgListener::connect_with(pool).await?;
    l.listen("docflow_outbox").await?;
    Ok(l)
}

/// Publishes one batch of due rows; returns the ids it claimed.
pub async fn relay_once(
    pool: &PgPool,
    broker: &Broker,
    publisher: &mut Option<Publisher>,
) -> anyhow::Result<Vec<i64>> {
    let mut tx = pool
        .begin()
        .await
        .context("starting the outbox transaction")?;
    let rows = sqlx::query_as!(
        Row,
        "SELECT id, exchange, routing_key, payload FROM outbox
         WHERE sent_at IS NULL AND available_at <= now()
         ORDER BY available_at, id
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
        BATCH
    )
    .fetch_all(&mut *tx)
    .await
    .context("claiming outbox rows")?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let p = match publisher {
        Some(p) if p.is_open() => p,
        _ => publisher.insert(broker.publisher().await?),
    };
    let messages: Vec<_> = rows
        .iter()
        .map(|r| broker::Outgoing {
            exchange: &r.exchange,
            routing_key: &r.routing_key,
            body: r.payload.to_string().into_bytes(),
            message_id: r.id.to_string(),
        })
        .collect();
    let outcomes = p.publish_all(&messages).await?;
    let mut sent = Vec::with_capacity(rows.len());
    let mut failed = Vec::new();
    let mut errors = Vec::new();
    for (row, outcome) in rows.iter().zip(outcomes) {
        match outcome {
            Ok(()) => sent.push(row.id),
            Err(e) => {
                tracing::error!(outbox_id = row.id, exchange = %row.exchange, routing_key = %row.routing_key, error = %e, "broker refused an outbox message");
                failed.push(row.id);
                errors.push(e);
            }
        }
    }
    // Stamped now, after the confirms, not at the transaction's start: the
    // reconciler takes a row sent after it read the queues for a message
    // it did not count.
    sqlx::query!(
        "UPDATE outbox SET sent_at = clock_timestamp() WHERE id = ANY($1)",
        &sent
    )
    .execute(&mut *tx)
    .await?;
    if !failed.is_empty() {
        // Unroutable or nacked: try again later rather than losing the row.
        sqlx::query!(
            "UPDATE outbox SET publish_attempts = publish_attempts + 1, last_error = e.err,
                 available_at = now() + least(interval '1 second' * power(2, publish_attempts), interval '5 minutes')
             FROM unnest($1::bigint[], $2::text[]) AS e(id, err) WHERE outbox.id = e.id",
            &failed,
            &errors
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await.context("committing sent outbox rows")?;
    Ok(rows.iter().map(|r| r.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_is_skipped_only_for_a_row_claimed_here_lately() {
        let mut claims = RecentClaims::default();
        claims.note(&[7, 8, 9]);
        assert!(claims.covers("9"));
        assert!(!claims.covers("10"), "a new row is claimed");
        assert!(!claims.covers(""), "a notice without an id is claimed");
        assert!(!claims.covers("x"));
        // A flood of claims forgets the oldest rows first, within bounds.
        let flood: Vec<i64> = (100..100 + REMEMBERED as i64 * 3).collect();
        claims.note(&flood);
        assert_eq!(claims.ids.len(), REMEMBERED);
        assert_eq!(claims.order.len(), REMEMBERED);
        assert!(!claims.covers("7"));
        assert!(claims.covers(&flood[flood.len() - 1].to_string()));
        assert!(!claims.covers(&flood[0].to_string()));
    }
}
