//! The job executor: claims a job with a lease, runs the steps that have no
//! checkpoint yet, and decides done / retry / dead in one place.

pub mod breaker;
pub mod embedder;
pub mod events;
pub mod group;
pub mod minilm;
pub mod reembed;
pub mod steps;
pub mod vectors;

use std::{sync::Arc, time::Duration};

use app::dto::FailureCode;
use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    jobs::{
        machine::{self, Budget, Decision, Fault},
        JobMessage, JobState, Step,
    },
    platform::blob::BlobStore,
    platform::config::Config,
};

use futures::FutureExt;

use self::{embedder::Embedder, events::EventSink, steps::Next};

/// How a step failed; the executor turns it into retry or dead letter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// Worth retrying: timeouts, connection loss, 5xx.
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help: corrupt or unsupported file, empty text. The
    /// code says which, for the job's `last_error_code`.
    #[error("{1}")]
    Permanent(FailureCode, String),
    /// The dependency asked to wait at least this long (429 `Retry-After`).
    #[error("{1}")]
    RetryAfter(Duration, String),
    /// A dependency is down (its circuit breaker is open): the job waits
    /// until `until` without spending its retries.
    #[error("{message}")]
    Unavailable {
        dependency: &'static str,
        until: DateTime<Utc>,
        message: String,
    },
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
    /// Not started: its queue was paused after the delivery left RabbitMQ
    /// and before the worker noticed. Requeue, and read the pause now.
    Paused,
}

/// What the executor needs; cheap to clone.
#[derive(Clone)]
pub struct Deps {
    pub pool: PgPool,
    pub blobs: BlobStore,
    pub embedder: Arc<dyn Embedder>,
    /// The model `embedder`'s vectors are stored as.
    pub model: Arc<vectors::Model>,
    /// The deployment's model, which `model` must be for vectors to be stored.
    pub choice: Arc<vectors::Choice>,
    /// Parser children: documents are never parsed in this process.
    pub parser: Arc<crate::parser::ParserPool>,
    pub config: Arc<Config>,
    pub events: EventSink,
    pub worker_id: Arc<str>,
    pub metrics: crate::platform::metrics::Metrics,
    /// Claims and step ends of this process's jobs share commits.
    pub group: Arc<group::GroupCommit>,
}

pub use crate::jobs::ClaimedJob;

/// What one step sees.
pub struct StepCtx<'a> {
    pub deps: &'a Deps,
    pub job: &'a Arc<ClaimedJob>,
    /// This run's statements, staged in order and committed behind it.
    pub chain: &'a group::Chain,
    pub step: Step,
    pub cancel: &'a CancellationToken,
    /// What a step hands the next one in memory within one run, so that
    /// it need not read back what it just wrote.
    pub carry: &'a std::sync::Mutex<Carry>,
}

/// Outputs of this run's earlier steps, when they ran in this run.
#[derive(Default)]
pub struct Carry {
    /// The parsed text (`parse` → `chunk`).
    pub text: Option<bytes::Bytes>,
    /// The chunks, none of them embedded yet (`chunk` → `embed`).
    pub chunks: Option<Pending>,
    /// `embed` stored a vector for every chunk in this run (→ `store`).
    pub all_embedded: bool,
    /// When the running step last reported progress (`parse`'s pages): the
    /// step's deadline counts from then.
    pub progressed_at: Option<tokio::time::Instant>,
}

/// A step's result from how its staged statements ended: nothing written
/// means the lease was lost; a failed commit is worth retrying.
fn settled(staged: group::Settled) -> Result<(), StepError> {
    match staged {
        group::Settled::Written => Ok(()),
        group::Settled::Nothing => Err(StepError::LeaseLost),
        group::Settled::Failed(e) => Err(StepError::Transient(format!("database: {e}"))),
    }
}

/// Chunks still without a vector: `texts[i]` is chunk `indexes[i]`.
pub struct Pending {
    pub indexes: Vec<i32>,
    pub texts: std::sync::Arc<[String]>,
}

impl StepCtx<'_> {
    /// This run's carried outputs.
    pub fn carry(&self) -> std::sync::MutexGuard<'_, Carry> {
        self.carry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StepCtx<'_> {
    /// A transaction for the step's output, once the run's staged
    /// statements are durable. It must end with a write that is guarded by
    /// the lease ([`StepCtx::complete`], or a progress update that checks
    /// it), so that a worker that lost the job commits nothing.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, StepError> {
        self.durable().await?;
        Ok(self.deps.pool.begin().await?)
    }

    /// Waits until what this run staged so far is durable.
    pub async fn durable(&self) -> Result<(), StepError> {
        settled(self.chain.settle().await)
    }

    /// Writes this step's checkpoint inside `tx` (with its output).
    pub async fn checkpoint(&self, tx: &mut PgConnection) -> Result<(), StepError> {
        sqlx::query!(
            "UPDATE job_steps SET state = 'done', finished_at = now(), error = NULL,
                 duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint
             WHERE job_id = $1 AND step = $2",
            self.job.id,
            self.step.as_str() as _
        )
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    /// Ends this step: its `output`, the checkpoint, the event `message`,
    /// and the start of the next step; after `store`, the job is done. One
    /// statement, so on the pool it is one round trip and one commit; in
    /// an open transaction it commits with what the step wrote before.
    /// Publish the events after commit with [`EventSink::send_all`].
    pub async fn complete<'c>(
        &self,
        conn: impl sqlx::PgExecutor<'c>,
        progress: Option<(i32, i32)>,
        message: &str,
        output: &machine::Output,
    ) -> Result<Vec<crate::jobs::events::JobEvent>, StepError> {
        machine::step_done(
            conn,
            self.job,
            &self.deps.worker_id,
            self.step,
            progress,
            message,
            output,
        )
        .await?
        .ok_or(StepError::LeaseLost)
    }

    /// [`StepCtx::complete`] as one statement staged on the run's chain
    /// ([`group`]): it shares its commit with other jobs', the run goes on
    /// at once, and the events are published once it committed.
    pub async fn finish(
        &self,
        progress: Option<(i32, i32)>,
        message: &str,
        output: machine::Output,
    ) -> Result<(), StepError> {
        self.chain
            .stage(StepEnd {
                job: self.job.clone(),
                worker: self.deps.worker_id.clone(),
                step: self.step,
                progress,
                message: message.to_string(),
                output,
                events: self.deps.events.clone(),
            })
            .await?
            .map(drop)
            .ok_or(StepError::LeaseLost)
    }

    /// Records an event inside `tx`; publish it after commit with [`EventSink::send`].
    pub async fn event(
        &self,
        tx: &mut PgConnection,
        progress: Option<(i32, i32)>,
        message: &str,
    ) -> Result<crate::jobs::events::JobEvent, StepError> {
        Ok(machine::record(
            tx,
            self.job,
            JobState::Processing,
            Some(self.step),
            progress,
            message,
        )
        .await?)
    }

    pub fn check_cancel(&self) -> Result<(), StepError> {
        if self.cancel.is_cancelled() {
            Err(StepError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// The statement that ends a step (see [`StepCtx::finish`]).
struct StepEnd {
    job: Arc<ClaimedJob>,
    worker: Arc<str>,
    step: Step,
    progress: Option<(i32, i32)>,
    message: String,
    output: machine::Output,
    events: EventSink,
}

impl group::Statement for StepEnd {
    type Output = Vec<crate::jobs::events::JobEvent>;

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl std::future::Future<Output = sqlx::Result<Option<Self::Output>>> + Send + 'c {
        machine::step_done(
            conn,
            &self.job,
            &self.worker,
            self.step,
            self.progress,
            &self.message,
            &self.output,
        )
    }

    fn committed(&self, events: Self::Output) {
        self.events.send_all(events);
    }
}

/// The statement that claims a job and starts its run.
struct Claim {
    job_id: Uuid,
    worker: Arc<str>,
    lease: Duration,
    events: EventSink,
}

impl group::Statement for Claim {
    type Output = (ClaimedJob, crate::jobs::events::JobEvent, Option<Step>);

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl std::future::Future<Output = sqlx::Result<Option<Self::Output>>> + Send + 'c {
        machine::claim(conn, self.job_id, &self.worker, self.lease)
    }

    fn committed(&self, (_, started, _): Self::Output) {
        self.events.send(started);
    }
}

/// Renews the lease every third of its length until `stop`; cancels `lost` if it is gone.
async fn heartbeat(deps: Deps, job_id: Uuid, stop: CancellationToken, lost: CancellationToken) {
    let every = deps.config.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let renewed = machine::renew(&deps.pool, job_id, &deps.worker_id, deps.config.lease).await;
        match renewed {
            Ok(false) => {
                tracing::warn!(%job_id, "lease lost; stopping the job");
                lost.cancel();
                return;
            }
            Ok(true) => {}
            // PostgreSQL down: keep trying; the step's own writes will fail too.
            Err(e) => tracing::warn!(%job_id, error = %e, "lease renewal failed"),
        }
    }
}

/// Input size up to which CPU-bound work (chunking, the local embedder)
/// runs on the task that needs it: a few hundred microseconds at most, less
/// than handing it to the blocking pool and back costs a small document.
pub const INLINE_CPU_BYTES: usize = 8 * 1024;

/// Runs CPU-bound `work` over `bytes` of input: inline when small, on the
/// blocking pool otherwise, so a long document never holds up the runtime.
pub async fn cpu_bound<T: Send + 'static>(
    bytes: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if bytes <= INLINE_CPU_BYTES {
        Ok(work())
    } else {
        tokio::task::spawn_blocking(work).await
    }
}

/// Runs one delivery's job to an outcome.
///
/// The claim and each step's end are staged on the run's [`group::Chain`]:
/// the steps run on while the committer makes them durable, and the run
/// settles the chain before it reports an outcome, so the delivery is
/// acknowledged only once everything it did is durable.
pub async fn process(
    deps: &Deps,
    msg: &JobMessage,
    shutdown: &CancellationToken,
) -> Result<Outcome, sqlx::Error> {
    let chain = group::Chain::new(&deps.group);
    let claimed = chain
        .stage(Claim {
            job_id: msg.job_id,
            worker: deps.worker_id.clone(),
            lease: deps.config.lease,
            events: deps.events.clone(),
        })
        .await?;
    let Some((job, _, first)) = claimed else {
        if machine::queue_paused(&deps.pool, msg.job_id).await? {
            tracing::debug!(job_id = %msg.job_id, "delivery handed back: its queue is paused");
            return Ok(Outcome::Paused);
        }
        tracing::debug!(job_id = %msg.job_id, "delivery skipped: job done, failed or leased");
        return Ok(Outcome::Skipped);
    };
    let job = Arc::new(job);
    let span =
        tracing::info_span!("job", job_id = %job.id, attempt = job.attempt, queue = %job.queue);
    async {
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
            r = run_steps(deps, &job, &chain, first, &cancel) => r,
            _ = cancel.cancelled() => Err((Step::Parse, StepError::Cancelled)),
        };
        // What the run staged ends before anything is decided on it.
        let staged = chain.settle().await;
        stop_heartbeat.cancel();
        watcher.abort();
        let last = match &result {
            Err((step, _)) => *step,
            Ok(_) => Step::Store,
        };
        let result = match settled(staged) {
            Ok(()) => result,
            Err(StepError::LeaseLost) => Err((last, StepError::LeaseLost)),
            Err(e) => {
                // Whether the claim itself committed is unknown: if the job
                // turns out not to be ours, the delivery goes back.
                let why = e.to_string();
                return match finish(deps, &job, Err((last, e))).await? {
                    Outcome::Skipped => Err(sqlx::Error::Io(std::io::Error::other(why))),
                    outcome => Ok(outcome),
                };
            }
        };
        let result = match result {
            Ok(Next::HandedOver) => return Ok(Outcome::HandedOver),
            Ok(Next::Completed) => {
                observe_end(deps, &job, Outcome::Done);
                return Ok(Outcome::Done);
            }
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

/// Runs the steps from `first` (already started by the claim) on; each
/// step's end, staged on `chain`, starts the next.
async fn run_steps(
    deps: &Deps,
    job: &Arc<ClaimedJob>,
    chain: &group::Chain,
    first: Option<Step>,
    cancel: &CancellationToken,
) -> Result<Next, (Step, StepError)> {
    let Some(first) = first else {
        return Ok(Next::Continue);
    };
    let carry = std::sync::Mutex::default();
    for step in Step::ALL.into_iter().skip_while(|s| *s != first) {
        let ctx = StepCtx {
            deps,
            job,
            chain,
            step,
            cancel,
            carry: &carry,
        };
        ctx.check_cancel().map_err(|e| (step, e))?;
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
            Err(StepError::Permanent(..)) => ctx
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
        match r.map_err(|e| (step, e))? {
            Next::Continue => {}
            end => return Ok(end),
        }
    }
    Ok(Next::Continue)
}

/// Runs one step under its deadline, turning a panic into a failure of the
/// job instead of a lost worker slot.
async fn run_bounded(ctx: &StepCtx<'_>) -> Result<Next, StepError> {
    let deadline = ctx.deps.config.step_timeout;
    let run = std::panic::AssertUnwindSafe(steps::run(ctx)).catch_unwind();
    tokio::pin!(run);
    let started = tokio::time::Instant::now();
    // A step that reports progress (a scan recognised page by page) keeps
    // its deadline ahead of it; its pages are bounded, and each by the
    // parse deadline.
    let progressed = || ctx.carry().progressed_at.filter(|at| *at > started);
    let ended = loop {
        let since = progressed().unwrap_or(started);
        match tokio::time::timeout_at(since + deadline, &mut run).await {
            Ok(r) => break Ok(r),
            Err(_) if progressed().is_some_and(|at| at > since) => continue,
            Err(elapsed) => break Err(elapsed),
        }
    };
    match ended {
        Ok(Ok(r)) => r,
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            tracing::error!(step = %ctx.step, panic = %what, "step panicked");
            Err(StepError::Permanent(
                FailureCode::Internal,
                format!(
                    "docflow hit an internal error in the {} step ({what}); an administrator can re-enqueue the job once it is fixed",
                    ctx.step
                ),
            ))
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

impl StepError {
    /// What kind of failure it is, for the job's `last_error_code`; `None`
    /// for a run that did not fail (shutdown, a lost lease).
    pub fn code(&self) -> Option<FailureCode> {
        match self {
            StepError::Transient(_) => Some(FailureCode::Temporary),
            StepError::Permanent(code, _) => Some(*code),
            StepError::RetryAfter(..) => Some(FailureCode::RateLimited),
            StepError::Unavailable { .. } => Some(FailureCode::Unavailable),
            StepError::LeaseLost | StepError::Cancelled => None,
        }
    }
}

/// The fault a step error is, for [`machine::decide`].
fn fault(e: &StepError) -> Fault {
    match e {
        StepError::Permanent(..) => Fault::Permanent,
        StepError::Transient(_) => Fault::Transient,
        StepError::RetryAfter(d, _) => Fault::RetryAfter(*d),
        StepError::Unavailable { until, .. } => Fault::Unavailable { until: *until },
        StepError::Cancelled => Fault::Shutdown,
        StepError::LeaseLost => Fault::LeaseLost,
    }
}

/// Ends the run: [`machine::decide`] says what happens, one transition of
/// the state machine does it, in one transaction with the job row locked.
async fn finish(
    deps: &Deps,
    job: &ClaimedJob,
    result: Result<(), (Step, StepError)>,
) -> Result<Outcome, sqlx::Error> {
    let mut tx = deps.pool.begin().await?;
    let ours = machine::hold(&mut tx, job.id, &deps.worker_id).await?;
    let fault = result.as_ref().err().map(|(_, e)| fault(e));
    let decision = machine::decide(
        JobState::Processing,
        ours,
        fault.as_ref().map_or(Ok(()), Err),
        Budget {
            spent: job.retries,
            delays: &deps.config.retry_delays.0,
        },
        rand::thread_rng().gen_range(0.8..=1.2),
        Utc::now(),
    );
    let (step, error, code) = match &result {
        Ok(()) => (Step::Store, String::new(), None),
        Err((step, e)) => (*step, e.to_string(), e.code()),
    };
    let outcome = match decision {
        Decision::Abandon => {
            if !ours {
                tracing::warn!(job_id = %job.id, "run ended after losing the lease; leaving the job to its new owner");
            }
            return Ok(Outcome::Skipped);
        }
        Decision::Done => Outcome::Done,
        Decision::Release => Outcome::Released,
        Decision::Retry { delay, .. } => {
            tracing::warn!(job_id = %job.id, %step, %error, retry_in_ms = delay.as_millis() as u64, "step failed; retrying");
            Outcome::Retrying
        }
        Decision::Wait { until } => {
            tracing::info!(job_id = %job.id, %step, %error, %until, "dependency unavailable; the job waits");
            Outcome::Retrying
        }
        Decision::Fail(kind) => {
            tracing::error!(job_id = %job.id, %step, %error, kind = kind.as_str(), "job failed");
            Outcome::Failed
        }
    };
    let dependency = match &result {
        Err((_, StepError::Unavailable { dependency, .. })) => Some(*dependency),
        _ => None,
    };
    let end = machine::RunEnd {
        step,
        error: &error,
        code,
        dependency,
    };
    let Some(event) = machine::apply(&mut tx, job, &deps.worker_id, decision, end).await? else {
        return Ok(Outcome::Skipped);
    };
    tx.commit().await?;
    deps.events.send(event);
    observe_end(deps, job, outcome);
    Ok(outcome)
}

/// The metrics of a job that ended.
fn observe_end(deps: &Deps, job: &ClaimedJob, outcome: Outcome) {
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
}
