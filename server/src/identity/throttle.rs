//! Login throttling. Failed logins are counted per account (the e-mail as
//! typed, lower-cased) and per client address with `governor`; while either
//! is over its limit, logins for it are refused with 429 and `Retry-After`
//! before any password is hashed. Only failures count, so a user's own
//! successful logins never lock them out, and one address's failures
//! against an account slow another address only through that account's
//! limit. Argon2 checks (19 MiB each) run a few at a time, so a flood of
//! logins waits instead of exhausting memory.
//!
//! Keys are never stored as sent: accounts and addresses (IPv6 by its /64)
//! are hashed with a per-process random key into [`BUCKETS`] buckets, so a
//! flood of made-up e-mails or addresses cannot grow the state past that.

use std::{
    collections::{hash_map::RandomState, HashMap},
    hash::{BuildHasher, Hash},
    net::IpAddr,
    num::NonZeroU32,
    sync::Mutex,
    time::{Duration, Instant},
};

use governor::{clock::Clock, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Failed logins an account may have per minute (and at once).
pub const ACCOUNT_FAILURES_PER_MINUTE: u32 = 5;
/// Failed logins one client address may have per minute (and at once).
pub const ADDRESS_FAILURES_PER_MINUTE: u32 = 30;
/// Buckets per limit: the most keys either limit ever holds. Two accounts
/// share a bucket by chance only (the hash key is random per process).
pub const BUCKETS: u32 = 1 << 16;

/// One limit: failures per bucket, and the buckets over it until when.
struct Limit {
    failures: DefaultKeyedRateLimiter<u32>,
    blocked: Mutex<HashMap<u32, Instant>>,
}

impl Limit {
    fn per_minute(n: u32) -> Self {
        let n = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        Self {
            failures: RateLimiter::keyed(Quota::per_minute(n)),
            blocked: Mutex::default(),
        }
    }

    fn blocked(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Instant>> {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `key` is still refused.
    fn wait(&self, key: u32) -> Option<Duration> {
        let until = *self.blocked().get(&key)?;
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Counts a failure; `Some(wait)` when it put `key` over the limit.
    fn fail(&self, key: u32) -> Option<Duration> {
        let clock = governor::clock::DefaultClock::default();
        let wait = match self.failures.check_key(&key) {
            Ok(()) => return None,
            Err(not_until) => not_until.wait_time_from(clock.now()),
        };
        self.blocked().insert(key, Instant::now() + wait);
        Some(wait)
    }
}

pub struct LoginThrottle {
    accounts: Limit,
    addresses: Limit,
    hashing: Semaphore,
    hasher: RandomState,
}

impl LoginThrottle {
    /// `hashing`: password checks that may run at once.
    pub fn new(hashing: usize) -> Self {
        Self {
            accounts: Limit::per_minute(ACCOUNT_FAILURES_PER_MINUTE),
            addresses: Limit::per_minute(ADDRESS_FAILURES_PER_MINUTE),
            hashing: Semaphore::new(hashing.max(1)),
            hasher: RandomState::new(),
        }
    }

    fn bucket(&self, key: impl Hash) -> u32 {
        (self.hasher.hash_one(key) as u32) & (BUCKETS - 1)
    }

    fn account(&self, email: &str) -> u32 {
        self.bucket(email.trim().to_lowercase())
    }

    /// An address's bucket; IPv6 by its /64, which one client usually owns whole.
    fn address(&self, ip: IpAddr) -> u32 {
        match ip {
            IpAddr::V4(v4) => self.bucket(v4),
            IpAddr::V6(v6) => self.bucket(v6.segments()[..4].to_vec()),
        }
    }

    /// How long a login for `email` from `client` must still wait, if at all.
    pub fn refused(&self, email: &str, client: Option<IpAddr>) -> Option<Duration> {
        let account = self.accounts.wait(self.account(email));
        let address = client.and_then(|a| self.addresses.wait(self.address(a)));
        account.max(address)
    }

    /// Counts a failed login; `Some(wait)` when it put the account or the
    /// address over its limit.
    pub fn failed(&self, email: &str, client: Option<IpAddr>) -> Option<Duration> {
        let account = self.accounts.fail(self.account(email));
        let address = client.and_then(|a| self.addresses.fail(self.address(a)));
        account.max(address)
    }

    /// A turn to hash a password.
    pub async fn hashing(&self) -> Option<SemaphorePermit<'_>> {
        self.hashing.acquire().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_is_refused_after_its_failures_and_others_are_not() {
        let t = LoginThrottle::new(1);
        let here = Some(IpAddr::from([10, 0, 0, 1]));
        for _ in 0..ACCOUNT_FAILURES_PER_MINUTE {
            assert_eq!(t.failed("Alice@acme.test", here), None);
        }
        let wait = t.failed("alice@acme.test ", here).expect("over the limit");
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(60));
        assert!(t.refused("ALICE@acme.test", None).is_some(), "any address");
        assert!(t.refused("bob@globex.test", here).is_none());
    }

    #[test]
    fn a_flood_of_made_up_accounts_and_addresses_stays_within_the_buckets() {
        let t = LoginThrottle::new(1);
        for i in 0..(BUCKETS + 1000) {
            let ip = IpAddr::from(std::net::Ipv6Addr::new(
                0x2001, 0xdb8, 0, i as u16, 0, 0, 0, 1,
            ));
            t.failed(&format!("nobody-{i}@x.test"), Some(ip));
        }
        assert!(t.accounts.failures.len() <= BUCKETS as usize);
        assert!(t.addresses.failures.len() <= BUCKETS as usize);
        assert!(t.addresses.blocked().len() <= BUCKETS as usize);
    }

    #[test]
    fn an_address_is_refused_after_its_failures_on_many_accounts() {
        let t = LoginThrottle::new(1);
        let here = Some(IpAddr::from([10, 0, 0, 2]));
        let mut refused = None;
        for i in 0..=ADDRESS_FAILURES_PER_MINUTE {
            refused = refused.or(t.failed(&format!("user{i}@x.test"), here));
        }
        assert!(refused.is_some());
        assert!(t.refused("new@x.test", here).is_some());
        assert!(t
            .refused("new@x.test", Some(IpAddr::from([10, 0, 0, 3])))
            .is_none());
    }
}
