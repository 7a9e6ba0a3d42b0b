//! RabbitMQ: one connection per process, re-opened with backoff when lost,
//! the topology of DESIGN §4 declared on every (re)connect, and a confirming
//! publisher.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use lapin::{
    options::{
        BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
        QueueDeclareOptions,
    },
    types::{AMQPValue, FieldTable, ShortString},
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use tokio::sync::Mutex;

use crate::jobs::Tier;

/// Direct exchange of the work queues; routing key = tier.
pub const JOBS_EXCHANGE: &str = "docflow.jobs";
/// Fanout dead-letter exchange of the three work queues.
pub const DEAD_EXCHANGE: &str = "docflow.dlx";
/// Everything dead-lettered.
pub const DEAD_QUEUE: &str = "docflow.dead";
/// Topic exchange for `job.<state>` and `job.progress` events.
pub const EVENTS_EXCHANGE: &str = "docflow.events";
/// Deliveries of one message before the quorum queue dead-letters it
/// (a poison message that crashes every worker that takes it).
pub const DELIVERY_LIMIT: i64 = 10;

/// Reconnect delay after `failures` consecutive failures: 200 ms doubling to 10 s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << failures.min(6).saturating_sub(1)))
        .min(Duration::from_secs(10))
}

/// The process's broker connection, shared by relay, workers, keeper and events.
#[derive(Clone)]
pub struct Broker {
    url: Arc<str>,
    name: Arc<str>,
    conn: Arc<Mutex<Option<Arc<Connection>>>>,
}

impl Broker {
    /// No connection is made until first use, so a process starts while RabbitMQ is down.
    pub fn new(url: &str, name: &str) -> Self {
        Self {
            url: url.into(),
            name: name.into(),
            conn: Arc::new(Mutex::new(None)),
        }
    }

    /// The live connection, connecting (and declaring the topology) if needed.
    pub async fn connection(&self) -> anyhow::Result<Arc<Connection>> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            if c.status().connected() {
                return Ok(c.clone());
            }
        }
        *guard = None;
        let props =
            ConnectionProperties::default().with_connection_name(self.name.to_string().into());
        let conn = tokio::time::timeout(
            Duration::from_secs(10),
            Connection::connect(&self.url, props),
        )
        .await
        .context("connecting to RabbitMQ timed out")?
        .context("connecting to RabbitMQ")?;
        let ch = conn.create_channel().await.context("opening a channel")?;
        declare_topology(&ch).await?;
        let _ = ch.close(200, "topology declared".into()).await;
        let conn = Arc::new(conn);
        *guard = Some(conn.clone());
        tracing::info!("connected to RabbitMQ");
        Ok(conn)
    }

    /// True while the connection is up (for `/readyz`); does not connect.
    pub async fn is_connected(&self) -> bool {
        self.conn
            .lock()
            .await
            .as_ref()
            .is_some_and(|c| c.status().connected())
    }

    /// Connects if needed and reports whether RabbitMQ answers.
    pub async fn check(&self) -> bool {
        self.connection().await.is_ok()
    }

    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let conn = self.connection().await?;
        match conn.create_channel().await {
            Ok(ch) => Ok(ch),
            Err(e) => {
                self.forget().await;
                Err(e).context("opening a channel")
            }
        }
    }

    /// Drops the cached connection so the next use reconnects.
    pub async fn forget(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            let _ = c.close(200, "reconnecting".into()).await;
        }
    }

    /// A channel in confirm mode for publishing.
    pub async fn publisher(&self) -> anyhow::Result<Publisher> {
        let channel = self.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        Ok(Publisher { channel })
    }

    /// Closes the connection cleanly (shutdown).
    pub async fn close(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            let _ = c.close(200, "docflow shutting down".into()).await;
        }
    }
}

fn quorum_args(dead_letter: bool) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    if dead_letter {
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(DEAD_EXCHANGE.into()),
        );
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(DELIVERY_LIMIT),
        );
    }
    args
}

/// Declares exchanges, queues and bindings; idempotent.
pub async fn declare_topology(ch: &Channel) -> anyhow::Result<()> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        JOBS_EXCHANGE.into(),
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await?;
    ch.exchange_declare(
        DEAD_EXCHANGE.into(),
        ExchangeKind::Fanout,
        durable,
        FieldTable::default(),
    )
    .await?;
    ch.exchange_declare(
        EVENTS_EXCHANGE.into(),
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    )
    .await?;
    let q = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for tier in Tier::ALL {
        let name = tier.queue_name();
        ch.queue_declare(name.as_str().into(), q, quorum_args(true))
            .await
            .with_context(|| format!("declaring {name}"))?;
        ch.queue_bind(
            name.as_str().into(),
            JOBS_EXCHANGE.into(),
            tier.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    }
    ch.queue_declare(DEAD_QUEUE.into(), q, quorum_args(false))
        .await
        .context("declaring docflow.dead")?;
    ch.queue_bind(
        DEAD_QUEUE.into(),
        DEAD_EXCHANGE.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok(())
}

/// Ready messages and consumers of a queue, by passive declare.
pub async fn queue_stats(ch: &Channel, queue: &str) -> anyhow::Result<(u32, u32)> {
    let q = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("inspecting {queue}"))?;
    Ok((q.message_count(), q.consumer_count()))
}

/// A message for [`Publisher::publish_all`].
pub struct Outgoing<'a> {
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub body: Vec<u8>,
    pub message_id: String,
}

/// A confirm-mode channel.
pub struct Publisher {
    channel: Channel,
}

impl Publisher {
    pub fn is_open(&self) -> bool {
        self.channel.status().connected()
    }

    /// Publishes persistent, mandatory messages with all confirms in flight at
    /// once; per message, `Ok` only when the broker confirmed and routed it.
    /// An `Err` of the whole call means the channel failed: nothing is known.
    pub async fn publish_all(
        &self,
        messages: &[Outgoing<'_>],
    ) -> anyhow::Result<Vec<Result<(), String>>> {
        let mut confirms = Vec::with_capacity(messages.len());
        for m in messages {
            let props = BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                .with_message_id(ShortString::from(m.message_id.as_str()));
            let confirm = self
                .channel
                .basic_publish(
                    m.exchange.into(),
                    m.routing_key.into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &m.body,
                    props,
                )
                .await
                .context("publishing")?;
            confirms.push(confirm);
        }
        let mut out = Vec::with_capacity(confirms.len());
        for (c, m) in confirms.into_iter().zip(messages) {
            let outcome = match c.await.context("waiting for a publisher confirm")? {
                Confirmation::Ack(None) => Ok(()),
                Confirmation::Ack(Some(ret)) => Err(format!(
                    "unroutable: {} {} (no queue bound to {}/{})",
                    ret.reply_code, ret.reply_text, m.exchange, m.routing_key
                )),
                Confirmation::Nack(_) => Err("the broker refused the message (nack)".to_string()),
                Confirmation::NotRequested => {
                    Err("publisher confirms are off on this channel".to_string())
                }
            };
            out.push(outcome);
        }
        Ok(out)
    }

    /// Publishes events: confirmed, but not `mandatory` (no web process
    /// listening is fine; the events are in PostgreSQL for replay).
    pub async fn publish_all_unrouted_ok(&self, messages: &[Outgoing<'_>]) -> anyhow::Result<()> {
        let mut confirms = Vec::with_capacity(messages.len());
        for m in messages {
            let props = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_message_id(ShortString::from(m.message_id.as_str()));
            confirms.push(
                self.channel
                    .basic_publish(
                        m.exchange.into(),
                        m.routing_key.into(),
                        BasicPublishOptions::default(),
                        &m.body,
                        props,
                    )
                    .await
                    .context("publishing an event")?,
            );
        }
        for c in confirms {
            if let Confirmation::Nack(_) = c.await.context("waiting for an event confirm")? {
                anyhow::bail!("the broker refused an event (nack)");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert!(backoff(30) <= Duration::from_secs(10));
    }
}
