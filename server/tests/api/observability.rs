//! Observability: /metrics and /api/admin/stats agree with what happened;
//! promtool accepts the scrape and the rules; a real Prometheus computes the
//! job latency P99.

use std::{process::Command, time::Duration};

use docflow::{platform::config::EmbedderKind, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE};
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_with, Options, TestApp},
};

/// The value of the sample `series` (name with its labels as exposed).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(|v| v.trim().parse::<f64>().expect("number"))
        })
        .unwrap_or_else(|| panic!("no sample {series}"))
}

/// The entry of `queue` in a `/api/admin/stats` answer.
fn queue_stats<'a>(stats: &'a Value, queue: &str) -> &'a Value {
    stats["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["queue"] == queue)
        .unwrap_or_else(|| panic!("no queue {queue} in {stats}"))
}

async fn scrape(app: &TestApp) -> String {
    let r = reqwest::get(app.url("/metrics")).await.expect("scrape");
    assert_eq!(r.status(), 200);
    r.text().await.expect("text")
}

async fn observed_app(mock: &MockEmbedder) -> TestApp {
    let url = mock.url();
    spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            c.sample_interval = Duration::from_millis(300);
        }),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn metrics_and_stats_agree_with_success_retry_and_dead_letter_paths() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        fail_first: 2,
        ..Default::default()
    })
    .await;
    let app = observed_app(&mock).await;
    // One job that needs two retries, one that succeeds at once, one that is dead.
    let retried = app
        .upload_ok(ALICE, "retried.txt", prose("r", 10).into_bytes())
        .await;
    app.wait_state(ALICE, retried["job_id"].as_str().expect("id"), "done")
        .await;
    let clean = app
        .upload_ok(ALICE, "clean.txt", prose("c", 10).into_bytes())
        .await;
    app.wait_state(ALICE, clean["job_id"].as_str().expect("id"), "done")
        .await;
    let dead = app
        .upload_ok(ALICE, "dead.pdf", b"%PDF-1.4 truncated nonsense".to_vec())
        .await;
    app.wait_state(ALICE, dead["job_id"].as_str().expect("id"), "failed")
        .await;

    let stats = app
        .get_json::<Value>(ADMIN, "/api/admin/stats?window=1h")
        .await;
    assert_eq!(
        stats["retries"],
        serde_json::json!({"0": 2, "1": 0, "2": 1, "3": 0}),
        "{stats:#}"
    );
    let step = |name: &str| {
        stats["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["step"] == name)
            .expect("step")
            .clone()
    };
    assert_eq!(
        (
            step("embed")["attempts"].as_i64(),
            step("embed")["failures"].as_i64()
        ),
        (Some(4), Some(2))
    );
    assert_eq!(
        (
            step("parse")["attempts"].as_i64(),
            step("parse")["failures"].as_i64()
        ),
        (Some(3), Some(1))
    );
    assert!((step("embed")["failure_rate"].as_f64().expect("rate") - 0.5).abs() < 1e-9);
    let high = queue_stats(&stats, "high");
    assert_eq!(high["consumers"], 1, "{high:#}");
    assert_eq!(high["depth"], 0);

    // Wait for a sampler tick that has seen the dead letter.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut text = scrape(&app).await;
    while sample(&text, "docflow_dead_letters") < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "dead-letter gauge never rose"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        text = scrape(&app).await;
    }
    assert_eq!(
        sample(&text, "docflow_dead_letters"),
        stats["dead_letters"].as_f64().expect("n")
    );
    assert_eq!(
        sample(&text, "docflow_job_retries_count"),
        3.0,
        "three finished jobs"
    );
    assert_eq!(
        sample(&text, "docflow_job_retries_sum"),
        2.0,
        "two retries in all"
    );
    assert_eq!(sample(&text, "docflow_job_retries_bucket{le=\"0\"}"), 2.0);
    assert_eq!(
        sample(&text, "docflow_step_runs_total{step=\"embed\"}"),
        4.0
    );
    assert_eq!(
        sample(
            &text,
            "docflow_step_failures_total{kind=\"transient\",step=\"embed\"}"
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            "docflow_step_failures_total{kind=\"permanent\",step=\"parse\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&text, "docflow_embed_requests_total{outcome=\"transient\"}"),
        2.0
    );
    assert_eq!(
        sample(&text, "docflow_embed_requests_total{outcome=\"ok\"}"),
        2.0
    );
    // Every batch is timed, whatever its outcome.
    assert_eq!(sample(&text, "docflow_embed_seconds_count"), 4.0);
    assert_eq!(
        sample(&text, "docflow_uploads_total{outcome=\"accepted\"}"),
        3.0
    );
    assert_eq!(sample(&text, "docflow_jobs{state=\"done\"}"), 2.0);
    assert_eq!(sample(&text, "docflow_jobs{state=\"failed\"}"), 1.0);
    assert_eq!(
        sample(&text, "docflow_job_latency_seconds_count{queue=\"high\"}"),
        2.0
    );
    assert_eq!(
        sample(&text, "docflow_queue_consumers{queue=\"high\"}"),
        1.0
    );
    assert!(text.contains("docflow_http_request_duration_seconds_count{route=\"/api/documents\",status=\"202\"} 3"), "routes are labelled by pattern");
    for name in [
        "queue_depth",
        "queue_unacked",
        "job_age_p99_seconds",
        "outbox_pending",
        "outbox_oldest_seconds",
        "sse_clients",
    ] {
        assert!(
            text.contains(&format!("# HELP docflow_{name} ")),
            "{name} has HELP"
        );
    }
    // The dashboard's series record the dead letter at the sampler's next tick.
    let mut series = Value::Null;
    for _ in 0..50 {
        series = app
            .get_json::<Value>(ADMIN, "/api/admin/series?metric=dead_letters&since=1h")
            .await;
        if series
            .as_array()
            .expect("points")
            .iter()
            .any(|p| p["value"].as_f64() == Some(1.0))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        series
            .as_array()
            .expect("points")
            .iter()
            .any(|p| p["value"].as_f64() == Some(1.0)),
        "{series:?}"
    );
}

#[tokio::test]
async fn promtool_accepts_a_live_scrape_and_the_alert_rules() {
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = observed_app(&mock).await;
    let b = app
        .upload_ok(ALICE, "m.txt", b"metrics please".to_vec())
        .await;
    app.wait_state(ALICE, b["job_id"].as_str().expect("id"), "done")
        .await;
    let text = scrape(&app).await;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (installed by scripts/setup.sh)");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus/alerts.yml"
    );
    let out = Command::new("promtool")
        .args(["check", "rules", rules])
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "promtool check rules: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("7 rules found"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn a_real_prometheus_scrapes_docflow_and_computes_the_job_latency_p99() {
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = observed_app(&mock).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let target = app.url("").trim_start_matches("http://").to_string();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: docflow\n    static_configs:\n      - targets: ['{target}']\n"),
    )
    .expect("config");
    let mut prom = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prometheus runs (installed by scripts/setup.sh)");
    let query =
        "histogram_quantile(0.99, sum by (le) (rate(docflow_job_latency_seconds_bucket[30s])))";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    let value = loop {
        // Keep jobs finishing while Prometheus starts and scrapes.
        i += 1;
        let b = app
            .upload_ok(
                ALICE,
                &format!("p{i}.txt"),
                prose(&format!("p{i}"), 5).into_bytes(),
            )
            .await;
        app.wait_state(ALICE, b["job_id"].as_str().expect("id"), "done")
            .await;
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/api/v1/query"))
            .query(&[("query", query)])
            .send()
            .await;
        if let Ok(r) = r {
            let v: Value = r.json().await.unwrap_or_default();
            if let Some(s) = v["data"]["result"][0]["value"][1].as_str() {
                if let Ok(x) = s.parse::<f64>() {
                    if x.is_finite() {
                        break x;
                    }
                }
            }
        }
        if tokio::time::Instant::now() > deadline {
            let _ = prom.kill();
            panic!("Prometheus gave no P99 for {query}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = prom.kill();
    let _ = prom.wait();
    // The jobs' own latencies, enqueue to done, as PostgreSQL recorded
    // them (the worker observes a few milliseconds later: 50 ms of slack).
    let (fastest, slowest): (f64, f64) = sqlx::query_as(
        "SELECT min(extract(epoch FROM finished_at - enqueued_at))::float8 - 0.05,
                max(extract(epoch FROM finished_at - enqueued_at))::float8 + 0.05
         FROM jobs WHERE state = 'done'",
    )
    .fetch_one(&app.pool)
    .await
    .expect("latencies");
    // histogram_quantile interpolates inside the bucket the 99th
    // percentile falls in: between the bucket below the fastest job and
    // the bucket above the slowest.
    let exposition = app
        .anonymous()
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let buckets: Vec<f64> = exposition
        .lines()
        .filter(|l| l.starts_with("docflow_job_latency_seconds_bucket{"))
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect();
    assert!(buckets.len() > 5, "the latency buckets: {buckets:?}");
    let low = buckets
        .iter()
        .copied()
        .filter(|b| *b < fastest)
        .fold(0.0, f64::max);
    let high = buckets
        .iter()
        .copied()
        .find(|b| *b >= slowest)
        .unwrap_or(f64::INFINITY);
    assert!(
        (low..=high).contains(&value),
        "P99 job latency {value} s, outside [{low}, {high}] of the jobs' latencies \
         ({:.3} to {:.3} s)",
        fastest + 0.05,
        slowest - 0.05
    );
    // The buckets are coarse for jobs this fast; the histogram's count and
    // sum are not: every done job observed once, with its own latency.
    let total = |name: &str| -> f64 {
        exposition
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let (done, latency_sum): (i64, f64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(extract(epoch FROM finished_at - enqueued_at)), 0)::float8
         FROM jobs WHERE state = 'done'",
    )
    .fetch_one(&app.pool)
    .await
    .expect("latency sum");
    assert_eq!(
        total("docflow_job_latency_seconds_count"),
        done as f64,
        "one observation per done job"
    );
    let observed = total("docflow_job_latency_seconds_sum");
    // The worker observes after its commit (the row's `finished_at` is its
    // transaction's start): later by a commit, under 100 ms on a busy machine.
    assert!(
        observed >= latency_sum - 0.001 * done as f64
            && observed <= latency_sum + 0.1 * done as f64,
        "latencies observed {observed:.3} s in all, recorded {latency_sum:.3} s for {done} jobs"
    );
}

#[tokio::test]
async fn stats_count_the_backlog_and_report_its_p99_and_oldest_age() {
    // No workers: 201 jobs wait on `normal`, enqueued 10 s, 20 s, … 2010 s ago.
    let app = spawn_with(Options::default()).await;
    sqlx::query(
        "WITH d AS (
             INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes, sha256, pages, blob_key)
             SELECT gen_random_uuid(), u.tenant_id, u.id, 'waiting-' || g || '.txt', 'text/plain', 10,
                    decode(md5(g::text) || md5(g::text), 'hex'), 1, 'documents/x/original'
             FROM generate_series(1, 201) g, (SELECT id, tenant_id FROM users WHERE email = $1) u
             RETURNING id, tenant_id, filename)
         INSERT INTO jobs (id, tenant_id, document_id, queue, state, enqueued_at)
         SELECT gen_random_uuid(), d.tenant_id, d.id, 'normal',
                (CASE WHEN n % 3 = 0 THEN 'retrying' ELSE 'pending' END)::job_state,
                now() - n * interval '10 seconds'
         FROM d, LATERAL (SELECT substring(d.filename FROM '[0-9]+')::int AS n) g",
    )
    .bind(ALICE)
    .execute(&app.pool)
    .await
    .expect("backlog");
    let stats = app.get_json::<Value>(ADMIN, "/api/admin/stats").await;
    let normal = queue_stats(&stats, "normal");
    assert_eq!(normal["pending"], 134, "{normal}");
    assert_eq!(normal["retrying"], 67, "{normal}");
    let oldest = normal["oldest_age_s"].as_f64().expect("oldest");
    let p99 = normal["age_p99_s"].as_f64().expect("p99");
    // 99 % of the 201 ages are at most 1990 s (the third oldest).
    assert!((2010.0..2015.0).contains(&oldest), "oldest {oldest}");
    assert!((1990.0..1995.0).contains(&p99), "p99 {p99}");
    let high = queue_stats(&stats, "high");
    assert_eq!(high["age_p99_s"], 0.0);
    assert_eq!(high["pending"], 0);
}
