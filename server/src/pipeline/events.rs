//! Job events on their way out: every state change and progress step is a
//! `job_events` row (written in the step's transaction) and, after commit,
//! a message on the `docflow.events` topic exchange (`job.<state>`,
//! `job.progress`). One publisher task per process keeps them in order.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::broker::{self, Broker, Publisher};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub done: i32,
    pub total: i32,
}

/// A notification created with a terminal event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationRef {
    pub id: Uuid,
    pub kind: String,
    pub title: String,
    pub body: String,
    pub link: String,
}

/// One event as it travels over RabbitMQ to the web processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// The `job_events` row id: the SSE event id.
    pub id: i64,
    pub job_id: Uuid,
    pub tenant_id: Uuid,
    /// The uploader, who gets the notification.
    pub user_id: Option<Uuid>,
    pub state: String,
    pub step: Option<String>,
    pub progress: Option<Progress>,
    pub message: String,
    pub at: DateTime<Utc>,
    pub notification: Option<NotificationRef>,
}

impl JobEvent {
    /// A state-change event without progress or notification (sweeper,
    /// keeper, admin actions).
    pub fn state_change(
        id: i64,
        at: DateTime<Utc>,
        job_id: Uuid,
        tenant_id: Uuid,
        state: &str,
        message: &str,
    ) -> Self {
        JobEvent {
            id,
            job_id,
            tenant_id,
            user_id: None,
            state: state.into(),
            step: None,
            progress: None,
            message: message.into(),
            at,
            notification: None,
        }
    }

    pub fn routing_key(&self) -> String {
        if self.progress.is_some() {
            "job.progress".into()
        } else {
            format!("job.{}", self.state)
        }
    }
}

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

async fn publish_loop(
    broker: Broker,
    mut rx: mpsc::UnboundedReceiver<JobEvent>,
    shutdown: CancellationToken,
) {
    let mut publisher: Option<Publisher> = None;
    let mut batch = Vec::new();
    loop {
        let n = tokio::select! {
            n = rx.recv_many(&mut batch, 256) => n,
            _ = shutdown.cancelled() => {
                // Publish what is already queued, then stop.
                rx.close();
                rx.recv_many(&mut batch, 4096).await
            }
        };
        if n == 0 {
            return;
        }
        let keys: Vec<String> = batch.iter().map(JobEvent::routing_key).collect();
        let messages: Vec<broker::Outgoing> = batch
            .iter()
            .zip(&keys)
            .filter_map(|(e, k)| {
                serde_json::to_vec(e).ok().map(|body| broker::Outgoing {
                    exchange: broker::EVENTS_EXCHANGE,
                    routing_key: k,
                    body,
                    message_id: e.id.to_string(),
                })
            })
            .collect();
        let mut tries = 0;
        loop {
            tries += 1;
            let p = match &publisher {
                Some(p) if p.is_open() => p,
                _ => match broker.publisher().await {
                    Ok(p) => publisher.insert(p),
                    Err(e) => {
                        tracing::debug!(error = format!("{e:#}"), "events publisher unavailable");
                        if tries >= 3 {
                            break;
                        }
                        tokio::time::sleep(broker::backoff(tries)).await;
                        continue;
                    }
                },
            };
            match p.publish_all_unrouted_ok(&messages).await {
                Ok(()) => break,
                Err(e) => {
                    publisher = None;
                    tracing::debug!(error = format!("{e:#}"), "publishing events failed");
                    if tries >= 3 {
                        // Events stay in job_events: SSE clients catch up from there.
                        tracing::warn!(
                            dropped = messages.len(),
                            "events not published live; clients will replay them"
                        );
                        break;
                    }
                    tokio::time::sleep(broker::backoff(tries)).await;
                }
            }
        }
        drop(messages);
        batch.clear();
    }
}
