//! Live notifications: each web process binds its own exclusive queue to
//! `docflow.events` and fans events out in-process through a broadcast hub;
//! SSE streams replay what a client missed from `job_events`, then follow
//! the hub with no gap and no duplicate. Also the inbox.

pub mod ended;
pub mod sse;

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use futures::StreamExt;
use lapin::{
    options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions},
    types::FieldTable,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::{
    broker::{self, Broker},
    jobs::events::JobEvent,
};

/// Events buffered per subscriber before it lags (and catches up from the database).
const HUB_CAPACITY: usize = 4096;

/// An event as the hub hands it to every stream: with its SSE frame encoded.
pub struct Published {
    pub event: JobEvent,
    pub frame: bytes::Bytes,
}

/// The in-process fan-out of events received from RabbitMQ.
#[derive(Clone)]
pub struct Hub {
    tx: broadcast::Sender<Arc<Published>>,
    clients: Arc<AtomicI64>,
    /// Credentials that ended, for the streams opened with them.
    ended: broadcast::Sender<ended::Ended>,
    /// Raised when this process may have missed events (its event queue
    /// was lost with a broker node): every stream replays from the database.
    resync: broadcast::Sender<()>,
    /// Open streams per user.
    per_user: Arc<std::sync::Mutex<std::collections::HashMap<uuid::Uuid, usize>>>,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    pub fn new() -> Self {
        Self {
            tx: broadcast::channel(HUB_CAPACITY).0,
            clients: Arc::default(),
            ended: broadcast::channel(256).0,
            resync: broadcast::channel(4).0,
            per_user: Arc::default(),
        }
    }

    /// Tells every stream to catch up from `job_events`: events published
    /// while this process had no event queue never reached the hub.
    pub fn resync(&self) {
        let _ = self.resync.send(());
    }

    pub fn subscribe_resync(&self) -> broadcast::Receiver<()> {
        self.resync.subscribe()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.tx.subscribe()
    }

    pub fn publish(&self, e: JobEvent) {
        // Serialised once here, not once per connected client.
        let frame = sse::job_frame(&e);
        let _ = self.tx.send(Arc::new(Published { event: e, frame }));
    }

    /// Ends the streams opened with a credential that ended.
    pub fn end(&self, e: ended::Ended) {
        let _ = self.ended.send(e);
    }

    pub fn subscribe_ended(&self) -> broadcast::Receiver<ended::Ended> {
        self.ended.subscribe()
    }

    /// Connected SSE clients of this process.
    pub fn clients(&self) -> i64 {
        self.clients.load(Ordering::Relaxed)
    }

    /// Counts a stream of `user` for as long as the guard lives; `None`
    /// when the user already has `cap` streams open in this process.
    pub fn client_guard(&self, user: uuid::Uuid, cap: usize) -> Option<ClientGuard> {
        {
            let mut per_user = self.per_user.lock().unwrap_or_else(|p| p.into_inner());
            let open = per_user.entry(user).or_default();
            if *open >= cap {
                return None;
            }
            *open += 1;
        }
        self.clients.fetch_add(1, Ordering::Relaxed);
        Some(ClientGuard {
            clients: self.clients.clone(),
            per_user: self.per_user.clone(),
            user,
        })
    }
}

pub struct ClientGuard {
    clients: Arc<AtomicI64>,
    per_user: Arc<std::sync::Mutex<std::collections::HashMap<uuid::Uuid, usize>>>,
    user: uuid::Uuid,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.clients.fetch_sub(1, Ordering::Relaxed);
        let mut per_user = self.per_user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = per_user.get_mut(&self.user) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                per_user.remove(&self.user);
            }
        }
    }
}

/// The events of one `docflow.events` message: a JSON array of events (as
/// docflow publishes them, one message per routing key and batch) or one
/// event object.
pub fn decode_events(body: &[u8]) -> serde_json::Result<Vec<JobEvent>> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => serde_json::from_slice(body),
        _ => serde_json::from_slice::<JobEvent>(body).map(|e| vec![e]),
    }
}

/// Consumes this process's event queue into the hub until `shutdown`.
/// `bound` is told once the queue is first bound: until then, published
/// events reach no stream of this process.
pub async fn run_listener(
    broker: Broker,
    hub: Hub,
    shutdown: CancellationToken,
    bound: tokio::sync::oneshot::Sender<()>,
) {
    let bound = std::sync::Mutex::new(Some(bound));
    crate::platform::reconnect::supervise("event listener", &shutdown, |connected| {
        let (broker, hub, shutdown, bound) = (&broker, &hub, &shutdown, &bound);
        async move {
            let consumer = subscribe(broker).await?;
            connected.mark();
            if let Some(bound) = bound.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = bound.send(());
            }
            // Streams opened while no queue was bound (the previous one was
            // lost, or the broker was unreachable at start) catch up from
            // the database; with none open this does nothing.
            hub.resync();
            consume(consumer, hub, shutdown).await
        }
    })
    .await;
}

/// Declares and binds this process's event queue and starts consuming it;
/// the channel is returned with the consumer, which lives as long as it.
async fn subscribe(broker: &Broker) -> anyhow::Result<(lapin::Channel, lapin::Consumer)> {
    let ch = broker.channel().await?;
    // Server-named, exclusive, auto-delete: one per web process, gone with it.
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let name = q.name().clone();
    ch.queue_bind(
        name.clone(),
        broker::EVENTS_EXCHANGE.into(),
        "job.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let consumer = ch
        .basic_consume(
            name,
            "docflow-events".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    tracing::info!("listening for job events");
    Ok((ch, consumer))
}

/// Hands the events of `consumer` to the hub until `shutdown` (`Ok`) or
/// the consumer fails.
async fn consume(
    (_channel, mut consumer): (lapin::Channel, lapin::Consumer),
    hub: &Hub,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let d = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            d = consumer.next() => match d {
                Some(d) => d?,
                None => anyhow::bail!("event consumer ended"),
            },
        };
        match decode_events(&d.data) {
            Ok(events) => events.into_iter().for_each(|e| hub.publish(e)),
            Err(e) => tracing::warn!(error = %e, "unreadable job event ignored"),
        }
    }
}
