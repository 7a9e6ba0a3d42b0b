//! A worker group's slots: how many jobs it runs at once, shared by its
//! queues, paid (`high`) first.
//!
//! A group has a total and, per queue, a reserved minimum. A delivery in
//! hand starts when a slot is free and taking it leaves every other queue
//! its unused reservation; when several queues wait for the same free slot,
//! the one first in [`Tier::ALL`] order (`high`, `normal`, `slow`) gets it.
//! With reservations summing to the total this is a fixed split; with no
//! reservations it is one pool in priority order, and no slot idles while
//! any queue has work. `slow` keeps a group of its own, so a long document
//! never takes a slot from the fast queues nor waits behind them.
//!
//! The broker's prefetch of each queue's channel is one more than the most
//! jobs that queue may run ([`Slots::capacity`]): a consumer has one
//! delivery in hand while it waits for a slot, so when a slot frees, a
//! waiting paid job takes it before the broker is asked for more; what a
//! process has not taken stays ready on the queue for any process. `high`
//! and `normal` get half their capacity more, for finished deliveries
//! whose gathered ack is not sent yet ([`crate::broker::acks`]).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::jobs::Tier;

const TIERS: usize = Tier::ALL.len();

fn index(tier: Tier) -> usize {
    Tier::ALL
        .iter()
        .position(|t| *t == tier)
        .unwrap_or(TIERS - 1)
}

/// The slots of one worker group.
#[derive(Debug)]
pub struct Slots {
    total: usize,
    reserved: [usize; TIERS],
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    running: [usize; TIERS],
    waiting: [usize; TIERS],
}

impl State {
    fn running_total(&self) -> usize {
        self.running.iter().sum()
    }
}

impl Slots {
    /// A group running at most `total` jobs, at least `reserved` of a queue
    /// when it has work (the total is raised to the reservations' sum).
    pub fn new(total: usize, reserved: &[(Tier, usize)]) -> Arc<Self> {
        let mut r = [0; TIERS];
        for (tier, n) in reserved {
            r[index(*tier)] += n;
        }
        Arc::new(Self {
            total: total.max(r.iter().sum()),
            reserved: r,
            state: Mutex::default(),
            changed: Notify::new(),
        })
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// The most jobs of `tier` that may run at once: the total less the
    /// other queues' reservations.
    pub fn capacity(&self, tier: Tier) -> usize {
        let i = index(tier);
        let others: usize = (0..TIERS)
            .filter(|j| *j != i)
            .map(|j| self.reserved[j])
            .sum();
        self.total - others
    }

    /// Jobs of `tier` running now.
    pub fn running(&self, tier: Tier) -> usize {
        self.lock().running[index(tier)]
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a handful of counters updated in one step each: a
        // panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `i` may take a slot now, leaving other queues their unused
    /// reservations.
    fn admissible(&self, s: &State, i: usize) -> bool {
        let used = s.running_total();
        if used >= self.total {
            return false;
        }
        if s.running[i] < self.reserved[i] {
            return true;
        }
        let held_back: usize = (0..TIERS)
            .filter(|j| *j != i)
            .map(|j| self.reserved[j].saturating_sub(s.running[j]))
            .sum();
        self.total - used > held_back
    }

    /// Whether `i` gets the slot now: admissible, and no queue before it
    /// waits for one it could take.
    fn grant(&self, s: &State, i: usize) -> bool {
        self.admissible(s, i) && !(0..i).any(|j| s.waiting[j] > 0 && self.admissible(s, j))
    }

    /// Waits for a slot for a delivery of `tier` in hand. Dropping the
    /// future gives up the place in line.
    pub async fn acquire(self: &Arc<Self>, tier: Tier) -> Permit {
        let i = index(tier);
        let mut waiter = Waiter {
            slots: self.clone(),
            i,
            granted: false,
        };
        self.lock().waiting[i] += 1;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if self.grant(&s, i) {
                    s.waiting[i] -= 1;
                    s.running[i] += 1;
                    waiter.granted = true;
                    drop(s);
                    // A queue after this one may be admissible too.
                    self.changed.notify_waiters();
                    return Permit {
                        slots: self.clone(),
                        i,
                    };
                }
            }
            notified.await;
        }
    }
}

/// A place in line for a slot; leaving the line lets the next queue in.
struct Waiter {
    slots: Arc<Slots>,
    i: usize,
    granted: bool,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if !self.granted {
            self.slots.lock().waiting[self.i] -= 1;
            self.slots.changed.notify_waiters();
        }
    }
}

/// A slot held by a running job; dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    slots: Arc<Slots>,
    i: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.slots.lock().running[self.i] -= 1;
        self.slots.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn pending<F: std::future::Future>(f: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_shared_group_runs_any_queue_up_to_its_total() {
        let slots = Slots::new(3, &[(Tier::High, 0), (Tier::Normal, 0)]);
        assert_eq!(slots.capacity(Tier::Normal), 3);
        let _a = slots.acquire(Tier::Normal).await;
        let _b = slots.acquire(Tier::Normal).await;
        let _c = slots.acquire(Tier::Normal).await;
        assert!(pending(slots.acquire(Tier::High)).await, "the fourth waits");
        assert_eq!(slots.running(Tier::Normal), 3);
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_high_before_normal_whoever_waited_longer() {
        let slots = Slots::new(1, &[]);
        let held = slots.acquire(Tier::Normal).await;
        let normal = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(Tier::Normal).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let high = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(Tier::High).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        let high = tokio::time::timeout(Duration::from_secs(1), high)
            .await
            .expect("high gets the slot")
            .expect("task");
        assert_eq!(slots.running(Tier::High), 1);
        assert!(!normal.is_finished(), "normal still waits");
        drop(high);
        tokio::time::timeout(Duration::from_secs(1), normal)
            .await
            .expect("then normal")
            .expect("task");
    }

    #[tokio::test]
    async fn reservations_are_kept_for_their_queue_and_the_rest_is_shared() {
        // 4 slots, 1 reserved for high: normal may run 3 at most.
        let slots = Slots::new(4, &[(Tier::High, 1), (Tier::Normal, 0)]);
        assert_eq!(slots.capacity(Tier::Normal), 3);
        assert_eq!(slots.capacity(Tier::High), 4);
        let n: Vec<_> =
            futures::future::join_all((0..3).map(|_| slots.acquire(Tier::Normal))).await;
        assert!(pending(slots.acquire(Tier::Normal)).await);
        let _h = slots.acquire(Tier::High).await;
        drop(n);
        // High may use the whole group.
        let _more: Vec<_> =
            futures::future::join_all((0..3).map(|_| slots.acquire(Tier::High))).await;
        assert_eq!(slots.running(Tier::High), 4);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_lets_the_next_queue_in() {
        let slots = Slots::new(1, &[]);
        let held = slots.acquire(Tier::Normal).await;
        let high = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(Tier::High).await }
        });
        let normal = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(Tier::Normal).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        high.abort();
        let _ = high.await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), normal)
            .await
            .expect("normal gets the slot")
            .expect("task");
    }

    #[test]
    fn the_total_is_at_least_the_reservations() {
        let slots = Slots::new(2, &[(Tier::High, 4), (Tier::Normal, 2)]);
        assert_eq!(slots.total(), 6);
        assert_eq!(slots.capacity(Tier::High), 4);
        assert_eq!(slots.capacity(Tier::Normal), 2);
    }
}
