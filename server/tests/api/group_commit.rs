//! Group commit: the claims and step ends of concurrent jobs share
//! transactions, a job runs ahead of its own commits, and one failing
//! statement costs the others nothing.

use std::{
    future::Future,
    sync::{Arc, Mutex},
};

use docflow::pipeline::group::{Chain, GroupCommit, Settled, Statement};
use sqlx::PgConnection;

use crate::helpers::spawn_app;

/// Inserts `n` into `shared`, failing (division by zero) when `fail`;
/// returns the id of the transaction it ran in.
struct Insert {
    n: i32,
    fail: bool,
}

impl Statement for Insert {
    type Output = i64;

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl Future<Output = sqlx::Result<Option<i64>>> + Send + 'c {
        sqlx::query_scalar(
            "INSERT INTO shared (n) SELECT $1 WHERE 1 / $2 = 1 RETURNING txid_current()",
        )
        .bind(self.n)
        .bind(if self.fail { 0 } else { 1 })
        .fetch_optional(conn)
    }
}

/// Runs `statement` as a job of its own and waits until it is durable;
/// the transaction id it ran in.
async fn run(group: &Arc<GroupCommit>, statement: Insert) -> Result<i64, String> {
    let chain = Chain::new(group);
    let txid = chain
        .stage(statement)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("nothing written")?;
    match chain.settle().await {
        Settled::Written => Ok(txid),
        other => Err(format!("{other:?}")),
    }
}

async fn rows(pool: &sqlx::PgPool) -> Vec<i32> {
    sqlx::query_scalar("SELECT n FROM shared ORDER BY n")
        .fetch_all(pool)
        .await
        .expect("rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_statements_share_commits_and_a_failing_one_costs_the_others_nothing() {
    let app = spawn_app().await;
    sqlx::query("CREATE TABLE shared (n int PRIMARY KEY)")
        .execute(&app.pool)
        .await
        .expect("table");
    let group = GroupCommit::start(app.pool.clone());

    // 200 statements from 200 jobs at once: every one is committed, once,
    // in far fewer transactions than statements.
    let runs = (0..200).map(|n| {
        let group = group.clone();
        tokio::spawn(async move { run(&group, Insert { n, fail: false }).await })
    });
    let mut txids = Vec::new();
    for run in futures::future::join_all(runs).await {
        txids.push(run.expect("task").expect("committed"));
    }
    assert_eq!(rows(&app.pool).await, (0..200).collect::<Vec<_>>());
    txids.sort_unstable();
    txids.dedup();
    println!("200 statements in {} transactions", txids.len());
    assert!(
        txids.len() <= 100,
        "200 concurrent statements took {} commits",
        txids.len()
    );

    // One statement in 50 fails: it alone reports the error, and the
    // statements that shared its transaction are committed all the same.
    let runs = (1000..1050).map(|n| {
        let group = group.clone();
        tokio::spawn(async move {
            let fail = n == 1025;
            (n, run(&group, Insert { n, fail }).await)
        })
    });
    for run in futures::future::join_all(runs).await {
        let (n, result) = run.expect("task");
        match (n, result) {
            (1025, Err(e)) => assert!(e.contains("division by zero"), "{e}"),
            (1025, Ok(_)) => panic!("the failing statement reported success"),
            (n, r) => {
                r.unwrap_or_else(|e| panic!("statement {n} failed with its neighbour: {e}"));
            }
        }
    }
    let after: Vec<i32> = rows(&app.pool)
        .await
        .into_iter()
        .filter(|n| *n >= 1000)
        .collect();
    let expected: Vec<i32> = (1000..1050).filter(|n| *n != 1025).collect();
    assert_eq!(
        after, expected,
        "every other statement committed exactly once"
    );

    // Idle, a statement waits for nobody: it commits on its own.
    let alone = run(
        &group,
        Insert {
            n: 5000,
            fail: false,
        },
    )
    .await
    .expect("committed");
    assert!(txids.binary_search(&alone).is_err());
    assert!(rows(&app.pool).await.contains(&5000));
}

/// One step of a job: inserts `(job, seq)`, failing when `fail`; once
/// durable it writes itself in `log`, as a step end publishes its events.
struct JobStep {
    job: i32,
    seq: i32,
    fail: bool,
    log: Arc<Mutex<Vec<(i32, i32)>>>,
}

impl Statement for JobStep {
    /// The row's id and the transaction it ran in.
    type Output = (i64, i64);

    fn execute<'c>(
        &'c self,
        conn: &'c mut PgConnection,
    ) -> impl Future<Output = sqlx::Result<Option<(i64, i64)>>> + Send + 'c {
        sqlx::query_as(
            "INSERT INTO steps (job, seq) SELECT $1, $2 WHERE 1 / $3 = 1
             RETURNING id, txid_current()",
        )
        .bind(self.job)
        .bind(self.seq)
        .bind(if self.fail { 0 } else { 1 })
        .fetch_optional(conn)
    }

    fn committed(&self, _: (i64, i64)) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((self.job, self.seq));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_ahead_of_its_commits_and_its_writes_land_in_order() {
    let app = spawn_app().await;
    sqlx::query("CREATE TABLE steps (id bigserial PRIMARY KEY, job int, seq int)")
        .execute(&app.pool)
        .await
        .expect("table");
    let group = GroupCommit::start(app.pool.clone());
    let log = Arc::new(Mutex::new(Vec::new()));

    // 20 jobs of 5 steps each, every step staged as soon as the one before
    // it returned, none waiting for a commit; job 7's third step fails,
    // rolling back whatever shared its transaction.
    let jobs = (0..20).map(|job| {
        let (group, log) = (group.clone(), log.clone());
        tokio::spawn(async move {
            let chain = Chain::new(&group);
            let mut txids = Vec::new();
            for seq in 0..5 {
                let step = JobStep {
                    job,
                    seq,
                    fail: job == 7 && seq == 2,
                    log: log.clone(),
                };
                match chain.stage(step).await {
                    Ok(Some((_, txid))) => txids.push(txid),
                    Ok(None) => panic!("job {job} step {seq} wrote nothing"),
                    Err(e) => {
                        assert_eq!((job, seq), (7, 2), "{e}");
                        break;
                    }
                }
            }
            (job, chain.settle().await, txids)
        })
    });
    let mut txids = Vec::new();
    for run in futures::future::join_all(jobs).await {
        let (job, settled, ids) = run.expect("task");
        match job {
            7 => assert!(
                matches!(&settled, Settled::Failed(e) if e.contains("division by zero")),
                "job 7 settled {settled:?}"
            ),
            _ => assert_eq!(settled, Settled::Written, "job {job}"),
        }
        txids.extend(ids);
    }

    // Every step that succeeded is written once, each job's in its order,
    // and reported durable in that order; job 7 stopped at its failure.
    let rows: Vec<(i32, i32)> = sqlx::query_as("SELECT job, seq FROM steps ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .expect("rows");
    let log = log.lock().expect("log").clone();
    for job in 0..20 {
        let expected: Vec<i32> = if job == 7 {
            vec![0, 1]
        } else {
            (0..5).collect()
        };
        let written: Vec<i32> = rows.iter().filter(|r| r.0 == job).map(|r| r.1).collect();
        assert_eq!(
            written, expected,
            "job {job}'s rows, in the order they were written"
        );
        let reported: Vec<i32> = log.iter().filter(|r| r.0 == job).map(|r| r.1).collect();
        assert_eq!(reported, expected, "job {job}'s writes reported durable");
    }
    txids.sort_unstable();
    txids.dedup();
    println!("97 statements in {} transactions", txids.len());
    assert!(
        txids.len() < 97,
        "no statement shared a transaction ({} of 97)",
        txids.len()
    );
}
