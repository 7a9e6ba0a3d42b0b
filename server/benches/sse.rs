//! SSE fan-out: 1,000 concurrent clients on `/api/events` of one `docflow web`
//! process (a separate OS process, so its memory can be read), events from
//! a `docflow worker` process. Reports delivery latency p50/p99 from the
//! moment the worker records the event (`at`) to each client, and the web
//! process's memory per connection. One upload every 500 ms (embed batches
//! of 8) is the event load. `DOCFLOW_BENCH_CLIENTS` changes the 1,000.
//! Run: `cargo bench -p server --bench benches sse` (after
//! `cargo build --release --bin docflow`).

use crate::common;

use std::{
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const JOBS: usize = 20;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// The string value of `"name":"…"` in a frame's JSON data.
fn field<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("\"{name}\":\"");
    let start = block.find(&key)? + key.len();
    let len = block[start..].find('"')?;
    Some(&block[start..start + len])
}

fn spawn(args: &[&str], env: &[(&str, String)]) -> Child {
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/docflow");
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .env("DOCFLOW_EMBEDDER", "local")
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .expect("run `cargo build --release --bin docflow` first")
}

#[tokio::main]
pub async fn main() {
    // 1,000 unless DOCFLOW_BENCH_CLIENTS says otherwise (to see the floor).
    let clients_n: usize = std::env::var("DOCFLOW_BENCH_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    // The database, vhost and demo users come from an in-process set-up that
    // serves nothing else; the measured web process is separate.
    let setup = common::start(
        docflow::Roles {
            web: true,
            background: false,
            queues: vec![],
            slots: 0,
        },
        |_| {},
    )
    .await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let env = vec![
        ("DATABASE_URL", setup.config.database_url.clone()),
        ("AMQP_URL", setup.config.amqp_url.clone()),
        (
            "DOCFLOW_DATA_DIR",
            setup.config.data_dir.display().to_string(),
        ),
        ("DOCFLOW_LISTEN", format!("127.0.0.1:{port}")),
        ("DOCFLOW_EMBED_BATCH", "8".to_string()),
        // Every simulated client is the same user.
        ("DOCFLOW_SSE_PER_USER", (clients_n + 10).to_string()),
    ];
    let mut web = spawn(&["web"], &env);
    let base = format!("http://127.0.0.1:{port}");
    let probe = reqwest::Client::new();
    for _ in 0..100 {
        if probe
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let login = |email: &'static str| {
        let base = base.clone();
        async move {
            let c = reqwest::Client::builder()
                .cookie_store(true)
                .build()
                .expect("client");
            let r = c
                .post(format!("{base}/api/login"))
                .json(&serde_json::json!({"email": email, "password": common::PASSWORD}))
                .send()
                .await
                .expect("login");
            assert_eq!(r.status(), 200);
            let cookie = r
                .headers()
                .get_all(reqwest::header::SET_COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_string))
                .collect::<Vec<_>>()
                .join("; ");
            (c, cookie)
        }
    };
    let (alice, _) = login("alice@acme.test").await;
    // Log every client in first: login work (argon2) is not stream memory.
    let mut cookies = Vec::with_capacity(clients_n);
    for _ in 0..clients_n {
        cookies.push(login("alice@acme.test").await.1);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kb(web.id());
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut readers = Vec::new();
    for cookie in cookies {
        // One connection per stream, read straight off the socket: the load
        // generator shares the two cores with the server it measures, so it
        // does as little as a browser's network thread would (no HTTP client
        // stack, no JSON parsing, latencies kept per task).
        let connected = connected.clone();
        readers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(JOBS * 16);
            let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            sock.set_nodelay(true).expect("nodelay");
            let request = format!(
                "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nCookie: {cookie}\r\n\r\n"
            );
            sock.write_all(request.as_bytes()).await.expect("request");
            let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
            let mut chunk = vec![0u8; 16 * 1024];
            let mut head_seen = false;
            let mut done_seen = 0;
            loop {
                let n = sock.read(&mut chunk).await.expect("read");
                if n == 0 {
                    return lat;
                }
                let now = Utc::now();
                buf.extend_from_slice(&chunk[..n]);
                if !head_seen {
                    let Some(end) = find(&buf, b"\r\n\r\n") else {
                        continue;
                    };
                    assert!(buf.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf));
                    buf.drain(..end + 4);
                    head_seen = true;
                    connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                // Complete frames end with a blank line; HTTP chunk-size
                // lines between them carry no `"at":"`.
                let Some(last) = rfind(&buf, b"\n\n") else {
                    continue;
                };
                let frames = std::str::from_utf8(&buf[..last + 2]).expect("utf-8");
                for frame in frames.split("\n\n") {
                    if !frame.contains("event: job") {
                        continue;
                    }
                    if let Some(at) = field(frame, "at").and_then(|a| a.parse::<DateTime<Utc>>().ok()) {
                        lat.push((now - at).to_std().unwrap_or_default());
                    }
                    if field(frame, "state") == Some("done") {
                        done_seen += 1;
                    }
                }
                buf.drain(..last + 2);
                if done_seen >= JOBS {
                    return lat;
                }
            }
        }));
    }
    while connected.load(std::sync::atomic::Ordering::SeqCst) < clients_n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_connected = rss_kb(web.id());
    let mut worker = spawn(&["worker", "--queue", "high=2"], &env);
    let started = Instant::now();
    // A steady stream of work: one upload every 500 ms.
    for i in 0..JOBS {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let body = format!("sse benchmark document {i}. ").repeat(200);
        common::upload(&alice, &base, format!("s{i}.txt"), body.into_bytes()).await;
    }
    let mut lat = Vec::new();
    for r in readers {
        lat.extend(
            tokio::time::timeout(Duration::from_secs(300), r)
                .await
                .expect("clients finish")
                .expect("reader"),
        );
    }
    let elapsed = started.elapsed();
    lat.sort();
    let per_conn = (rss_connected.saturating_sub(rss_before)) as f64 / clients_n as f64;
    println!("SSE: {clients_n} clients on /api/events of one web process, {JOBS} jobs, {} events delivered in {:.1} s", lat.len(), elapsed.as_secs_f64());
    println!(
        "  delivery latency (commit → client) p50 {}  p99 {}",
        common::ms(common::quantile(&lat, 0.5)),
        common::ms(common::quantile(&lat, 0.99))
    );
    println!("  web process RSS {rss_before} KB before, {rss_connected} KB with {clients_n} streams open: {per_conn:.1} KB per connection (TCP, HTTP and stream)");
    let _ = worker.kill();
    let _ = web.kill();
    let _ = worker.wait();
    let _ = web.wait();
    setup.stop().await;
}
