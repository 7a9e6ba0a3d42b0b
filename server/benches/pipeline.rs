//! End-to-end throughput: 2,000 small text documents through parse → chunk
//! → embed → store with the local embedder, in one `docflow run` process
//! (workers high=4). Reports jobs/s and time-to-done p50/p99 (enqueue →
//! done, from the job rows). Run: `cargo bench -p server --bench benches pipeline`.

use crate::common;

use std::time::{Duration, Instant};

use docflow::{platform::config::QueueArg, Roles};

const DOCS: usize = 2_000;

#[tokio::main]
pub async fn main() {
    let queues: Vec<QueueArg> = vec!["high=8".parse().expect("queue")];
    let bench = common::start(Roles::all(queues), |c| c.db_pool = 30).await;
    let client = bench.login("alice@acme.test").await;
    let started = Instant::now();
    // Upload with 16 concurrent clients so uploads are not the bottleneck.
    let mut tasks = Vec::new();
    for w in 0..16 {
        let client = client.clone();
        let base = bench.base.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..DOCS).step_by(16) {
                let body = format!("Document {i}. docflow benchmark text about ingestion number {i}.\n\nA second paragraph for document {i}.");
                let form = reqwest::multipart::Form::new().part("file", reqwest::multipart::Part::bytes(body.into_bytes()).file_name(format!("doc-{i}.txt")));
                let r = client.post(format!("{base}/api/documents")).multipart(form).send().await.expect("upload");
                assert_eq!(r.status(), 202);
            }
        }));
    }
    for t in tasks {
        t.await.expect("uploader");
    }
    let uploaded = started.elapsed();
    loop {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'done'")
            .fetch_one(&bench.pool)
            .await
            .expect("count");
        if done as usize == DOCS {
            break;
        }
        let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'failed'")
            .fetch_one(&bench.pool)
            .await
            .expect("count");
        assert_eq!(failed, 0, "jobs failed during the benchmark");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall = started.elapsed();
    let mut latencies: Vec<Duration> = sqlx::query_scalar::<_, f64>(
        "SELECT extract(epoch FROM finished_at - enqueued_at)::float8 FROM jobs",
    )
    .fetch_all(&bench.pool)
    .await
    .expect("latencies")
    .into_iter()
    .map(Duration::from_secs_f64)
    .collect();
    latencies.sort();
    println!("pipeline: {DOCS} text documents, local embedder, workers high=8, one process");
    println!(
        "  uploads done in {:.1} s; all jobs done in {:.1} s",
        uploaded.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "  throughput {:.0} jobs/s end to end",
        DOCS as f64 / wall.as_secs_f64()
    );
    println!(
        "  time to done p50 {}  p99 {}",
        common::ms(common::quantile(&latencies, 0.5)),
        common::ms(common::quantile(&latencies, 0.99))
    );
    bench.stop().await;
}
