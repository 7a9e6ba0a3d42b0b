//! Upload acceptance: p50/p99 of `POST /api/documents` with 50 concurrent
//! clients sending 100 KB text files (no workers running, so the numbers
//! are the request path alone: stream to the blob store, hash, sniff, one
//! transaction, plus the relay publishing in the background).
//!
//! Two phases: 50 clients each uploading every 250 ms (200 uploads/s, the
//! latency a user sees under steady load), then 50 clients uploading
//! back-to-back (saturation: the throughput ceiling, where latency is just
//! queueing). Run: `cargo bench -p server --bench benches upload`
//! (`UPLOAD_PER_CLIENT`, 40 by default, sets the uploads per client and
//! phase; the test command runs it with 2).
//!
//! Each phase also prints what an upload cost: commits of the bench's
//! database (`pg_stat_database.xact_commit`, relay and background tasks
//! included) and PostgreSQL CPU (every `postgres` process, from `/proc`).

use crate::common;
use common::cost::{clk_tck, commits, cpu_of};

use std::time::{Duration, Instant};

use docflow::Roles;

const CLIENTS: usize = 50;
const FILE_BYTES: usize = 100 * 1024;

#[tokio::main]
pub async fn main() {
    // Uploads per client and phase; the test command runs a few.
    let per_client = std::env::var("UPLOAD_PER_CLIENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let bench = common::start(
        Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        |_| {},
    )
    .await;
    let file: Vec<u8> = "docflow upload benchmark line of plain text.\n"
        .bytes()
        .cycle()
        .take(FILE_BYTES)
        .collect();
    let client = bench.login("alice@acme.test").await;
    // Warm-up: connections, pool, page cache.
    for _ in 0..20 {
        common::upload(&client, &bench.base, "bench.txt".into(), file.clone()).await;
    }
    println!(
        "upload acceptance: {CLIENTS} concurrent clients, uploads of {} KB",
        FILE_BYTES / 1024
    );
    let phases = [
        ("steady 200 uploads/s", Some(Duration::from_millis(250))),
        ("saturated", None),
    ];
    let db = bench.iso.database.clone();
    let tick_ms = 1000.0 / clk_tck();
    for (phase, pace) in phases {
        let commits_before = commits(&bench.pool, &db).await;
        let pg_before = cpu_of("postgres");
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let client = client.clone();
            let base = bench.base.clone();
            let file = file.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_client);
                if let Some(p) = pace {
                    // Spread the clients over one period.
                    tokio::time::sleep(p * c as u32 / CLIENTS as u32).await;
                }
                let mut next = tokio::time::Instant::now();
                for _ in 0..per_client {
                    let t = Instant::now();
                    common::upload(&client, &base, "bench.txt".into(), file.clone()).await;
                    lat.push(t.elapsed());
                    if let Some(p) = pace {
                        next += p;
                        tokio::time::sleep_until(next).await;
                    }
                }
                lat
            }));
        }
        let mut all: Vec<Duration> = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("client task"));
        }
        let wall = started.elapsed();
        // Until the relay has published the phase's uploads.
        let polls = common::until_outbox_sent(&bench.pool).await;
        let pg_ms = (cpu_of("postgres") - pg_before) as f64 * tick_ms;
        // Less the polls above and the first reading (each is a commit).
        let spent_commits = commits(&bench.pool, &db).await - commits_before - polls - 1;
        all.sort();
        println!(
            "  {phase}: {} uploads, p50 {}  p90 {}  p99 {}  max {}, {:.0} uploads/s; per upload {:.1} commits, PostgreSQL {:.2} ms CPU",
            all.len(),
            common::ms(common::quantile(&all, 0.5)),
            common::ms(common::quantile(&all, 0.9)),
            common::ms(common::quantile(&all, 0.99)),
            common::ms(common::quantile(&all, 1.0)),
            all.len() as f64 / wall.as_secs_f64(),
            spent_commits as f64 / all.len() as f64,
            pg_ms / all.len() as f64,
        );
    }
    bench.stop().await;
}
