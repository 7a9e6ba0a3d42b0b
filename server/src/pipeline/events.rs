//! Job events on their way out: every state change and progress step is a
//! `job_events` row (written in the step's transaction) and, after commit,
//! a message on the `docflow.events` topic exchange (`job.<state>`,
//! `job.progress`). One publisher task per process keeps them in order.
//! The events themselves are the job layer's ([`crate::jobs::events`]).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::broker::{self, Broker, Publisher};

use crate::jobs::events::JobEvent;

/// Hands events to the process's publisher task; never blocks the pipeline.
#[derive(Clone)]
pub struct EventSink {
    tx: Option<mpsc::UnboundedSender<JobEvent>>,
}

impl EventSink {
    /// A sink that drops everything (processes without a broker role, tests).
    pub fn disabled() -> Self {
        Self { tx: None }
    }

    pub fn send(&self, event: JobEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(event);
        }
    }

    pub fn send_all(&self, events: impl IntoIterator<Item = JobEvent>) {
        events.into_iter().for_each(|e| self.send(e));
    }

    /// Starts the publisher task; it drains what is queued when `shutdown` fires.
    pub fn start(
        broker: Broker,
        shutdown: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(publish_loop(broker, rx, shutdown));
        (Self { tx: Some(tx) }, handle)
    }
}

/// The most events published in one go.
const MAX_BATCH: usize = 256;

/// How long the publisher gathers events after the first of a batch before
/// it publishes them. The events of jobs moving through the steps together
/// then share messages, one per routing key, instead of taking one each:
/// in the drain bench 1.2–1.4 messages a job instead of 3.5, which was a
/// third of RabbitMQ's work per job (docs/performance.md). An SSE client
/// sees an event at most this much later.
const EVENT_LINGER: Duration = Duration::from_millis(10);

/// Tries to publish a batch of events before leaving them to the replay
/// from `job_events`: long enough to ride out a move to another node
/// (backoff 0.2 + 0.4 + 0.8 + 1.6 s).
const EVENT_TRIES: u32 = 5;

/// The messages for a batch of events: one message per routing key as far
/// as each job's order allows, its body the JSON array of its events (a web
/// process reads a single event object too). An event joins the first
/// message of its key that is not before the last message holding an event
/// of its job, else a new one at the end; so a job's events still arrive in
/// the order they were written, while the events of the jobs that move
/// through the same steps together travel together (events of different
/// jobs may pass each other, as they do between worker processes). Each
/// message's id is its first event's id.
fn messages_of(batch: &[JobEvent]) -> Vec<(String, Vec<u8>, i64)> {
    let mut runs: Vec<(String, Vec<&JobEvent>)> = Vec::new();
    let mut last_of_job: std::collections::HashMap<Uuid, usize> = Default::default();
    for e in batch {
        let key = e.routing_key();
        let from = last_of_job.get(&e.job_id).copied().unwrap_or(0);
        let i = match runs[from..].iter().position(|(k, _)| *k == key) {
            Some(p) => from + p,
            None => {
                runs.push((key, Vec::new()));
                runs.len() - 1
            }
        };
        runs[i].1.push(e);
        last_of_job.insert(e.job_id, i);
    }
    runs.into_iter()
        .filter_map(|(key, events)| {
            let first = events.first()?.id;
            serde_json::to_vec(&events)
                .ok()
                .map(|body| (key, body, first))
        })
        .collect()
}

/// Adds to `batch` what arrives within `linger`, up to [`MAX_BATCH`]
/// events; returns early when the channel closes or `shutdown` fires.
async fn gather(
    rx: &mut mpsc::UnboundedReceiver<JobEvent>,
    batch: &mut Vec<JobEvent>,
    linger: Duration,
    shutdown: &CancellationToken,
) {
    let until = tokio::time::Instant::now() + linger;
    while batch.len() < MAX_BATCH && !shutdown.is_cancelled() {
        let room = MAX_BATCH - batch.len();
        tokio::select! {
            n = rx.recv_many(batch, room) => if n == 0 { return },
            _ = tokio::time::sleep_until(until) => return,
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn publish_loop(
    broker: Broker,
    mut rx: mpsc::UnboundedReceiver<JobEvent>,
    shutdown: CancellationToken,
) {
    let mut publisher: Option<Publisher> = None;
    let mut batch = Vec::new();
    loop {
        let n = tokio::select! {
            n = rx.recv_many(&mut batch, MAX_BATCH) => n,
            _ = shutdown.cancelled() => {
                // Publish what is already queued, then stop.
                rx.close();
                rx.recv_many(&mut batch, 4096).await
            }
        };
        if n == 0 {
            return;
        }
        gather(&mut rx, &mut batch, EVENT_LINGER, &shutdown).await;
        let mut runs = messages_of(&batch);
        // The bodies move into the messages (kept for every try); only the
        // routing keys stay behind, borrowed.
        let messages: Vec<broker::Outgoing> = runs
            .iter_mut()
            .map(|(key, body, first)| broker::Outgoing {
                exchange: broker::EVENTS_EXCHANGE,
                routing_key: key.as_str(),
                body: std::mem::take(body),
                message_id: first.to_string(),
            })
            .collect();
        let mut tries = 0;
        let mut backoff = crate::platform::reconnect::Backoff::new();
        loop {
            tries += 1;
            let p = match &publisher {
                Some(p) if p.is_open() => p,
                _ => match broker.publisher().await {
                    Ok(p) => publisher.insert(p),
                    Err(e) => {
                        tracing::debug!(error = format!("{e:#}"), "events publisher unavailable");
                        if tries >= EVENT_TRIES {
                            break;
                        }
                        tokio::time::sleep(backoff.next_wait()).await;
                        continue;
                    }
                },
            };
            match p.publish_all_unrouted_ok(&messages).await {
                Ok(()) => break,
                Err(e) => {
                    publisher = None;
                    tracing::debug!(error = format!("{e:#}"), "publishing events failed");
                    if tries >= EVENT_TRIES {
                        // Events stay in job_events: SSE clients catch up from there.
                        tracing::warn!(
                            dropped = messages.len(),
                            "events not published live; clients will replay them"
                        );
                        break;
                    }
                    tokio::time::sleep(backoff.next_wait()).await;
                }
            }
        }
        drop(messages);
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::jobs::events::Progress;

    fn event(id: i64, state: &str, progress: bool) -> JobEvent {
        job_event(Uuid::nil(), id, state, progress)
    }

    fn job_event(job: Uuid, id: i64, state: &str, progress: bool) -> JobEvent {
        JobEvent {
            progress: progress.then_some(Progress { done: 1, total: 2 }),
            ..JobEvent::state_change(id, Utc::now(), job, Uuid::nil(), state, "m")
        }
    }

    fn ids(body: &[u8]) -> Vec<i64> {
        crate::notify::decode_events(body)
            .expect("decodes")
            .iter()
            .map(|e| e.id)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn events_arriving_within_the_linger_are_published_together() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let mut batch = vec![event(1, "processing", false)];
        let sender = tokio::spawn(async move {
            for id in 2..=4 {
                tokio::time::sleep(Duration::from_millis(3)).await;
                tx.send(event(id, "processing", false)).expect("open");
            }
            // Too late for this batch.
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send(event(5, "processing", false)).expect("open");
            tx
        });
        gather(&mut rx, &mut batch, EVENT_LINGER, &stop).await;
        let ids: Vec<i64> = batch.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        let _tx = sender.await.expect("sender");
        assert_eq!(rx.recv().await.map(|e| e.id), Some(5));

        // A full batch and a shutdown end the gathering at once.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _keep_open = tx.clone();
        let mut full: Vec<JobEvent> = (0..MAX_BATCH as i64)
            .map(|id| event(id, "processing", false))
            .collect();
        tx.send(event(-1, "done", false)).expect("open");
        let started = tokio::time::Instant::now();
        gather(&mut rx, &mut full, EVENT_LINGER, &stop).await;
        assert_eq!(full.len(), MAX_BATCH);
        stop.cancel();
        let mut batch = vec![event(1, "processing", false)];
        gather(&mut rx, &mut batch, EVENT_LINGER, &stop).await;
        assert_eq!(batch.len(), 1);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn jobs_moving_together_share_messages() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let batch = [
            job_event(a, 1, "processing", false),
            job_event(b, 2, "processing", false),
            job_event(a, 3, "processing", true),
            job_event(b, 4, "processing", true),
            job_event(a, 5, "done", false),
            job_event(b, 6, "done", false),
            // Back to an earlier key: only after a's last message.
            job_event(a, 7, "processing", false),
            // b's last is the `done` message too.
            job_event(b, 8, "processing", true),
        ];
        let messages = messages_of(&batch);
        let got: Vec<(&str, Vec<i64>)> = messages
            .iter()
            .map(|(k, body, _)| (k.as_str(), ids(body)))
            .collect();
        assert_eq!(
            got,
            [
                ("job.processing", vec![1, 2]),
                ("job.progress", vec![3, 4]),
                ("job.done", vec![5, 6]),
                ("job.processing", vec![7]),
                ("job.progress", vec![8]),
            ]
        );
    }

    #[test]
    fn every_job_keeps_the_order_of_its_events() {
        let states = ["processing", "retrying", "done"];
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let batch: Vec<JobEvent> = (1..=60)
                .map(|id| {
                    let job = Uuid::from_u128(u128::from(next(6)));
                    job_event(job, id, states[next(3) as usize], next(2) == 0)
                })
                .collect();
            let published: Vec<JobEvent> = messages_of(&batch)
                .iter()
                .flat_map(|(_, body, _)| crate::notify::decode_events(body).expect("decodes"))
                .collect();
            assert_eq!(published.len(), batch.len());
            for job in 0..6 {
                let job = Uuid::from_u128(job);
                let order: Vec<i64> = published
                    .iter()
                    .filter(|e| e.job_id == job)
                    .map(|e| e.id)
                    .collect();
                assert!(order.is_sorted(), "{order:?}");
            }
            for (key, body, _) in messages_of(&batch) {
                let events = crate::notify::decode_events(&body).expect("decodes");
                assert!(events.iter().all(|e| e.routing_key() == key));
            }
        }
    }

    #[test]
    fn a_batch_is_one_message_per_run_of_a_routing_key_in_order() {
        let batch = [
            event(1, "processing", false),
            event(2, "processing", false),
            event(3, "processing", true),
            event(4, "processing", true),
            event(5, "done", false),
            event(6, "processing", false),
        ];
        let messages = messages_of(&batch);
        let keys: Vec<&str> = messages.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "job.processing",
                "job.progress",
                "job.done",
                "job.processing"
            ]
        );
        assert_eq!(ids(&messages[0].1), [1, 2]);
        assert_eq!(ids(&messages[1].1), [3, 4]);
        assert_eq!(ids(&messages[2].1), [5]);
        assert_eq!(ids(&messages[3].1), [6]);
        assert_eq!(messages[1].2, 3, "message id = first event id");
        // A single event object is read too.
        let one = serde_json::to_vec(&batch[4]).expect("json");
        assert_eq!(ids(&one), [5]);
    }
}
