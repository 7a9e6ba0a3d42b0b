//! Outages of the real services: a RabbitMQ node and a PostgreSQL cluster
//! that the test starts on its own ports, stops and starts again, without
//! disturbing the shared servers other tests use.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use docflow::{config::EmbedderKind, Roles};
use uuid::Uuid;

use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_with, Options},
};

const ALICE: &str = "alice@acme.test";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A RabbitMQ node of the test's own: own name, ports and data folder.
struct RabbitNode {
    name: String,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RabbitNode {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = &Uuid::new_v4().simple().to_string()[..8];
        let name = format!("docflow-t-{id}@localhost");
        let port = free_port();
        let dist = free_port();
        let base: PathBuf = dir.path().to_path_buf();
        // Our own listener: the machine's rabbitmq.conf names 5672.
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .expect("config");
        // The server drops to the rabbitmq user, which must own its folders.
        run(Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(&base));
        run(Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &name)
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_PID_FILE", base.join("node.pid"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq.conf")));
        let node = Self {
            name,
            port,
            _dir: dir,
        };
        node.wait_ready(Duration::from_secs(90));
        node
    }

    fn ctl(&self, args: &[&str]) -> String {
        run(Command::new("rabbitmqctl")
            .arg("-q")
            .arg("-n")
            .arg(&self.name)
            .args(args))
    }

    fn wait_ready(&self, timeout: Duration) {
        let started = Instant::now();
        loop {
            let ok = Command::new("rabbitmqctl")
                .args(["-q", "-n", &self.name, "await_startup", "--timeout", "5"])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "RabbitMQ node {} did not start",
                self.name
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn start_app(&self) {
        self.ctl(&["start_app"]);
        self.wait_ready(Duration::from_secs(60));
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name, "stop"])
            .output();
    }
}

/// A PostgreSQL cluster of the test's own, on its own port, trust auth.
struct PgCluster {
    version: String,
    name: String,
    port: u16,
}

impl PgCluster {
    fn start() -> Self {
        let version = std::fs::read_dir("/etc/postgresql")
            .expect("Debian PostgreSQL")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .max_by_key(|v| v.parse::<u32>().unwrap_or(0))
            .expect("a PostgreSQL version");
        let name = format!("dft{}", &Uuid::new_v4().simple().to_string()[..8]);
        let port = free_port();
        run(Command::new("pg_createcluster").args([
            &version,
            &name,
            "-p",
            &port.to_string(),
            "--",
            "--auth=trust",
        ]));
        let c = Self {
            version,
            name,
            port,
        };
        c.start_again();
        c
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/docflow", self.port)
    }

    fn stop(&self) {
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &self.version,
            &self.name,
            "stop",
            "-m",
            "fast",
        ]));
    }

    fn start_again(&self) {
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &self.version,
            &self.name,
            "start",
        ]));
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "cluster did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .output();
    }
}

#[tokio::test]
async fn rabbitmq_stopped_and_started_with_200_jobs_in_flight_loses_none_and_runs_none_twice() {
    let node = tokio::task::spawn_blocking(RabbitNode::start)
        .await
        .expect("node");
    let port = node.port;
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=4"])),
        // The node is the test's own: its default vhost is isolation enough.
        configure: Box::new(move |c| {
            c.amqp_url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
            c.embed_batch = 4;
        }),
        ..Default::default()
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..200 {
        let b = app
            .upload_ok(
                ALICE,
                &format!("flight-{i}.txt"),
                prose(&format!("f{i}"), 30).into_bytes(),
            )
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    // Wait until work is under way, then take the broker away.
    let deadline = Instant::now() + Duration::from_secs(60);
    while app.count("jobs WHERE state = 'done'").await < 10 {
        assert!(
            Instant::now() < deadline,
            "no job finished before the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::spawn_blocking({
        let name = node.name.clone();
        move || run(Command::new("rabbitmqctl").args(["-q", "-n", &name, "stop_app"]))
    })
    .await
    .expect("stop_app");
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503, "not ready while RabbitMQ is down");
    // Uploads still work meanwhile.
    for i in 0..5 {
        let b = app
            .upload_ok(
                ALICE,
                &format!("during-{i}.txt"),
                prose(&format!("d{i}"), 5).into_bytes(),
            )
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = tokio::task::spawn_blocking(move || {
        node.start_app();
        node
    })
    .await
    .expect("start_app");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let done = app.count("jobs WHERE state = 'done'").await;
        if done == ids.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} jobs done after the broker came back",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Each job finished exactly once and its chunks exist once.
    let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT job_id FROM job_events WHERE state = 'done' GROUP BY job_id HAVING count(*) <> 1) x")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(twice, 0, "jobs finished more than once");
    let embedded_twice: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE chunks_embedded <> chunks_total")
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert_eq!(embedded_twice, 0);
    assert_eq!(app.count("dead_letters").await, 0);
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 200);
    app.stop().await;
    drop(node);
}

#[tokio::test]
async fn postgresql_unreachable_means_503_with_nothing_written_and_workers_pause_until_it_is_back()
{
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("cluster");
    let url = cluster.url();
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(1),
        ..Default::default()
    })
    .await;
    let embed_url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        configure: Box::new(move |c| {
            c.database_url = url;
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(embed_url);
            c.lease = Duration::from_secs(2);
        }),
        ..Default::default()
    })
    .await;
    // A job is in the middle of embedding when PostgreSQL goes away.
    let b = app
        .upload_ok(ALICE, "interrupted.txt", prose("i", 20).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id").to_string();
    mock.wait_calls(1).await;
    let blobs_before = app.blob_files().len();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop();
        cluster
    })
    .await
    .expect("stop");
    mock.release();

    let r = app
        .upload(ALICE, "refused.txt", prose("z", 5).into_bytes())
        .await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "unavailable");
    assert_eq!(
        app.blob_files().len(),
        blobs_before,
        "no blob left half-written"
    );
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.start_again();
        cluster
    })
    .await
    .expect("start");
    let job = app.wait_state(ALICE, &job_id, "done").await;
    assert_eq!(job["steps"][0]["attempts"], 1, "parse kept its checkpoint");
    let r = app
        .upload(ALICE, "after.txt", prose("a", 5).into_bytes())
        .await;
    assert_eq!(r.status(), 202, "uploads work again");
    assert_eq!(
        app.count("documents WHERE filename = 'refused.txt'").await,
        0
    );
    app.stop().await;
    drop(cluster);
}
