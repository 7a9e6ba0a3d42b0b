//! Admin service functions, shared by the REST API and the admin pages:
//! dead letters (list, re-enqueue, discard), jobs across tenants, workers,
//! the audit log. Each action is one transaction with its audit-log row.

use app::dto::{AuditEntryDto, DeadLetterDto, WorkerDto};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{auth::CurrentUser, db, error::ApiError, jobs::machine, pipeline::events::EventSink};

/// Unresolved dead letters, newest first; `before` is the last id of the previous page.
pub async fn dead_letters(
    pool: &PgPool,
    limit: i64,
    before: Option<Uuid>,
) -> sqlx::Result<Vec<DeadLetterDto>> {
    sqlx::query_as(
        "SELECT dl.id::text AS id, dl.job_id::text AS job_id, t.slug AS tenant, d.filename, dl.queue, dl.reason, dl.error, dl.attempts, dl.dead_at
         FROM dead_letters dl
         LEFT JOIN jobs j ON j.id = dl.job_id
         LEFT JOIN documents d ON d.id = j.document_id
         LEFT JOIN tenants t ON t.id = dl.tenant_id
         WHERE dl.resolved_at IS NULL
           AND ($2::uuid IS NULL OR (dl.dead_at, dl.id) < (SELECT dead_at, id FROM dead_letters WHERE id = $2))
         ORDER BY dl.dead_at DESC, dl.id DESC
         LIMIT $1",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(limit)
    .bind(before)
    .fetch_all(pool)
    .await
}

#[derive(sqlx::FromRow)]
struct OpenDeadLetter {
    job_id: Option<Uuid>,
    resolved_at: Option<DateTime<Utc>>,
}

async fn lock_dead_letter(conn: &mut PgConnection, id: Uuid) -> Result<OpenDeadLetter, ApiError> {
    let dl: Option<OpenDeadLetter> =
        sqlx::query_as("SELECT job_id, resolved_at FROM dead_letters WHERE id = $1 FOR UPDATE")
            .bind(id)
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
    sqlx::query("UPDATE dead_letters SET resolved_at = now(), resolution = $2, resolved_by = $3 WHERE id = $1")
        .bind(id)
        .bind(resolution)
        .bind(by.id)
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
    let (_, event) = machine::requeue(&mut tx, job_id)
        .await?
        .ok_or_else(|| ApiError::Conflict("the job is no longer failed".into()))?;
    resolve(&mut tx, id, "requeued", by).await?;
    db::audit(
        &mut tx,
        by.id,
        &by.email,
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
    db::audit(
        &mut tx,
        by.id,
        &by.email,
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
    sqlx::query_as(
        "SELECT id, hostname, pid, queues, running_jobs::text[] AS running_jobs, started_at, heartbeat_at FROM workers
         WHERE heartbeat_at > now() - interval '30 seconds' ORDER BY started_at",
    )
    .fetch_all(pool)
    .await
}

pub async fn audit(
    pool: &PgPool,
    limit: i64,
    before: Option<i64>,
) -> sqlx::Result<Vec<AuditEntryDto>> {
    sqlx::query_as(
        "SELECT id, actor_email AS actor, action, target, detail, at FROM audit_log
         WHERE ($2::bigint IS NULL OR id < $2) ORDER BY id DESC LIMIT $1",
    )
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
    .bind(limit)
    .bind(before)
    .fetch_all(pool)
    .await
}
