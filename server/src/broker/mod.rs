//! RabbitMQ: one connection per process, re-opened with backoff when lost,
//! the topology of DESIGN §4 declared on every (re)connect, and a confirming
//! publisher.
//!
//! `AMQP_URL` may name several nodes of a cluster, comma-separated:
//! `amqp://user:pass@node1:5672/vhost,node2:5672,node3:5672` (an entry
//! without a scheme takes the first one's credentials and vhost). A process
//! connects to the first node that answers; when it loses that connection
//! it tries the next node first, and so on round the list, each time with
//! the callers' backoff ([`crate::platform::reconnect`]). Every move to another node is logged and counted
//! (`docflow_broker_failovers_total`). Callers see one lost connection:
//! consumers resume, the relay re-publishes what was not confirmed, and the
//! topology is declared again on the new node.

pub mod acks;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

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

/// How long a publisher waits for the broker to confirm what it published.
/// A confirm can go missing while a quorum queue changes leader after a
/// node crash, with the connection still up; without a bound the outbox
/// relay would wait on it forever, holding its claimed rows locked so that
/// no other relay publishes them. Past the bound the batch is published
/// again on a new channel (consumers skip a job that already ran).
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The node addresses of `AMQP_URL`: comma-separated URLs, where an entry
/// without `://` is a `host:port` that takes the first URL's scheme,
/// credentials, vhost and query.
pub fn node_urls(spec: &str) -> anyhow::Result<Vec<String>> {
    let mut entries = spec.split(',').map(str::trim).filter(|e| !e.is_empty());
    let first = entries
        .next()
        .ok_or_else(|| anyhow::anyhow!("AMQP_URL is empty"))?;
    let base = url::Url::parse(first).with_context(|| format!("AMQP_URL entry `{first}`"))?;
    let mut out = vec![first.to_string()];
    for e in entries {
        if e.contains("://") {
            url::Url::parse(e).with_context(|| format!("AMQP_URL entry `{e}`"))?;
            out.push(e.to_string());
            continue;
        }
        let (host, port) = match e.rsplit_once(':') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u16>()
                        .with_context(|| format!("port of AMQP_URL entry `{e}`"))?,
                ),
            ),
            None => (e, None),
        };
        let mut u = base.clone();
        u.set_host(Some(host))
            .with_context(|| format!("host of AMQP_URL entry `{e}`"))?;
        u.set_port(port.or(base.port()))
            .map_err(|()| anyhow::anyhow!("AMQP_URL entry `{e}` cannot have a port"))?;
        out.push(u.to_string());
    }
    Ok(out)
}

/// A node's URL without its password, for logs.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_password(None);
            format!(
                "{}:{}",
                u.host_str().unwrap_or("?"),
                u.port().unwrap_or(5672)
            )
        }
        Err(_) => "the configured node".into(),
    }
}

/// The process's broker connection, shared by relay, workers, keeper and events.
#[derive(Clone)]
pub struct Broker {
    nodes: Arc<[String]>,
    /// The node to try first: the one connected to, or the next after a loss.
    next: Arc<AtomicUsize>,
    /// The node connected to last (`usize::MAX`: none yet).
    last: Arc<AtomicUsize>,
    name: Arc<str>,
    conn: Arc<Mutex<Option<Current>>>,
    failovers: Option<prometheus::IntCounter>,
    published: Option<prometheus::IntCounterVec>,
}

/// The connection and the node it is to.
struct Current {
    conn: Arc<Connection>,
    node: usize,
}

impl Broker {
    /// No connection is made until first use, so a process starts while
    /// RabbitMQ is down. `url` is `AMQP_URL` (one or several nodes; an
    /// unreadable list is used as one URL, whose connect then fails with
    /// the reason).
    pub fn new(url: &str, name: &str) -> Self {
        let nodes = node_urls(url).unwrap_or_else(|e| {
            tracing::error!(
                error = format!("{e:#}"),
                "AMQP_URL is not a list of node URLs"
            );
            vec![url.to_string()]
        });
        Self {
            nodes: nodes.into(),
            next: Arc::default(),
            last: Arc::new(AtomicUsize::new(usize::MAX)),
            name: name.into(),
            conn: Arc::new(Mutex::new(None)),
            failovers: None,
            published: None,
        }
    }

    /// Counts confirmed publishes per exchange in `counter`.
    pub fn counting_published(mut self, counter: prometheus::IntCounterVec) -> Self {
        self.published = Some(counter);
        self
    }

    /// Counts every move to another node in `counter`.
    pub fn counting_failovers(mut self, counter: prometheus::IntCounter) -> Self {
        self.failovers = Some(counter);
        self
    }

    /// The live connection, connecting (and declaring the topology) if
    /// needed: to the node connected last, or after a loss to the next one,
    /// round the list until one answers.
    pub async fn connection(&self) -> anyhow::Result<Arc<Connection>> {
        let mut guard = self.conn.lock().await;
        let mut lost = None;
        if let Some(c) = guard.take() {
            if c.conn.status().connected() {
                let conn = c.conn.clone();
                *guard = Some(c);
                return Ok(conn);
            }
            lost = Some(c.node);
        }
        let n = self.nodes.len();
        let start = match lost {
            Some(node) => (node + 1) % n,
            None => self.next.load(Ordering::Relaxed) % n,
        };
        let mut last_err = None;
        for k in 0..n {
            let node = (start + k) % n;
            match self.connect_to(node).await {
                Ok(conn) => {
                    let conn = Arc::new(conn);
                    self.next.store(node, Ordering::Relaxed);
                    let previous = self.last.swap(node, Ordering::Relaxed);
                    let moved = previous != usize::MAX && previous != node;
                    if moved && n > 1 {
                        if let Some(c) = &self.failovers {
                            c.inc();
                        }
                        tracing::warn!(node = %redacted(&self.nodes[node]), "RabbitMQ: failed over to another node");
                    } else {
                        tracing::info!(node = %redacted(&self.nodes[node]), "connected to RabbitMQ");
                    }
                    *guard = Some(Current {
                        conn: conn.clone(),
                        node,
                    });
                    return Ok(conn);
                }
                Err(e) => {
                    if n > 1 {
                        tracing::debug!(node = %redacted(&self.nodes[node]), error = format!("{e:#}"), "RabbitMQ node unavailable");
                    }
                    last_err = Some(e);
                }
            }
        }
        // Next time, start after the node that was tried first.
        self.next.store((start + 1) % n, Ordering::Relaxed);
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no RabbitMQ node configured")))
    }

    async fn connect_to(&self, node: usize) -> anyhow::Result<Connection> {
        let props =
            ConnectionProperties::default().with_connection_name(self.name.to_string().into());
        // Shorter per node when there are others to try.
        let limit = if self.nodes.len() > 1 {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(10)
        };
        let conn = tokio::time::timeout(limit, Connection::connect(&self.nodes[node], props))
            .await
            .context("connecting to RabbitMQ timed out")?
            .context("connecting to RabbitMQ")?;
        let ch = conn.create_channel().await.context("opening a channel")?;
        declare_topology(&ch).await?;
        let _ = ch.close(200, "topology declared".into()).await;
        Ok(conn)
    }

    /// True while the connection is up (for `/readyz`); does not connect.
    pub async fn is_connected(&self) -> bool {
        self.conn
            .lock()
            .await
            .as_ref()
            .is_some_and(|c| c.conn.status().connected())
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

    /// Drops the cached connection so the next use reconnects (to the
    /// next node, when there are several).
    pub async fn forget(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            self.next
                .store((c.node + 1) % self.nodes.len(), Ordering::Relaxed);
            let _ = c.conn.close(200, "reconnecting".into()).await;
        }
    }

    /// A channel in confirm mode for publishing.
    pub async fn publisher(&self) -> anyhow::Result<Publisher> {
        let channel = self.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        Ok(Publisher {
            channel,
            published: self.published.clone(),
        })
    }

    /// Closes the connection cleanly (shutdown).
    pub async fn close(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            let _ = c.conn.close(200, "docflow shutting down".into()).await;
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
    published: Option<prometheus::IntCounterVec>,
}

impl Publisher {
    pub fn is_open(&self) -> bool {
        self.channel.status().connected()
    }

    fn count(&self, exchange: &str, n: usize) {
        if let Some(c) = &self.published {
            c.with_label_values(&[exchange]).inc_by(n as u64);
        }
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
        let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
        for (c, m) in confirms.into_iter().zip(messages) {
            let confirmed = tokio::time::timeout_at(deadline, c)
                .await
                .map_err(|_| unconfirmed())?;
            let outcome = match confirmed.context("waiting for a publisher confirm")? {
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
            if outcome.is_ok() {
                self.count(m.exchange, 1);
            }
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
        let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
        for (c, m) in confirms.into_iter().zip(messages) {
            let confirmed = tokio::time::timeout_at(deadline, c)
                .await
                .map_err(|_| unconfirmed())?;
            if let Confirmation::Nack(_) = confirmed.context("waiting for an event confirm")? {
                anyhow::bail!("the broker refused an event (nack)");
            }
            self.count(m.exchange, 1);
        }
        Ok(())
    }
}

fn unconfirmed() -> anyhow::Error {
    anyhow::anyhow!(
        "the broker confirmed nothing within {} s",
        CONFIRM_TIMEOUT.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amqp_url_names_one_or_several_nodes() {
        assert_eq!(
            node_urls("amqp://guest:guest@127.0.0.1:5672/docflow").expect("one"),
            ["amqp://guest:guest@127.0.0.1:5672/docflow"]
        );
        assert_eq!(
            node_urls("amqp://u:p@a:5681/v?heartbeat=10, b:5682 ,amqp://x:y@c:5683/w")
                .expect("several"),
            [
                "amqp://u:p@a:5681/v?heartbeat=10",
                "amqp://u:p@b:5682/v?heartbeat=10",
                "amqp://x:y@c:5683/w"
            ]
        );
        assert_eq!(
            node_urls("amqp://u:p@a:5681/v,b").expect("port of the first"),
            ["amqp://u:p@a:5681/v", "amqp://u:p@b:5681/v"]
        );
        assert!(node_urls("").is_err());
        assert!(node_urls("amqp://a/v,b:notaport").is_err());
    }

    #[test]
    fn logs_never_show_a_password() {
        assert_eq!(redacted("amqp://guest:secret@node2:5682/v"), "node2:5682");
    }
}
