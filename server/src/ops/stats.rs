//! The numbers operators live by, from one place for both the stats API and
//! the dashboard: queue depth and consumers (RabbitMQ, passive declare), job
//! counts and age percentiles, per-step failure rates, the retry
//! distribution, the dead-letter backlog, throughput, which queues are
//! paused, when each backlog clears at its recent drain rate, and each
//! tenant's share of the work (PostgreSQL, index-backed).

use std::time::Duration;

use app::dto::{DependencyDto, QueueStatsDto, ReembedDto, StatsDto, StepStatsDto, TenantStatsDto};
use chrono::{DateTime, Utc};

use crate::{broker, jobs::Tier, state::AppState};

/// Unfinished jobs of one queue: counts by state and ages.
#[derive(sqlx::FromRow)]
pub struct QueueRow {
    pub queue: String,
    pub pending: i64,
    pub processing: i64,
    pub retrying: i64,
    pub age_p99_s: f64,
    pub oldest_age_s: f64,
}

/// Counts and ages of each queue's unfinished jobs, from the partial index
/// `jobs_unfinished (queue, enqueued_at)` alone: the counts are an
/// index-only scan, and the 99th-percentile age is read at offset
/// `⌊0.01·(n − 1)⌋` from the oldest, a short index walk, instead of sorting
/// the backlog. That is `percentile_cont(0.99)`'s rank rounded towards the
/// older job, so the age is never under-reported.
pub async fn queue_rows(pool: &sqlx::PgPool) -> sqlx::Result<Vec<QueueRow>> {
    let queues: Vec<&str> = Tier::ALL.iter().map(|t| t.as_str()).collect();
    sqlx::query_as::<_, QueueRow>(
        "SELECT q.queue, c.pending, c.processing, c.retrying,
                coalesce(extract(epoch FROM now() - (
                    SELECT j.enqueued_at FROM jobs j
                    WHERE j.queue = q.queue AND j.state IN ('pending', 'processing', 'retrying')
                    ORDER BY j.enqueued_at
                    OFFSET floor(0.01 * greatest(c.n - 1, 0))::bigint LIMIT 1)), 0)::float8 AS age_p99_s,
                coalesce(extract(epoch FROM now() - c.oldest), 0)::float8 AS oldest_age_s
         FROM unnest($1::text[]) AS q(queue),
              LATERAL (SELECT count(*) AS n,
                              count(*) FILTER (WHERE j.state = 'pending') AS pending,
                              count(*) FILTER (WHERE j.state = 'processing') AS processing,
                              count(*) FILTER (WHERE j.state = 'retrying') AS retrying,
                              min(j.enqueued_at) AS oldest
                       FROM jobs j
                       WHERE j.queue = q.queue AND j.state IN ('pending', 'processing', 'retrying')) c",
    )
    .bind(&queues)
    .fetch_all(pool)
    .await
}

/// How far back the drain rate behind a queue's ETA looks.
pub const DRAIN_WINDOW: Duration = Duration::from_secs(300);

/// Seconds until `backlog` jobs' worth of work is done at `per_s` jobs'
/// worth a second: 0 without a backlog; `None` while the queue does not
/// drain (nothing ended or progressed lately, or it is paused).
pub fn eta_s(backlog: f64, per_s: f64, paused: bool) -> Option<f64> {
    if backlog <= 0.0 {
        return Some(0.0);
    }
    if per_s <= 0.0 || paused {
        return None;
    }
    Some(backlog / per_s)
}

/// The documents of one queue whose parse step is running and reports
/// pages (a 300-page scan takes minutes to read): the pages read of how
/// many; `read`, the share of those documents read (the sum of each one's
/// `pages_parsed / pages_total`); `read_lately`, the share read within the
/// last [`DRAIN_WINDOW`]; and `pace`, the shares read per second. Each
/// document's pages are taken as read at an even pace since its parse
/// started.
#[derive(sqlx::FromRow, Debug, Default, Clone, PartialEq)]
pub struct Parsing {
    pub queue: String,
    pub pages_parsed: i64,
    pub pages_total: i64,
    pub read: f64,
    pub read_lately: f64,
    pub pace: f64,
}

impl Parsing {
    /// The queue's backlog in jobs, a document 120 pages into 300 counting
    /// 0.6 of a job, and the jobs' worth it drains a second. That is the
    /// rate of the last [`DRAIN_WINDOW`] (the jobs that ended in it, plus
    /// the share of a job each document in parse read in it) while jobs
    /// end; when none ended in the window (every job in it is long, a scan
    /// read for minutes), the documents' own pace of reading.
    pub fn drain(&self, backlog: i64, ended: i64) -> (f64, f64) {
        let per_s = if ended > 0 {
            (ended as f64 + self.read_lately) / DRAIN_WINDOW.as_secs_f64()
        } else {
            self.pace
        };
        (backlog as f64 - self.read, per_s)
    }
}

/// [`Parsing`] of every queue with such a document.
async fn parsing(pool: &sqlx::PgPool) -> sqlx::Result<Vec<Parsing>> {
    sqlx::query_as::<_, Parsing>(
        "SELECT queue, sum(pages_parsed)::int8 AS pages_parsed, sum(pages_total)::int8 AS pages_total,
                sum(share) AS read, sum(share * least(1, $1 / parsing_s)) AS read_lately,
                sum(share / parsing_s) AS pace
         FROM (SELECT j.queue, j.pages_parsed, j.pages_total,
                      least(j.pages_parsed, j.pages_total)::float8 / j.pages_total AS share,
                      greatest(extract(epoch FROM now() - s.started_at)::float8, 1) AS parsing_s
               FROM jobs j JOIN job_steps s ON s.job_id = j.id AND s.step = 'parse'
               WHERE j.state = 'processing' AND j.current_step = 'parse' AND j.pages_total > 0) p
         GROUP BY queue",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(DRAIN_WINDOW.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// Jobs of each queue that ended (done, failed or cancelled) in the last
/// [`DRAIN_WINDOW`], from the index `jobs_finished`.
async fn drained(pool: &sqlx::PgPool) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as(
        "SELECT queue, count(*) FROM jobs
         WHERE finished_at > now() - $1 * interval '1 second' GROUP BY queue",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(DRAIN_WINDOW.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// One tenant's counts, before its share is known.
#[derive(sqlx::FromRow)]
struct TenantRow {
    tenant: String,
    plan: String,
    unfinished: i64,
    done: i64,
    failed: i64,
    dead_letters: i64,
}

/// Every tenant's unfinished jobs (index `jobs_tenant_unfinished`), jobs
/// done and failed in the window (index `jobs_finished`) and open dead
/// letters, by slug; each share of the backlog is worked out from them.
async fn tenants(pool: &sqlx::PgPool, window_s: f64) -> sqlx::Result<Vec<TenantStatsDto>> {
    let rows: Vec<TenantRow> = sqlx::query_as(
        "SELECT t.slug AS tenant, t.plan,
                coalesce(u.n, 0) AS unfinished, coalesce(f.done, 0) AS done,
                coalesce(f.failed, 0) AS failed, coalesce(dl.n, 0) AS dead_letters
         FROM tenants t
         LEFT JOIN (SELECT tenant_id, count(*) AS n FROM jobs
                    WHERE state IN ('pending', 'processing', 'retrying') GROUP BY tenant_id) u
                ON u.tenant_id = t.id
         LEFT JOIN (SELECT tenant_id, count(*) FILTER (WHERE state = 'done') AS done,
                           count(*) FILTER (WHERE state = 'failed') AS failed
                    FROM jobs WHERE finished_at > now() - $1 * interval '1 second'
                    GROUP BY tenant_id) f
                ON f.tenant_id = t.id
         LEFT JOIN (SELECT tenant_id, count(*) AS n FROM dead_letters
                    WHERE resolved_at IS NULL GROUP BY tenant_id) dl
                ON dl.tenant_id = t.id
         ORDER BY t.slug",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(window_s)
    .fetch_all(pool)
    .await?;
    let all: i64 = rows.iter().map(|r| r.unfinished).sum();
    Ok(rows
        .into_iter()
        .map(|r| TenantStatsDto {
            backlog_share: if all > 0 {
                r.unfinished as f64 / all as f64
            } else {
                0.0
            },
            tenant: r.tenant,
            plan: r.plan,
            unfinished: r.unfinished,
            done: r.done,
            failed: r.failed,
            dead_letters: r.dead_letters,
        })
        .collect())
}

/// The longest window: PostgreSQL's `interval` holds about 178 million
/// years, and a longer `now() - window` would be an error, not an answer.
const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Runs the reads at once (each on its own connection), so the answer takes
/// as long as the slowest of them rather than their sum. A window over 100
/// years counts as 100 years.
pub async fn collect(state: &AppState, window: Duration) -> sqlx::Result<StatsDto> {
    let window = window.min(MAX_WINDOW);
    let window_s = window.as_secs_f64();
    let queue_rows = queue_rows(&state.pool);
    let step_rows = sqlx::query_as::<_, (String, i64, i64)>(
        "SELECT step, coalesce(sum(attempts), 0)::bigint,
                coalesce(sum(attempts - CASE WHEN state IN ('done', 'running') THEN 1 ELSE 0 END), 0)::bigint
         FROM job_steps WHERE started_at > now() - $1 * interval '1 second'
         GROUP BY step",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(window_s)
    .fetch_all(&state.pool);
    // Finished jobs in the window by retries spent, and how many of them are done.
    let finished = sqlx::query_as::<_, (i32, i64, i64)>(
        "SELECT least(retries, 3), count(*), count(*) FILTER (WHERE state = 'done') FROM jobs
         WHERE finished_at > now() - $1 * interval '1 second' GROUP BY 1",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(window_s)
    .fetch_all(&state.pool);
    let dead_letters =
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL")
            .fetch_one(&state.pool);
    let (
        queue_rows,
        step_rows,
        finished,
        dead_letters,
        broker_stats,
        dependencies,
        paused,
        drained,
        parsing,
        tenants,
    ) = tokio::join!(
        queue_rows,
        step_rows,
        finished,
        dead_letters,
        queue_depths(state),
        dependencies(state),
        crate::worker::queues::paused(&state.pool),
        drained(&state.pool),
        parsing(&state.pool),
        tenants(&state.pool, window_s),
    );
    let reembed = reembed(&state.pool).await?;
    let (queue_rows, step_rows, finished, dead_letters, dependencies, paused, drained) = (
        queue_rows?,
        step_rows?,
        finished?,
        dead_letters?,
        dependencies?,
        paused?,
        drained?,
    );
    let (parsing, tenants) = (parsing?, tenants?);

    let queues = Tier::ALL
        .iter()
        .map(|t| {
            let row = queue_rows.iter().find(|r| r.queue == t.as_str());
            let (depth, consumers) = broker_stats
                .iter()
                .find(|(q, _, _)| q == t.as_str())
                .map(|(_, d, c)| (Some(*d), Some(*c)))
                .unwrap_or((None, None));
            let backlog = row.map_or(0, |r| r.pending + r.processing + r.retrying);
            let ended = drained
                .iter()
                .find(|(q, _)| q == t.as_str())
                .map_or(0, |(_, n)| *n);
            let parsing = parsing
                .iter()
                .find(|p| p.queue == t.as_str())
                .cloned()
                .unwrap_or_default();
            let (work, per_s) = parsing.drain(backlog, ended);
            QueueStatsDto {
                queue: t.as_str().into(),
                depth,
                unacked: row.map_or(0, |r| r.processing),
                consumers,
                pending: row.map_or(0, |r| r.pending),
                processing: row.map_or(0, |r| r.processing),
                retrying: row.map_or(0, |r| r.retrying),
                age_p99_s: row.map_or(0.0, |r| r.age_p99_s),
                oldest_age_s: row.map_or(0.0, |r| r.oldest_age_s),
                paused: paused.contains(t),
                eta_s: eta_s(work, per_s, paused.contains(t)),
                pages_parsed: parsing.pages_parsed,
                pages_total: parsing.pages_total,
                age_warn_s: state.config.age_warn.as_secs_f64(),
            }
        })
        .collect();
    let steps = crate::jobs::Step::ALL
        .iter()
        .map(|s| {
            let (attempts, failures) = step_rows
                .iter()
                .find(|r| r.0 == s.as_str())
                .map(|r| (r.1, r.2))
                .unwrap_or((0, 0));
            StepStatsDto {
                step: s.as_str().into(),
                attempts,
                failures,
                failure_rate: if attempts > 0 {
                    failures as f64 / attempts as f64
                } else {
                    0.0
                },
            }
        })
        .collect();
    let retries = (0..=3)
        .map(|r| {
            (
                r.to_string(),
                finished.iter().find(|h| h.0 == r).map_or(0, |h| h.1),
            )
        })
        .collect();
    let done: i64 = finished.iter().map(|h| h.2).sum();
    Ok(StatsDto {
        window_s: window.as_secs(),
        queues,
        steps,
        retries,
        dead_letters,
        throughput_per_min: done as f64 / (window_s / 60.0).max(1.0 / 60.0),
        dependencies,
        tenants,
        reembed,
    })
}

/// The latest re-embedding after a model change (see
/// [`crate::pipeline::reembed`]); `None` when the model never changed.
async fn reembed(pool: &sqlx::PgPool) -> sqlx::Result<Option<ReembedDto>> {
    type Row = (
        String,
        Vec<String>,
        i64,
        i64,
        i64,
        i64,
        bool,
        DateTime<Utc>,
        Option<DateTime<Utc>>,
    );
    let row: Option<Row> = sqlx::query_as(
        "SELECT m.name,
                ARRAY(SELECT f.name FROM embedding_models f WHERE f.id = ANY(r.from_models) ORDER BY f.id),
                count(*) FILTER (WHERE e.state = 'done'),
                count(*) FILTER (WHERE e.state = 'failed'),
                count(*) FILTER (WHERE e.state = 'pending'),
                count(*) FILTER (WHERE e.state = 'done' AND e.finished_at > now() - interval '1 minute'),
                r.paused, r.started_at, r.finished_at
         FROM reembed_run r JOIN embedding_models m ON m.id = r.model_id
         LEFT JOIN reembeds e ON e.model_id = r.model_id
         WHERE cardinality(r.from_models) > 0
         GROUP BY m.name, r.from_models, r.paused, r.started_at, r.finished_at",
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(
        |(model, from, done, failed, pending, last_minute, paused, started_at, finished_at)| {
            // A run younger than a minute: per minute of it.
            let minutes =
                ((Utc::now() - started_at).num_milliseconds() as f64 / 60_000.0).clamp(0.05, 1.0);
            let rate_per_min = last_minute as f64 / minutes;
            ReembedDto {
                model,
                from,
                total: done + failed + pending,
                done,
                failed,
                pending,
                rate_per_min: (rate_per_min * 10.0).round() / 10.0,
                eta_s: (rate_per_min > 0.0 && pending > 0)
                    .then(|| (pending as f64 / rate_per_min * 60.0).ceil()),
                paused,
                started_at,
                finished_at,
            }
        },
    ))
}

/// The embedding provider as the dashboard shows it: down while a process
/// that probed it lately has its breaker open (a process that died with an
/// open breaker stops counting after a few probe intervals).
async fn dependencies(state: &AppState) -> sqlx::Result<Vec<DependencyDto>> {
    let fresh_ms = (state.config.breaker_probe_max * 3)
        .max(std::time::Duration::from_secs(300))
        .as_millis() as i64;
    let down: Option<(Option<DateTime<Utc>>, Option<String>)> = sqlx::query_as(
        "SELECT next_probe_at, error FROM dependency_status
         WHERE dependency = 'embedder' AND NOT up AND updated_at > now() - $1 * interval '1 millisecond'
         ORDER BY next_probe_at LIMIT 1",
    )
    .bind(fresh_ms)
    .fetch_optional(&state.pool)
    .await?;
    let waiting_jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE state = 'retrying' AND waiting_for = 'embedder'",
    )
    .fetch_one(&state.pool)
    .await?;
    let (next_probe_at, error) = down.clone().unwrap_or_default();
    Ok(vec![DependencyDto {
        name: "embedder".into(),
        label: "embedding provider".into(),
        up: down.is_none(),
        waiting_jobs,
        next_probe_at,
        error,
    }])
}

/// `(queue tier, ready messages, consumers)` of each work queue; empty when RabbitMQ is down.
pub async fn queue_depths(state: &AppState) -> Vec<(String, u32, u32)> {
    let Ok(ch) = state.broker.channel().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in Tier::ALL {
        if let Ok((depth, consumers)) = broker::queue_stats(&ch, &t.queue_name()).await {
            out.push((t.as_str().to_string(), depth, consumers));
        }
    }
    let _ = ch.close(200, "stats read".into()).await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate of `ended` jobs in the window, per second.
    fn rate(ended: f64) -> f64 {
        ended / DRAIN_WINDOW.as_secs_f64()
    }

    #[test]
    fn the_eta_is_the_backlog_at_the_last_five_minutes_drain_rate() {
        // 60 ended in 300 s: 0.2 jobs/s; 48 left take 240 s.
        assert_eq!(eta_s(48.0, rate(60.0), false), Some(240.0));
        assert_eq!(eta_s(1.0, rate(300.0), false), Some(1.0));
        assert_eq!(Parsing::default().drain(48, 60), (48.0, rate(60.0)));
    }

    #[test]
    fn an_empty_backlog_is_cleared_now_and_one_that_does_not_drain_has_no_eta() {
        assert_eq!(eta_s(0.0, 0.0, false), Some(0.0));
        assert_eq!(eta_s(0.0, rate(12.0), true), Some(0.0));
        assert_eq!(eta_s(5.0, 0.0, false), None);
        // A paused queue does not drain, whatever it did before the pause.
        assert_eq!(eta_s(5.0, rate(100.0), true), None);
        assert_eq!(Parsing::default().drain(5, 0), (5.0, 0.0));
    }

    /// One 300-page scan, 120 pages read in the 10 minutes since its parse
    /// started, 60 of them in the last five.
    fn scan() -> Parsing {
        Parsing {
            queue: "slow".into(),
            pages_parsed: 120,
            pages_total: 300,
            read: 0.4,
            read_lately: 0.2,
            pace: 0.4 / 600.0,
        }
    }

    #[test]
    fn a_long_scan_alone_drains_at_its_own_pace() {
        // Nothing has ended, yet the queue drains: 0.6 of the scan is
        // left, at 0.4 in 600 s; 900 s.
        let (work, per_s) = scan().drain(1, 0);
        assert!((work - 0.6).abs() < 1e-9, "{work}");
        let eta = eta_s(work, per_s, false).expect("draining");
        assert!((eta - 900.0).abs() < 1e-6, "{eta}");
    }

    #[test]
    fn beside_jobs_that_end_a_scan_counts_its_pages_read_in_the_window() {
        // 5 jobs ended and the scan read 0.2 of itself in 300 s: 5.2 jobs'
        // worth; the backlog of 10 (the scan among them) is 9.6 jobs.
        let (work, per_s) = scan().drain(10, 5);
        assert!((work - 9.6).abs() < 1e-9, "{work}");
        assert!((per_s - rate(5.2)).abs() < 1e-12, "{per_s}");
        let eta = eta_s(work, per_s, false).expect("draining");
        assert!((eta - 9.6 / 5.2 * 300.0).abs() < 1e-6, "{eta}");
    }
}
