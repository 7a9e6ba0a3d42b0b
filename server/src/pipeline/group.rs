//! Group commit: the statements that claim a job or end one of its steps,
//! from all the jobs a worker process runs at once, share transactions.
//!
//! Each such statement is the whole of its write (output, checkpoint and
//! events; see [`crate::jobs::machine::step_done`]) and guarded by the
//! lease, so statements of different jobs can share a transaction without
//! changing what any of them means. A job runs its statement in its own
//! task, on the connection of the transaction that is gathering, then
//! waits until a committer has committed that transaction: every job still
//! waits for its own durable commit before it publishes its events or
//! starts its next step. While one transaction commits, the next gathers,
//! so under load one commit serves several jobs, and when the process is
//! idle a statement waits for nobody.
//!
//! Such statements read the clock with `statement_timestamp()`: `now()`
//! is the start of the shared transaction, which another job began, so
//! jobs claimed in one batch would share a start time and sort at random.
//!
//! A process has one transaction gathering and one committing at a time.
//! Two such lanes were measured with the drain bench (docs/performance.md):
//! one gave fewer commits (1.7–2.0 a job against 3.0) and less PostgreSQL
//! CPU at the same drain rate. If a statement fails, its transaction is
//! rolled back; the other jobs whose statements were in it run theirs again
//! alone.

use std::{
    future::Future,
    sync::{Arc, Weak},
};

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{watch, Mutex, Notify};

/// One statement that can share a transaction with others: the whole of
/// its write, which leaves the database consistent however it ends. It may
/// run twice: alone, after another statement's failure rolled back the
/// transaction it was in.
pub trait Statement: Sync {
    type Output: Send;

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl Future<Output = sqlx::Result<Self::Output>> + Send + 'c;
}

/// What became of a batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    Gathering,
    Committed,
    /// Rolled back because another statement in it failed: run again alone.
    RolledBack,
    /// Its commit failed; whether it took effect is unknown.
    Failed,
}

struct Batch {
    tx: Transaction<'static, Postgres>,
    members: usize,
    fate: watch::Sender<Fate>,
}

/// The group committer of one worker process.
pub struct GroupCommit {
    pool: PgPool,
    /// The transaction gathering statements, if any.
    open: Mutex<Option<Batch>>,
    /// The open batch has members to commit.
    ready: Notify,
}

impl GroupCommit {
    /// Starts the committer; it stops when the last handle is dropped.
    pub fn start(pool: PgPool) -> Arc<Self> {
        let me = Arc::new(Self {
            pool,
            open: Mutex::new(None),
            ready: Notify::new(),
        });
        tokio::spawn(committer(Arc::downgrade(&me)));
        me
    }

    /// Runs `statement` in a shared transaction and returns its result once
    /// that transaction has committed.
    pub async fn run<S: Statement>(&self, statement: &S) -> sqlx::Result<S::Output> {
        let mut open = self.open.lock().await;
        let batch = match open.as_mut() {
            Some(batch) => batch,
            None => open.insert(Batch {
                tx: self.pool.begin().await?,
                members: 0,
                fate: watch::Sender::new(Fate::Gathering),
            }),
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
                return Err(e);
            }
        };
        batch.members += 1;
        let mut fate = batch.fate.subscribe();
        drop(open);
        self.ready.notify_one();
        let fate = fate
            .wait_for(|f| *f != Fate::Gathering)
            .await
            .map_or(Fate::Failed, |f| *f);
        match fate {
            Fate::Committed => Ok(value),
            Fate::RolledBack => {
                // Alone now, in a transaction of its own (one statement).
                let mut conn = self.pool.acquire().await?;
                statement.execute(&mut conn).await
            }
            Fate::Gathering | Fate::Failed => Err(sqlx::Error::Io(std::io::Error::other(
                "the commit of a shared transaction failed",
            ))),
        }
    }
}

/// Commits the batches one after another while the group commit lives.
async fn committer(group: Weak<GroupCommit>) {
    loop {
        let Some(g) = group.upgrade() else {
            return;
        };
        // Wakes at least every second to notice that the process is done.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), g.ready.notified()).await;
        let batch = {
            let mut open = g.open.lock().await;
            match open.as_ref() {
                Some(b) if b.members > 0 => open.take(),
                _ => None,
            }
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
