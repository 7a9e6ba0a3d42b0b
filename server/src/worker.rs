//! Worker groups: one consumer per queue with manual ack and prefetch = the
//! queue's concurrency, one task per delivery, a heartbeat row per process,
//! and graceful shutdown (stop consuming, let running steps finish within
//! the grace period, release what could not finish).

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt};
use lapin::{
    options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    },
    types::FieldTable,
};
use sqlx::PgPool;
use tokio::{sync::Mutex, task::JoinSet};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    broker::{self, Broker},
    config::QueueArg,
    jobs::JobMessage,
    pipeline::{self, Deps, Outcome},
};

/// How often a worker process writes its heartbeat row.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// A unique id for this process's worker group.
pub fn worker_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!(
        "{host}:{}:{}",
        std::process::id(),
        &Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Jobs this process is running, for the heartbeat row.
type Running = Arc<Mutex<Vec<Uuid>>>;

/// Runs the worker group until `shutdown`, then drains within the grace period.
pub async fn run(deps: Deps, broker: Broker, queues: Vec<QueueArg>, shutdown: CancellationToken) {
    let running: Running = Arc::default();
    let queue_names = queues
        .iter()
        .map(|q| format!("{}={}", q.tier, q.concurrency))
        .collect::<Vec<_>>()
        .join(",");
    let registry = tokio::spawn(heartbeat_loop(
        deps.pool.clone(),
        deps.worker_id.clone(),
        queue_names,
        running.clone(),
        shutdown.clone(),
    ));
    // Steps stop at their next check only once the grace period is over.
    let hard_stop = CancellationToken::new();
    let mut consumers = JoinSet::new();
    for q in queues {
        consumers.spawn(consume(
            deps.clone(),
            broker.clone(),
            q,
            running.clone(),
            shutdown.clone(),
            hard_stop.clone(),
        ));
    }
    shutdown.cancelled().await;
    let grace = deps.config.shutdown_grace;
    let drained = tokio::time::timeout(grace, async {
        while consumers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace_s = grace.as_secs(),
            "jobs still running after the grace period; releasing them"
        );
        hard_stop.cancel();
        while consumers.join_next().await.is_some() {}
    }
    let _ = registry.await;
    let _ = sqlx::query("DELETE FROM workers WHERE id = $1")
        .bind(&*deps.worker_id)
        .execute(&deps.pool)
        .await;
}

async fn heartbeat_loop(
    pool: PgPool,
    id: Arc<str>,
    queues: String,
    running: Running,
    shutdown: CancellationToken,
) {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    loop {
        let jobs = running.lock().await.clone();
        let r = sqlx::query(
            "INSERT INTO workers (id, hostname, pid, queues, running_jobs) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), running_jobs = EXCLUDED.running_jobs",
        )
        .bind(&*id)
        .bind(&host)
        .bind(std::process::id() as i32)
        .bind(&queues)
        .bind(&jobs)
        .execute(&pool)
        .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "worker heartbeat failed");
        }
        // Forget workers silent for a minute (their process died).
        let _ = sqlx::query("DELETE FROM workers WHERE heartbeat_at < now() - interval '1 minute'")
            .execute(&pool)
            .await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

/// Consumes one queue, reconnecting after broker loss, until shutdown.
async fn consume(
    deps: Deps,
    broker: Broker,
    q: QueueArg,
    running: Running,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
) {
    let queue = q.tier.queue_name();
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        // Take nothing while PostgreSQL is down: deliveries would only bounce.
        if let Err(e) = sqlx::query("SELECT 1").execute(&deps.pool).await {
            failures += 1;
            tracing::warn!(error = %e, %queue, "PostgreSQL unreachable; not consuming");
            sleep_or_stop(broker::backoff(failures), &shutdown).await;
            continue;
        }
        match consume_once(
            &deps,
            &broker,
            &queue,
            q.concurrency,
            &running,
            &shutdown,
            &hard_stop,
        )
        .await
        {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::warn!(error = format!("{e:#}"), %queue, "consumer lost; reconnecting");
                sleep_or_stop(broker::backoff(failures), &shutdown).await;
            }
        }
    }
}

async fn sleep_or_stop(d: Duration, stop: &CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {},
        _ = tokio::time::sleep(d) => {},
    }
}

async fn consume_once(
    deps: &Deps,
    broker: &Broker,
    queue: &str,
    concurrency: u16,
    running: &Running,
    shutdown: &CancellationToken,
    hard_stop: &CancellationToken,
) -> anyhow::Result<()> {
    let channel = broker.channel().await?;
    channel
        .basic_qos(concurrency, BasicQosOptions::default())
        .await?;
    let tag = format!("{}:{queue}", deps.worker_id);
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(%queue, concurrency, "consuming");
    let mut tasks = JoinSet::new();
    // Cancelled by a delivery that failed on PostgreSQL: stop taking more.
    let db_down = CancellationToken::new();
    let result = loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await;
                break Ok(());
            }
            _ = db_down.cancelled() => {
                let _ = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await;
                break Err(anyhow::anyhow!("PostgreSQL is unavailable; pausing consumption"));
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "delivery task panicked");
                }
            }
            next = consumer.next() => match next {
                Some(Ok(delivery)) => {
                    let deps = deps.clone();
                    let running = running.clone();
                    let hard_stop = hard_stop.clone();
                    let db_down = db_down.clone();
                    tasks.spawn(async move { handle(deps, delivery, running, hard_stop, db_down).await });
                }
                Some(Err(e)) => break Err(anyhow::Error::new(e).context("consumer failed")),
                None => break Err(anyhow::anyhow!("consumer stream ended")),
            }
        }
    };
    // Let running deliveries finish (their acks need this channel open).
    while tasks.join_next().await.is_some() {}
    let _ = channel.close(200, "worker stopping".into()).await;
    result
}

async fn handle(
    deps: Deps,
    delivery: lapin::message::Delivery,
    running: Running,
    stop: CancellationToken,
    db_down: CancellationToken,
) {
    let msg: JobMessage = match serde_json::from_slice(&delivery.data) {
        Ok(m) => m,
        Err(e) => {
            // The keeper records it as `malformed` from docflow.dead.
            tracing::error!(error = %e, "malformed job message; dead-lettering it");
            let _ = delivery
                .nack(BasicNackOptions {
                    requeue: false,
                    ..Default::default()
                })
                .await;
            return;
        }
    };
    running.lock().await.push(msg.job_id);
    let outcome = std::panic::AssertUnwindSafe(pipeline::process(&deps, &msg, &stop))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            // Steps catch their own panics; this is the executor's own. The
            // job keeps its lease until the sweeper counts it as a crash.
            tracing::error!(job_id = %msg.job_id, "job executor panicked; the sweeper takes the job over");
            Ok(Outcome::Skipped)
        });
    running.lock().await.retain(|id| *id != msg.job_id);
    let r = match outcome {
        Ok(Outcome::Done | Outcome::Skipped | Outcome::Retrying | Outcome::HandedOver) => {
            delivery.ack(BasicAckOptions::default()).await
        }
        Ok(Outcome::Failed) => {
            delivery
                .nack(BasicNackOptions {
                    requeue: false,
                    ..Default::default()
                })
                .await
        }
        Ok(Outcome::Released) => {
            delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await
        }
        Err(e) => {
            // PostgreSQL trouble: hand the message back for a later try.
            tracing::warn!(job_id = %msg.job_id, error = %e, "job could not be processed now; requeueing");
            db_down.cancel();
            delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await
        }
    };
    if let Err(e) = r {
        // The channel is gone; the broker redelivers, the claim makes that harmless.
        tracing::warn!(job_id = %msg.job_id, error = %e, "could not settle the delivery");
    }
}
