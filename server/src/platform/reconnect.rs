//! What a long-lived connection does when it is lost (a broker consumer, a
//! database listener, the outbox relay's publisher): it waits, growing the
//! wait with each failure in a row, and tries again, until shutdown.
//! [`supervise`] runs one connection's life at a time that way; the loops
//! that keep their own state between tries use [`Backoff`] directly.
//!
//! The waits are `backon`'s exponential backoff with jitter: 200 ms
//! doubling to 5 s, each stretched by a random part of itself (so 200 to
//! 400 ms first, at most 10 s). The jitter keeps a deployment's processes
//! from reconnecting in step after a broker or database restart. A life
//! that got connected starts the next waits from the shortest again.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio_util::sync::CancellationToken;

/// The first wait after a loss, before its jitter.
pub const FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest wait before its jitter (with it, less than twice this).
pub const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// The waits between tries, growing with each failure in a row.
#[derive(Debug)]
pub struct Backoff {
    waits: ExponentialBackoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        let waits = ExponentialBuilder::new()
            .with_min_delay(FIRST_WAIT)
            .with_max_delay(LONGEST_WAIT)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build();
        Self { waits }
    }

    /// The wait before the next try.
    pub fn next_wait(&mut self) -> Duration {
        self.waits.next().unwrap_or(LONGEST_WAIT)
    }

    /// A try succeeded: the next failure waits the shortest again.
    pub fn reset(&mut self) {
        *self = Self::new();
    }
}

/// Told by a connection's life once it is connected (see [`supervise`]).
#[derive(Debug, Clone, Default)]
pub struct Connected(Arc<AtomicBool>);

impl Connected {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs `life` (one connection, from connecting until it is lost) again
/// and again until `shutdown`: after it ends, waits the [`Backoff`] (reset
/// when that life had marked itself [`Connected`]) and starts the next.
/// A life that ends in an error is logged as `what`; one that ends without
/// one (its consumer was closed) is started again the same way.
pub async fn supervise<F, Fut>(what: &'static str, shutdown: &CancellationToken, mut life: F)
where
    F: FnMut(Connected) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut backoff = Backoff::new();
    while !shutdown.is_cancelled() {
        let connected = Connected::default();
        let ended = life(connected.clone()).await;
        if shutdown.is_cancelled() {
            return;
        }
        if connected.is_marked() {
            backoff.reset();
        }
        let wait = backoff.next_wait();
        match ended {
            Ok(()) => tracing::info!(what, retry_in = ?wait, "connection ended; connecting again"),
            Err(e) => tracing::warn!(
                what,
                error = format!("{e:#}"),
                retry_in = ?wait,
                "connection lost; reconnecting"
            ),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn the_waits_grow_jittered_up_to_a_cap_and_start_again_after_a_reset() {
        let mut b = Backoff::new();
        let first = b.next_wait();
        assert!(first >= FIRST_WAIT && first < 2 * FIRST_WAIT, "{first:?}");
        let second = b.next_wait();
        assert!(
            second >= 2 * FIRST_WAIT && second < 4 * FIRST_WAIT,
            "{second:?}"
        );
        // 800 ms, 1.6 s, 3.2 s (each up to twice that), then the cap.
        for base in [4, 8, 16] {
            let wait = b.next_wait();
            assert!(
                wait >= base * FIRST_WAIT && wait < 2 * base * FIRST_WAIT,
                "{wait:?}"
            );
        }
        let later: Vec<Duration> = (0..20).map(|_| b.next_wait()).collect();
        assert!(
            later
                .iter()
                .all(|w| *w >= LONGEST_WAIT && *w < 2 * LONGEST_WAIT),
            "{later:?}"
        );
        // Jittered: twenty waits at the cap are not all the same.
        assert!(later.iter().any(|w| *w != later[0]), "{later:?}");
        b.reset();
        assert!(b.next_wait() < 2 * FIRST_WAIT);
    }

    /// Lives that fail before connecting wait longer each time; one that
    /// connected makes the next wait the shortest again; shutdown ends it.
    #[tokio::test(start_paused = true)]
    async fn a_supervised_life_is_restarted_after_growing_waits_until_shutdown() {
        let shutdown = CancellationToken::new();
        let starts = Arc::new(Mutex::new(Vec::new()));
        let began = tokio::time::Instant::now();
        let task = {
            let shutdown = shutdown.clone();
            let starts = starts.clone();
            tokio::spawn(async move {
                let mut n = 0;
                supervise("test", &shutdown, |connected| {
                    n += 1;
                    let n = n;
                    starts.lock().expect("starts").push(began.elapsed());
                    async move {
                        if n == 3 {
                            connected.mark();
                        }
                        anyhow::bail!("lost {n}")
                    }
                })
                .await;
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        shutdown.cancel();
        task.await.expect("supervise ends at shutdown");
        let starts = starts.lock().expect("starts").clone();
        assert!(starts.len() >= 5, "{starts:?}");
        let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        // Before the third life connected: 200–400 ms, then 400–800 ms
        // (upper bounds included: tokio's timer rounds a sleep up to the
        // next millisecond, so 399.7 ms is seen as 400 ms).
        assert!(
            gaps[0] >= FIRST_WAIT && gaps[0] <= 2 * FIRST_WAIT,
            "{gaps:?}"
        );
        assert!(
            gaps[1] >= 2 * FIRST_WAIT && gaps[1] <= 4 * FIRST_WAIT,
            "{gaps:?}"
        );
        // After it: the shortest again.
        assert!(
            gaps[2] >= FIRST_WAIT && gaps[2] <= 2 * FIRST_WAIT,
            "{gaps:?}"
        );
    }
}
