//! Which work queues are paused (`POST /api/admin/queues/{queue}/pause`
//! and `…/resume`, in [`crate::ops::controls`]). The state is a row per paused
//! queue in `paused_queues`, so it survives restarts and every process
//! reads the same truth; each change is one transaction with its audit-log
//! row. Worker processes
//! follow the table with [`follow`] and cancel their consumer of a paused
//! queue (see `worker`); the stats and the sampler read it with [`paused`].

use std::{sync::Arc, time::Duration};

use sqlx::{PgExecutor, PgPool};
use tokio::{
    sync::{watch, Notify},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

use crate::{jobs::Tier, platform::error::ApiError};

/// How often a worker process reads which queues are paused: a pause takes
/// effect within this plus one round trip to RabbitMQ.
pub const POLL: Duration = Duration::from_millis(500);

/// What a process knows of the paused queues: `None` until the table was
/// first read, so a worker never consumes before it knows.
pub type Known = Option<Vec<Tier>>;

/// Whether `tier` is paused, as far as `known` tells (`None`: not known yet).
pub fn is_paused(known: &Known, tier: Tier) -> Option<bool> {
    known.as_ref().map(|p| p.contains(&tier))
}

/// The queue named in a path: `high`, `normal` or `slow` (404 otherwise).
pub fn parse(queue: &str) -> Result<Tier, ApiError> {
    queue.parse().map_err(|_| ApiError::NotFound("queue"))
}

/// The paused queues, in `Tier::ALL` order.
pub async fn paused(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<Tier>> {
    let rows = sqlx::query_scalar!(r#"SELECT queue AS "queue: Tier" FROM paused_queues"#)
        .fetch_all(conn)
        .await?;
    Ok(Tier::ALL.into_iter().filter(|t| rows.contains(t)).collect())
}

/// Reads `paused_queues` every [`POLL`] until `shutdown` and publishes what
/// it read. A failed read keeps what was read last: the worker does not
/// consume while PostgreSQL is down anyway.
///
/// Polling rather than `LISTEN/NOTIFY`: one indexed read of a table of at
/// most three rows twice a second costs nothing, needs no connection of its
/// own, and has no window in which a missed notification leaves a queue
/// running; a listener would need this poll as its safety net anyway.
///
/// [`Pauses::recheck`] makes it read at once: a worker whose claim found the queue
/// paused notifies it, so the consumer is cancelled without waiting for the
/// next poll.
pub fn follow(pool: PgPool, shutdown: CancellationToken) -> (Pauses, JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let recheck = Arc::new(Notify::new());
    let pauses = Pauses {
        known: rx,
        recheck: recheck.clone(),
    };
    let task = tokio::spawn(async move {
        let mut failing = false;
        loop {
            match paused(&pool).await {
                Ok(now) => {
                    if failing {
                        tracing::info!("paused queues readable again");
                        failing = false;
                    }
                    tx.send_if_modified(|known| {
                        let changed = known.as_ref() != Some(&now);
                        if changed {
                            *known = Some(now);
                        }
                        changed
                    });
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot read the paused queues; keeping what was read last");
                        failing = true;
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = recheck.notified() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    });
    (pauses, task)
}

/// What a worker process knows of the paused queues ([`follow`] keeps it
/// current), and a way to have it read again at once.
#[derive(Clone)]
pub struct Pauses {
    pub known: watch::Receiver<Known>,
    recheck: Arc<Notify>,
}

impl Pauses {
    /// Reads `paused_queues` now rather than at the next poll.
    pub fn recheck(&self) {
        self.recheck.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_paused_only_once_the_state_is_known_and_names_it() {
        assert_eq!(is_paused(&None, Tier::Normal), None);
        assert_eq!(is_paused(&Some(vec![]), Tier::Normal), Some(false));
        assert_eq!(
            is_paused(&Some(vec![Tier::Normal]), Tier::Normal),
            Some(true)
        );
        assert_eq!(
            is_paused(&Some(vec![Tier::Normal]), Tier::High),
            Some(false)
        );
    }

    #[test]
    fn only_the_three_tiers_are_queues() {
        assert_eq!(parse("slow").ok(), Some(Tier::Slow));
        assert!(matches!(
            parse("docflow.jobs.normal"),
            Err(ApiError::NotFound(_))
        ));
        assert!(matches!(parse("Normal"), Err(ApiError::NotFound(_))));
    }
}
