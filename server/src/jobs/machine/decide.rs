//! What to do when a run ends: a pure function of the job's state, whether
//! this worker still holds it, the error, the retry budget and the clock.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::jobs::JobState;

/// Why a run did not finish, as far as the decision is concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Retrying cannot help (corrupt file, refused request, internal error).
    Permanent,
    /// The document's own transient failure (timeout, 5xx below the
    /// breaker's threshold, a step past its deadline): spends a retry.
    Transient,
    /// A dependency asked to wait this long (429 `Retry-After`).
    RetryAfter(Duration),
    /// A dependency is down (its circuit breaker is open) until `until`.
    Unavailable { until: DateTime<Utc> },
    /// The worker is shutting down.
    Shutdown,
    /// Another worker or the sweeper took the job over.
    LeaseLost,
}

/// The retries a job may spend on its own faults.
#[derive(Debug, Clone, Copy)]
pub struct Budget<'a> {
    /// Retries spent since the job was (re-)enqueued.
    pub spent: i32,
    /// One delay per retry; their count is the limit (`DOCFLOW_RETRY_DELAYS`).
    pub delays: &'a [Duration],
}

/// How a failed job is recorded (`jobs.failure_kind`, `dead_letters.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    Permanent,
    Exhausted,
    Crashed,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Permanent => "permanent",
            FailureKind::Exhausted => "exhausted",
            FailureKind::Crashed => "crashed",
        }
    }
}

/// What happens to a job whose run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Every step has its checkpoint.
    Done,
    /// Retry number `retry` after `delay` (jitter applied).
    Retry { retry: i32, delay: Duration },
    /// Wait for a dependency until `until`, spending nothing.
    Wait { until: DateTime<Utc> },
    /// Back to `pending`, untouched (shutdown).
    Release,
    /// Failed and dead-lettered.
    Fail(FailureKind),
    /// Not this worker's job any more: change nothing.
    Abandon,
}

/// Done, retry, wait, release, fail or abandon: the job's `state` and
/// whether this worker still holds its lease (`ours`), how the run ended,
/// the budget, a jitter factor (0.8–1.2 in production) and the time now.
pub fn decide(
    state: JobState,
    ours: bool,
    end: Result<(), &Fault>,
    budget: Budget<'_>,
    jitter: f64,
    now: DateTime<Utc>,
) -> Decision {
    if state != JobState::Processing || !ours {
        return Decision::Abandon;
    }
    let fault = match end {
        Ok(()) => return Decision::Done,
        Err(f) => f,
    };
    match fault {
        Fault::LeaseLost => Decision::Abandon,
        Fault::Shutdown => Decision::Release,
        Fault::Permanent => Decision::Fail(FailureKind::Permanent),
        Fault::Unavailable { until } => Decision::Wait {
            until: (*until).max(now),
        },
        // A wait too long to represent is as good as a day.
        Fault::RetryAfter(d) => Decision::Wait {
            until: chrono::Duration::from_std(*d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(now + chrono::Duration::days(1)),
        },
        Fault::Transient => {
            let retry = budget.spent.max(0) + 1;
            match usize::try_from(retry - 1)
                .ok()
                .and_then(|i| budget.delays.get(i))
            {
                Some(base) => Decision::Retry {
                    retry,
                    delay: base.mul_f64(jitter.clamp(0.0, 10.0)),
                },
                None => Decision::Fail(FailureKind::Exhausted),
            }
        }
    }
}
