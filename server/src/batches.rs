//! Batches: a folder of uploads handed over as one unit. A batch is `open`
//! while it takes uploads (`batch_id` on `POST /api/documents`), `running`
//! once it has jobs, and `done` (or `cancelled`) once it is closed and
//! every job in it has ended; then `batch.done` goes to the tenant's
//! webhooks with the counts. Whenever a job of a batch changes state, a
//! trigger appends the batch to `batch_checks` in the transaction of the
//! change, so no code path that ends a job can forget its batch; the
//! [`run_checker`] loop then brings the batch's state up to date
//! (`docflow_batch_check`) once that change has committed.

use app::dto::{BatchCountsDto, BatchDto};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{
    identity::auth::CurrentUser,
    jobs::{machine, JobState},
    pipeline::events::EventSink,
    platform::db,
    platform::error::ApiError,
};

/// Jobs one batch may hold: a folder, not the whole archive.
pub const MAX_JOBS: i64 = 10_000;

struct Row {
    id: Uuid,
    name: String,
    state: String,
    created_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    pending: i64,
    processing: i64,
    retrying: i64,
    done: i64,
    failed: i64,
    cancelled: i64,
    /// When the first of its jobs ended: the start of the rate the ETA uses.
    first_started: Option<DateTime<Utc>>,
}

/// `sqlx::query_as!` for [`Row`]s, batches with their jobs counted by
/// state: the select written once, the rest of the statement (`$rest`, a
/// string literal; it groups by `b.id`) and its arguments after.
macro_rules! select_batches {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Row,
            r#"SELECT b.id, b.name, b.state, b.created_at AS "created_at: _",
                    b.closed_at AS "closed_at: _", b.finished_at AS "finished_at: _",
                    count(*) FILTER (WHERE j.state = 'pending') AS "pending!",
                    count(*) FILTER (WHERE j.state = 'processing') AS "processing!",
                    count(*) FILTER (WHERE j.state = 'retrying') AS "retrying!",
                    count(*) FILTER (WHERE j.state = 'done') AS "done!",
                    count(*) FILTER (WHERE j.state = 'failed') AS "failed!",
                    count(*) FILTER (WHERE j.state = 'cancelled') AS "cancelled!",
                    min(j.started_at) AS "first_started: _"
               FROM batches b LEFT JOIN jobs j ON j.batch_id = b.id "# + $rest
            $(, $arg)*
        )
    };
}

impl Row {
    fn into_dto(self, now: DateTime<Utc>) -> BatchDto {
        let counts = BatchCountsDto {
            pending: self.pending,
            processing: self.processing,
            retrying: self.retrying,
            done: self.done,
            failed: self.failed,
            cancelled: self.cancelled,
        };
        let total = counts.total();
        BatchDto {
            eta_seconds: eta(&counts, self.first_started, self.finished_at, now),
            id: self.id.to_string(),
            name: self.name,
            state: self.state,
            counts,
            total,
            created_at: self.created_at,
            closed_at: self.closed_at,
            finished_at: self.finished_at,
        }
    }
}

/// Seconds until every job has ended, at the rate jobs of this batch have
/// ended since its first started; `None` before one has ended or after all.
fn eta(
    c: &BatchCountsDto,
    first_started: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<i64> {
    let ended = c.done + c.failed + c.cancelled;
    let left = c.pending + c.processing + c.retrying;
    if finished_at.is_some() || ended == 0 || left == 0 {
        return None;
    }
    let elapsed = (now - first_started?).num_milliseconds().max(1) as f64;
    Some((elapsed / ended as f64 * left as f64 / 1000.0).ceil() as i64)
}

/// Creates an open batch in the caller's tenant.
pub async fn create(pool: &PgPool, user: &CurrentUser, name: &str) -> Result<BatchDto, ApiError> {
    user.require_writer()?;
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::bad_request(
            "invalid_name",
            "a batch needs a name of 1 to 200 characters",
        ));
    }
    let id = Uuid::now_v7();
    let mut conn = pool.acquire().await?;
    sqlx::query!(
        "INSERT INTO batches (id, tenant_id, created_by, name) VALUES ($1, $2, $3, $4)",
        id,
        user.tenant_id,
        user.id,
        name
    )
    .execute(&mut *conn)
    .await?;
    fetch(&mut conn, id, Some(user.tenant_id))
        .await?
        .ok_or(ApiError::NotFound("batch"))
}

/// The batch with its counts: the caller's tenant's, or any for an operator.
pub async fn get(pool: &PgPool, user: &CurrentUser, id: Uuid) -> Result<BatchDto, ApiError> {
    let mut conn = pool.acquire().await?;
    fetch(&mut conn, id, user.readable_tenant())
        .await?
        .ok_or(ApiError::NotFound("batch"))
}

pub(crate) async fn fetch(
    conn: &mut PgConnection,
    id: Uuid,
    tenant: Option<Uuid>,
) -> sqlx::Result<Option<BatchDto>> {
    let row = select_batches!(
        "WHERE b.id = $1 AND ($2::uuid IS NULL OR b.tenant_id = $2) GROUP BY b.id",
        id,
        tenant
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| r.into_dto(Utc::now())))
}

/// The tenant's batches, newest first.
pub async fn list(
    pool: &PgPool,
    user: &CurrentUser,
    limit: i64,
) -> Result<Vec<BatchDto>, ApiError> {
    let rows = select_batches!(
        "WHERE b.tenant_id = $1 GROUP BY b.id ORDER BY b.created_at DESC LIMIT $2",
        user.tenant_id,
        limit.clamp(1, 200)
    )
    .fetch_all(pool)
    .await?;
    let now = Utc::now();
    Ok(rows.into_iter().map(|r| r.into_dto(now)).collect())
}

/// Takes an upload into the batch, in the upload's transaction: locks the
/// batch row (so a close waits for the upload) and refuses a batch that is
/// closed (409 `batch_closed`), full (409 `batch_full`), or not the
/// caller's tenant's (404).
pub async fn admit(conn: &mut PgConnection, tenant: Uuid, id: Uuid) -> Result<(), ApiError> {
    let batch = sqlx::query!(
        r#"SELECT state, closed_at IS NOT NULL AS "closed!"
           FROM batches WHERE id = $1 AND tenant_id = $2 FOR NO KEY UPDATE"#,
        id,
        tenant
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|b| (b.state, b.closed));
    match batch {
        None => Err(ApiError::NotFound("batch")),
        Some((state, true)) => Err(ApiError::Refused {
            code: "batch_closed",
            message: format!("the batch is {state} and closed; create a new batch for more files"),
        }),
        Some(_) => {
            let jobs = sqlx::query_scalar!(
                r#"SELECT count(*) AS "count!" FROM jobs WHERE batch_id = $1"#,
                id
            )
            .fetch_one(&mut *conn)
            .await?;
            if jobs >= MAX_JOBS {
                return Err(ApiError::Refused {
                    code: "batch_full",
                    message: format!("a batch holds at most {MAX_JOBS} documents; start another"),
                });
            }
            sqlx::query!(
                "UPDATE batches SET state = 'running' WHERE id = $1 AND state = 'open'",
                id
            )
            .execute(&mut *conn)
            .await?;
            Ok(())
        }
    }
}

/// Closes the batch to uploads; it is done at once when every job in it
/// has ended (an empty batch too). Closing a closed batch changes nothing.
pub async fn close(pool: &PgPool, user: &CurrentUser, id: Uuid) -> Result<BatchDto, ApiError> {
    user.require_writer()?;
    let mut tx = pool.begin().await?;
    let found = sqlx::query_scalar!(
        "UPDATE batches SET closed_at = coalesce(closed_at, now())
         WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2) RETURNING id",
        id,
        user.readable_tenant()
    )
    .fetch_optional(&mut *tx)
    .await?;
    found.ok_or(ApiError::NotFound("batch"))?;
    check(&mut tx, id).await?;
    user.audit(
        &mut tx,
        "batch.close",
        &id.to_string(),
        serde_json::json!({ "jobs": 0 }),
    )
    .await?;
    let dto = fetch(&mut tx, id, None).await?;
    tx.commit().await?;
    dto.ok_or(ApiError::NotFound("batch"))
}

/// Cancels every unfinished job of the batch and closes it: it ends
/// `cancelled` once the last running job has stopped.
pub async fn cancel(
    pool: &PgPool,
    events: &EventSink,
    user: &CurrentUser,
    id: Uuid,
) -> Result<BatchDto, ApiError> {
    user.require_writer()?;
    let mut tx = pool.begin().await?;
    exists(&mut tx, user, id).await?;
    // Its jobs first, then the batch: the order a job's change and then
    // its batch's check take them.
    let ids = job_ids(
        &mut tx,
        id,
        &[JobState::Pending, JobState::Retrying, JobState::Processing],
    )
    .await?;
    sqlx::query!(
        "UPDATE batches SET closed_at = coalesce(closed_at, now()),
             cancelled_at = CASE WHEN state IN ('done', 'cancelled') THEN cancelled_at ELSE now() END
         WHERE id = $1",
        id
    )
    .execute(&mut *tx)
    .await?;
    let by = if user.is_admin() {
        "cancelled with its batch by an administrator"
    } else {
        "cancelled with its batch"
    };
    let mut out = Vec::with_capacity(ids.len());
    for job in ids {
        out.extend(machine::cancel(&mut tx, job, by, Some(user.id)).await?);
    }
    check(&mut tx, id).await?;
    user.audit(
        &mut tx,
        "batch.cancel",
        &id.to_string(),
        serde_json::json!({ "jobs": out.len() }),
    )
    .await?;
    let dto = fetch(&mut tx, id, None).await?;
    tx.commit().await?;
    events.send_all(out);
    dto.ok_or(ApiError::NotFound("batch"))
}

/// Retries every failed job of the batch (and runs its retrying ones now);
/// a finished batch is running again until they end.
pub async fn retry(
    pool: &PgPool,
    events: &EventSink,
    user: &CurrentUser,
    id: Uuid,
) -> Result<BatchDto, ApiError> {
    user.require_writer()?;
    let mut tx = pool.begin().await?;
    exists(&mut tx, user, id).await?;
    let by = if user.is_admin() {
        "retried with its batch by an administrator"
    } else {
        "retried with its batch"
    };
    let mut out = Vec::new();
    for job in job_ids(&mut tx, id, &[JobState::Failed, JobState::Retrying]).await? {
        if let Some(e) = machine::retry_now(&mut tx, job, by).await? {
            out.push(e);
        } else if let Some((_, e)) = machine::requeue(&mut tx, job, by).await? {
            crate::ops::controls::resolve_dead_letters_of(&mut tx, job, Some(user.id)).await?;
            out.push(e);
        }
    }
    if out.is_empty() {
        return Err(ApiError::Refused {
            code: "not_retryable",
            message: "no job of the batch has failed or is waiting to retry".into(),
        });
    }
    user.audit(
        &mut tx,
        "batch.retry",
        &id.to_string(),
        serde_json::json!({ "jobs": out.len() }),
    )
    .await?;
    let dto = fetch(&mut tx, id, None).await?;
    tx.commit().await?;
    events.send_all(out);
    dto.ok_or(ApiError::NotFound("batch"))
}

/// 404 unless the batch is the caller's tenant's (any for an operator).
async fn exists(conn: &mut PgConnection, user: &CurrentUser, id: Uuid) -> Result<(), ApiError> {
    let found = sqlx::query_scalar!(
        "SELECT id FROM batches WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)",
        id,
        user.readable_tenant()
    )
    .fetch_optional(conn)
    .await?;
    found.map(|_| ()).ok_or(ApiError::NotFound("batch"))
}

/// Checks claimed per transaction.
const CHECKS: i64 = 500;
const CHECK_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Brings the batches in `batch_checks` up to date, until `shutdown`: each
/// pass claims appended rows (`SKIP LOCKED`: any number of processes may
/// run this), checks each batch once, in id order (so two passes never
/// wait on each other's batches in a cycle), and deletes the rows in the
/// same transaction. Woken by `NOTIFY`, polled every second besides.
pub async fn run_checker(pool: PgPool, shutdown: tokio_util::sync::CancellationToken) {
    let mut wakeup = db::Wakeup::new(pool.clone(), "docflow_batch_checks");
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        match check_pending(&pool).await {
            Ok(n) if n as i64 == CHECKS => continue,
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "batch checks failed; retrying"),
        }
        if !wakeup.wait(CHECK_POLL, &shutdown).await {
            return;
        }
    }
}

/// One pass of [`run_checker`]; returns how many rows it claimed.
pub async fn check_pending(pool: &PgPool) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    let mut batches = sqlx::query_scalar!(
        "DELETE FROM batch_checks WHERE id IN (
             SELECT id FROM batch_checks ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING batch_id",
        CHECKS
    )
    .fetch_all(&mut *tx)
    .await?;
    let claimed = batches.len();
    batches.sort();
    batches.dedup();
    for batch in batches {
        check(&mut tx, batch).await?;
    }
    tx.commit().await?;
    Ok(claimed)
}

/// Brings the batch's state up to date with its jobs (`docflow_batch_check`).
async fn check(conn: &mut PgConnection, batch: Uuid) -> sqlx::Result<()> {
    sqlx::query_scalar!("SELECT docflow_batch_check($1)", batch)
        .fetch_one(conn)
        .await?;
    Ok(())
}

/// The batch's jobs in `states`, in id order (the order locks are taken).
async fn job_ids(
    conn: &mut PgConnection,
    batch: Uuid,
    states: &[JobState],
) -> sqlx::Result<Vec<Uuid>> {
    let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    sqlx::query_scalar!(
        "SELECT id FROM jobs WHERE batch_id = $1 AND state::text = ANY($2) ORDER BY id FOR UPDATE",
        batch,
        &states as &[&str]
    )
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(done: i64, pending: i64) -> BatchCountsDto {
        BatchCountsDto {
            pending,
            processing: 0,
            retrying: 0,
            done,
            failed: 0,
            cancelled: 0,
        }
    }

    #[test]
    fn the_eta_extrapolates_the_batch_s_own_rate_and_is_absent_before_and_after() {
        let start = Utc::now();
        let now = start + chrono::Duration::seconds(10);
        // 5 ended in 10 s: 15 left take 30 s.
        assert_eq!(eta(&counts(5, 15), Some(start), None, now), Some(30));
        assert_eq!(eta(&counts(0, 20), Some(start), None, now), None);
        assert_eq!(eta(&counts(20, 0), Some(start), None, now), None);
        assert_eq!(eta(&counts(5, 15), None, None, now), None);
    }
}
