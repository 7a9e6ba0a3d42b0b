//! Retention: what only grows is pruned in small batches, so no delete
//! holds locks or bloats a transaction for long. Job events and read
//! notifications are kept `DOCFLOW_RETENTION` (default 30 days); dashboard
//! samples 7 days at most, sent outbox rows (bookkeeping only) an hour at
//! most, and the circuit-breaker rows of processes silent for a day.
//! Webhook events go with their deliveries after `DOCFLOW_RETENTION` (a
//! delivery is retried for a day, so none is still due by then).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Rows deleted per statement.
pub const BATCH: i64 = 1000;
/// How often the pruning runs.
const EVERY: Duration = Duration::from_secs(300);
/// Sent outbox rows are kept at most this long.
const OUTBOX_KEEP: Duration = Duration::from_secs(3600);
/// Dashboard samples are kept at most this long (its longest window is a day).
const SAMPLES_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// A process's breaker row is dropped after this long without an update
/// (each process writes its own row, under a name that changes at restart).
const BREAKER_ROWS_KEEP: Duration = Duration::from_secs(24 * 3600);

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub events: u64,
    pub notifications: u64,
    pub outbox: u64,
    pub samples: u64,
    pub breaker_rows: u64,
    pub webhook_events: u64,
}

/// Prunes every `EVERY` (the first pass a minute after start) until `shutdown`.
pub async fn run(pool: PgPool, retention: Duration, shutdown: CancellationToken) {
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = EVERY;
        match prune(&pool, retention, BATCH, &shutdown).await {
            Ok(p) if p == Pruned::default() => {}
            Ok(p) => tracing::info!(
                events = p.events,
                notifications = p.notifications,
                outbox = p.outbox,
                samples = p.samples,
                "retention: old rows pruned"
            ),
            Err(e) => tracing::debug!(error = %e, "retention pass failed"),
        }
    }
}

/// Deletes everything past its keep time, `batch` rows per statement,
/// until nothing is left or `stop` is cancelled.
pub async fn prune(
    pool: &PgPool,
    retention: Duration,
    batch: i64,
    stop: &CancellationToken,
) -> sqlx::Result<Pruned> {
    let keep = |d: Duration| d.as_millis() as i64;
    let outbox_keep = retention.min(OUTBOX_KEEP);
    Ok(Pruned {
        events: in_batches(pool, "job_events", "at", keep(retention), batch, stop).await?,
        notifications: in_batches(
            pool,
            "notifications",
            "read_at",
            keep(retention),
            batch,
            stop,
        )
        .await?,
        outbox: in_batches(pool, "outbox", "sent_at", keep(outbox_keep), batch, stop).await?,
        samples: in_batches(
            pool,
            "metric_samples",
            "at",
            keep(retention.min(SAMPLES_KEEP)),
            batch,
            stop,
        )
        .await?,
        breaker_rows: in_batches(
            pool,
            "dependency_status",
            "updated_at",
            keep(retention.min(BREAKER_ROWS_KEEP)),
            batch,
            stop,
        )
        .await?,
        webhook_events: in_batches(
            pool,
            "webhook_events",
            "created_at",
            keep(retention),
            batch,
            stop,
        )
        .await?,
    })
}

/// `DELETE … WHERE column < now() - keep`, `batch` rows at a time.
async fn in_batches(
    pool: &PgPool,
    table: &str,
    column: &str,
    keep_ms: i64,
    batch: i64,
    stop: &CancellationToken,
) -> sqlx::Result<u64> {
    let sql = format!(
        "DELETE FROM {table} WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM {table} WHERE {column} < now() - $1 * interval '1 millisecond' LIMIT $2))"
    );
    let mut total = 0;
    while !stop.is_cancelled() {
        let n = sqlx::query(&sql)
            .bind(keep_ms)
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected();
        total += n;
        if n < batch as u64 {
            break;
        }
    }
    Ok(total)
}
