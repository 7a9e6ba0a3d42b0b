//! SQL for jobs, steps and events. Functions take `&mut PgConnection` so the
//! caller owns the transaction.

use app::dto::{FailureCode, JobDto, ProgressDto, StepDto};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{JobState, Step, Tier};

/// A job joined with its document, as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub document_id: Uuid,
    pub filename: String,
    pub queue: String,
    pub state: JobState,
    pub attempt: i32,
    pub retries: i32,
    pub current_step: Option<String>,
    pub last_error: Option<String>,
    pub last_error_code: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub chunks_total: i32,
    pub chunks_embedded: i32,
    pub pages_parsed: i32,
    pub pages_total: i32,
    pub enqueued_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub document_deleted: bool,
    pub uploaded_at: DateTime<Utc>,
    /// The uploader's e-mail (callers hide it from members: `view::hide_uploaders`).
    pub uploaded_by: String,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StepRow {
    pub job_id: Uuid,
    pub step: String,
    pub state: String,
    pub attempts: i32,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
}

const JOB_SELECT: &str = "SELECT j.id, j.tenant_id, t.slug AS tenant, j.document_id, d.filename, j.queue, j.state,
        j.attempt, j.retries, j.current_step, j.last_error, j.last_error_code, j.next_attempt_at, j.chunks_total, j.chunks_embedded,
        j.pages_parsed, j.pages_total, j.enqueued_at, j.started_at, j.finished_at, d.deleted_at IS NOT NULL AS document_deleted,
        d.created_at AS uploaded_at, u.email AS uploaded_by
     FROM jobs j JOIN documents d ON d.id = j.document_id JOIN tenants t ON t.id = j.tenant_id
     JOIN users u ON u.id = d.uploaded_by";

impl JobRow {
    /// The API view; `steps` lists all four, in order, pending where never started.
    pub fn into_dto(self, steps: &[StepRow]) -> JobDto {
        let steps = Step::ALL
            .iter()
            .map(|s| {
                match steps
                    .iter()
                    .find(|r| r.job_id == self.id && r.step == s.as_str())
                {
                    Some(r) => StepDto {
                        name: r.step.clone(),
                        state: r.state.clone(),
                        attempts: r.attempts,
                        duration_ms: r.duration_ms,
                        error: r.error.clone(),
                        started_at: r.started_at,
                    },
                    None => StepDto {
                        name: s.as_str().into(),
                        state: "pending".into(),
                        attempts: 0,
                        duration_ms: None,
                        error: None,
                        started_at: None,
                    },
                }
            })
            .collect();
        JobDto {
            id: self.id.to_string(),
            document_id: self.document_id.to_string(),
            filename: self.filename,
            tenant: self.tenant,
            queue: self.queue,
            state: self.state.as_str().into(),
            attempt: self.attempt,
            current_step: self.current_step,
            steps,
            progress: ProgressDto {
                chunks_total: self.chunks_total,
                chunks_embedded: self.chunks_embedded,
                pages_parsed: self.pages_parsed,
                pages_total: self.pages_total,
            },
            last_error: self.last_error,
            // The schema allows only codes FailureCode knows.
            last_error_code: self.last_error_code.as_deref().and_then(FailureCode::parse),
            next_attempt_at: self.next_attempt_at,
            enqueued_at: self.enqueued_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            document_deleted: self.document_deleted,
            uploaded_at: self.uploaded_at,
            uploaded_by: Some(self.uploaded_by),
            // Filled by `view::attach_dead_periods`.
            dead_periods: Vec::new(),
        }
    }
}

/// Filters of a job listing. `tenant_id` is always set for members.
#[derive(Debug, Default, Clone)]
pub struct JobFilter {
    pub tenant_id: Option<Uuid>,
    /// The start of a tenant's slug (`acm` for `acme`).
    pub tenant_slug: Option<String>,
    pub state: Option<JobState>,
    pub queue: Option<Tier>,
    /// Substring of the filename, or the start of the job's or document's
    /// id (4 or more hex digits).
    pub filename: Option<String>,
    /// Only jobs enqueued within this long before now.
    pub since: Option<std::time::Duration>,
    /// Only jobs that failed at least once at this step (a failure the
    /// dashboard's failure rate of the step counts).
    pub failed_at: Option<Step>,
    /// Keyset cursor: jobs after this job in `sort` order.
    pub before: Option<Uuid>,
    pub limit: i64,
    /// Which time the listing is ordered by, newest first.
    pub sort: JobSort,
}

/// The time a job listing is ordered by (newest first; jobs that have not
/// started or finished yet come last).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum JobSort {
    #[default]
    Enqueued,
    Started,
    Finished,
}

impl JobSort {
    /// `enqueued` (or blank), `started` or `finished`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "enqueued" => Ok(Self::Enqueued),
            "started" => Ok(Self::Started),
            "finished" => Ok(Self::Finished),
            other => Err(format!(
                "unknown sort `{other}`: use enqueued, started or finished"
            )),
        }
    }

    /// The sort key of the job aliased `alias`, as SQL (a fixed string).
    fn key(self, alias: &str) -> String {
        match self {
            Self::Enqueued => format!("{alias}.enqueued_at"),
            Self::Started => format!("COALESCE({alias}.started_at, '-infinity'::timestamptz)"),
            Self::Finished => format!("COALESCE({alias}.finished_at, '-infinity'::timestamptz)"),
        }
    }
}

impl JobFilter {
    /// Appends the `WHERE` of the jobs this filter matches, over `jobs j`,
    /// `documents d` and `tenants t`, with a condition only for what is set:
    /// shared by the list, the bulk actions and their count, so they always
    /// agree on what matches. Callers go on with ` AND …`.
    fn push_matching(&self, q: &mut QueryBuilder<'_, Postgres>) {
        q.push(" WHERE true");
        if let Some(tenant) = self.tenant_id {
            q.push(" AND j.tenant_id = ").push_bind(tenant);
        }
        if let Some(slug) = &self.tenant_slug {
            q.push(" AND starts_with(t.slug, lower(")
                .push_bind(slug.clone())
                .push("))");
        }
        if let Some(state) = self.state {
            q.push(" AND j.state = ").push_bind(state);
        }
        if let Some(queue) = self.queue {
            q.push(" AND j.queue = ").push_bind(queue.as_str());
        }
        if let Some(text) = &self.filename {
            // Part of the filename; or, 4 or more hex digits and dashes,
            // part of the job's or its document's id.
            let like = format!("%{}%", escape_like(text));
            q.push(" AND (d.filename ILIKE ").push_bind(like);
            let id = text.to_lowercase();
            let hex = id.len() >= 4
                && id.len() <= 36
                && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            if hex {
                let part = format!("%{id}%");
                q.push(" OR j.id::text LIKE ")
                    .push_bind(part.clone())
                    .push(" OR j.document_id::text LIKE ")
                    .push_bind(part);
            }
            q.push(")");
        }
        if let Some(since) = self.since {
            q.push(" AND j.enqueued_at > now() - ")
                .push_bind(since.as_secs_f64())
                .push(" * interval '1 second'");
        }
        if let Some(step) = self.failed_at {
            // A failure at the step, counted as the dashboard's failure rate
            // counts it (`stats::collect`): every start of the step but the
            // one that succeeded or is running.
            q.push(" AND EXISTS (SELECT 1 FROM job_steps s WHERE s.job_id = j.id AND s.step = ")
                .push_bind(step.as_str())
                .push(
                    " AND s.attempts > CASE WHEN s.state IN ('done', 'running') THEN 1 ELSE 0 END)",
                );
        }
    }
}

pub async fn list(conn: &mut PgConnection, f: &JobFilter) -> sqlx::Result<Vec<JobDto>> {
    let key = f.sort.key("j");
    let mut q = QueryBuilder::new(JOB_SELECT);
    f.push_matching(&mut q);
    if let Some(before) = f.before {
        // Another tenant's job is no cursor: it answers like an unknown id.
        q.push(format_args!(
            " AND ({key}, j.id) < (SELECT {}, c.id FROM jobs c WHERE c.id = ",
            f.sort.key("c")
        ))
        .push_bind(before);
        if let Some(tenant) = f.tenant_id {
            q.push(" AND c.tenant_id = ").push_bind(tenant);
        }
        q.push(")");
    }
    q.push(format_args!(" ORDER BY {key} DESC, j.id DESC LIMIT "))
        .push_bind(f.limit);
    let rows: Vec<JobRow> = q
        .build_query_as()
        // Planned with its values each time: see `db::connect`.
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    dtos(conn, rows).await
}

/// The jobs of a batch, newest first, at most `limit`.
pub async fn list_of_batch(
    conn: &mut PgConnection,
    batch: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<JobDto>> {
    let rows: Vec<JobRow> = sqlx::query_as(&format!(
        "{JOB_SELECT} WHERE j.batch_id = $1 ORDER BY j.enqueued_at DESC, j.id DESC LIMIT $2"
    ))
    .bind(batch)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    dtos(conn, rows).await
}

/// The API view of `rows`, with their steps and dead-letter history.
async fn dtos(conn: &mut PgConnection, rows: Vec<JobRow>) -> sqlx::Result<Vec<JobDto>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let steps = steps_of(conn, &ids).await?;
    let mut jobs: Vec<JobDto> = rows.into_iter().map(|r| r.into_dto(&steps)).collect();
    super::view::attach_dead_periods(conn, &mut jobs).await?;
    Ok(jobs)
}

fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

async fn steps_of(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<Vec<StepRow>> {
    sqlx::query_as("SELECT job_id, step, state, attempts, duration_ms, error, started_at FROM job_steps WHERE job_id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}

/// The ids of the jobs in `states` matching `f`'s tenant, state, queue,
/// filename, time range and failed step (its cursor ignored), oldest
/// first, at most `f.limit`, locked for the caller's transaction: the
/// targets of a bulk action.
pub async fn matching_ids(
    conn: &mut PgConnection,
    f: &JobFilter,
    states: &[JobState],
) -> sqlx::Result<Vec<Uuid>> {
    let mut q = QueryBuilder::new(
        "SELECT j.id FROM jobs j JOIN documents d ON d.id = j.document_id
         JOIN tenants t ON t.id = j.tenant_id",
    );
    f.push_matching(&mut q);
    q.push(" AND j.state = ANY(")
        .push_bind(states.to_vec())
        .push(") ORDER BY j.enqueued_at, j.id LIMIT ")
        .push_bind(f.limit)
        .push(" FOR UPDATE OF j");
    q.build_query_scalar()
        .persistent(false)
        .fetch_all(conn)
        .await
}

/// How many jobs matching a filter are in one state.
#[derive(sqlx::FromRow)]
pub struct StateCount {
    pub state: JobState,
    pub jobs: i64,
    /// Of the failed ones, those whose last dead letter says `permanent`:
    /// a retry fails them the same way unless the cause changed.
    pub permanent: i64,
}

/// How many jobs in each of `states` match `f`'s tenant, state, queue,
/// filename, time range and failed step (its cursor and limit ignored):
/// what a bulk action would change.
pub async fn count_by_state(
    conn: &mut PgConnection,
    f: &JobFilter,
    states: &[JobState],
) -> sqlx::Result<Vec<StateCount>> {
    let mut q = QueryBuilder::new(
        "SELECT j.state, count(*) AS jobs,
                count(*) FILTER (WHERE j.state = 'failed' AND (
                    SELECT dl.reason FROM dead_letters dl WHERE dl.job_id = j.id
                    ORDER BY dl.dead_at DESC LIMIT 1) = 'permanent') AS permanent
         FROM jobs j JOIN documents d ON d.id = j.document_id JOIN tenants t ON t.id = j.tenant_id",
    );
    f.push_matching(&mut q);
    q.push(" AND j.state = ANY(")
        .push_bind(states.to_vec())
        .push(") GROUP BY j.state");
    q.build_query_as()
        // Planned with its values each time: see `db::connect`.
        .persistent(false)
        .fetch_all(conn)
        .await
}

/// One job; `tenant_id` restricts it to a tenant (another tenant's job is absent).
pub async fn get(
    conn: &mut PgConnection,
    id: Uuid,
    tenant_id: Option<Uuid>,
) -> sqlx::Result<Option<JobDto>> {
    let row: Option<JobRow> = sqlx::query_as(&format!(
        "{JOB_SELECT} WHERE j.id = $1 AND ($2::uuid IS NULL OR j.tenant_id = $2)"
    ))
    .bind(id)
    .bind(tenant_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let steps = steps_of(conn, &[row.id]).await?;
    let mut job = [row.into_dto(&steps)];
    super::view::attach_dead_periods(conn, &mut job).await?;
    let [job] = job;
    Ok(Some(job))
}

/// Unfinished jobs of all tenants.
pub async fn unfinished(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE state IN ('pending', 'processing', 'retrying')",
    )
    .fetch_one(conn)
    .await
}

/// Unfinished jobs of one tenant (its quota check).
pub async fn tenant_unfinished(conn: &mut PgConnection, tenant_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND state IN ('pending', 'processing', 'retrying')",
    )
    .bind(tenant_id)
    .fetch_one(conn)
    .await
}

/// Each tenant's unfinished jobs, counted at most once a second per tenant
/// and process (the fair-share check of every upload).
#[derive(Default)]
pub struct TenantBacklog {
    cached: tokio::sync::Mutex<std::collections::HashMap<Uuid, (std::time::Instant, i64)>>,
}

impl TenantBacklog {
    pub async fn get(&self, conn: &mut PgConnection, tenant_id: Uuid) -> sqlx::Result<i64> {
        if let Some((at, n)) = self.cached.lock().await.get(&tenant_id) {
            if at.elapsed() < Backlog::MAX_AGE {
                return Ok(*n);
            }
        }
        // Counted without the lock: one tenant's count never waits for another's.
        let n = tenant_unfinished(conn, tenant_id).await?;
        let mut cached = self.cached.lock().await;
        // Tenants are few; entries of a second ago are dropped as it grows.
        if cached.len() > 10_000 {
            cached.retain(|_, (at, _)| at.elapsed() < Backlog::MAX_AGE);
        }
        cached.insert(tenant_id, (std::time::Instant::now(), n));
        Ok(n)
    }
}

/// The global backlog, counted at most once a second per process: the limit
/// is a safety valve, and a count on every upload would cost more the fuller
/// the backlog gets.
#[derive(Default)]
pub struct Backlog {
    cached: tokio::sync::Mutex<Option<(std::time::Instant, i64)>>,
}

impl Backlog {
    pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);

    pub async fn get(&self, conn: &mut PgConnection) -> sqlx::Result<i64> {
        let mut cached = self.cached.lock().await;
        if let Some((at, n)) = *cached {
            if at.elapsed() < Self::MAX_AGE {
                return Ok(n);
            }
        }
        let n = unfinished(conn).await?;
        *cached = Some((std::time::Instant::now(), n));
        Ok(n)
    }
}

/// A `job_events` row; returns its id (the SSE event id).
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub job_id: Uuid,
    pub tenant_id: Uuid,
    pub state: JobState,
    pub step: Option<Step>,
    pub progress: Option<(i32, i32)>,
    pub message: &'a str,
}

pub async fn insert_event(
    conn: &mut PgConnection,
    e: &NewEvent<'_>,
) -> sqlx::Result<(i64, DateTime<Utc>)> {
    sqlx::query_as(
        "INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, at",
    )
    .bind(e.job_id)
    .bind(e.tenant_id)
    .bind(e.state)
    .bind(e.step.map(Step::as_str))
    .bind(e.progress.map(|p| p.0))
    .bind(e.progress.map(|p| p.1))
    .bind(e.message)
    .fetch_one(conn)
    .await
}

#[derive(sqlx::FromRow)]
struct TimelineRow {
    id: i64,
    state: JobState,
    step: Option<String>,
    progress_done: Option<i32>,
    progress_total: Option<i32>,
    message: String,
    at: DateTime<Utc>,
}

/// A job's timeline, oldest first: its first `limit` events, each run
/// named once (`view::name_runs`).
///
/// Progress lines are collapsed: of consecutive progress events of one
/// step (`embed 32/13796`, `embed 64/13796`, …, one per batch) only the
/// latest is kept, so a 20 MB document's timeline is its state changes and
/// one line per step run, not hundreds of batches. The live stream and
/// `GET /api/jobs/{id}/events` still carry every one.
pub async fn events(
    conn: &mut PgConnection,
    job_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<app::dto::JobEventDto>> {
    let rows: Vec<TimelineRow> = sqlx::query_as(
        "SELECT id, state, step, progress_done, progress_total, message, at FROM (
             SELECT *, lead(progress_done) OVER run AS next_done, lead(step) OVER run AS next_step
             FROM job_events WHERE job_id = $1
             WINDOW run AS (ORDER BY id)) e
         WHERE progress_done IS NULL OR next_done IS NULL OR next_step IS DISTINCT FROM step
         ORDER BY id LIMIT $2",
    )
    .bind(job_id)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    let mut events: Vec<app::dto::JobEventDto> = rows
        .into_iter()
        .map(|r| app::dto::JobEventDto {
            id: r.id,
            state: r.state.as_str().into(),
            step: r.step,
            progress: r
                .progress_done
                .zip(r.progress_total)
                .map(|(done, total)| app::dto::EventProgress { done, total }),
            message: r.message,
            at: r.at,
        })
        .collect();
    super::view::name_runs(&mut events);
    Ok(events)
}

/// The newest event id of a tenant: where a fresh event stream starts.
pub async fn latest_event_id(conn: &mut PgConnection, tenant_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM job_events WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod sort_tests {
    use super::JobSort;

    #[test]
    fn a_blank_sort_is_by_enqueue_time_and_an_unknown_one_is_refused() {
        assert_eq!(JobSort::parse(""), Ok(JobSort::Enqueued));
        assert_eq!(JobSort::parse("finished"), Ok(JobSort::Finished));
        assert_eq!(JobSort::parse(" started "), Ok(JobSort::Started));
        assert!(JobSort::parse("size").is_err());
    }

    #[test]
    fn the_schema_allows_exactly_the_failure_codes_docflow_writes() {
        use app::dto::FailureCode;
        let migration = include_str!("../../../migrations/20261209000001_last_error_code.sql");
        let list = migration
            .split_once("IN (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(list, _)| list)
            .expect("the CHECK's list");
        let allowed: Vec<&str> = list
            .split(',')
            .map(|c| c.trim().trim_matches('\''))
            .collect();
        let codes: Vec<&str> = FailureCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(allowed, codes);
        for code in codes {
            assert_eq!(
                FailureCode::parse(code).map(FailureCode::as_str),
                Some(code)
            );
        }
    }
}
