//! Sessions and the users behind them, remembered for a few seconds so
//! that a signed-in request reads neither from PostgreSQL. A user (and
//! every session of theirs) is forgotten the moment their row or their
//! tenant's changes, by docflow or by hand (triggers announce it on
//! `docflow_users`), or one of their credentials ends (`docflow_credentials`:
//! a logout, a password change); every web process follows both (see
//! [`crate::notify::ended`]). A session deleted or written by this process
//! is forgotten or replaced at once. Everything is forgotten when
//! announcements may have been missed, and no entry outlives [`TTL`].

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tower_sessions::cookie::time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use uuid::Uuid;

use sqlx::{postgres::PgListener, PgPool};
use tokio_util::sync::CancellationToken;

use crate::notify::{
    ended::{Ended, CHANNEL},
    Hub,
};
use crate::platform::{db::UserRow, reconnect::Connected};

/// Changes of users and tenants (triggers), for [`SignedIn`].
const USERS_CHANNEL: &str = "docflow_users";

/// The longest a user row or a session is used without reading it again:
/// the bound on a change whose announcement was lost.
pub const TTL: Duration = Duration::from_secs(5);

/// Users, and sessions, remembered at most; past that the stalest half is
/// dropped.
const MAX_ENTRIES: usize = 10_000;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forget {
    User(Uuid),
    /// Every user of the tenant (its plan or limit changed).
    Tenant(Uuid),
    /// Announcements may have been missed.
    All,
}

impl From<Ended> for Forget {
    fn from(ended: Ended) -> Self {
        match ended {
            Ended::Credential { user, .. } => Forget::User(user),
            Ended::Unknown => Forget::All,
        }
    }
}

impl Forget {
    /// A `docflow_users` payload: `users:<id>` or `tenants:<id>`.
    pub fn parse(payload: &str) -> Option<Self> {
        let (table, id) = payload.split_once(':')?;
        let id = id.parse().ok()?;
        match table {
            "users" => Some(Forget::User(id)),
            "tenants" => Some(Forget::Tenant(id)),
            _ => None,
        }
    }
}

/// What a signed-in request reads before its own work: its session and
/// the user behind it, each for at most [`TTL`].
#[derive(Default)]
pub struct SignedIn {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    users: Recent<Uuid, UserRow>,
    /// Each session with the user it is signed in as.
    sessions: Recent<Id, (Record, Option<Uuid>)>,
    /// Raised by every forgetting, so a row read before one is not kept.
    generation: u64,
}

/// Entries with the time they were read, at most [`MAX_ENTRIES`].
struct Recent<K, V> {
    entries: HashMap<K, (V, Instant)>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq, V> Recent<K, V> {
    /// The entry, when read less than [`TTL`] ago.
    fn get(&self, key: &K) -> Option<&V> {
        let (value, read_at) = self.entries.get(key)?;
        (read_at.elapsed() < TTL).then_some(value)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.entries.len() >= MAX_ENTRIES {
            let mut ages: Vec<Instant> = self.entries.values().map(|(_, at)| *at).collect();
            let (_, median, _) = ages.select_nth_unstable(MAX_ENTRIES / 2);
            let median = *median;
            self.entries.retain(|_, (_, at)| *at > median);
        }
        self.entries.insert(key, (value, Instant::now()));
    }

    fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|_, (value, _)| keep(value));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

impl SignedIn {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The user, when read less than [`TTL`] ago and not forgotten since.
    pub fn get(&self, id: Uuid) -> Option<UserRow> {
        self.lock().users.get(&id).cloned()
    }

    /// Taken before reading a user or a session, and handed to
    /// [`SignedIn::put`] or [`SignedIn::put_session`].
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Remembers `row`, read after [`SignedIn::generation`] returned
    /// `generation`; not if anything was forgotten since (the read may
    /// predate the change that was announced).
    pub fn put(&self, row: UserRow, generation: u64) {
        let mut inner = self.lock();
        if inner.generation == generation {
            inner.users.insert(row.id, row);
        }
    }

    /// The session, when read or written less than [`TTL`] ago, not
    /// forgotten since, and not past its expiry.
    pub fn session(&self, id: &Id) -> Option<Record> {
        let inner = self.lock();
        let (record, _) = inner.sessions.get(id)?;
        (record.expiry_date > OffsetDateTime::now_utc()).then(|| record.clone())
    }

    /// Remembers `record`, signed in as `user`, like [`SignedIn::put`].
    pub fn put_session(&self, record: Record, user: Option<Uuid>, generation: u64) {
        let mut inner = self.lock();
        if inner.generation == generation {
            inner.sessions.insert(record.id, (record, user));
        }
    }

    /// Forgets a session; a read of it meanwhile is not kept.
    pub fn forget_session(&self, id: &Id) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.sessions.remove(id);
    }

    /// Forgets what changed; a row being read meanwhile is not kept.
    pub fn forget(&self, what: Forget) {
        let mut inner = self.lock();
        inner.generation += 1;
        match what {
            Forget::User(id) => {
                inner.users.remove(&id);
                inner.sessions.retain(|(_, user)| *user != Some(id));
            }
            Forget::Tenant(id) => inner.users.retain(|row| row.tenant_id != id),
            Forget::All => {
                inner.users.clear();
                inner.sessions.clear();
            }
        }
    }
}

#[cfg(test)]
impl SignedIn {
    fn len(&self) -> usize {
        self.lock().users.entries.len()
    }
}

/// Follows the announcements into `hub`, and those and the changes of users
/// and tenants into `signed_in`, until `shutdown`. `listening` hears when
/// the process first listens: a web process serves only from then on (see
/// [`crate::run`]), so no stream opens before an announcement could end it.
pub async fn run_listener(
    pool: PgPool,
    hub: Hub,
    signed_in: std::sync::Arc<SignedIn>,
    shutdown: CancellationToken,
    listening: tokio::sync::oneshot::Sender<()>,
) {
    let listening = std::sync::Mutex::new(Some(listening));
    crate::platform::reconnect::supervise("credential listener", &shutdown, |connected| {
        let (pool, hub, signed_in, shutdown, listening) =
            (&pool, &hub, &signed_in, &shutdown, &listening);
        async move {
            let lived = listen_once(pool, hub, signed_in, shutdown, connected, listening).await;
            // Whatever was announced while not listening is unknown: open
            // streams end (clients reconnect and authenticate anew).
            signed_in.forget(Forget::All);
            hub.end(Ended::Unknown);
            lived
        }
    })
    .await;
}

async fn listen_once(
    pool: &PgPool,
    hub: &Hub,
    signed_in: &SignedIn,
    shutdown: &CancellationToken,
    connected: Connected,
    listening: &std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
) -> anyhow::Result<()> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all([CHANNEL, USERS_CHANNEL]).await?;
    connected.mark();
    // Users read while this process was not listening may have changed, and
    // streams opened meanwhile (before the first listen, or between a lost
    // connection and this one) may have missed their end.
    signed_in.forget(Forget::All);
    hub.end(Ended::Unknown);
    if let Some(tx) = listening.lock().unwrap_or_else(|p| p.into_inner()).take() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: u128) -> UserRow {
        UserRow {
            id: Uuid::from_u128(id),
            email: format!("u{id}@acme.test"),
            role: "member".into(),
            password_hash: String::new(),
            tenant_id: Uuid::from_u128(id % 2),
            tenant: "acme".into(),
            plan: "free".into(),
            max_unfinished_jobs: None,
            sessions_valid_after: None,
        }
    }

    #[test]
    fn a_change_forgets_its_user_or_its_tenants_users_only() {
        let cache = SignedIn::default();
        for id in [1, 2, 3, 4] {
            cache.put(user(id), cache.generation());
        }
        let known = |id: u128| cache.get(Uuid::from_u128(id)).is_some();
        let user_1 = format!("users:{}", Uuid::from_u128(1));
        cache.forget(Forget::parse(&user_1).expect("parsed"));
        assert!(!known(1));
        assert!(known(2) && known(3) && known(4));
        // Users 2 and 4 are of tenant 0.
        let tenant_0 = format!("tenants:{}", Uuid::from_u128(0));
        cache.forget(Forget::parse(&tenant_0).expect("parsed"));
        assert!(!known(2) && !known(4));
        assert!(known(3));
        cache.forget(Forget::All);
        assert!(!known(3));
        assert_eq!(Forget::parse("jobs:1"), None);
        assert_eq!(Forget::parse("users:not-an-id"), None);
        assert_eq!(Forget::parse(""), None);
    }

    #[test]
    fn a_row_read_before_a_change_is_not_kept() {
        let cache = SignedIn::default();
        let before = cache.generation();
        // The password changes while the request reads the old row.
        cache.forget(Forget::User(Uuid::from_u128(1)));
        cache.put(user(1), before);
        assert!(cache.get(Uuid::from_u128(1)).is_none());
    }

    #[test]
    fn no_row_outlives_its_time_or_the_bound() {
        let cache = SignedIn::default();
        let generation = cache.generation();
        cache.put(user(1), generation);
        // Aged past the TTL, as if its announcement had been lost.
        if let Some((_, at)) = cache.lock().users.entries.get_mut(&Uuid::from_u128(1)) {
            *at -= TTL;
        }
        assert!(cache.get(Uuid::from_u128(1)).is_none());
        for id in 0..(MAX_ENTRIES as u128 * 3) {
            cache.put(user(id), generation);
            assert!(cache.len() <= MAX_ENTRIES);
        }
        let last = MAX_ENTRIES as u128 * 3 - 1;
        assert!(cache.get(Uuid::from_u128(last)).is_some());
    }
}
