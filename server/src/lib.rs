//! docflow's server: HTTP API and pages, the outbox relay, the workers, the
//! dead-letter keeper and the sweepers. `main.rs` only parses the command
//! line; everything runs through [`Application`].

// The layers, lowest first (`layers.rs` keeps them; the README draws them).
// store
pub mod broker;
pub mod jobs;
pub mod parser;
pub mod platform;
// live
pub mod notify;
// runtime
pub mod pipeline;
pub mod worker;
// identity
pub mod identity;
// services
pub mod batches;
pub mod ops;
pub mod search;
pub mod state;
pub mod upload;
pub mod webhooks;
// http
pub mod http;
// process
pub mod demo;
#[cfg(test)]
mod layers;

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use leptos::config::LeptosOptions;
use tokio::{net::TcpListener, task::JoinSet};
use tokio_util::sync::CancellationToken;

use crate::{
    broker::Broker,
    identity::{signed_in, throttle},
    jobs::outbox,
    ops::sampler,
    platform::{blob::BlobStore, config, config::Config, db, metrics},
    state::AppState,
    worker::{keeper, retention},
};

/// What a process runs.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    /// HTTP server.
    pub web: bool,
    /// Outbox relay, dead-letter keeper, lease sweeper (safe to run in several processes).
    pub background: bool,
    /// Worker queues and their reserved slots.
    pub queues: Vec<config::QueueArg>,
    /// Slots `high` and `normal` share (0: the sum of their reservations).
    pub slots: u16,
}

impl Roles {
    pub fn all(queues: Vec<config::QueueArg>) -> Self {
        Self {
            web: true,
            background: true,
            queues,
            slots: 0,
        }
    }

    pub fn web() -> Self {
        Self {
            web: true,
            background: true,
            queues: Vec::new(),
            slots: 0,
        }
    }

    pub fn worker(queues: Vec<config::QueueArg>) -> Self {
        Self {
            web: false,
            background: false,
            queues,
            slots: 0,
        }
    }

    /// The same roles with `slots` shared by `high` and `normal`.
    pub fn with_slots(self, slots: u16) -> Self {
        Self { slots, ..self }
    }
}

/// A built, not yet running, docflow process.
pub struct Application {
    state: AppState,
    listener: Option<TcpListener>,
    roles: Roles,
    shutdown: CancellationToken,
    events_stop: CancellationToken,
    events_task: tokio::task::JoinHandle<()>,
}

impl Application {
    /// Connects to PostgreSQL (creating and migrating the database), opens the
    /// blob store and binds the HTTP port (port 0 picks a free one).
    pub async fn build(config: Config, roles: Roles) -> anyhow::Result<Self> {
        let pool = db::connect_and_migrate(
            &config.database_url,
            config
                .db_pool
                .max(1)
                .saturating_add(db::listeners(roles.background, roles.web)),
        )
        .await?;
        let blobs = BlobStore::from_config(&config)?;
        let listener = if roles.web {
            Some(
                TcpListener::bind(config.listen)
                    .await
                    .with_context(|| format!("binding {}", config.listen))?,
            )
        } else {
            None
        };
        let site_addr = listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .unwrap_or(config.listen);
        let leptos = LeptosOptions::builder()
            .output_name("docflow")
            .site_root(config.site_root.as_str())
            .site_pkg_dir("pkg")
            .site_addr(site_addr)
            .build();
        let name = format!(
            "docflow-{}-{}",
            std::process::id(),
            if roles.web { "web" } else { "worker" }
        );
        let metrics = metrics::Metrics::new().context("registering metrics")?;
        let broker = Broker::new(&config.amqp_url, &name)
            .counting_failovers(metrics.broker_failovers_total.clone())
            .counting_published(metrics.broker_published_total.clone());
        let embedder = pipeline::embedder::from_config(&config, &metrics, Some(pool.clone()))?;
        let model = Arc::new(pipeline::vectors::register(&pool, &embedder.model()).await?);
        // Events are published until everything else has stopped.
        let events_stop = CancellationToken::new();
        let (events, events_task) =
            pipeline::events::EventSink::start(broker.clone(), events_stop.clone());
        let state = AppState {
            pool,
            config: Arc::new(config),
            blobs,
            broker,
            leptos,
            embedder,
            model,
            earlier: Arc::default(),
            events,
            hub: notify::Hub::new(),
            metrics,
            backlog: Arc::default(),
            tenant_backlog: Arc::default(),
            signed_in: Arc::default(),
            logins: Arc::new(throttle::LoginThrottle::new(
                std::thread::available_parallelism().map_or(2, usize::from),
            )),
        };
        Ok(Self {
            state,
            listener,
            roles,
            shutdown: CancellationToken::new(),
            events_stop,
            events_task,
        })
    }

    /// The bound HTTP address, when this process serves HTTP.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Replaces the configured embedder (another provider, or one that
    /// fails on purpose in a test); its model is registered when the
    /// process starts.
    pub fn with_embedder(mut self, embedder: Arc<dyn pipeline::embedder::Embedder>) -> Self {
        self.state.embedder = embedder;
        self
    }

    /// Cancel to stop the process gracefully.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs until the shutdown token is cancelled.
    pub async fn run(self) -> anyhow::Result<()> {
        let Self {
            mut state,
            listener,
            roles,
            shutdown,
            events_stop,
            events_task,
        } = self;
        let spec = state.embedder.model();
        if spec.name != state.model.name || spec.dims != state.model.dims {
            state.model = Arc::new(pipeline::vectors::register(&state.pool, &spec).await?);
        }
        let mut tasks = JoinSet::new();
        if roles.background {
            tasks.spawn(outbox::run_relay(
                state.pool.clone(),
                state.broker.clone(),
                shutdown.clone(),
            ));
            tasks.spawn(sampler::run(state.clone(), shutdown.clone()));
            tasks.spawn(expire_sessions(state.pool.clone(), shutdown.clone()));
            tasks.spawn(keeper::run_keeper(
                state.pool.clone(),
                state.broker.clone(),
                state.events.clone(),
                shutdown.clone(),
            ));
            tasks.spawn(keeper::run_sweeper(
                state.pool.clone(),
                state.events.clone(),
                (state.config.lease / 2).max(std::time::Duration::from_millis(500)),
                state.config.max_crashes,
                shutdown.clone(),
            ));
            tasks.spawn(jobs::reconcile::run(
                state.pool.clone(),
                state.broker.clone(),
                state.metrics.reconciled_total.clone(),
                state.config.reconcile_grace,
                shutdown.clone(),
            ));
            tasks.spawn(retention::run(
                state.pool.clone(),
                state.config.retention,
                shutdown.clone(),
            ));
            tasks.spawn(batches::run_checker(state.pool.clone(), shutdown.clone()));
            tasks.spawn(webhooks::deliver::run(
                state.pool.clone(),
                webhooks::deliver::Settings::from_config(&state.config),
                state.metrics.clone(),
                shutdown.clone(),
            ));
        }
        if !roles.queues.is_empty() {
            let parser = parser_pool(&state.config)?;
            let worker_id: Arc<str> = worker::worker_id().into();
            let c = &state.config;
            let embedder = pipeline::breaker::Guarded::embedder(
                state.embedder.clone(),
                pipeline::breaker::BreakerConfig {
                    failures: c.breaker_failures.max(1),
                    probe: c.breaker_probe,
                    probe_max: c.breaker_probe_max.max(c.breaker_probe),
                    max_wait: (c.step_timeout / 4).min(std::time::Duration::from_secs(30)),
                },
                &state.metrics.dependency_up,
                state.pool.clone(),
                worker_id.to_string(),
                shutdown.clone(),
            );
            let deps = pipeline::Deps {
                pool: state.pool.clone(),
                blobs: state.blobs.clone(),
                embedder,
                model: state.model.clone(),
                choice: Arc::new(pipeline::vectors::Choice::new(state.pool.clone())),
                parser,
                config: state.config.clone(),
                events: state.events.clone(),
                metrics: state.metrics.clone(),
                worker_id,
                group: pipeline::group::GroupCommit::start(state.pool.clone()),
            };
            tasks.spawn(worker::run(
                deps,
                state.broker.clone(),
                worker::Groups::new(&roles.queues, roles.slots)?,
                shutdown.clone(),
            ));
        }
        if listener.is_none() {
            if let Some(addr) = state.config.metrics_listen {
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding {addr}"))?;
                tracing::info!("metrics on http://{addr}/metrics");
                let app = http::metrics_only(state.clone());
                let stop = shutdown.clone();
                tasks.spawn(async move {
                    let serve = axum::serve(l, app.into_make_service())
                        .with_graceful_shutdown(async move { stop.cancelled().await });
                    if let Err(e) = serve.await {
                        tracing::error!(error = %e, "metrics server failed");
                    }
                });
            }
        }
        if let Some(listener) = listener {
            let (bound, first_bind) = tokio::sync::oneshot::channel();
            tasks.spawn(notify::run_listener(
                state.broker.clone(),
                state.hub.clone(),
                shutdown.clone(),
                bound,
            ));
            let (listening, first_listen) = tokio::sync::oneshot::channel();
            tasks.spawn(signed_in::run_listener(
                state.pool.clone(),
                state.hub.clone(),
                state.signed_in.clone(),
                shutdown.clone(),
                listening,
            ));
            // A stream opened before the process listens for ended
            // credentials would miss a revocation, and one opened before its
            // event queue is bound would miss the events published
            // meanwhile: serve once both listen. PostgreSQL or RabbitMQ
            // slower than `LISTEN_WAIT` does not hold the process back (it
            // accepts uploads while the broker is down); the streams opened
            // meanwhile end, or catch up from the database, when it listens.
            let both = async { tokio::join!(first_listen, first_bind) };
            if tokio::time::timeout(LISTEN_WAIT, both).await.is_err() {
                tracing::warn!("serving before listening for ended credentials and job events");
            }
            let app = http::router(state.clone());
            let stop = shutdown.clone();
            // Small writes (SSE frames) leave at once instead of waiting for
            // the client's delayed ACK (Nagle's algorithm).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
            });
            tasks.spawn(async move {
                // A make-service shares one route table among connections
                // (serving the `Router` itself would copy it for each, ~1 KB a
                // route); with connect info, so login throttling knows the
                // client address.
                let serve = axum::serve(
                    listener,
                    app.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .with_graceful_shutdown(async move { stop.cancelled().await });
                if let Err(e) = serve.await {
                    tracing::error!(error = %e, "HTTP server failed");
                }
            });
        }
        // Shutdown is bounded: running jobs get the grace period, and what
        // is left (cancelling consumers, closing channels and the
        // connection) gets `SETTLE`. A broker too slow to confirm those must
        // not keep the process alive: whatever it did not confirm is
        // redelivered when the connection drops.
        let finish = async {
            while tasks.join_next().await.is_some() {}
            events_stop.cancel();
            let _ = events_task.await;
            state.broker.close().await;
        };
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(state.config.shutdown_grace + SETTLE).await;
        };
        tokio::select! {
            _ = finish => {}
            _ = deadline => {
                tracing::warn!(
                    settle_s = SETTLE.as_secs(),
                    "RabbitMQ did not confirm the shutdown in time; stopping anyway"
                );
            }
        }
        // Dropping `finish` aborted whatever was still running.
        events_stop.cancel();
        Ok(())
    }
}

/// The parser children of a worker process, as configured.
fn parser_pool(config: &Config) -> anyhow::Result<Arc<parser::ParserPool>> {
    let exe = match &config.parser_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the docflow binary for parsers")?,
    };
    let size = config.parsers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    });
    let limits = parser::ParseLimits {
        memory: config.parse_memory,
        timeout: config.parse_timeout,
        max_text: usize::try_from(config.max_text_bytes).unwrap_or(usize::MAX),
        max_pages: config.max_pages,
        ocr_max_pixels: config.ocr_max_pixels,
        ocr_max_pages: config.ocr_max_pages,
    };
    let ocr = parser::ocr::Ocr {
        languages: config.ocr_languages.clone(),
    };
    Ok(Arc::new(parser::ParserPool::new(exe, limits, ocr, size)))
}

/// How long shutdown waits, after the grace period, for the broker to
/// confirm consumer cancels and channel and connection closes.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a web process waits to listen for ended credentials before it
/// serves anyway.
const LISTEN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Deletes expired login sessions hourly (safe in several processes).
async fn expire_sessions(pool: sqlx::PgPool, shutdown: CancellationToken) {
    use tower_sessions::ExpiredDeletion;
    let store = tower_sessions_sqlx_store::PostgresStore::new(pool);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = store.clone().continuously_delete_expired(std::time::Duration::from_secs(3600)) => {
                // Only a database error ends the loop; try again later.
                if let Err(e) = r {
                    tracing::debug!(error = %e, "expired-session cleanup failed");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        }
    }
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            _ = term => {},
        }
        tracing::info!("shutting down");
        token.cancel();
    });
}
