//! `AppState`: what every request handler and background loop shares.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use sqlx::PgPool;

use crate::{
    broker::Broker,
    notify::Hub,
    pipeline::{embedder::Embedder, events::EventSink},
    platform::blob::BlobStore,
    platform::config::Config,
    platform::metrics::Metrics,
};

#[derive(Clone)]
pub struct AppState {
    /// The source of truth.
    pub pool: PgPool,
    /// Settings of this process.
    pub config: Arc<Config>,
    /// Uploaded files and parsed text.
    pub blobs: BlobStore,
    /// RabbitMQ; connects lazily, reconnects after loss.
    pub broker: Broker,
    /// Where the built site lives and what it is called.
    pub leptos: LeptosOptions,
    /// Text → vector, for search queries and the embed step.
    pub embedder: Arc<dyn Embedder>,
    /// The embedding model `embedder`'s vectors are stored and searched as.
    pub model: Arc<crate::pipeline::vectors::Model>,
    /// Earlier models' embedders, for search during a re-embedding.
    pub earlier: Arc<crate::pipeline::embedder::Earlier>,
    /// Publishes job events to `docflow.events` after their rows commit.
    pub events: EventSink,
    /// This process's fan-out of events to SSE clients.
    pub hub: Hub,
    /// Prometheus metrics of this process.
    pub metrics: Metrics,
    /// The unfinished-job count behind `DOCFLOW_MAX_BACKLOG`.
    pub backlog: Arc<crate::jobs::repo::Backlog>,
    /// Each tenant's unfinished jobs, for its fair share of the backlog.
    pub tenant_backlog: Arc<crate::jobs::repo::TenantBacklog>,
    /// Sessions and the users behind them, for a few seconds at most.
    pub signed_in: Arc<crate::identity::signed_in::SignedIn>,
    /// Failed logins per account and address; password checks at once.
    pub logins: Arc<crate::identity::throttle::LoginThrottle>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(s: &AppState) -> Self {
        s.leptos.clone()
    }
}

impl crate::identity::auth::Identity for AppState {
    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn signed_in(&self) -> &crate::identity::signed_in::SignedIn {
        &self.signed_in
    }

    fn logins(&self) -> &crate::identity::throttle::LoginThrottle {
        &self.logins
    }

    fn session_lifetimes(&self) -> (std::time::Duration, std::time::Duration) {
        (self.config.session_max, self.config.session_idle)
    }
}
