//! The job executor: claims a job with a lease, runs the steps that have no
//! checkpoint yet, and decides done / retry / dead in one place.

pub mod embedder;
pub mod events;
pub mod steps;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    blob::BlobStore,
    config::Config,
    jobs::{
        repo::{self, NewEvent},
        JobMessage, JobState, Step, Tier,
    },
    outbox,
};

use futures::FutureExt;

use self::{embedder::Embedder, events::EventSink, steps::Next};

/// How a step failed; the executor turns it into retry or dead letter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// Worth retrying: timeouts, connection loss, 5xx.
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help: corrupt or unsupported file, empty text.
    #[error("{0}")]
    Permanent(String),
    /// The dependency asked to wait at least this long (429 `Retry-After`).
    #[error("{1}")]
    RetryAfter(Duration, String),
    /// Another worker or the sweeper took the job over; stop quietly.
    #[error("the job's lease was lost")]
    LeaseLost,
    /// The process is shutting down.
    #[error("shutting down")]
    Cancelled,
}

impl From<sqlx::Error> for StepError {
    fn from(e: sqlx::Error) -> Self {
        StepError::Transient(format!("database: {e}"))
    }
}

impl From<anyhow::Error> for StepError {
    fn from(e: anyhow::Error) -> Self {
        StepError::Transient(format!("{e:#}"))
    }
}

/// What the consumer should do with the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All steps done: ack.
    Done,
    /// Already done, failed, or leased by a live worker: ack and skip.
    Skipped,
    /// Retry scheduled through the outbox: ack.
    Retrying,
    /// Dead: nack without requeue, so it reaches `docflow.dead`.
    Failed,
    /// Shutdown or lost lease: the job is back to `pending` or someone else's; requeue.
    Released,
    /// Moved to another queue (a long document to `slow`), published there: ack.
    HandedOver,
}

/// What the executor needs; cheap to clone.
#[derive(Clone)]
pub struct Deps {
    pub pool: PgPool,
    pub blobs: BlobStore,
    pub embedder: Arc<dyn Embedder>,
    /// Parser children: documents are never parsed in this process.
    pub parser: Arc<crate::parser::ParserPool>,
    pub config: Arc<Config>,
    pub events: EventSink,
    pub worker_id: Arc<str>,
    pub metrics: crate::metrics::Metrics,
}

/// The job as a worker sees it once claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub document_id: Uuid,
    pub uploaded_by: Uuid,
    pub queue: Tier,
    pub attempt: i32,
    /// Retries spent before this run.
    pub retries: i32,
    pub filename: String,
    pub content_type: String,
    pub blob_key: String,
    pub text_blob_key: Option<String>,
    pub enqueued_at: DateTime<Utc>,
}

impl ClaimedJob {
    /// The message that runs this job again after a failed attempt.
    pub fn next_attempt(&self) -> JobMessage {
        JobMessage {
            job_id: self.id,
            tenant_id: self.tenant_id,
            document_id: self.document_id,
            queue: self.queue,
            attempt: self.attempt + 1,
            enqueued_at: self.enqueued_at,
        }
    }
}

/// What one step sees.
pub struct StepCtx<'a> {
    pub deps: &'a Deps,
    pub job: &'a ClaimedJob,
    pub step: Step,
    pub cancel: &'a CancellationToken,
}

impl StepCtx<'_> {
    /// A transaction in which this worker still holds the lease (row locked).
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, StepError> {
        let mut tx = self.deps.pool.begin().await?;
        guard_lease(&mut tx, self.job.id, &self.deps.worker_id).await?;
        Ok(tx)
    }

    /// Writes this step's checkpoint inside `tx` (with its output).
    pub async fn checkpoint(&self, tx: &mut PgConnection) -> Result<(), StepError> {
        sqlx::query(
            "UPDATE job_steps SET state = 'done', finished_at = now(), error = NULL,
                 duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint
             WHERE job_id = $1 AND step = $2",
        )
        .bind(self.job.id)
        .bind(self.step.as_str())
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    /// Records an event inside `tx`; publish it after commit with [`EventSink::send`].
    pub async fn event(
        &self,
        tx: &mut PgConnection,
        progress: Option<(i32, i32)>,
        message: &str,
    ) -> Result<events::JobEvent, StepError> {
        record_event(
            tx,
            self.job,
            JobState::Processing,
            Some(self.step),
            progress,
            message,
        )
        .await
    }

    pub fn check_cancel(&self) -> Result<(), StepError> {
        if self.cancel.is_cancelled() {
            Err(StepError::Cancelled)
        } else {
            Ok(())
        }
    }
}

async fn guard_lease(conn: &mut PgConnection, job_id: Uuid, worker: &str) -> Result<(), StepError> {
    let held: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM jobs WHERE id = $1 AND state = 'processing' AND lease_owner = $2 FOR UPDATE",
    )
    .bind(job_id)
    .bind(worker)
    .fetch_optional(conn)
    .await?;
    held.map(|_| ()).ok_or(StepError::LeaseLost)
}

async fn record_event(
    conn: &mut PgConnection,
    job: &ClaimedJob,
    state: JobState,
    step: Option<Step>,
    progress: Option<(i32, i32)>,
    message: &str,
) -> Result<events::JobEvent, StepError> {
    let (id, at) = repo::insert_event(
        conn,
        &NewEvent {
            job_id: job.id,
            tenant_id: job.tenant_id,
            state,
            step,
            progress,
            message,
        },
    )
    .await?;
    Ok(events::JobEvent {
        id,
        job_id: job.id,
        tenant_id: job.tenant_id,
        user_id: Some(job.uploaded_by),
        state: state.as_str().into(),
        step: step.map(|s| s.as_str().to_string()),
        progress: progress.map(|(done, total)| events::Progress { done, total }),
        message: message.into(),
        at,
        notification: None,
    })
}

/// Claims the job for this worker: moves it to `processing` with a lease, or
/// returns `None` when it is done, failed, or leased. An expired lease is not
/// taken over here: the sweeper counts it as a crash first (poison pills).
async fn claim(deps: &Deps, job_id: Uuid) -> sqlx::Result<Option<ClaimedJob>> {
    sqlx::query_as(
        "WITH claimed AS (
             UPDATE jobs SET state = 'processing', lease_owner = $2, lease_until = now() + $3 * interval '1 millisecond',
                 attempt = attempt + 1, started_at = coalesce(started_at, now()), next_attempt_at = NULL, updated_at = now()
             WHERE id = $1
               AND (state = 'pending'
                    OR (state = 'retrying' AND next_attempt_at <= now() + interval '1 second'))
             RETURNING id, tenant_id, document_id, queue, attempt, retries, enqueued_at)
         SELECT c.id, c.tenant_id, c.document_id, d.uploaded_by, c.queue, c.attempt, c.retries, d.filename, d.content_type,
                d.blob_key, d.text_blob_key, c.enqueued_at
         FROM claimed c JOIN documents d ON d.id = c.document_id",
    )
    .bind(job_id)
    .bind(&*deps.worker_id)
    .bind(deps.config.lease.as_millis() as i64)
    .fetch_optional(&deps.pool)
    .await
}

/// Renews the lease every third of its length until `stop`; cancels `lost` if it is gone.
async fn heartbeat(deps: Deps, job_id: Uuid, stop: CancellationToken, lost: CancellationToken) {
    let every = deps.config.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let renewed = sqlx::query(
            "UPDATE jobs SET lease_until = now() + $3 * interval '1 millisecond'
             WHERE id = $1 AND state = 'processing' AND lease_owner = $2",
        )
        .bind(job_id)
        .bind(&*deps.worker_id)
        .bind(deps.config.lease.as_millis() as i64)
        .execute(&deps.pool)
        .await;
        match renewed {
            Ok(r) if r.rows_affected() == 0 => {
                tracing::warn!(%job_id, "lease lost; stopping the job");
                lost.cancel();
                return;
            }
            Ok(_) => {}
            // PostgreSQL down: keep trying; the step's own writes will fail too.
            Err(e) => tracing::warn!(%job_id, error = %e, "lease renewal failed"),
        }
    }
}

/// Runs one delivery's job to an outcome.
pub async fn process(
    deps: &Deps,
    msg: &JobMessage,
    shutdown: &CancellationToken,
) -> Result<Outcome, sqlx::Error> {
    let Some(job) = claim(deps, msg.job_id).await? else {
        tracing::debug!(job_id = %msg.job_id, "delivery skipped: job done, failed or leased");
        return Ok(Outcome::Skipped);
    };
    let span =
        tracing::info_span!("job", job_id = %job.id, attempt = job.attempt, queue = %job.queue);
    async {
        let mut conn = deps.pool.acquire().await?;
        let started = record_event(
            &mut conn,
            &job,
            JobState::Processing,
            None,
            None,
            &format!("attempt {} started", job.attempt),
        )
        .await
        .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        drop(conn);
        deps.events.send(started);

        let stop_heartbeat = CancellationToken::new();
        // The heartbeat ends with this run whatever way it ends (a panic too).
        let _heartbeat_guard = stop_heartbeat.clone().drop_guard();
        let lease_lost = CancellationToken::new();
        tokio::spawn(heartbeat(
            deps.clone(),
            job.id,
            stop_heartbeat.clone(),
            lease_lost.clone(),
        ));
        // Shutdown and a lost lease both stop the steps at their next check.
        let cancel = CancellationToken::new();
        let watcher = {
            let (cancel, shutdown, lost) = (cancel.clone(), shutdown.clone(), lease_lost.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = shutdown.cancelled() => {},
                    _ = lost.cancelled() => {},
                }
                cancel.cancel();
            })
        };
        // A cancelled job stops at once, even inside a slow embedding call:
        // dropping the step rolls back its open transaction.
        let result = tokio::select! {
            r = run_steps(deps, &job, &cancel) => r,
            _ = cancel.cancelled() => Err((Step::Parse, StepError::Cancelled)),
        };
        stop_heartbeat.cancel();
        watcher.abort();
        let result = match result {
            Ok(Next::HandedOver) => return Ok(Outcome::HandedOver),
            Ok(Next::Continue) => Ok(()),
            Err((step, StepError::Cancelled)) if lease_lost.is_cancelled() => {
                Err((step, StepError::LeaseLost))
            }
            Err(e) => Err(e),
        };
        finish(deps, &job, result).await
    }
    .instrument(span)
    .await
}

async fn run_steps(
    deps: &Deps,
    job: &ClaimedJob,
    cancel: &CancellationToken,
) -> Result<Next, (Step, StepError)> {
    let done: Vec<String> =
        sqlx::query_scalar("SELECT step FROM job_steps WHERE job_id = $1 AND state = 'done'")
            .bind(job.id)
            .fetch_all(&deps.pool)
            .await
            .map_err(|e| (Step::Parse, e.into()))?;
    for step in Step::ALL {
        if done.iter().any(|d| d == step.as_str()) {
            continue;
        }
        let ctx = StepCtx {
            deps,
            job,
            step,
            cancel,
        };
        ctx.check_cancel().map_err(|e| (step, e))?;
        start_step(&ctx).await.map_err(|e| (step, e))?;
        let started = std::time::Instant::now();
        let span = tracing::info_span!("step", job_id = %job.id, step = step.as_str());
        ctx.deps
            .metrics
            .step_runs_total
            .with_label_values(&[step.as_str()])
            .inc();
        let r = run_bounded(&ctx).instrument(span).await;
        ctx.deps
            .metrics
            .step_duration_seconds
            .with_label_values(&[step.as_str()])
            .observe(started.elapsed().as_secs_f64());
        match &r {
            Err(StepError::Permanent(_)) => ctx
                .deps
                .metrics
                .step_failures_total
                .with_label_values(&[step.as_str(), "permanent"])
                .inc(),
            Err(StepError::Transient(_) | StepError::RetryAfter(..)) => ctx
                .deps
                .metrics
                .step_failures_total
                .with_label_values(&[step.as_str(), "transient"])
                .inc(),
            _ => {}
        }
        tracing::debug!(
            step = step.as_str(),
            ms = started.elapsed().as_millis() as u64,
            ok = r.is_ok(),
            "step finished"
        );
        if r.map_err(|e| (step, e))? == Next::HandedOver {
            return Ok(Next::HandedOver);
        }
    }
    Ok(Next::Continue)
}

/// Runs one step under its deadline, turning a panic into a failure of the
/// job instead of a lost worker slot.
async fn run_bounded(ctx: &StepCtx<'_>) -> Result<Next, StepError> {
    let deadline = ctx.deps.config.step_timeout;
    let run = std::panic::AssertUnwindSafe(steps::run(ctx)).catch_unwind();
    match tokio::time::timeout(deadline, run).await {
        Ok(Ok(r)) => r,
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            tracing::error!(step = %ctx.step, panic = %what, "step panicked");
            Err(StepError::Permanent(format!(
                "docflow hit an internal error in the {} step ({what}); an administrator can re-enqueue the job once it is fixed",
                ctx.step
            )))
        }
        // Dropping the step's future abandons it and rolls back its open
        // transaction; the attempt counts as a failure.
        Err(_) => Err(StepError::Transient(format!(
            "the {} step did not finish within its {} deadline",
            ctx.step,
            humantime::format_duration(deadline)
        ))),
    }
}

async fn start_step(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let mut tx = ctx.begin().await?;
    sqlx::query(
        "INSERT INTO job_steps (job_id, step, state, attempts, started_at) VALUES ($1, $2, 'running', 1, now())
         ON CONFLICT (job_id, step) DO UPDATE SET state = 'running', attempts = job_steps.attempts + 1,
             started_at = now(), finished_at = NULL, error = NULL",
    )
    .bind(ctx.job.id)
    .bind(ctx.step.as_str())
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE jobs SET current_step = $2, updated_at = now() WHERE id = $1")
        .bind(ctx.job.id)
        .bind(ctx.step.as_str())
        .execute(&mut *tx)
        .await?;
    let ev = ctx
        .event(&mut tx, None, &format!("{} started", ctx.step))
        .await?;
    tx.commit().await?;
    ctx.deps.events.send(ev);
    Ok(())
}

/// The delay before retry number `retry` (1 for the first): the configured
/// delay ±20 % jitter, never shorter than what the dependency asked for;
/// `None` once the delays are used up.
pub fn retry_delay(
    delays: &[Duration],
    retry: i32,
    at_least: Option<Duration>,
) -> Option<Duration> {
    let base = *delays.get(usize::try_from(retry - 1).ok()?)?;
    let jitter = rand::thread_rng().gen_range(0.8..=1.2);
    let d = base.mul_f64(jitter);
    Some(at_least.map_or(d, |min| d.max(min)))
}

/// The one place that decides done / retry / dead.
async fn finish(
    deps: &Deps,
    job: &ClaimedJob,
    result: Result<(), (Step, StepError)>,
) -> Result<Outcome, sqlx::Error> {
    let mut tx = deps.pool.begin().await?;
    match guard_lease(&mut tx, job.id, &deps.worker_id).await {
        Ok(()) => {}
        Err(StepError::LeaseLost) => {
            tracing::warn!(job_id = %job.id, "finished after losing the lease; leaving the job to its new owner");
            return Ok(Outcome::Skipped);
        }
        Err(e) => return Err(sqlx::Error::Protocol(e.to_string())),
    }
    let (outcome, event) = match result {
        Ok(()) => {
            sqlx::query(
                "UPDATE jobs SET state = 'done', finished_at = now(), lease_owner = NULL, lease_until = NULL,
                     current_step = NULL, last_error = NULL, updated_at = now() WHERE id = $1",
            )
            .bind(job.id)
            .execute(&mut *tx)
            .await?;
            let mut ev = record_event(
                &mut tx,
                job,
                JobState::Done,
                None,
                None,
                "done: the document is searchable",
            )
            .await
            .map_err(to_sqlx)?;
            ev.notification = Some(notify(&mut tx, job.into(), true, None).await?);
            (Outcome::Done, ev)
        }
        Err((_, StepError::LeaseLost)) => {
            tx.rollback().await?;
            return Ok(Outcome::Skipped);
        }
        Err((_, StepError::Cancelled)) => {
            // Shutdown: hand the job back untouched; checkpoints stay.
            sqlx::query(
                "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_until = NULL, attempt = greatest(attempt - 1, 0),
                     updated_at = now() WHERE id = $1",
            )
            .bind(job.id)
            .execute(&mut *tx)
            .await?;
            let step: Option<String> = sqlx::query_scalar(
                "UPDATE job_steps SET state = 'pending' WHERE job_id = $1 AND state = 'running' RETURNING step",
            )
            .bind(job.id)
            .fetch_optional(&mut *tx)
            .await?;
            let step = Step::ALL
                .into_iter()
                .find(|s| step.as_deref() == Some(s.as_str()));
            let ev = record_event(
                &mut tx,
                job,
                JobState::Pending,
                step,
                None,
                "worker shutting down; the job will resume",
            )
            .await
            .map_err(to_sqlx)?;
            (Outcome::Released, ev)
        }
        Err((step, err)) => {
            let message = err.to_string();
            let (permanent, at_least) = match &err {
                StepError::Permanent(_) => (true, None),
                StepError::RetryAfter(d, _) => (false, Some(*d)),
                _ => (false, None),
            };
            sqlx::query(
                "UPDATE job_steps SET state = 'failed', error = $3, finished_at = now(),
                     duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint
                 WHERE job_id = $1 AND step = $2",
            )
            .bind(job.id)
            .bind(step.as_str())
            .bind(&message)
            .execute(&mut *tx)
            .await?;
            let delay = if permanent {
                None
            } else {
                // The budget is the document's own failures: runs cut short by
                // a worker's death (crashes) or a shutdown do not spend it.
                retry_delay(&deps.config.retry_delays.0, job.retries + 1, at_least)
            };
            match delay {
                Some(delay) => {
                    let due = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
                    sqlx::query(
                        "UPDATE jobs SET state = 'retrying', lease_owner = NULL, lease_until = NULL, next_attempt_at = $2,
                             retries = retries + 1, last_error = $3, updated_at = now() WHERE id = $1",
                    )
                    .bind(job.id)
                    .bind(due)
                    .bind(format!("{step}: {message}"))
                    .execute(&mut *tx)
                    .await?;
                    outbox::enqueue_job(&mut tx, &job.next_attempt(), Some(due)).await?;
                    tracing::warn!(job_id = %job.id, %step, error = %message, retry_in_ms = delay.as_millis() as u64, "step failed; retrying");
                    let ev = record_event(
                        &mut tx,
                        job,
                        JobState::Retrying,
                        Some(step),
                        None,
                        &format!(
                            "{step} failed: {message}; retry {} in {:.1} s",
                            job.retries + 1,
                            delay.as_secs_f64()
                        ),
                    )
                    .await
                    .map_err(to_sqlx)?;
                    (Outcome::Retrying, ev)
                }
                None => {
                    let kind = if permanent { "permanent" } else { "exhausted" };
                    sqlx::query(
                        "UPDATE jobs SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_until = NULL,
                             failure_kind = $2, last_error = $3, updated_at = now() WHERE id = $1",
                    )
                    .bind(job.id)
                    .bind(kind)
                    .bind(format!("{step}: {message}"))
                    .execute(&mut *tx)
                    .await?;
                    tracing::error!(job_id = %job.id, %step, error = %message, kind, "job failed");
                    let text = if permanent {
                        format!("failed at {step}: {message}")
                    } else {
                        format!("failed at {step} after {} attempts: {message}", job.attempt)
                    };
                    let mut ev =
                        record_event(&mut tx, job, JobState::Failed, Some(step), None, &text)
                            .await
                            .map_err(to_sqlx)?;
                    ev.notification = Some(notify(&mut tx, job.into(), false, Some(&text)).await?);
                    (Outcome::Failed, ev)
                }
            }
        }
    };
    tx.commit().await?;
    deps.events.send(event);
    match outcome {
        Outcome::Done => {
            let latency = (Utc::now() - job.enqueued_at).to_std().unwrap_or_default();
            deps.metrics
                .job_latency_seconds
                .with_label_values(&[job.queue.as_str()])
                .observe(latency.as_secs_f64());
            deps.metrics.job_retries.observe(f64::from(job.retries));
        }
        Outcome::Failed => deps.metrics.job_retries.observe(f64::from(job.retries)),
        _ => {}
    }
    Ok(outcome)
}

fn to_sqlx(e: StepError) -> sqlx::Error {
    sqlx::Error::Protocol(e.to_string())
}

/// The job an inbox entry is about.
pub struct Finished<'a> {
    pub job_id: Uuid,
    pub uploaded_by: Uuid,
    pub filename: &'a str,
}

impl<'a> From<&'a ClaimedJob> for Finished<'a> {
    fn from(job: &'a ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            uploaded_by: job.uploaded_by,
            filename: &job.filename,
        }
    }
}

/// The uploader's inbox entry for a finished job.
pub async fn notify(
    conn: &mut PgConnection,
    job: Finished<'_>,
    ok: bool,
    error: Option<&str>,
) -> sqlx::Result<events::NotificationRef> {
    let id = Uuid::now_v7();
    let (kind, title, body) = if ok {
        (
            "job_done",
            format!("{} is ready", job.filename),
            "Its text is indexed and searchable.".to_string(),
        )
    } else {
        (
            "job_failed",
            format!("{} could not be processed", job.filename),
            error.unwrap_or("unknown error").to_string(),
        )
    };
    sqlx::query("INSERT INTO notifications (id, user_id, job_id, kind, title, body, link) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(id)
        .bind(job.uploaded_by)
        .bind(job.job_id)
        .bind(kind)
        .bind(&title)
        .bind(&body)
        .bind(format!("/jobs/{}", job.job_id))
        .execute(conn)
        .await?;
    Ok(events::NotificationRef {
        id,
        kind: kind.into(),
        title,
        body,
        link: format!("/jobs/{}", job.job_id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_follow_the_schedule_with_jitter_and_run_out() {
        let delays = [
            Duration::from_secs(1),
            Duration::from_secs(4),
            Duration::from_secs(16),
        ];
        for _ in 0..100 {
            let d = retry_delay(&delays, 2, None).expect("second retry");
            assert!(
                d >= Duration::from_millis(3200) && d <= Duration::from_millis(4800),
                "{d:?}"
            );
        }
        assert!(
            retry_delay(&delays, 4, None).is_none(),
            "three retries, then dead"
        );
        let d = retry_delay(&delays, 1, Some(Duration::from_secs(30))).expect("first retry");
        assert!(d >= Duration::from_secs(30), "Retry-After wins when longer");
    }
}
