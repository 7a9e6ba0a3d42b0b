//! Group commit: the claims and step ends of concurrent jobs share
//! transactions, and one failing statement costs the others nothing.

use std::future::Future;

use docflow::pipeline::group::{GroupCommit, Statement};
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
    ) -> impl Future<Output = sqlx::Result<i64>> + Send + 'c {
        sqlx::query_scalar(
            "INSERT INTO shared (n) SELECT $1 WHERE 1 / $2 = 1 RETURNING txid_current()",
        )
        .bind(self.n)
        .bind(if self.fail { 0 } else { 1 })
        .fetch_one(conn)
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
        tokio::spawn(async move { group.run(&Insert { n, fail: false }).await })
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
            (n, group.run(&Insert { n, fail }).await)
        })
    });
    for run in futures::future::join_all(runs).await {
        let (n, result) = run.expect("task");
        match (n, result) {
            (1025, Err(e)) => assert!(e.to_string().contains("division by zero"), "{e}"),
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
    let alone = group
        .run(&Insert {
            n: 5000,
            fail: false,
        })
        .await
        .expect("committed");
    assert!(txids.binary_search(&alone).is_err());
    assert!(rows(&app.pool).await.contains(&5000));
}
