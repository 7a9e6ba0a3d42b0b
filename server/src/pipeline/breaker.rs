//! A circuit breaker per dependency (the embedding provider first), so an
//! outage costs the documents nothing.
//!
//! - **Closed**: calls go through. `failures` consecutive transient failures
//!   open it; the failure that opens it (and any that land while it is
//!   open) is reported as [`StepError::Unavailable`], which spends no retry.
//! - **Open**: calls are refused at once with `Unavailable` ("embedding
//!   provider unavailable, next probe at …"); their jobs wait as
//!   `retrying`. One prober task sends a single small request at each probe
//!   time, the interval doubling from `probe` up to `probe_max` (half-open).
//!   Its first success closes the breaker and wakes the waiting jobs
//!   ([`machine::resume_waiting`]); they resume at the step that waited.
//! - **429 with `Retry-After`** slows the whole process: every call waits
//!   until the provider's time has passed, and the job keeps running. A wait
//!   longer than `max_wait` in one call turns into `Unavailable` instead of
//!   holding the worker slot.
//!
//! Its state is `docflow_dependency_up{dependency}` and a row per process in
//! `dependency_status` (the dashboard card).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{embedder::Embedder, StepError};
use crate::jobs::machine;

/// How a breaker trips and probes.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive transient failures that open it.
    pub failures: u32,
    /// The first probe interval; it doubles after each failed probe.
    pub probe: Duration,
    /// The longest probe interval.
    pub probe_max: Duration,
    /// The longest a call waits for a rate limit before its job waits instead.
    pub max_wait: Duration,
}

enum State {
    Closed {
        failures: u32,
    },
    Open {
        interval: Duration,
        next_probe: Instant,
        next_probe_at: DateTime<Utc>,
        error: String,
    },
}

/// One small request to the dependency: the probe of a half-open breaker.
pub type Probe = Box<dyn Fn() -> BoxFuture<'static, Result<(), StepError>> + Send + Sync>;

/// One dependency's breaker, shared by every call in the process.
pub struct Breaker {
    /// `embedder`: the metric label and `jobs.waiting_for`.
    pub name: &'static str,
    /// What users read: "embedding provider".
    pub label: &'static str,
    config: BreakerConfig,
    state: Mutex<State>,
    /// Calls wait until then (429 `Retry-After`).
    slow_until: Mutex<Option<Instant>>,
    up: prometheus::IntGauge,
    probe: Probe,
    pool: PgPool,
    process: String,
    shutdown: CancellationToken,
}

/// What a failed call learns from the breaker.
enum Verdict {
    /// Below the threshold: the document's own failure.
    Counted,
    /// The breaker is (now) open: the job waits.
    Open(StepError),
}

impl Breaker {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &'static str,
        label: &'static str,
        config: BreakerConfig,
        up: &prometheus::IntGaugeVec,
        probe: Probe,
        pool: PgPool,
        process: String,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let up = up.with_label_values(&[name]);
        up.set(1);
        Arc::new(Self {
            name,
            label,
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
            slow_until: Mutex::new(None),
            up,
            probe,
            pool,
            process,
            shutdown,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error of a call refused while open. Its job waits until the
    /// breaker closes (the prober wakes it); `until` is only the fallback
    /// for a process that dies with its breaker open: a probe interval
    /// after the next probe.
    fn unavailable(&self, probe_at: DateTime<Utc>) -> StepError {
        StepError::Unavailable {
            dependency: self.name,
            until: probe_at + chrono_duration(self.config.probe_max),
            message: format!(
                "{} unavailable, next probe at {}",
                self.label,
                probe_at.format("%H:%M:%S UTC")
            ),
        }
    }

    /// `Err(Unavailable)` while open.
    fn admit(&self) -> Result<(), StepError> {
        match &*self.state() {
            State::Closed { .. } => Ok(()),
            State::Open { next_probe_at, .. } => Err(self.unavailable(*next_probe_at)),
        }
    }

    fn succeeded(&self) {
        if let State::Closed { failures } = &mut *self.state() {
            *failures = 0;
        }
    }

    /// Counts a transient failure; opens the breaker at the threshold.
    fn failed(self: &Arc<Self>, error: &str) -> Verdict {
        let mut state = self.state();
        match &mut *state {
            State::Open { next_probe_at, .. } => Verdict::Open(self.unavailable(*next_probe_at)),
            State::Closed { failures } => {
                *failures += 1;
                if *failures < self.config.failures {
                    return Verdict::Counted;
                }
                let interval = self.config.probe;
                let next_probe_at = Utc::now() + chrono_duration(interval);
                *state = State::Open {
                    interval,
                    next_probe: Instant::now() + interval,
                    next_probe_at,
                    error: error.to_string(),
                };
                drop(state);
                self.up.set(0);
                tracing::warn!(dependency = self.name, %error, "circuit breaker opened");
                tokio::spawn(self.clone().probe_until_closed());
                Verdict::Open(self.unavailable(next_probe_at))
            }
        }
    }

    /// Every call waits until a `Retry-After` has passed.
    fn slow_down(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut slow = self.slow_until.lock().unwrap_or_else(|p| p.into_inner());
        if slow.is_none_or(|t| t < until) {
            *slow = Some(until);
        }
        tracing::info!(
            dependency = self.name,
            wait_ms = wait.as_millis() as u64,
            "rate limited; slowing down"
        );
    }

    fn pending_slowdown(&self) -> Option<Duration> {
        let slow = *self.slow_until.lock().unwrap_or_else(|p| p.into_inner());
        slow.and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// Runs `call` through the breaker.
    pub async fn call<T, F, Fut>(self: &Arc<Self>, call: F) -> Result<T, StepError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, StepError>>,
    {
        let mut waited = Duration::ZERO;
        loop {
            self.admit()?;
            if let Some(wait) = self.pending_slowdown() {
                if waited + wait > self.config.max_wait {
                    // A rate limit longer than a call should wait: the job
                    // waits as `retrying` until the provider's time.
                    let at = Utc::now() + chrono_duration(wait);
                    return Err(StepError::Unavailable {
                        dependency: self.name,
                        until: at,
                        message: format!(
                            "{} is rate limiting (429), next try at {}",
                            self.label,
                            at.format("%H:%M:%S UTC")
                        ),
                    });
                }
                tokio::time::sleep(wait).await;
                waited += wait;
                continue;
            }
            match call().await {
                Ok(v) => {
                    self.succeeded();
                    return Ok(v);
                }
                Err(StepError::RetryAfter(wait, _)) => self.slow_down(wait),
                Err(StepError::Transient(error)) => {
                    return match self.failed(&error) {
                        Verdict::Counted => Err(StepError::Transient(error)),
                        Verdict::Open(e) => Err(e),
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The prober: one request per probe time until one succeeds.
    async fn probe_until_closed(self: Arc<Self>) {
        self.report().await;
        loop {
            let wait = match &*self.state() {
                State::Closed { .. } => return,
                State::Open { next_probe, .. } => {
                    next_probe.saturating_duration_since(Instant::now())
                }
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let result = (self.probe)().await;
            let closed = {
                let mut state = self.state();
                match (&mut *state, result) {
                    (State::Closed { .. }, _) => return,
                    // Reachable: a refusal (4xx) is the request's business, not an outage.
                    (_, Ok(()) | Err(StepError::Permanent(..))) => {
                        *state = State::Closed { failures: 0 };
                        true
                    }
                    (
                        State::Open {
                            interval,
                            next_probe,
                            next_probe_at,
                            error,
                        },
                        Err(e),
                    ) => {
                        let asked = match &e {
                            StepError::RetryAfter(d, _) => *d,
                            _ => Duration::ZERO,
                        };
                        *interval = (*interval * 2).min(self.config.probe_max);
                        let wait = (*interval).max(asked);
                        *next_probe = Instant::now() + wait;
                        *next_probe_at = Utc::now() + chrono_duration(wait);
                        *error = e.to_string();
                        false
                    }
                }
            };
            self.report().await;
            if closed {
                self.up.set(1);
                match machine::resume_waiting(&self.pool, self.name).await {
                    Ok(n) => tracing::info!(
                        dependency = self.name,
                        jobs = n,
                        "circuit breaker closed; waiting jobs resume"
                    ),
                    Err(e) => tracing::warn!(dependency = self.name, error = %e,
                        "circuit breaker closed; waking the waiting jobs failed (they wake at their own time)"),
                }
                return;
            }
            tracing::info!(
                dependency = self.name,
                "probe failed; the breaker stays open"
            );
        }
    }

    /// Writes this process's breaker state for the dashboard (best effort).
    async fn report(&self) {
        let (up, next_probe_at, error) = match &*self.state() {
            State::Closed { .. } => (true, None, None),
            State::Open {
                next_probe_at,
                error,
                ..
            } => (false, Some(*next_probe_at), Some(error.clone())),
        };
        let r = sqlx::query!(
            "INSERT INTO dependency_status (dependency, process, up, next_probe_at, error, updated_at)
             VALUES ($1, $2, $3, $4, $5, now())
             ON CONFLICT (dependency, process) DO UPDATE SET up = EXCLUDED.up,
                 next_probe_at = EXCLUDED.next_probe_at, error = EXCLUDED.error, updated_at = now()",
            self.name,
            &self.process,
            up,
            next_probe_at as _,
            error
        )
        .execute(&self.pool)
        .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "could not record the breaker state");
        }
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The embedder behind its breaker: what the embed step calls.
pub struct Guarded {
    inner: Arc<dyn Embedder>,
    breaker: Arc<Breaker>,
}

impl Guarded {
    /// Wraps `inner` in a breaker named `embedder` whose probe embeds one
    /// short text.
    pub fn embedder(
        inner: Arc<dyn Embedder>,
        config: BreakerConfig,
        up: &prometheus::IntGaugeVec,
        pool: PgPool,
        process: String,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let probed = inner.clone();
        let probe: Probe = Box::new(move || {
            let e = probed.clone();
            Box::pin(async move { e.embed(&["docflow probe".to_string()]).await.map(drop) })
        });
        let breaker = Breaker::new(
            "embedder",
            "embedding provider",
            config,
            up,
            probe,
            pool,
            process,
            shutdown,
        );
        Arc::new(Self { inner, breaker })
    }

    pub fn breaker(&self) -> &Arc<Breaker> {
        &self.breaker
    }
}

#[async_trait::async_trait]
impl Embedder for Guarded {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError> {
        self.breaker.call(|| self.inner.embed(texts)).await
    }

    async fn embed_query(&self, query: &str) -> Result<Vec<f32>, StepError> {
        self.inner.embed_query(query).await
    }

    fn model(&self) -> super::vectors::ModelSpec {
        self.inner.model()
    }

    fn tokenizer(&self) -> Option<(&tokenizers::Tokenizer, usize)> {
        self.inner.tokenizer()
    }

    fn calls_out(&self) -> bool {
        self.inner.calls_out()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// A breaker whose probe succeeds once `healthy` is set. Its database is
    /// unreachable: the state rows it writes are best effort.
    fn breaker(failures: u32, healthy: Arc<AtomicBool>, probes: Arc<AtomicUsize>) -> Arc<Breaker> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_millis(100))
            .connect_lazy("postgres://postgres@127.0.0.1:1/none")
            .expect("lazy pool");
        let gauge =
            prometheus::IntGaugeVec::new(prometheus::Opts::new("up", "up"), &["dependency"])
                .expect("gauge");
        let probe: Probe = Box::new(move || {
            let (healthy, probes) = (healthy.clone(), probes.clone());
            Box::pin(async move {
                probes.fetch_add(1, Ordering::SeqCst);
                if healthy.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err(StepError::Transient("503".into()))
                }
            })
        });
        Breaker::new(
            "embedder",
            "embedding provider",
            BreakerConfig {
                failures,
                probe: Duration::from_millis(50),
                probe_max: Duration::from_millis(200),
                max_wait: Duration::from_millis(500),
            },
            &gauge,
            probe,
            pool,
            "test".into(),
            CancellationToken::new(),
        )
    }

    #[tokio::test]
    async fn consecutive_failures_open_it_then_calls_are_refused_until_a_probe_succeeds() {
        let healthy = Arc::new(AtomicBool::new(false));
        let probes = Arc::new(AtomicUsize::new(0));
        let b = breaker(2, healthy.clone(), probes.clone());
        let calls = AtomicUsize::new(0);
        let failing = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(StepError::Transient("503".into()))
        };
        // Below the threshold the failure is the document's own.
        assert!(matches!(
            b.call(failing).await,
            Err(StepError::Transient(_))
        ));
        // The one that reaches it spends nothing.
        let e = b.call(failing).await.expect_err("opens");
        let StepError::Unavailable { message, until, .. } = e else {
            panic!("{e:?}")
        };
        assert!(message.starts_with("embedding provider unavailable, next probe at "));
        assert!(until > Utc::now());
        assert_eq!(b.up.get(), 0);
        // While open, no request goes out.
        for _ in 0..10 {
            assert!(matches!(
                b.call(failing).await,
                Err(StepError::Unavailable { .. })
            ));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Failed probes back off: 50, 100, 200 ms.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let failed_probes = probes.load(Ordering::SeqCst);
        assert!(
            (1..=3).contains(&failed_probes),
            "{failed_probes} probes in 400 ms"
        );
        healthy.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(3);
        while b.up.get() == 0 {
            assert!(Instant::now() < deadline, "the successful probe closes it");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(matches!(&*b.state(), State::Closed { failures: 0 }));
        assert_eq!(b.call(|| async { Ok(7) }).await.expect("closed"), 7);
    }

    #[tokio::test]
    async fn a_429_makes_every_call_wait_and_then_go_through() {
        let b = breaker(2, Arc::default(), Arc::default());
        let calls = AtomicUsize::new(0);
        let started = Instant::now();
        let r = b
            .call(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(StepError::RetryAfter(
                        Duration::from_millis(200),
                        "429".into(),
                    ))
                } else {
                    Ok("vectors")
                }
            })
            .await;
        assert_eq!(r.expect("after the wait"), "vectors");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // A wait longer than a call may take makes the job wait instead.
        b.slow_down(Duration::from_secs(5));
        let e = b.call(|| async { Ok(()) }).await.expect_err("too long");
        assert!(
            matches!(&e, StepError::Unavailable { message, .. } if message.contains("rate limiting (429)")),
            "{e:?}"
        );
        assert_eq!(b.up.get(), 1, "a rate limit is not an outage");
    }
}
