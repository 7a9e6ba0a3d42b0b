//! Soak: 1,000 jobs through three `docflow worker` processes that are killed
//! (SIGKILL) at random and restarted, plus one restart of RabbitMQ (a node
//! of the benchmark's own). Reports jobs lost (must be 0), jobs processed
//! twice (must be 0) and extra embedding calls per kill.
//! Run: `cargo build --release --bin docflow && cargo bench -p server --bench benches soak`.

use crate::common;
use crate::{mock_embedder, services};

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use docflow::Roles;
use rand::Rng;

const JOBS: usize = 1_000;
const WORKERS: usize = 3;
const BATCH: usize = 4;

fn worker(env: &[(String, String)]) -> Child {
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/docflow");
    let mut cmd = Command::new(bin);
    cmd.args(["worker", "--queue", "high=4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .expect("run `cargo build --release --bin docflow` first")
}

#[tokio::main]
pub async fn main() {
    let node = tokio::task::spawn_blocking(services::RabbitNode::start)
        .await
        .expect("node");
    let mock = mock_embedder::MockEmbedder::start(mock_embedder::EmbedBehaviour {
        delay: Some(Duration::from_millis(60)),
        ..Default::default()
    })
    .await;
    let amqp = format!("amqp://guest:guest@127.0.0.1:{}/%2f", node.port);
    let embed_url = mock.url();
    let bench = common::start(
        Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        {
            let amqp = amqp.clone();
            move |c| {
                c.amqp_url = amqp;
                c.lease = Duration::from_secs(3);
                // Kills here are the bench's doing, not the documents': a
                // job caught by two of them must still finish, not be
                // dead-lettered as a poison pill.
                c.max_crashes = 1_000;
            }
        },
    )
    .await;
    let env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), bench.config.database_url.clone()),
        ("AMQP_URL".into(), amqp),
        (
            "DOCFLOW_DATA_DIR".into(),
            bench.config.data_dir.display().to_string(),
        ),
        ("DOCFLOW_EMBEDDER".into(), "openai".into()),
        ("DOCFLOW_EMBED_URL".into(), embed_url),
        // The stand-in endpoint answers with docflow's hashed vectors.
        ("DOCFLOW_EMBED_MODEL".into(), "docflow-mock".into()),
        ("DOCFLOW_EMBED_DIMS".into(), "384".into()),
        ("DOCFLOW_EMBED_BATCH".into(), BATCH.to_string()),
        ("DOCFLOW_LEASE".into(), "3s".into()),
        ("RUST_LOG".into(), "error".into()),
    ];
    let mut workers: Vec<Child> = (0..WORKERS).map(|_| worker(&env)).collect();
    let client = bench.login("alice@acme.test").await;
    let started = Instant::now();
    // Upload while the workers run, so kills land from the first minute on.
    let uploader = {
        let client = client.clone();
        let base = bench.base.clone();
        tokio::spawn(async move {
            for i in 0..JOBS {
                let body = format!("Soak document {i}. ").repeat(150 + (i % 7) * 40);
                common::upload(&client, &base, format!("soak-{i}.txt"), body.into_bytes()).await;
            }
        })
    };
    let mut kills = 0usize;
    let mut restarted_broker = false;
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state IN ('done', 'failed')")
                .fetch_one(&bench.pool)
                .await
                .expect("count");
        if done as usize == JOBS && uploader.is_finished() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {JOBS} jobs finished"
        );
        tokio::time::sleep(Duration::from_millis(
            rand::thread_rng().gen_range(1500..4000),
        ))
        .await;
        if !restarted_broker && done as usize > JOBS / 3 {
            restarted_broker = true;
            let name = node.name.clone();
            tokio::task::spawn_blocking(move || {
                services::run(Command::new("rabbitmqctl").args(["-q", "-n", &name, "stop_app"]))
            })
            .await
            .expect("stop");
            tokio::time::sleep(Duration::from_secs(3)).await;
            let name = node.name.clone();
            tokio::task::spawn_blocking(move || {
                services::run(Command::new("rabbitmqctl").args(["-q", "-n", &name, "start_app"]))
            })
            .await
            .expect("start");
            continue;
        }
        let victim = rand::thread_rng().gen_range(0..WORKERS);
        let _ = workers[victim].kill();
        let _ = workers[victim].wait();
        kills += 1;
        workers[victim] = worker(&env);
    }
    let wall = started.elapsed();
    let lost: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state <> 'done'")
        .fetch_one(&bench.pool)
        .await
        .expect("count");
    let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT job_id FROM job_events WHERE state = 'done' GROUP BY job_id HAVING count(*) > 1) x")
        .fetch_one(&bench.pool)
        .await
        .expect("count");
    let batches: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum(ceil(chunks_total::float8 / {BATCH})), 0)::bigint FROM jobs"
    ))
    .fetch_one(&bench.pool)
    .await
    .expect("batches");
    let calls = mock.calls() as i64;
    println!("soak: {JOBS} jobs, {WORKERS} worker processes, {kills} SIGKILLs, broker restarted: {restarted_broker}, {:.0} s", wall.as_secs_f64());
    println!("  jobs lost {lost}  jobs processed twice {twice}");
    println!(
        "  embedding calls {calls} for {batches} batches: {} extra, {:.2} per kill",
        calls - batches,
        (calls - batches) as f64 / (kills.max(1)) as f64
    );
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    bench.stop().await;
    drop(node);
}
