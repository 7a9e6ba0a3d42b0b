//! Worker groups: one consumer per queue with manual acks (gathered: see
//! [`broker::acks`]), one task per delivery started once the queue's group
//! has a slot for it (see [`slots`](crate::worker::slots): `high` and `normal`
//! share their slots, paid first; `slow` has its own), a heartbeat row per
//! process, and graceful shutdown (stop consuming, let running steps finish
//! within the grace period, release what could not finish).
//!
//! Paused queues: each process reads `paused_queues` every
//! [`queues::POLL`] (half a second; see [`queues::follow`] for why a poll
//! and not `LISTEN`). When a queue it consumes is paused, the worker
//! cancels that consumer (`basic.cancel`), hands back untouched whatever
//! the broker sent before the cancel took effect, and lets the jobs it is
//! running finish and settle on the same channel. RabbitMQ keeps the
//! queue's messages ready, so they show as depth, the reconciler sees them
//! there, and no job runs twice. On resume the worker consumes
//! again, once the jobs it was running at the pause have settled (so it
//! never runs more than the queue's concurrency). A consumer cancelled for
//! a pause is a normal stop, not a lost connection: it resets the reconnect
//! backoff and logs no warning. A worker that starts reads the table before
//! its first `basic.consume`, so a paused queue stays paused across
//! restarts. The poll is not what makes a pause hold: the claim reads the
//! pause in its own statement, so a delivery that reaches a worker after
//! the pause committed starts nothing; it goes back to the queue and makes
//! the process read the pause at once.

pub mod keeper;
pub mod queues;
pub mod retention;
pub mod slots;

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt};
use lapin::{
    options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use sqlx::PgPool;
use tokio::{
    sync::{watch, Mutex},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    broker::{
        acks::{Acks, Verdict},
        Broker,
    },
    jobs::{JobMessage, Tier},
    pipeline::{self, Deps, Outcome},
    platform::config::QueueArg,
};

use self::{
    queues::{Known, Pauses},
    slots::{Permit, Slots},
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

/// The queues a worker process consumes, each with its group's slots.
#[derive(Debug, Clone)]
pub struct Groups {
    queues: Vec<(Tier, Arc<Slots>)>,
    described: String,
}

impl Groups {
    /// `high` and `normal` share `slots` (at least their reservations);
    /// `slow` runs its own reserved slots.
    pub fn new(queues: &[QueueArg], slots: u16) -> anyhow::Result<Self> {
        for (i, q) in queues.iter().enumerate() {
            if queues[..i].iter().any(|p| p.tier == q.tier) {
                anyhow::bail!("queue `{}` is given twice", q.tier);
            }
        }
        let (slow, shared): (Vec<&QueueArg>, Vec<&QueueArg>) =
            queues.iter().partition(|q| q.tier == Tier::Slow);
        let mut out = Vec::new();
        let mut described = Vec::new();
        if !shared.is_empty() {
            let reserved: Vec<(Tier, usize)> = shared
                .iter()
                .map(|q| (q.tier, usize::from(q.concurrency)))
                .collect();
            let group = Slots::new(usize::from(slots), &reserved);
            if group.total() == 0 {
                anyhow::bail!(
                    "queues without reserved slots need a shared total: give `--slots N` or `--queue name=N`"
                );
            }
            for q in &shared {
                out.push((q.tier, group.clone()));
            }
            let names: Vec<String> = shared
                .iter()
                .map(|q| match q.concurrency {
                    0 => q.tier.to_string(),
                    n => format!("{}={n}", q.tier),
                })
                .collect();
            described.push(format!("{} ({} slots)", names.join("+"), group.total()));
        }
        for q in slow {
            let n = usize::from(q.concurrency.max(1));
            out.push((q.tier, Slots::new(n, &[(q.tier, n)])));
            described.push(format!("{}={n}", q.tier));
        }
        Ok(Self {
            queues: out,
            described: described.join(", "),
        })
    }
}

/// Runs the worker group until `shutdown`, then drains within the grace period.
pub async fn run(deps: Deps, broker: Broker, groups: Groups, shutdown: CancellationToken) {
    let running: Running = Arc::default();
    let registry = tokio::spawn(heartbeat_loop(
        deps.pool.clone(),
        deps.worker_id.clone(),
        groups.described.clone(),
        running.clone(),
        shutdown.clone(),
    ));
    let (pauses, follower) = queues::follow(deps.pool.clone(), shutdown.clone());
    // Steps stop at their next check only once the grace period is over.
    let hard_stop = CancellationToken::new();
    let mut consumers = JoinSet::new();
    // Re-embedding after a model change takes a slot as `normal` work
    // (paid jobs waiting go first), or as the one queue this process has.
    let reembed_slots = [Tier::Normal, Tier::High, Tier::Slow]
        .iter()
        .find_map(|t| groups.queues.iter().find(|(tier, _)| tier == t))
        .cloned();
    let reembedder = reembed_slots.map(|(tier, slots)| {
        tokio::spawn(pipeline::reembed::run(
            deps.clone(),
            tier,
            slots,
            shutdown.clone(),
        ))
    });
    for (tier, slots) in groups.queues {
        consumers.spawn(consume(
            deps.clone(),
            broker.clone(),
            tier,
            slots,
            running.clone(),
            pauses.clone(),
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
    if let Some(reembedder) = reembedder {
        let _ = reembedder.await;
    }
    let _ = registry.await;
    let _ = follower.await;
    let _ = sqlx::query!("DELETE FROM workers WHERE id = $1", &*deps.worker_id)
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
        let r = sqlx::query!(
            "INSERT INTO workers (id, hostname, pid, queues, running_jobs) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), running_jobs = EXCLUDED.running_jobs",
            &*id,
            &host,
            std::process::id() as i32,
            &queues,
            &jobs
        )
        .execute(&pool)
        .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "worker heartbeat failed");
        }
        // Forget workers silent for a minute (their process died).
        let _ =
            sqlx::query!("DELETE FROM workers WHERE heartbeat_at < now() - interval '1 minute'")
                .execute(&pool)
                .await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

/// Consumes one queue, reconnecting after broker loss and standing still
/// while the queue is paused, until shutdown.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker group's shared parts, passed down as they are"
)]
async fn consume(
    deps: Deps,
    broker: Broker,
    tier: Tier,
    slots: Arc<Slots>,
    running: Running,
    mut pauses: Pauses,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
) {
    let queue = tier.queue_name();
    let mut backoff = crate::platform::reconnect::Backoff::new();
    while !shutdown.is_cancelled() {
        let is_paused = queues::is_paused(&pauses.known.borrow(), tier) == Some(true);
        if is_paused {
            tracing::info!(%queue, "queue paused; not consuming until it is resumed");
        }
        if !until_running(&mut pauses.known, tier, &shutdown).await {
            break;
        }
        // Take nothing while PostgreSQL is down: deliveries would only bounce.
        if let Err(e) = sqlx::query!("SELECT 1 AS one").fetch_one(&deps.pool).await {
            tracing::warn!(error = %e, %queue, "PostgreSQL unreachable; not consuming");
            sleep_or_stop(backoff.next_wait(), &shutdown).await;
            continue;
        }
        match consume_once(
            &deps,
            &broker,
            tier,
            &slots,
            &running,
            &mut pauses,
            &shutdown,
            &hard_stop,
        )
        .await
        {
            // Shut down, or paused: neither is a failure.
            Ok(()) => backoff.reset(),
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), %queue, "consumer lost; reconnecting");
                sleep_or_stop(backoff.next_wait(), &shutdown).await;
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

/// Waits until `tier` is known not to be paused; false on shutdown.
async fn until_running(
    paused: &mut watch::Receiver<Known>,
    tier: Tier,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        r = paused.wait_for(|k| queues::is_paused(k, tier) == Some(false)) => r.is_ok(),
    }
}

/// Resolves once `tier` is paused; never once the state is no longer
/// followed (the process is stopping, and shutdown ends the consumer).
async fn until_paused(paused: &mut watch::Receiver<Known>, tier: Tier) {
    let followed = paused
        .wait_for(|k| queues::is_paused(k, tier) == Some(true))
        .await
        .is_ok();
    if !followed {
        std::future::pending::<()>().await;
    }
}

/// Cancels the consumer for a pause and hands back, untouched, the
/// deliveries the broker sent before the cancel took effect, so they are
/// ready on the queue again instead of waiting for this channel to close.
async fn cancel_for_pause(
    channel: &lapin::Channel,
    tag: &str,
    consumer: &mut lapin::Consumer,
    acks: &Acks,
) {
    if let Err(e) = channel
        .basic_cancel(tag.into(), BasicCancelOptions::default())
        .await
    {
        // The channel is gone: the broker requeues what it had delivered.
        tracing::debug!(error = %e, "cancelling the consumer for a pause failed");
        return;
    }
    // The stream ends once the broker confirmed the cancel.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(delivery)) = consumer.next().await {
            acks.received(delivery.delivery_tag);
            acks.settle(delivery.delivery_tag, Verdict::Requeue);
        }
    })
    .await;
}

/// A delivery taken from the queue, waiting for a slot of its group.
struct Held {
    delivery: lapin::message::Delivery,
    slot: Pin<Box<dyn Future<Output = Permit> + Send>>,
}

/// The slot for the delivery in hand; never resolves with none in hand.
async fn slot_for(held: &mut Option<Held>) -> Permit {
    match held {
        Some(h) => h.slot.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Hands a delivery that never started back to the queue, untouched.
fn hand_back(held: Option<Held>, acks: &Acks) {
    if let Some(Held { delivery, .. }) = held {
        acks.settle(delivery.delivery_tag, Verdict::Requeue);
    }
}

/// Consumes `tier`'s queue on one channel until shutdown, a pause (both
/// `Ok`), or the loss of the channel or of PostgreSQL (`Err`); returns once
/// the deliveries it started have settled. A delivery starts once its
/// group has a slot for it.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker group's shared parts, passed down as they are"
)]
async fn consume_once(
    deps: &Deps,
    broker: &Broker,
    tier: Tier,
    slots: &Arc<Slots>,
    running: &Running,
    pauses: &mut Pauses,
    shutdown: &CancellationToken,
    hard_stop: &CancellationToken,
) -> anyhow::Result<()> {
    let queue = tier.queue_name();
    let queue = queue.as_str();
    let channel = broker.channel().await?;
    // One more than the queue may run: when its jobs fill the group, the
    // next one is already in hand for the first slot they free, before a
    // lower queue's delivery can take it. For the fast queues, half their
    // slots again: room for the deliveries that finished and whose ack
    // waits (up to `acks::ACK_LINGER`) for others to share its frame;
    // without it a freed slot waits for that ack before the broker sends
    // work. `slow`'s jobs run for minutes: what one process does not run
    // stays on the queue for another.
    let capacity = slots.capacity(tier);
    let awaiting_ack = match tier {
        Tier::High | Tier::Normal => capacity.div_ceil(2),
        Tier::Slow => 0,
    };
    let prefetch = u16::try_from(capacity + 1 + awaiting_ack).unwrap_or(u16::MAX);
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
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
    tracing::info!(%queue, slots = slots.total(), prefetch, "consuming");
    let (acks, settling) = Acks::start(channel.clone());
    let mut tasks = JoinSet::new();
    let mut held: Option<Held> = None;
    // Cancelled by a delivery that failed on PostgreSQL: stop taking more.
    let db_down = CancellationToken::new();
    let result = loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                hand_back(held.take(), &acks);
                let _ = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await;
                break Ok(());
            }
            _ = db_down.cancelled() => {
                hand_back(held.take(), &acks);
                let _ = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await;
                break Err(anyhow::anyhow!("PostgreSQL is unavailable; pausing consumption"));
            }
            _ = until_paused(&mut pauses.known, tier) => {
                tracing::info!(%queue, running = tasks.len(), "queue paused; consumer cancelled, running jobs finish");
                hand_back(held.take(), &acks);
                cancel_for_pause(&channel, &tag, &mut consumer, &acks).await;
                break Ok(());
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "delivery task panicked");
                }
            }
            permit = slot_for(&mut held) => {
                if let Some(Held { delivery, .. }) = held.take() {
                    let deps = deps.clone();
                    let running = running.clone();
                    let hard_stop = hard_stop.clone();
                    let db_down = db_down.clone();
                    let acks = acks.clone();
                    let pauses = pauses.clone();
                    tasks.spawn(async move {
                        let outcome = handle(deps, delivery, &acks, running, hard_stop, db_down).await;
                        if outcome == Some(Outcome::Paused) {
                            pauses.recheck();
                        }
                        drop(permit);
                    });
                }
            }
            next = consumer.next(), if held.is_none() => match next {
                Some(Ok(delivery)) => {
                    acks.received(delivery.delivery_tag);
                    let slots = slots.clone();
                    held = Some(Held {
                        delivery,
                        slot: Box::pin(async move { slots.acquire(tier).await }),
                    });
                }
                Some(Err(e)) => break Err(anyhow::Error::new(e).context("consumer failed")),
                None => break Err(anyhow::anyhow!("consumer stream ended")),
            }
        }
    };
    // Let running deliveries finish and settle (on this channel, still open).
    while tasks.join_next().await.is_some() {}
    settling.finish(acks).await;
    let _ = channel.close(200, "worker stopping".into()).await;
    result
}

async fn handle(
    deps: Deps,
    delivery: lapin::message::Delivery,
    acks: &Acks,
    running: Running,
    stop: CancellationToken,
    db_down: CancellationToken,
) -> Option<Outcome> {
    let tag = delivery.delivery_tag;
    let msg: JobMessage = match serde_json::from_slice(&delivery.data) {
        Ok(m) => m,
        Err(e) => {
            // The keeper records it as `malformed` from docflow.dead.
            tracing::error!(error = %e, "malformed job message; dead-lettering it");
            acks.settle(tag, Verdict::DeadLetter);
            return None;
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
    let verdict = match &outcome {
        Ok(Outcome::Done | Outcome::Skipped | Outcome::Retrying | Outcome::HandedOver) => {
            Verdict::Ack
        }
        Ok(Outcome::Failed) => Verdict::DeadLetter,
        Ok(Outcome::Released | Outcome::Paused) => Verdict::Requeue,
        Err(e) => {
            // PostgreSQL trouble: hand the message back for a later try.
            tracing::warn!(job_id = %msg.job_id, error = %e, "job could not be processed now; requeueing");
            db_down.cancel();
            Verdict::Requeue
        }
    };
    acks.settle(tag, verdict);
    outcome.ok()
}
