//! Re-embedding after a model change: `REEMBED_DOCS` documents (default
//! 300, three chunks each) embedded with the local model, then the
//! deployment restarted with all-MiniLM-L6-v2 (the real model, in process).
//! It reports the re-embedding's throughput (documents and chunks per
//! second, and CPU ms of this process per chunk) and, while it runs and
//! once it is over (the reference, same process, same model), the p50/p99
//! of `POST /api/documents` (a free tenant's short note every 500 ms) and
//! of `GET /api/search` (a paid tenant's, every 100 ms).
//! Run: `cargo bench -p server --bench benches reembed` (the model from
//! `scripts/fetch-model.sh`).

use crate::common;
use common::cost::{clk_tck, ticks};

use std::time::{Duration, Instant};

use docflow::{platform::config::EmbedderKind, Application, Roles};
use tokio_util::sync::CancellationToken;

fn queues() -> Vec<docflow::platform::config::QueueArg> {
    ["high=2", "normal=1"]
        .iter()
        .map(|q| q.parse().expect("queue"))
        .collect()
}

fn document(i: usize, tag: &str) -> Vec<u8> {
    // About three chunks of the local model's size.
    (0..36)
        .map(|s| {
            format!(
                "Ledger {tag} {i} entry {s} records the quarterly orders of the northern region in plain words. "
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// Latencies of what users do, while `until` is not cancelled: a free
/// tenant uploads a short note every 500 ms (its jobs share the workers
/// with the re-embedding), a paid one searches every 100 ms.
async fn load(
    uploader: reqwest::Client,
    searcher: reqwest::Client,
    base: String,
    until: CancellationToken,
) -> (Vec<Duration>, Vec<Duration>) {
    let uploads = {
        let (base, until) = (base.clone(), until.clone());
        tokio::spawn(async move {
            let mut took = Vec::new();
            let mut i = 0;
            while !until.is_cancelled() {
                let note = format!("Live note {i}: the northern region shipped its orders.");
                let started = Instant::now();
                common::upload(&uploader, &base, format!("live-{i}.txt"), note.into_bytes()).await;
                took.push(started.elapsed());
                i += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            took
        })
    };
    let client = searcher;
    let mut searches = Vec::new();
    while !until.is_cancelled() {
        let started = Instant::now();
        let r = client
            .get(format!(
                "{base}/api/search?q=quarterly%20orders%20northern&k=10"
            ))
            .send()
            .await
            .expect("search");
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
        searches.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (uploads.await.expect("uploads"), searches)
}

fn report(label: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "  {label:<28} n={:<5} p50 {:>8}  p99 {:>8}",
        v.len(),
        common::ms(common::quantile(&v, 0.5)),
        common::ms(common::quantile(&v, 0.99)),
    );
}

#[tokio::main]
pub async fn main() {
    let docs: usize = std::env::var("REEMBED_DOCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    // The earlier deploy: the local model.
    let mut bench = common::start(Roles::all(queues()), |c| c.embedder = EmbedderKind::Local).await;
    let client = bench.login("alice@acme.test").await;
    for i in 0..docs {
        common::upload(
            &client,
            &bench.base,
            format!("doc-{i}.txt"),
            document(i, "doc"),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'done'")
            .fetch_one(&bench.pool)
            .await
            .expect("count");
        if done as usize >= docs {
            break;
        }
        assert!(Instant::now() < deadline, "ingest finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks")
        .fetch_one(&bench.pool)
        .await
        .expect("chunks");
    bench.shutdown.cancel();
    let _ = (&mut bench.handle).await;

    // The next deploy: the real model. The clock starts with the process.
    let mut config = bench.config.clone();
    config.embedder = EmbedderKind::Minilm;
    config.listen = "127.0.0.1:0".parse().expect("addr");
    let app = Application::build(config, Roles::all(queues()))
        .await
        .expect("docflow builds");
    let base = format!("http://{}", app.addr().expect("web"));
    let shutdown = app.shutdown_token();
    let handle = tokio::spawn(app.run());
    let client = bench.login_at(&base, "alice@acme.test").await;
    let free = bench.login_at(&base, "bob@globex.test").await;
    let started = Instant::now();
    let cpu_before = ticks(std::process::id()).map_or(0, |t| t.0);
    let during = CancellationToken::new();
    let load_during = tokio::spawn(load(
        free.clone(),
        client.clone(),
        base.clone(),
        during.clone(),
    ));
    loop {
        let finished: bool = sqlx::query_scalar(
            "SELECT coalesce((SELECT finished_at IS NOT NULL AND cardinality(from_models) > 0
                              FROM reembed_run), false)",
        )
        .fetch_one(&bench.pool)
        .await
        .expect("run");
        if finished {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "re-embedding finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let rechunked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chunks WHERE document_id IN (SELECT document_id FROM reembeds)",
    )
    .fetch_one(&bench.pool)
    .await
    .expect("chunks");
    let cpu = ticks(std::process::id()).map_or(0, |t| t.0) - cpu_before;
    during.cancel();
    let (uploads_during, searches_during) = load_during.await.expect("load");
    // The reference: the same process once the run is over.
    let after = CancellationToken::new();
    let load_after = tokio::spawn(load(free, client, base, after.clone()));
    tokio::time::sleep(took.clamp(Duration::from_secs(5), Duration::from_secs(30))).await;
    after.cancel();
    let (uploads_after, searches_after) = load_after.await.expect("load");

    let secs = took.as_secs_f64();
    println!(
        "re-embedding {docs} documents, local model ({chunks} chunks) → all-MiniLM-L6-v2 \
         ({rechunked} chunks, chunked again in its word pieces):"
    );
    println!(
        "  {:.1} s: {:.1} documents/s, {:.1} chunks/s, {:.1} CPU ms of docflow per chunk (model included, with the load below)",
        secs,
        docs as f64 / secs,
        rechunked as f64 / secs,
        cpu as f64 * 1000.0 / clk_tck() / rechunked.max(1) as f64,
    );
    report("upload while re-embedding", uploads_during);
    report("upload after", uploads_after);
    report("search while re-embedding", searches_during);
    report("search after", searches_after);
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chunks c JOIN embedding_models m ON m.id = c.model_id
         WHERE m.name = $1",
    )
    .bind(docflow::pipeline::embedder::LOCAL_MODEL)
    .fetch_one(&bench.pool)
    .await
    .expect("left");
    assert_eq!(left, 0, "every earlier vector replaced");
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), handle).await;
    // The first process has stopped already; dropping the bench removes its
    // database and vhost.
    bench.pool.close().await;
}
