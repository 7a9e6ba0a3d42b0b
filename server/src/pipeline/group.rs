//! Group commit: the statements that claim a job or end one of its steps,
//! from all the jobs a worker process runs at once, share transactions,
//! and a job runs ahead of its own commits.
//!
//! Each such statement is the whole of its write (output, checkpoint and
//! events; see [`crate::jobs::machine::step_done`]) and guarded by the
//! lease, so statements of different jobs can share a transaction without
//! changing what any of them means. A job stages its statements in order
//! on a [`Chain`]: each runs on the connection of the transaction that is
//! gathering and hands its result back at once, so the job goes on to its
//! next step while the committer makes it durable. While one transaction
//! commits, the next gathers; under load one commit serves several jobs,
//! and when the process is idle a statement waits for nobody.
//!
//! What keeps that safe:
//! - A job's statements reach the database in order, and one whose
//!   predecessor's transaction is committing waits for that commit before
//!   it runs: in another transaction it would not see the rows the
//!   predecessor wrote, and would wait for its row locks while holding up
//!   the gathering transaction.
//! - A statement's events are published by [`Statement::committed`] once
//!   it is durable, in the job's order, never before.
//! - A job settles its chain ([`Chain::settle`]) before anything that
//!   depends on its writes being durable: acknowledging the delivery, its
//!   own transactions, a call to an outside service, the end of its run.
//!   A statement whose predecessor turned out not to be written writes
//!   nothing, and the chain says so.
//! - If a statement fails, its transaction rolls back, and the statements
//!   that shared it run again alone, in each job's order: each is the whole
//!   of its write and guarded by the lease, so running it again is what a
//!   retry would do. A failed `COMMIT` fails what it carried.
//!
//! A batch lingers while its jobs add to it: the committer takes it once
//! no statement joined it for [`QUIET`], or once it is [`LINGER`] old, so
//! a small document's steps often all commit together, and a checkpoint
//! is durable at most a few milliseconds after its step ended. A process
//! has [`LANES`] lines of batches, each with a transaction gathering and
//! one committing; a job stays on one. One lane runs every statement on a
//! single connection, one after another, and that was the drain's limit
//! (docs/performance.md).
//!
//! Such statements read the clock with `statement_timestamp()`: `now()`
//! is the start of the shared transaction, which another job began, so
//! jobs claimed in one batch would share a start time and sort at random.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Weak,
    },
};

use std::time::{Duration, Instant};

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{oneshot, watch, Mutex, Notify};

/// One statement that can share a transaction with others: the whole of
/// its write, which leaves the database consistent however it ends. It may
/// run twice: alone, after another statement's failure rolled back the
/// transaction it was in.
pub trait Statement: Send + Sync + 'static {
    /// What it returns when it wrote; `None` when its guard held it back
    /// (the job is no longer this worker's) and it wrote nothing.
    type Output: Clone + Send + Sync + 'static;

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl Future<Output = sqlx::Result<Option<Self::Output>>> + Send + 'c;

    /// Runs once the write is durable, after the job's earlier statements'
    /// (publish its events); `output` is what the committed run returned.
    fn committed(&self, _output: Self::Output) {}
}

/// A batch is committed once no statement joined it for this long...
const QUIET: Duration = Duration::from_millis(1);
/// ...or once it is this old.
const LINGER: Duration = Duration::from_millis(5);
/// Transactions gathering at once.
const LANES: usize = 2;

/// What became of a batch, and of the statements in it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// A statement not yet run (it waits for its turn).
    Queued,
    Gathering,
    /// Taken by the committer.
    Committing,
    Committed,
    /// Rolled back because a statement in it failed: run again alone.
    RolledBack,
    /// Its commit failed; whether it took effect is unknown.
    Failed,
}

/// How a staged statement ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Its write is durable.
    Written,
    /// It wrote nothing: its guard, or a predecessor that wrote nothing.
    Nothing,
    /// It or its commit failed (the commit's outcome may be unknown).
    Failed(String),
}

struct Batch {
    id: u64,
    tx: Transaction<'static, Postgres>,
    members: usize,
    /// When it began, and when its last statement joined.
    opened: Instant,
    joined: Instant,
    fate: watch::Sender<Fate>,
}

/// The group committer of one worker process: its lanes, each a
/// transaction gathering while another commits.
pub struct GroupCommit {
    lanes: Vec<Arc<Lane>>,
    /// The lane of the next job.
    turn: std::sync::atomic::AtomicUsize,
}

/// One line of batches, committed one after another.
struct Lane {
    pool: PgPool,
    /// The transaction gathering statements, if any.
    open: Mutex<Option<Batch>>,
    /// The open batch has members to commit.
    ready: Notify,
    /// The id of the next batch.
    next: AtomicU64,
}

impl GroupCommit {
    /// Starts the committers; they stop when the last handle is dropped.
    pub fn start(pool: PgPool) -> Arc<Self> {
        let lanes = (0..LANES)
            .map(|_| {
                let lane = Arc::new(Lane {
                    pool: pool.clone(),
                    open: Mutex::new(None),
                    ready: Notify::new(),
                    next: AtomicU64::new(0),
                });
                tokio::spawn(committer(Arc::downgrade(&lane)));
                lane
            })
            .collect();
        Arc::new(Self {
            lanes,
            turn: Default::default(),
        })
    }
}

/// Where a staged statement is: its batch and that batch's fate, then its
/// own end.
#[derive(Clone)]
struct Link {
    fate: watch::Receiver<(Fate, u64)>,
    settled: watch::Receiver<Option<Settled>>,
}

impl Link {
    async fn settled(&mut self) -> Settled {
        match self.settled.wait_for(Option::is_some).await {
            Ok(s) => s.clone().unwrap_or(Settled::Nothing),
            Err(_) => Settled::Failed("the group commit stopped".into()),
        }
    }
}

/// One job's staged statements, in order.
pub struct Chain {
    lane: Arc<Lane>,
    links: std::sync::Mutex<Vec<Link>>,
}

impl Chain {
    /// A job's chain, on the next of `group`'s lanes.
    pub fn new(group: &GroupCommit) -> Self {
        let n = group.turn.fetch_add(1, Ordering::Relaxed);
        Self {
            lane: group.lanes[n % group.lanes.len()].clone(),
            links: std::sync::Mutex::default(),
        }
    }

    /// Runs `statement` after the job's earlier ones, in the gathering
    /// transaction, and returns what it returned; it commits in the
    /// background. What it returned is final only once [`Chain::settle`]
    /// says [`Settled::Written`].
    pub async fn stage<S: Statement>(&self, statement: S) -> sqlx::Result<Option<S::Output>> {
        let (fate, fate_rx) = watch::channel((Fate::Queued, 0));
        let (done, done_rx) = watch::channel(None);
        let (executed, result) = oneshot::channel();
        let before = {
            let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
            let before = links.last().cloned();
            links.push(Link {
                fate: fate_rx,
                settled: done_rx,
            });
            before
        };
        let lane = self.lane.clone();
        tokio::spawn(async move {
            let settled = run_staged(&lane, &statement, before, &fate, executed).await;
            // The next statement follows this one's end from here on.
            let end = if settled == Settled::Written {
                Fate::Committed
            } else {
                Fate::Failed
            };
            fate.send_modify(|f| f.0 = end);
            done.send_replace(Some(settled));
        });
        result.await.unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::other(
                "the group commit stopped",
            )))
        })
    }

    /// Waits until every statement staged so far has settled: `Written`
    /// when all are durable, else how the first that is not ended.
    pub async fn settle(&self) -> Settled {
        let links = std::mem::take(&mut *self.links.lock().unwrap_or_else(|p| p.into_inner()));
        let mut end = Settled::Written;
        for mut link in links {
            let s = link.settled().await;
            if end == Settled::Written {
                end = s;
            }
        }
        end
    }
}

/// One staged statement, from waiting for its turn to its end; `fate`
/// follows its batch's, for the job's next statement.
async fn run_staged<S: Statement>(
    lane: &Lane,
    statement: &S,
    mut before: Option<Link>,
    fate: &watch::Sender<(Fate, u64)>,
    executed: oneshot::Sender<sqlx::Result<Option<S::Output>>>,
) -> Settled {
    let refuse = |executed: oneshot::Sender<sqlx::Result<Option<S::Output>>>, why: Settled| {
        let _ = executed.send(match &why {
            Settled::Failed(e) => Err(sqlx::Error::Io(std::io::Error::other(e.clone()))),
            _ => Ok(None),
        });
        why
    };
    // Its turn: in the batch its predecessor is gathering in, or after the
    // predecessor's commit.
    let mut open = loop {
        let Some(link) = before.as_mut() else {
            break lane.open.lock().await;
        };
        let open = lane.open.lock().await;
        let theirs = *link.fate.borrow();
        let gathering = open.as_ref().map(|b| b.id);
        match theirs.0 {
            Fate::Committed => break open,
            Fate::Gathering if gathering == Some(theirs.1) => break open,
            // Not run yet, or its batch is committing.
            Fate::Queued | Fate::Gathering | Fate::Committing => {
                drop(open);
                let _ = link.fate.wait_for(|f| *f != theirs).await;
            }
            Fate::RolledBack | Fate::Failed => {
                drop(open);
                match link.settled().await {
                    Settled::Written => before = None,
                    other => return refuse(executed, other),
                }
            }
        }
    };
    let batch = match open.as_mut() {
        Some(batch) => batch,
        None => match lane.pool.begin().await {
            Ok(tx) => open.insert(Batch {
                id: lane.next.fetch_add(1, Ordering::Relaxed),
                tx,
                members: 0,
                opened: Instant::now(),
                joined: Instant::now(),
                fate: watch::Sender::new(Fate::Gathering),
            }),
            Err(e) => return refuse(executed, Settled::Failed(e.to_string())),
        },
    };
    let value = match statement.execute(&mut batch.tx).await {
        Ok(value) => value,
        Err(e) => {
            // The transaction is aborted; its other members run again alone.
            if let Some(batch) = open.take() {
                drop(open);
                batch.fate.send_replace(Fate::RolledBack);
                let _ = batch.tx.rollback().await;
            }
            let message = e.to_string();
            let _ = executed.send(Err(e));
            return Settled::Failed(message);
        }
    };
    batch.members += 1;
    batch.joined = Instant::now();
    let mut batch_fate = batch.fate.subscribe();
    let id = batch.id;
    fate.send_replace((Fate::Gathering, id));
    drop(open);
    lane.ready.notify_one();
    let _ = executed.send(Ok(value.clone()));
    let end = loop {
        let f = *batch_fate.borrow_and_update();
        fate.send_replace((f, id));
        if !matches!(f, Fate::Gathering | Fate::Committing) {
            break f;
        }
        if batch_fate.changed().await.is_err() {
            break Fate::Failed;
        }
    };
    // The job's earlier statements end first, in order.
    let earlier = match before.as_mut() {
        Some(link) => link.settled().await,
        None => Settled::Written,
    };
    match end {
        Fate::Committed => match value {
            Some(v) if earlier == Settled::Written => {
                statement.committed(v);
                Settled::Written
            }
            None => Settled::Nothing,
            // A write after one that was held back: the pipeline stages
            // nothing after such a statement, so this is the conservative
            // answer for one that would.
            Some(_) => earlier,
        },
        Fate::RolledBack if earlier == Settled::Written => {
            // Alone now, in a transaction of its own (one statement).
            let again = match lane.pool.acquire().await {
                Ok(mut conn) => statement.execute(&mut conn).await,
                Err(e) => Err(e),
            };
            match again {
                Ok(Some(v)) => {
                    statement.committed(v);
                    Settled::Written
                }
                Ok(None) => Settled::Nothing,
                Err(e) => Settled::Failed(e.to_string()),
            }
        }
        Fate::RolledBack => earlier,
        Fate::Queued | Fate::Gathering | Fate::Committing | Fate::Failed => {
            Settled::Failed("the commit of a shared transaction failed".into())
        }
    }
}

/// Commits the batches one after another while the group commit lives.
async fn committer(weak: Weak<Lane>) {
    loop {
        let Some(lane) = weak.upgrade() else {
            return;
        };
        // Wakes at least every second to notice that the process is done.
        let _ = tokio::time::timeout(Duration::from_secs(1), lane.ready.notified()).await;
        // The batch lingers while its jobs add their next steps to it.
        let batch = loop {
            let mut open = lane.open.lock().await;
            let due = match open.as_ref() {
                Some(b) if b.members > 0 => (b.joined + QUIET).min(b.opened + LINGER),
                _ => break None,
            };
            if Instant::now() >= due {
                let batch = open.take();
                if let Some(b) = &batch {
                    b.fate.send_replace(Fate::Committing);
                }
                break batch;
            }
            drop(open);
            tokio::time::sleep_until(due.into()).await;
        };
        let Some(batch) = batch else { continue };
        let members = batch.members;
        let fate = match batch.tx.commit().await {
            Ok(()) => Fate::Committed,
            Err(e) => {
                tracing::warn!(error = %e, members, "a shared commit failed; its jobs' steps fail and retry");
                Fate::Failed
            }
        };
        batch.fate.send_replace(fate);
    }
}
