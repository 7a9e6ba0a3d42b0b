//! Sends webhook deliveries: claims due rows of `webhook_deliveries` with
//! `FOR UPDATE SKIP LOCKED` and a lease (any number of processes may run
//! this loop; a process that dies mid-send leaves its rows to the next
//! claim once the lease ends, so a delivery is sent at least once), POSTs
//! each signed body, and records the outcome: any 2xx delivers it;
//! anything else is retried after a jittered, doubling delay until the
//! retry period (a day by default) has passed, then given up. An endpoint
//! that failed for a whole retry period is disabled and its tenant's
//! admins are told in their inbox; its other deliveries wait, and resume
//! when an admin redelivers.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use rand::Rng;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{signature, target};
use crate::platform::metrics::Metrics;

/// Deliveries claimed at once, and sent at once.
const CLAIM: i64 = 32;
const PARALLEL: usize = 8;
/// Longest wait for an endpoint's answer; the lease outlasts it.
pub const TIMEOUT: Duration = Duration::from_secs(10);
const LEASE_SECS: i64 = 60;
/// The most of an answer kept (and read).
pub const SNIPPET: usize = 512;
/// The longest delay between two attempts by default
/// (`DOCFLOW_WEBHOOK_BACKOFF_MAX`).
pub const MAX_DELAY: Duration = Duration::from_secs(3600);
const POLL: Duration = Duration::from_secs(1);

/// How deliveries are made.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub policy: target::Policy,
    /// The first retry's delay; each next one doubles, up to `max_delay`.
    pub backoff: Duration,
    /// The longest delay (`DOCFLOW_WEBHOOK_BACKOFF_MAX`, an hour by default).
    pub max_delay: Duration,
    /// How long a delivery is retried before it is given up.
    pub retry_for: Duration,
}

impl Settings {
    pub fn from_config(c: &crate::platform::config::Config) -> Self {
        Settings {
            policy: target::Policy {
                allow_private: c.webhook_allow_private,
                allow_http: c.webhook_allow_http,
            },
            backoff: c.webhook_backoff,
            max_delay: c.webhook_backoff_max,
            retry_for: c.webhook_retry_for,
        }
    }
}

/// The delay before attempt `attempts + 1`: `backoff` doubled per attempt,
/// at most `max`, jittered ±20 %.
pub fn delay(backoff: Duration, max: Duration, attempts: i32, jitter: f64) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    backoff
        .saturating_mul(1 << doublings)
        .min(max)
        .mul_f64(jitter.clamp(0.8, 1.2))
}

struct Claimed {
    id: Uuid,
    endpoint_id: Uuid,
    attempts: i32,
    /// When the retry period began: creation, or the last redeliver.
    since: DateTime<Utc>,
    url: String,
    secret: String,
    tenant_id: Uuid,
    event_id: Uuid,
    event_type: String,
    event_at: DateTime<Utc>,
    job_id: Option<Uuid>,
    batch_id: Option<Uuid>,
    document_id: Option<Uuid>,
    state: Option<String>,
    body: Option<String>,
}

/// What one attempt came to.
enum Outcome {
    Delivered {
        status: u16,
        latency_ms: i32,
        snippet: String,
    },
    Failed {
        status: Option<u16>,
        latency_ms: Option<i32>,
        snippet: Option<String>,
        error: String,
        /// An internal target: retrying cannot help until DNS changes
        /// back, but it is retried like any failure.
        refused: bool,
    },
}

/// The delivery client: no redirects, bounded time, and (unless private
/// targets are allowed) a resolver that refuses internal addresses.
pub fn client(policy: target::Policy) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .user_agent(concat!("docflow-webhooks/", env!("CARGO_PKG_VERSION")));
    if !policy.allow_private {
        b = b.dns_resolver(Arc::new(target::GuardedResolver));
    }
    Ok(b.build()?)
}

/// Runs the delivery loop until `shutdown`; survives PostgreSQL outages.
pub async fn run(pool: PgPool, settings: Settings, metrics: Metrics, shutdown: CancellationToken) {
    let client = match client(settings.policy) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                "webhook client could not be built; no webhooks are delivered"
            );
            return;
        }
    };
    let mut wakeup = crate::platform::db::Wakeup::new(pool.clone(), "docflow_webhooks");
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        match deliver_due(&pool, &client, settings, &metrics).await {
            Ok(n) if n as i64 == CLAIM => continue,
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "webhook deliveries could not be claimed"),
        }
        if !wakeup.wait(POLL, &shutdown).await {
            return;
        }
    }
}

/// Claims and sends the deliveries due now; returns how many were claimed.
pub async fn deliver_due(
    pool: &PgPool,
    client: &reqwest::Client,
    settings: Settings,
    metrics: &Metrics,
) -> sqlx::Result<usize> {
    // Read through the CTE: the `!` says not null where the columns are.
    let claimed = sqlx::query_as!(
        Claimed,
        r#"WITH claimed AS (
             UPDATE webhook_deliveries d
             SET lease_until = now() + make_interval(secs => $2), attempts = attempts + 1
             WHERE d.id IN (
                 SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
                 WHERE d.state = 'pending' AND d.next_attempt_at <= now()
                   AND (d.lease_until IS NULL OR d.lease_until < now()) AND e.disabled_at IS NULL
                 ORDER BY d.next_attempt_at LIMIT $1
                 FOR UPDATE OF d SKIP LOCKED)
             RETURNING d.id, d.endpoint_id, d.event_id, d.attempts,
                       coalesce(d.redelivered_at, d.created_at) AS since)
         SELECT c.id AS "id!", c.endpoint_id AS "endpoint_id!", c.attempts AS "attempts!",
                c.since AS "since!: _", e.url, e.secret, ev.tenant_id,
                ev.id AS event_id, ev.type AS event_type, ev.created_at AS "event_at: _",
                ev.job_id, ev.batch_id, ev.document_id, ev.state, ev.body
         FROM claimed c JOIN webhook_endpoints e ON e.id = c.endpoint_id
         JOIN webhook_events ev ON ev.id = c.event_id"#,
        CLAIM,
        LEASE_SECS as f64
    )
    .fetch_all(pool)
    .await?;
    let n = claimed.len();
    futures::stream::iter(claimed)
        .for_each_concurrent(PARALLEL, |c| async move {
            if let Err(e) = attempt(pool, client, settings, metrics, c).await {
                // The lease runs out and the delivery is claimed again.
                tracing::warn!(error = format!("{e:#}"), "webhook delivery not recorded");
            }
        })
        .await;
    Ok(n)
}

async fn attempt(
    pool: &PgPool,
    client: &reqwest::Client,
    settings: Settings,
    metrics: &Metrics,
    c: Claimed,
) -> anyhow::Result<()> {
    let body = match &c.body {
        Some(b) => b.clone(),
        None => render(pool, &c).await?,
    };
    let outcome = send(client, settings.policy, &c, &body).await;
    record(pool, settings, metrics, &c, outcome).await
}

/// The event's body, rendered once and kept, so that every attempt (and
/// every endpoint) gets the same bytes: `{"id","type","created_at","data"}`
/// with `data` the job as `GET /api/jobs/{id}` shows it, or the batch as
/// `GET /api/batches/{id}` does, in the state the event announces.
async fn render(pool: &PgPool, c: &Claimed) -> anyhow::Result<String> {
    let mut conn = pool.acquire().await?;
    let mut data = if let Some(batch) = c.batch_id.filter(|_| c.event_type == "batch.done") {
        serde_json::to_value(crate::batches::fetch(&mut conn, batch, None).await?)?
    } else if let Some(job) = c.job_id {
        serde_json::to_value(crate::jobs::repo::get(&mut conn, job, None).await?)?
    } else {
        serde_json::Value::Null
    };
    if let (Some(obj), Some(state)) = (data.as_object_mut(), &c.state) {
        if c.event_type != "document.deleted" {
            obj.insert("state".into(), state.clone().into());
        }
        if let Some(doc) = c.document_id {
            obj.entry("document_id")
                .or_insert_with(|| doc.to_string().into());
        }
    }
    if data.is_null() {
        data = serde_json::json!({ "document_id": c.document_id, "batch_id": c.batch_id });
    }
    let body = serde_json::to_string(&serde_json::json!({
        "id": c.event_id,
        "type": c.event_type,
        "created_at": c.event_at,
        "data": data,
    }))?;
    let kept = sqlx::query_scalar!(
        r#"UPDATE webhook_events SET body = coalesce(body, $2) WHERE id = $1 RETURNING body AS "body!""#,
        c.event_id,
        &body
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(kept)
}

async fn send(
    client: &reqwest::Client,
    policy: target::Policy,
    c: &Claimed,
    body: &str,
) -> Outcome {
    let refused = |error: String| Outcome::Failed {
        status: None,
        latency_ms: None,
        snippet: None,
        error,
        refused: true,
    };
    // The URL was checked at registration; check its form again, and an IP
    // literal here (the resolver sees only names).
    let url = match target::check_form(&c.url, policy) {
        Ok(u) => u,
        Err(e) => return refused(e),
    };
    if !policy.allow_private && target::literal_is_internal(&url) {
        return refused(format!(
            "{} is an internal address; not delivered",
            url.host_str().unwrap_or_default()
        ));
    }
    let t = Utc::now().timestamp();
    let started = std::time::Instant::now();
    let result = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("Docflow-Event-Id", c.event_id.to_string())
        .header("Docflow-Event-Type", &c.event_type)
        .header(
            "Docflow-Signature",
            signature::header(&c.secret, t, body.as_bytes()),
        )
        .body(body.to_string())
        .send()
        .await;
    let mut response = match result {
        Ok(r) => r,
        Err(e) => {
            let error = error_chain(&e);
            let internal = error.contains("internal address");
            return Outcome::Failed {
                status: None,
                latency_ms: Some(elapsed_ms(started)),
                snippet: None,
                error,
                refused: internal,
            };
        }
    };
    let status = response.status();
    let mut snippet = Vec::new();
    while snippet.len() < SNIPPET {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                snippet.extend_from_slice(&chunk[..chunk.len().min(SNIPPET - snippet.len())])
            }
            _ => break,
        }
    }
    let snippet = String::from_utf8_lossy(&snippet).into_owned();
    let latency_ms = elapsed_ms(started);
    if status.is_success() {
        Outcome::Delivered {
            status: status.as_u16(),
            latency_ms,
            snippet,
        }
    } else {
        let error = if status.is_redirection() {
            format!("answered {status}: redirects are not followed")
        } else {
            format!("answered {status}")
        };
        Outcome::Failed {
            status: Some(status.as_u16()),
            latency_ms: Some(latency_ms),
            snippet: Some(snippet),
            error,
            refused: false,
        }
    }
}

fn elapsed_ms(since: std::time::Instant) -> i32 {
    i32::try_from(since.elapsed().as_millis()).unwrap_or(i32::MAX)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

async fn record(
    pool: &PgPool,
    settings: Settings,
    metrics: &Metrics,
    c: &Claimed,
    outcome: Outcome,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    match outcome {
        Outcome::Delivered {
            status,
            latency_ms,
            snippet,
        } => {
            sqlx::query!(
                "UPDATE webhook_deliveries SET state = 'delivered', delivered_at = now(), lease_until = NULL,
                     last_status = $2, last_latency_ms = $3, last_response = $4, last_error = NULL
                 WHERE id = $1",
                c.id,
                i32::from(status),
                latency_ms,
                snippet
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query!(
                "UPDATE webhook_endpoints SET last_success_at = now() WHERE id = $1",
                c.endpoint_id
            )
            .execute(&mut *tx)
            .await?;
            metrics
                .webhook_deliveries_total
                .with_label_values(&["delivered"])
                .inc();
        }
        Outcome::Failed {
            status,
            latency_ms,
            snippet,
            error,
            refused,
        } => {
            let wait = delay(
                settings.backoff,
                settings.max_delay,
                c.attempts,
                rand::thread_rng().gen_range(0.8..1.2),
            );
            let next =
                Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1));
            let deadline = c.since
                + chrono::Duration::from_std(settings.retry_for)
                    .unwrap_or(chrono::Duration::days(1));
            let give_up = next > deadline;
            sqlx::query!(
                "UPDATE webhook_deliveries SET state = $2, next_attempt_at = $3, lease_until = NULL,
                     last_status = $4, last_latency_ms = $5, last_response = $6, last_error = $7
                 WHERE id = $1",
                c.id,
                if give_up { "failed" } else { "pending" },
                next as _,
                status.map(i32::from),
                latency_ms,
                snippet,
                &error
            )
            .execute(&mut *tx)
            .await?;
            let outcome = match (give_up, refused) {
                (true, _) => "failed",
                (false, true) => "refused",
                (false, false) => "retry",
            };
            metrics
                .webhook_deliveries_total
                .with_label_values(&[outcome])
                .inc();
            tracing::info!(delivery = %c.id, event = %c.event_id, attempts = c.attempts, %error, give_up, "webhook delivery failed");
            if give_up {
                disable_if_failing(&mut tx, c, &error).await?;
            }
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Disables the endpoint when it has not answered once since the given-up
/// delivery began (it failed for the whole retry period), and tells the
/// tenant's admins.
async fn disable_if_failing(
    tx: &mut sqlx::PgConnection,
    c: &Claimed,
    error: &str,
) -> sqlx::Result<()> {
    let reason = format!("no delivery succeeded for the whole retry period; the last: {error}");
    let disabled = sqlx::query_scalar!(
        "UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = $3
         WHERE id = $1 AND disabled_at IS NULL AND (last_success_at IS NULL OR last_success_at < $2)
         RETURNING url",
        c.endpoint_id,
        c.since as _,
        &reason
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(url) = disabled else { return Ok(()) };
    tracing::warn!(endpoint = %c.endpoint_id, %url, "webhook endpoint disabled after failing for the whole retry period");
    sqlx::query!(
        "INSERT INTO notifications (id, user_id, kind, title, body, link)
         SELECT gen_random_uuid(), id, 'webhook_disabled', $2, $3, '/admin/webhooks'
         FROM users WHERE tenant_id = $1 AND role = 'admin'",
        c.tenant_id,
        format!("Webhook to {url} was disabled"),
        format!(
            "It failed every delivery for the whole retry period ({error}). Fix the receiver, then redeliver a delivery to enable it again; the deliveries it missed are kept."
        )
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_the_backoff_is_capped_at_an_hour_and_jittered() {
        let b = Duration::from_secs(10);
        assert_eq!(delay(b, MAX_DELAY, 1, 1.0), Duration::from_secs(10));
        assert_eq!(delay(b, MAX_DELAY, 2, 1.0), Duration::from_secs(20));
        assert_eq!(delay(b, MAX_DELAY, 4, 1.0), Duration::from_secs(80));
        assert_eq!(delay(b, MAX_DELAY, 40, 1.0), MAX_DELAY);
        let max = Duration::from_secs(30);
        assert_eq!(delay(b, max, 3, 1.0), max, "at most the configured longest");
        assert_eq!(delay(b, MAX_DELAY, 1, 1.2), Duration::from_secs(12));
        assert_eq!(
            delay(b, MAX_DELAY, 1, 5.0),
            Duration::from_secs(12),
            "jitter is bounded"
        );
    }
}
