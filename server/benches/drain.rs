//! Drain: small text documents (about 400 words, 2 chunks each) queued with
//! no worker running, then one `docflow worker --queue high=8` process
//! started and timed until all are `done`. Besides jobs/s and time to done
//! (worker start → done) p50/p99 it reports the cost per job:
//!
//! - PostgreSQL commits (`pg_stat_database.xact_commit` of the bench's own
//!   database), for the upload and for the drain;
//! - CPU milliseconds of PostgreSQL (every `postgres` process, plus what the
//!   postmaster collected from backends that exited), of RabbitMQ
//!   (`beam.smp`) and of the docflow worker with its parser children, from
//!   `/proc`;
//! - job events written, and the messages that carried them to
//!   `docflow.events` (the worker's `docflow_broker_published_total`).
//!
//! Run: `cargo bench -p server --bench benches drain` (`DRAIN_DOCS`, default 2000;
//! `DRAIN_CONCURRENCY`, default 8; `DRAIN_DB_POOL`, the uploading web
//! process's connections, default 30). `DRAIN_WORKERS=N` starts N worker
//! processes instead of one; `DRAIN_CLUSTER=1` runs on the three-node
//! RabbitMQ cluster of `scripts/cluster.sh` (started if it is not up, taken
//! down after), in a vhost of its own, every process given all three node
//! addresses. `DRAIN_EMBEDDER=minilm` has the workers embed with the real
//! model instead of hashed words (the default, which measures docflow's own
//! overhead); the bench also reports chunks per second and the workers'
//! CPU per chunk, and beside them the same chunks' texts embedded by the
//! reference (`common::reference`: the model in Python onnxruntime, as
//! many threads as the machine has cores, batches of 8). Worker
//! CPU is the sum over the worker processes, RabbitMQ CPU the sum over
//! every `beam.smp`. The test command runs it with 20 documents in the
//! debug build, on one node and on the cluster, so the bench itself stays
//! working.

use crate::common;
use common::cost::{clk_tck, commits, cpu_of, cpu_of_tree};

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use docflow::Roles;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// About 400 words in paragraphs: two chunks.
fn document(i: usize) -> String {
    (0..8)
        .map(|p| {
            (0..5)
                .map(|s| format!("Document {i} paragraph {p} sentence {s} says ordinary things about ingestion work today."))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// A `docflow worker` process serving its metrics on a port of its own.
struct Worker {
    child: std::process::Child,
    metrics_port: u16,
}

fn start_worker(
    bin: &str,
    concurrency: usize,
    config: &docflow::platform::config::Config,
    embedder: &str,
) -> Worker {
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(bin)
        .args(["worker", "--queue", &format!("high={concurrency}")])
        .env(
            "DOCFLOW_METRICS_LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .env("DATABASE_URL", &config.database_url)
        .env("AMQP_URL", &config.amqp_url)
        .env("DOCFLOW_DATA_DIR", &config.data_dir)
        // By default docflow's own cost per job: hashed vectors, no model.
        .env("DOCFLOW_EMBEDDER", embedder)
        .env("DOCFLOW_MODEL_DIR", &config.model_dir)
        // DRAIN_WORKER_LOG=sqlx::query=debug counts the worker's statements.
        .env(
            "RUST_LOG",
            std::env::var("DRAIN_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(if std::env::var_os("DRAIN_WORKER_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("docflow worker starts");
    Worker {
        child,
        metrics_port,
    }
}

/// Messages a worker published to `exchange`, from its metrics.
async fn published(worker: &Worker, exchange: &str) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", worker.metrics_port))
        .await
        .expect("worker metrics")
        .text()
        .await
        .expect("metrics text");
    let series = format!("docflow_broker_published_total{{exchange=\"{exchange}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::main]
pub async fn main() {
    let docs = env_usize("DRAIN_DOCS", 2_000);
    let concurrency = env_usize("DRAIN_CONCURRENCY", 8);
    let processes = env_usize("DRAIN_WORKERS", 1).max(1);
    let cluster = std::env::var_os("DRAIN_CLUSTER").is_some_and(|v| v != "0");
    let embedder = std::env::var("DRAIN_EMBEDDER").unwrap_or_else(|_| "local".into());
    let tick_ms = 1000.0 / clk_tck();
    // Taken down after the run, as the cluster tests do.
    let cluster_vhost = cluster.then(common::isolation::ClusterVhost::new);
    let amqp_url = cluster_vhost.as_ref().map(|v| v.url([1, 2, 3]));
    // A web process without workers: uploads, relay.
    // DRAIN_DB_POOL: the web process's connections (the test command's
    // smoke runs share PostgreSQL's 100 with the cluster and browser tests;
    // their workers get DOCFLOW_DB_POOL from the environment).
    let web_pool = u32::try_from(env_usize("DRAIN_DB_POOL", 30)).unwrap_or(30);
    let mut bench = common::start(Roles::web(), move |c| {
        c.db_pool = web_pool;
        if let Some(url) = amqp_url {
            c.amqp_url = url;
        }
    })
    .await;
    let db = bench.iso.database.clone();
    let client = bench.login("alice@acme.test").await;

    let before_upload = commits(&bench.pool, &db).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16 {
        let (client, base) = (client.clone(), bench.base.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..docs).step_by(16) {
                common::upload(
                    &client,
                    &base,
                    format!("drain-{i}.txt"),
                    document(i).into_bytes(),
                )
                .await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("uploader");
    }
    let uploaded_in = started.elapsed();
    // Every message on the queue before the worker starts.
    common::until_outbox_sent(&bench.pool).await;
    let after_upload = commits(&bench.pool, &db).await;
    let config = bench.config.clone();
    // The web process stops; its database and vhost stay until the end.
    bench.shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), &mut bench.handle).await;
    let pool = sqlx::PgPool::connect(&config.database_url)
        .await
        .expect("pool");
    let events_before = count(&pool, "SELECT count(*) FROM job_events").await;

    let drain_commits = commits(&pool, &db).await;
    let (pg0, mq0) = (cpu_of("postgres"), cpu_of("beam.smp"));
    println!("draining: {processes} worker process(es) starting");
    let worker_started = Instant::now();
    // DRAIN_DOCFLOW_BIN runs another build's worker (an A/B of two commits).
    let docflow_bin =
        std::env::var("DRAIN_DOCFLOW_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_docflow").into());
    let mut workers: Vec<Worker> = (0..processes)
        .map(|_| start_worker(&docflow_bin, concurrency, &config, &embedder))
        .collect();
    let started_at = chrono::Utc::now();
    let mut polls = 0i64;
    loop {
        polls += 1;
        let done = count(&pool, "SELECT count(*) FROM jobs WHERE state = 'done'").await;
        if done as usize == docs {
            break;
        }
        for w in &mut workers {
            if let Ok(Some(status)) = w.child.try_wait() {
                panic!("a worker exited during the drain: {status}");
            }
        }
        let failed = count(&pool, "SELECT count(*) FROM jobs WHERE state = 'failed'").await;
        polls += 1;
        assert_eq!(failed, 0, "jobs failed during the drain");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let wall = worker_started.elapsed();
    let worker_cpu: u64 = workers.iter().map(|w| cpu_of_tree(w.child.id())).sum();
    // A process that exited since the first sample (a RabbitMQ node that a
    // cluster test beside this run stopped) took its CPU time with it: the
    // differences below are then a lower bound, never negative.
    let (pg1, mq1) = (cpu_of("postgres"), cpu_of("beam.smp"));
    let mut event_messages = 0.0;
    for w in &workers {
        event_messages += published(w, "docflow.events").await;
    }
    for w in &mut workers {
        let _ = Command::new("kill")
            .args(["-TERM", &w.child.id().to_string()])
            .status();
        let _ = w.child.wait();
    }
    // The bench's own reads: the polls and the two statements around them.
    let drained_commits = commits(&pool, &db).await - drain_commits - polls - 3;
    let events = count(&pool, "SELECT count(*) FROM job_events").await - events_before;
    let chunks = count(&pool, "SELECT count(*) FROM chunks").await;
    let mut to_done: Vec<Duration> = sqlx::query_scalar::<_, f64>(
        "SELECT greatest(extract(epoch FROM finished_at - $1), 0)::float8 FROM jobs",
    )
    .bind(started_at)
    .fetch_all(&pool)
    .await
    .expect("times")
    .into_iter()
    .map(Duration::from_secs_f64)
    .collect();
    to_done.sort();

    let per_job = |ticks: u64| ticks as f64 * tick_ms / docs as f64;
    println!(
        "drain: {docs} text documents of {:.1} chunks, {processes} `docflow worker --queue high={concurrency}` process(es), embedder {embedder}, RabbitMQ {}",
        chunks as f64 / docs as f64,
        if cluster { "3-node cluster" } else { "single node" }
    );
    println!(
        "  uploads: {:.1} s, {:.1} commits per upload",
        uploaded_in.as_secs_f64(),
        (after_upload - before_upload) as f64 / docs as f64
    );
    println!(
        "  drain: {:.1} s, {:.0} jobs/s; time to done p50 {} p99 {}",
        wall.as_secs_f64(),
        docs as f64 / wall.as_secs_f64(),
        common::ms(common::quantile(&to_done, 0.5)),
        common::ms(common::quantile(&to_done, 0.99))
    );
    println!(
        "  per job: {:.1} commits, PostgreSQL {:.2} ms CPU, docflow {:.2} ms CPU, RabbitMQ {:.2} ms CPU, {:.1} events in {:.2} messages",
        drained_commits as f64 / docs as f64,
        per_job(pg1.saturating_sub(pg0)),
        per_job(worker_cpu),
        per_job(mq1.saturating_sub(mq0)),
        events as f64 / docs as f64,
        event_messages / docs as f64
    );
    println!(
        "  per chunk: {:.0} chunks/s, docflow {:.2} ms CPU",
        chunks as f64 / wall.as_secs_f64(),
        worker_cpu as f64 * tick_ms / chunks.max(1) as f64
    );
    if embedder == "minilm" {
        reference(&pool, worker_cpu as f64 * tick_ms / chunks.max(1) as f64).await;
    }
    pool.close().await;
    bench.pool.close().await;
    drop(bench);
    drop(cluster_vhost);
}

/// The drained chunks' texts through the reference, beside the workers'
/// CPU per chunk (`ours_ms`).
async fn reference(pool: &sqlx::PgPool, ours_ms: f64) {
    let Some(python) = common::reference::python() else {
        return;
    };
    let texts: Vec<String> =
        sqlx::query_scalar("SELECT text FROM chunks ORDER BY document_id, chunk_index")
            .fetch_all(pool)
            .await
            .expect("chunk texts");
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let theirs = common::reference::run(&python, &texts, threads, 8);
    println!(
        "  reference (onnxruntime, {threads} threads, batches of 8) on these chunks: {:.0} chunks/s, {:.2} ms CPU per chunk; docflow end to end / reference per CPU: {:.2}x",
        theirs.chunks_per_s,
        theirs.cpu_ms_per_chunk,
        theirs.cpu_ms_per_chunk / ours_ms
    );
}
