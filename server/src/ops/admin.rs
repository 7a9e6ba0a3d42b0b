//! Admin service functions, shared by the REST API and the admin pages:
//! dead letters (list, re-enqueue, discard), jobs across tenants, workers,
//! the audit log. Each action is one transaction with its audit-log row.

use app::dto::{AuditEntryDto, DeadLetterDto, WorkerDto};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{
    identity::auth::CurrentUser, jobs::machine, pipeline::events::EventSink,
    platform::error::ApiError,
};

/// Which dead letters to list; `None` means any.
#[derive(Debug, Default, Clone)]
pub struct DeadLetterFilter {
    /// `permanent`, `exhausted`, `crashed`, `malformed`, …
    pub reason: Option<String>,
    /// The queue as the dashboard names it: `high`, `normal`, `slow`.
    pub queue: Option<String>,
    /// A tenant's slug.
    pub tenant: Option<String>,
    /// Keyset cursor: the last id of the previous page.
    pub before: Option<Uuid>,
    pub limit: i64,
}

/// A dead letter's queue as the dashboard names it: `docflow.jobs.high` is
/// `high`; anything else (a message that never named its queue) as recorded.
const SHORT_QUEUE: &str = "regexp_replace(dl.queue, '^docflow\\.jobs\\.', '')";

/// The conditions an unresolved dead letter `dl` of tenant `t` meets to
/// match a filter: `$1` reason, `$2` queue, `$3` tenant, each `NULL` for any.
fn matching() -> String {
    format!(
        "dl.resolved_at IS NULL
         AND ($1::text IS NULL OR dl.reason = $1)
         AND ($2::text IS NULL OR {SHORT_QUEUE} = $2)
         AND ($3::text IS NULL OR t.slug = $3)"
    )
}

/// Unresolved dead letters matching `f`, newest first. Queues are named as
/// on the dashboard (`high`); attempts are the job's runs when it failed,
/// as its page counts them.
pub async fn dead_letters(pool: &PgPool, f: &DeadLetterFilter) -> sqlx::Result<Vec<DeadLetterDto>> {
    sqlx::query_as(&format!(
        "SELECT dl.id::text AS id, dl.job_id::text AS job_id, t.slug AS tenant, d.filename,
                {SHORT_QUEUE} AS queue, dl.reason, dl.error, dl.attempts, dl.dead_at
         FROM dead_letters dl
         LEFT JOIN jobs j ON j.id = dl.job_id
         LEFT JOIN documents d ON d.id = j.document_id
         LEFT JOIN tenants t ON t.id = dl.tenant_id
         WHERE {}
           AND ($4::uuid IS NULL OR (dl.dead_at, dl.id) < (SELECT dead_at, id FROM dead_letters WHERE id = $4))
         ORDER BY dl.dead_at DESC, dl.id DESC
         LIMIT $5",
        matching()
    ))
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(&f.reason)
    .bind(&f.queue)
    .bind(&f.tenant)
    .bind(f.before)
    .bind(f.limit)
    .fetch_all(pool)
    .await
}

/// How many unresolved dead letters match `f` on every page (its cursor
/// and limit aside), and how many of those failed permanently.
pub async fn count_dead_letters(
    pool: &PgPool,
    f: &DeadLetterFilter,
) -> sqlx::Result<DeadLetterCount> {
    sqlx::query_as(&format!(
        "SELECT count(*) AS total, count(*) FILTER (WHERE dl.reason = 'permanent') AS permanent
         FROM dead_letters dl
         LEFT JOIN tenants t ON t.id = dl.tenant_id
         WHERE {}",
        matching()
    ))
    .persistent(false)
    .bind(&f.reason)
    .bind(&f.queue)
    .bind(&f.tenant)
    .fetch_one(pool)
    .await
}

/// What [`count_dead_letters`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct DeadLetterCount {
    pub total: i64,
    pub permanent: i64,
}

/// The most dead letters one "re-enqueue all that match" takes on; the
/// rest stay listed for the next one.
pub const REQUEUE_MATCHING_MAX: i64 = 5_000;

/// Each dead letter's outcome of a bulk re-enqueue.
#[derive(Debug, Default)]
pub struct Requeued {
    /// Dead letter and its job, pending again.
    pub requeued: Vec<(Uuid, Uuid)>,
    /// Dead letters not re-enqueued: gone, already resolved, no job.
    pub refused: Vec<(Uuid, ApiError)>,
}

/// Re-enqueues each of `ids` in a transaction of its own (as one at a time
/// would), reporting each; a dead letter that is gone or resolved meanwhile
/// is reported, not an error. Stops at the first other error.
pub async fn requeue_each(
    pool: &PgPool,
    events: &EventSink,
    ids: impl IntoIterator<Item = Uuid>,
    by: &CurrentUser,
) -> Result<Requeued, ApiError> {
    let mut out = Requeued::default();
    for id in ids {
        match requeue(pool, events, id, by).await {
            Ok(job_id) => out.requeued.push((id, job_id)),
            Err(e @ (ApiError::NotFound(_) | ApiError::Conflict(_))) => out.refused.push((id, e)),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Re-enqueues every unresolved dead letter matching `f` on every page,
/// oldest first, at most [`REQUEUE_MATCHING_MAX`] (its cursor and limit
/// aside), each as [`requeue_each`] does.
pub async fn requeue_matching(
    pool: &PgPool,
    events: &EventSink,
    f: &DeadLetterFilter,
    by: &CurrentUser,
) -> Result<Requeued, ApiError> {
    let ids: Vec<Uuid> = sqlx::query_scalar(&format!(
        "SELECT dl.id FROM dead_letters dl
         LEFT JOIN tenants t ON t.id = dl.tenant_id
         WHERE {}
         ORDER BY dl.dead_at, dl.id
         LIMIT $4",
        matching()
    ))
    .persistent(false)
    .bind(&f.reason)
    .bind(&f.queue)
    .bind(&f.tenant)
    .bind(REQUEUE_MATCHING_MAX)
    .fetch_all(pool)
    .await?;
    tracing::info!(matched = ids.len(), admin = %by.email, "re-enqueueing every matching dead letter");
    requeue_each(pool, events, ids, by).await
}

/// Every tenant's slug, in order: the choices of the tenant filters.
pub async fn tenant_slugs(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!("SELECT slug FROM tenants ORDER BY slug")
        .fetch_all(pool)
        .await
}

struct OpenDeadLetter {
    job_id: Option<Uuid>,
    resolved_at: Option<DateTime<Utc>>,
}

async fn lock_dead_letter(conn: &mut PgConnection, id: Uuid) -> Result<OpenDeadLetter, ApiError> {
    let dl = sqlx::query_as!(
        OpenDeadLetter,
        r#"SELECT job_id, resolved_at AS "resolved_at: _" FROM dead_letters WHERE id = $1 FOR UPDATE"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?;
    let dl = dl.ok_or(ApiError::NotFound("dead letter"))?;
    if dl.resolved_at.is_some() {
        return Err(ApiError::Conflict(
            "this dead letter was already resolved".into(),
        ));
    }
    Ok(dl)
}

async fn resolve(
    conn: &mut PgConnection,
    id: Uuid,
    resolution: &str,
    by: &CurrentUser,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE dead_letters SET resolved_at = now(), resolution = $2, resolved_by = $3 WHERE id = $1",
        id,
        resolution,
        by.id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Re-enqueues a dead letter's job: resolved, job back to `pending` with its
/// attempts reset and its checkpoints kept, an outbox row, an audit row.
pub async fn requeue(
    pool: &PgPool,
    events: &EventSink,
    id: Uuid,
    by: &CurrentUser,
) -> Result<Uuid, ApiError> {
    let mut tx = pool.begin().await?;
    let dl = lock_dead_letter(&mut tx, id).await?;
    let job_id = dl.job_id.ok_or_else(|| {
        ApiError::Conflict(
            "this message has no job to re-enqueue (it was malformed); discard it".into(),
        )
    })?;
    // The tenant sees that an administrator acted, not who (the audit log
    // says who).
    let (_, event) = machine::requeue(&mut tx, job_id, app::format::REQUEUED_BY_ADMIN)
        .await?
        .ok_or_else(|| ApiError::Conflict("the job is no longer failed".into()))?;
    resolve(&mut tx, id, "requeued", by).await?;
    by.audit(
        &mut tx,
        "dead_letter.requeue",
        &id.to_string(),
        serde_json::json!({"job_id": job_id}),
    )
    .await?;
    tx.commit().await?;
    events.send(event);
    tracing::info!(dead_letter = %id, %job_id, admin = %by.email, "dead letter re-enqueued");
    Ok(job_id)
}

/// Marks a dead letter discarded (the job stays failed), with an audit row.
pub async fn discard(pool: &PgPool, id: Uuid, by: &CurrentUser) -> Result<(), ApiError> {
    let mut tx = pool.begin().await?;
    let dl = lock_dead_letter(&mut tx, id).await?;
    resolve(&mut tx, id, "discarded", by).await?;
    by.audit(
        &mut tx,
        "dead_letter.discard",
        &id.to_string(),
        serde_json::json!({"job_id": dl.job_id}),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(dead_letter = %id, admin = %by.email, "dead letter discarded");
    Ok(())
}

/// Workers that sent a heartbeat in the last 30 seconds.
pub async fn workers(pool: &PgPool) -> sqlx::Result<Vec<WorkerDto>> {
    sqlx::query_as!(
        WorkerDto,
        r#"SELECT id, hostname, pid, queues, running_jobs::text[] AS "running_jobs!",
                  started_at AS "started_at: _", heartbeat_at AS "heartbeat_at: _"
           FROM workers WHERE heartbeat_at > now() - interval '30 seconds' ORDER BY started_at"#
    )
    .fetch_all(pool)
    .await
}

/// Which audit-log entries to list; `None` means any.
#[derive(Debug, Default, Clone)]
pub struct AuditFilter {
    /// The actor's e-mail.
    pub actor: Option<String>,
    /// `dead_letter.requeue`, `job.cancel`, …
    pub action: Option<String>,
    /// Only entries of this last stretch of time.
    pub since: Option<std::time::Duration>,
    /// Keyset cursor: entries older than this id.
    pub before: Option<i64>,
    pub limit: i64,
}

/// The audit log matching `f`, newest first, each entry with the job its
/// target is or leads to (a job, its document, its dead letter) and that
/// job's file name.
pub async fn audit(pool: &PgPool, f: &AuditFilter) -> sqlx::Result<Vec<AuditEntryDto>> {
    sqlx::query_as(
        "SELECT a.id, a.actor_email AS actor, a.action, a.target, a.detail, a.at,
                coalesce(j.id, jd.id)::text AS job_id, d.filename
         FROM audit_log a
         -- Targets are ids for most actions, a queue or `jobs` for others.
         CROSS JOIN LATERAL (SELECT CASE WHEN a.target ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                                         THEN a.target::uuid END AS id) target
         LEFT JOIN dead_letters dl ON a.action LIKE 'dead\\_letter.%' AND dl.id = target.id
         LEFT JOIN jobs j ON j.id = CASE WHEN a.action LIKE 'job.%' THEN target.id ELSE dl.job_id END
         LEFT JOIN jobs jd ON a.action LIKE 'document.%' AND jd.document_id = target.id
         LEFT JOIN documents d ON d.id = coalesce(j.document_id, jd.document_id)
         WHERE ($2::bigint IS NULL OR a.id < $2)
           AND ($3::text IS NULL OR a.actor_email = $3)
           AND ($4::text IS NULL OR a.action = $4)
           AND ($5::double precision IS NULL OR a.at > now() - $5 * interval '1 second')
         ORDER BY a.id DESC LIMIT $1",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(f.limit)
    .bind(f.before)
    .bind(&f.actor)
    .bind(&f.action)
    .bind(f.since.map(|d| d.as_secs_f64()))
    .fetch_all(pool)
    .await
}

/// Everyone who acted and every action in the audit log, each sorted: the
/// choices of its filters.
pub async fn audit_choices(pool: &PgPool) -> sqlx::Result<(Vec<String>, Vec<String>)> {
    let actors = sqlx::query_scalar!("SELECT DISTINCT actor_email FROM audit_log ORDER BY 1")
        .fetch_all(pool)
        .await?;
    let actions = sqlx::query_scalar!("SELECT DISTINCT action FROM audit_log ORDER BY 1")
        .fetch_all(pool)
        .await?;
    Ok((actors, actions))
}
