//! The session store: PostgreSQL, read through the few-second memory of
//! [`SignedIn`], so that a signed-in request usually costs the database
//! nothing before its own work. A session is forgotten in every web process
//! when its user's credentials end (a logout, a password change) or their
//! row changes, and here at once when this process deletes it; see
//! [`crate::identity::signed_in`] for the rest of the rules.

use std::sync::Arc;

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{Result, SessionStore};
use tower_sessions_sqlx_store::PostgresStore;

use crate::{identity::auth::session_user, identity::signed_in::SignedIn};

#[derive(Clone)]
pub struct Sessions {
    store: PostgresStore,
    cache: Arc<SignedIn>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    pub fn new(store: PostgresStore, cache: Arc<SignedIn>) -> Self {
        Self { store, cache }
    }

    /// Remembers `record` as it now is in the store.
    fn remember(&self, record: &Record, generation: u64) {
        self.cache
            .put_session(record.clone(), session_user(record), generation);
    }
}

#[async_trait]
impl SessionStore for Sessions {
    async fn create(&self, record: &mut Record) -> Result<()> {
        let generation = self.cache.generation();
        self.store.create(record).await?;
        self.remember(record, generation);
        Ok(())
    }

    async fn save(&self, record: &Record) -> Result<()> {
        // A failed write leaves the store unknown: read it next time.
        self.cache.forget_session(&record.id);
        let generation = self.cache.generation();
        self.store.save(record).await?;
        self.remember(record, generation);
        Ok(())
    }

    async fn load(&self, id: &Id) -> Result<Option<Record>> {
        if let Some(record) = self.cache.session(id) {
            return Ok(Some(record));
        }
        let generation = self.cache.generation();
        let record = self.store.load(id).await?;
        if let Some(record) = &record {
            self.remember(record, generation);
        }
        Ok(record)
    }

    async fn delete(&self, id: &Id) -> Result<()> {
        self.cache.forget_session(id);
        self.store.delete(id).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tower_sessions::cookie::time::{Duration, OffsetDateTime};
    use uuid::Uuid;

    use super::*;

    fn record(user: Option<Uuid>, expires_in: Duration) -> Record {
        let mut data = HashMap::new();
        if let Some(user) = user {
            let login = serde_json::json!({"user": user, "id": Uuid::new_v4(), "at": "2026-12-03T00:00:00Z"});
            data.insert("login".to_string(), login);
        }
        Record {
            id: Id::default(),
            data,
            expiry_date: OffsetDateTime::now_utc() + expires_in,
        }
    }

    #[test]
    fn a_session_is_known_by_its_user_and_forgotten_with_them() {
        let cache = SignedIn::default();
        let (alice, bob) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let (a, b, anonymous) = (
            record(Some(alice), Duration::hours(1)),
            record(Some(bob), Duration::hours(1)),
            record(None, Duration::hours(1)),
        );
        assert_eq!(session_user(&a), Some(alice));
        assert_eq!(session_user(&anonymous), None);
        for r in [&a, &b, &anonymous] {
            cache.put_session(r.clone(), session_user(r), cache.generation());
        }
        cache.forget(crate::identity::signed_in::Forget::User(alice));
        assert!(cache.session(&a.id).is_none());
        assert!(cache.session(&b.id).is_some());
        assert!(cache.session(&anonymous.id).is_some());
        cache.forget(crate::identity::signed_in::Forget::All);
        assert!(cache.session(&b.id).is_none());
    }

    #[test]
    fn an_expired_or_deleted_session_is_never_served_from_memory() {
        let cache = SignedIn::default();
        let user = Some(Uuid::from_u128(1));
        let expired = record(user, Duration::seconds(-1));
        cache.put_session(expired.clone(), user, cache.generation());
        assert!(cache.session(&expired.id).is_none());

        // Deleted while another request was reading it: the read is not kept.
        let live = record(user, Duration::hours(1));
        let before = cache.generation();
        cache.forget_session(&live.id);
        cache.put_session(live.clone(), user, before);
        assert!(cache.session(&live.id).is_none());
    }
}
