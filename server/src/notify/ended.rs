//! Credentials that end (a logout, a password change, a revoked token) end
//! the event streams opened with them, in every web process: the change
//! is announced with PostgreSQL `NOTIFY` in the transaction that makes it,
//! and each web process `LISTEN`s and tells its hub
//! (`crate::identity::signed_in::run_listener`). Streams also end by
//! themselves when their credential expires (`DOCFLOW_SESSION_MAX`, a
//! token's expiry).
//!
//! While the listener is disconnected it could miss an announcement, so on
//! losing its connection it ends every stream of the process: clients
//! reconnect (`EventSource` does so by itself) and are authenticated anew.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

/// Where credential ends are announced (`crate::identity::signed_in::run_listener`
/// follows it).
pub const CHANNEL: &str = "docflow_credentials";

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

/// How long until `at`, for a stream's deadline (`None` when it never ends).
pub fn until(at: Option<chrono::DateTime<chrono::Utc>>) -> Option<Duration> {
    at.map(|at| (at - chrono::Utc::now()).to_std().unwrap_or_default())
}
