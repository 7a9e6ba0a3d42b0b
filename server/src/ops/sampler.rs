//! The metrics sampler: every `DOCFLOW_SAMPLE_INTERVAL` (10 s) it reads queue
//! depths from RabbitMQ and job counts, ages, the dead-letter backlog, the
//! outbox and the paused queues from PostgreSQL, sets the Prometheus gauges, and records the
//! dashboard's time series in `metric_samples` (kept 7 days at most: see `retention`). Scrapes and
//! the dashboard read what it left; neither queries the job table.

use std::time::Duration;

use app::dto::SeriesPointDto;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{jobs::JobState, ops::stats, state::AppState};

/// Series the dashboard can chart.
pub const SERIES: [&str; 5] = [
    "queue_depth",
    "age_p99_s",
    "throughput_per_min",
    "failures_per_min",
    "dead_letters",
];

pub async fn run(state: AppState, shutdown: CancellationToken) {
    let every = state.config.sample_interval;
    loop {
        if let Err(e) = sample(&state).await {
            tracing::debug!(error = %e, "metrics sample failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

struct Snapshot {
    dead_letters: i64,
    outbox_pending: i64,
    outbox_oldest_s: f64,
    done_last_min: i64,
    failed_steps_last_min: i64,
    webhook_pending: i64,
    reembed_pending: i64,
}

pub async fn sample(state: &AppState) -> sqlx::Result<()> {
    let m = &state.metrics;
    let by_state: Vec<(JobState, i64)> = sqlx::query!(
        r#"SELECT state AS "state: JobState", count(*) AS "count!" FROM jobs GROUP BY state"#
    )
    .map(|r| (r.state, r.count))
    .fetch_all(&state.pool)
    .await?;
    for s in JobState::ALL {
        m.jobs
            .with_label_values(&[s.as_str()])
            .set(by_state.iter().find(|r| r.0 == s).map_or(0, |r| r.1));
    }
    let queues = stats::queue_rows(&state.pool).await?;
    let snap = sqlx::query_as!(
        Snapshot,
        r#"SELECT (SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL) AS "dead_letters!",
                  (SELECT count(*) FROM outbox WHERE sent_at IS NULL) AS "outbox_pending!",
                  coalesce((SELECT extract(epoch FROM now() - min(available_at)) FROM outbox
                            WHERE sent_at IS NULL AND available_at <= now()), 0)::float8 AS "outbox_oldest_s!",
                  (SELECT count(*) FROM jobs WHERE finished_at > now() - interval '1 minute' AND state = 'done')
                      AS "done_last_min!",
                  (SELECT count(*) FROM job_steps WHERE finished_at > now() - interval '1 minute' AND state = 'failed')
                      AS "failed_steps_last_min!",
                  (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending') AS "webhook_pending!",
                  (SELECT count(*) FROM reembeds WHERE state = 'pending') AS "reembed_pending!""#
    )
    .fetch_one(&state.pool)
    .await?;
    m.dead_letters.set(snap.dead_letters);
    m.outbox_pending.set(snap.outbox_pending);
    m.outbox_oldest_seconds.set(snap.outbox_oldest_s);
    m.webhook_pending.set(snap.webhook_pending);
    m.reembed_pending.set(snap.reembed_pending);
    let depths = stats::queue_depths(state).await;
    let paused = crate::worker::queues::paused(&state.pool).await?;
    let now = Utc::now();
    let at = DateTime::from_timestamp(
        now.timestamp() - now.timestamp() % state.config.sample_interval.as_secs().max(1) as i64,
        0,
    )
    .unwrap_or(now);
    let mut rows: Vec<(&str, String, f64)> = vec![
        (
            "throughput_per_min",
            String::new(),
            snap.done_last_min as f64,
        ),
        (
            "failures_per_min",
            String::new(),
            snap.failed_steps_last_min as f64,
        ),
        ("dead_letters", String::new(), snap.dead_letters as f64),
    ];
    for tier in crate::jobs::Tier::ALL {
        let q = tier.as_str();
        let (processing, p99) = queues
            .iter()
            .find(|r| r.queue == q)
            .map_or((0, 0.0), |r| (r.processing, r.age_p99_s));
        m.queue_unacked.with_label_values(&[q]).set(processing);
        m.job_age_p99_seconds.with_label_values(&[q]).set(p99);
        m.queue_paused
            .with_label_values(&[q])
            .set(i64::from(paused.contains(&tier)));
        if let Some((_, depth, consumers)) = depths.iter().find(|d| d.0 == q) {
            m.queue_depth.with_label_values(&[q]).set(i64::from(*depth));
            m.queue_consumers
                .with_label_values(&[q])
                .set(i64::from(*consumers));
            rows.push(("queue_depth", q.to_string(), f64::from(*depth)));
        }
        rows.push(("age_p99_s", q.to_string(), p99));
    }
    let (metrics, queues, values): (Vec<&str>, Vec<String>, Vec<f64>) = unzip3(rows);
    // Several web processes sample at once; one row per metric and instant.
    sqlx::query!(
        "INSERT INTO metric_samples (metric, queue, at, value)
         SELECT m, q, $4, v FROM unnest($1::text[], $2::text[], $3::float8[]) AS s(m, q, v)
         ON CONFLICT DO NOTHING",
        &metrics as &[&str],
        &queues,
        &values,
        at as _
    )
    .execute(&state.pool)
    .await?;
    Ok(())
}

fn unzip3<A, B, C>(v: Vec<(A, B, C)>) -> (Vec<A>, Vec<B>, Vec<C>) {
    let mut a = Vec::with_capacity(v.len());
    let mut b = Vec::with_capacity(v.len());
    let mut c = Vec::with_capacity(v.len());
    for (x, y, z) in v {
        a.push(x);
        b.push(y);
        c.push(z);
    }
    (a, b, c)
}

/// A series since `since`, in at most ~120 points (the highest sample per
/// bucket, so a chart never hides a peak).
pub async fn series(
    pool: &PgPool,
    metric: &str,
    queue: &str,
    since: Duration,
) -> sqlx::Result<Vec<SeriesPointDto>> {
    let bucket_s = (since.as_secs() / 120).max(10) as f64;
    sqlx::query_as(
        "SELECT to_timestamp(floor(extract(epoch FROM at) / $4) * $4) AS at, max(value)::float8 AS value
         FROM metric_samples WHERE metric = $1 AND queue = $2 AND at > now() - $3 * interval '1 second'
         GROUP BY 1 ORDER BY 1",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(metric)
    .bind(queue)
    .bind(since.as_secs_f64())
    .bind(bucket_s)
    .fetch_all(pool)
    .await
}
