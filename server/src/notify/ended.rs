//! Credentials that end (a logout, a password change, a revoked token) end
//! the event streams opened with them, in every web process: the change
//! is announced with PostgreSQL `NOTIFY` in the transaction that makes it,
//! and each web process `LISTEN`s and tells its hub. Streams also end by
//! themselves when their credential expires (`DOCFLOW_SESSION_MAX`, a
//! token's expiry).
//!
//! While the listener is disconnected it could miss an announcement, so on
//! losing its connection it ends every stream of the process: clients
//! reconnect (`EventSource` does so by itself) and are authenticated anew.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{postgres::PgListener, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Hub;
use crate::signed_in::{Forget, SignedIn};

const CHANNEL: &str = "docflow_credentials";
/// Changes of users and tenants (triggers), for [`SignedIn`].
const USERS_CHANNEL: &str = "docflow_users";

/// What ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ended {
    /// One credential of `user` (`None`: all of their sessions).
    Credential {
        user: Uuid,
        credential: Option<Uuid>,
    },
    /// Unknown: announcements may have been missed.
    Unknown,
}

impl Ended {
    /// Whether a stream opened by `user` with `credential` must end.
    pub fn ends(&self, user: Uuid, credential: Uuid) -> bool {
        match *self {
            Ended::Credential {
                user: u,
                credential: c,
            } => u == user && c.is_none_or(|c| c == credential),
            Ended::Unknown => true,
        }
    }
}

/// Announces, on commit of `conn`'s transaction (at once outside one),
/// that `credential` of `user` ended (`None`: all their sessions).
pub async fn announce(
    conn: &mut PgConnection,
    user: Uuid,
    credential: Option<Uuid>,
) -> sqlx::Result<()> {
    let payload = serde_json::to_string(&Ended::Credential { user, credential })
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query_scalar!("SELECT pg_notify($1, $2)", CHANNEL, payload)
        .fetch_one(conn)
        .await?;
    Ok(())
}

/// Follows the announcements into `hub`, and those and the changes of users
/// and tenants into `signed_in`, until `shutdown`. `listening` hears when
/// the process first listens: a web process serves only from then on (see
/// [`crate::run`]), so no stream opens before an announcement could end it.
pub async fn run_listener(
    pool: PgPool,
    hub: Hub,
    signed_in: Arc<SignedIn>,
    shutdown: CancellationToken,
    listening: tokio::sync::oneshot::Sender<()>,
) {
    let mut failures = 0u32;
    let mut listening = Some(listening);
    while !shutdown.is_cancelled() {
        let once = listen_once(
            &pool,
            &hub,
            &signed_in,
            &shutdown,
            &mut failures,
            &mut listening,
        );
        if let Err(e) = once.await {
            failures += 1;
            tracing::warn!(error = %e, "credential listener lost; ending open streams and reconnecting");
        }
        // Whatever was announced meanwhile is unknown.
        signed_in.forget(Forget::All);
        hub.end(Ended::Unknown);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(crate::broker::backoff(failures)) => {}
        }
    }
}

async fn listen_once(
    pool: &PgPool,
    hub: &Hub,
    signed_in: &SignedIn,
    shutdown: &CancellationToken,
    failures: &mut u32,
    listening: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> anyhow::Result<()> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all([CHANNEL, USERS_CHANNEL]).await?;
    *failures = 0;
    // Users read while this process was not listening may have changed, and
    // streams opened meanwhile (before the first listen, or between a lost
    // connection and this one) may have missed their end.
    signed_in.forget(Forget::All);
    hub.end(Ended::Unknown);
    if let Some(tx) = listening.take() {
        let _ = tx.send(());
    }
    loop {
        let n = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            n = listener.try_recv() => n?,
        };
        // `None`: the connection was lost (the next call would reconnect
        // silently, over a gap).
        let Some(n) = n else {
            anyhow::bail!("the connection was lost");
        };
        if n.channel() == USERS_CHANNEL {
            match Forget::parse(n.payload()) {
                Some(what) => signed_in.forget(what),
                None => tracing::warn!(payload = n.payload(), "unreadable user change ignored"),
            }
            continue;
        }
        match serde_json::from_str::<Ended>(n.payload()) {
            Ok(ended) => {
                signed_in.forget(ended.into());
                hub.end(ended);
            }
            Err(e) => tracing::warn!(error = %e, "unreadable credential announcement ignored"),
        }
    }
}

/// How long until `at`, for a stream's deadline (`None` when it never ends).
pub fn until(at: Option<chrono::DateTime<chrono::Utc>>) -> Option<Duration> {
    at.map(|at| (at - chrono::Utc::now()).to_std().unwrap_or_default())
}
