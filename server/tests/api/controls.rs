//! Operator controls: pausing and resuming a queue. Only admins may; each
//! change is audited; the stats, `/metrics` and every worker follow it; a
//! paused queue's messages wait ready in RabbitMQ and run once, after the
//! resume, even across a worker restart.

use std::{process::Command, time::Duration};

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::{prose, WorkerProcess},
    helpers::{queues, spawn_with, status, Options, TestApp},
};

/// How long a test waits for something that should happen about at once.
const SOON: Duration = Duration::from_secs(30);

async fn post(app: &TestApp, client: &reqwest::Client, path: &str) -> (u16, Value) {
    let r = client.post(app.url(path)).send().await.expect("request");
    let code = r.status().as_u16();
    let text = r.text().await.expect("body");
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Pauses (`true`) or resumes `queue` as the admin, expecting 204.
async fn set_paused(app: &TestApp, queue: &str, pause: bool) {
    let action = if pause { "pause" } else { "resume" };
    let admin = app.client(ADMIN).await;
    let (code, body) = post(app, &admin, &format!("/api/admin/queues/{queue}/{action}")).await;
    assert_eq!(code, 204, "{action} {queue}: {body}");
}

/// The entry of `queue` in `/api/admin/stats`.
async fn queue_stats(app: &TestApp, queue: &str) -> Value {
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    stats["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["queue"] == queue)
        .cloned()
        .unwrap_or_else(|| panic!("no queue {queue} in {stats}"))
}

/// Polls the stats of `queue` until `pred` holds, failing after `timeout`.
async fn wait_stats(
    app: &TestApp,
    queue: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let q = queue_stats(app, queue).await;
        if pred(&q) {
            return q;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{queue}: {what} did not happen in {timeout:?}; last: {q}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `(ready, unacknowledged, consumers)` of a work queue, as RabbitMQ counts
/// them. The broker refreshes these every few seconds, so they lag.
pub fn broker_counts(app: &TestApp, queue: &str) -> (u64, u64, u64) {
    let out = Command::new("timeout")
        .args([
            "60",
            "rabbitmqctl",
            "-q",
            "list_queues",
            "-p",
            &app.iso.vhost,
        ])
        .args([
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
        ])
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl list_queues: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let name = format!("docflow.jobs.{queue}");
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[0] == name).then(|| {
                let n = |s: &str| s.parse::<u64>().expect("a count");
                (n(f[1]), n(f[2]), n(f[3]))
            })
        })
        .unwrap_or_else(|| panic!("no {name} in: {text}"))
}

/// The value of `series` (name with labels) in a scrape, if exposed.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
    })
}

/// Scrapes until `series` has `value`, failing after [`SOON`].
async fn wait_metric(app: &TestApp, series: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let text = reqwest::get(app.url("/metrics"))
            .await
            .expect("scrape")
            .text()
            .await
            .expect("text");
        if sample(&text, series) == Some(value) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} is not {value} after {SOON:?}: {:?}",
            sample(&text, series)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `(action, target, detail)` of the audit log's queue entries, oldest first.
async fn queue_audit(app: &TestApp) -> Vec<(String, String, Value)> {
    sqlx::query_as(
        "SELECT action, target, detail FROM audit_log WHERE action LIKE 'queue.%' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .expect("audit log")
}

/// Uploads `n` documents as bob (free plan: queue `normal`); their job ids.
async fn upload_many(app: &TestApp, n: usize, seed: &str) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let body = app
            .upload_ok(
                BOB,
                &format!("{seed}-{i}.txt"),
                prose(&format!("{seed}{i}"), 12).into_bytes(),
            )
            .await;
        assert_eq!(body["queue"], "normal", "{body}");
        ids.push(body["job_id"].as_str().expect("job id").to_string());
    }
    ids
}

/// Jobs of `ids` that a worker has started.
async fn started(app: &TestApp, ids: &[String]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE id::text = ANY($1) AND (started_at IS NOT NULL OR state <> 'pending')",
    )
    .bind(ids)
    .fetch_one(&app.pool)
    .await
    .expect("count")
}

/// Waits for `ids` to be `done`, then checks each ran exactly once.
async fn all_done_once(app: &TestApp, ids: &[String]) {
    for id in ids {
        let job = app.wait_state(BOB, id, "done").await;
        assert_eq!(job["attempt"], 1, "{job:#}");
        let timeline = app.timeline(id).await;
        let runs = timeline
            .iter()
            .filter(|m| m.starts_with("attempt ") && m.ends_with(" started"))
            .count();
        assert_eq!(runs, 1, "job {id} ran {runs} times: {timeline:?}");
        assert!(
            timeline.iter().any(|m| m == "attempt 1 started"),
            "{timeline:?}"
        );
    }
}

/// Checks, for a couple of seconds, that the paused queue holds `n`
/// messages ready and none delivered, has no consumer, and that no job of
/// `ids` started.
async fn stays_paused(app: &TestApp, ids: &[String]) {
    let n = ids.len() as u64;
    wait_stats(app, "normal", SOON, "the uploads reaching the queue", |q| {
        q["depth"] == n
    })
    .await;
    // RabbitMQ's own counts lag by a few seconds: wait for them to catch up.
    let deadline = tokio::time::Instant::now() + SOON;
    while broker_counts(app, "normal") != (n, 0, 0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "RabbitMQ does not count {n} ready, 0 unacked, 0 consumers: {:?}",
            broker_counts(app, "normal")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            broker_counts(app, "normal"),
            (n, 0, 0),
            "ready, unacked, consumers"
        );
        assert_eq!(queue_stats(app, "normal").await["depth"], n);
        assert_eq!(
            started(app, ids).await,
            0,
            "a job of a paused queue started"
        );
    }
    let q = queue_stats(app, "normal").await;
    assert_eq!(q["paused"], true, "{q}");
    assert_eq!(q["pending"], n, "{q}");
    assert_eq!(q["processing"], 0, "{q}");
}

#[tokio::test]
async fn only_admins_pause_and_resume_a_queue_and_each_change_is_audited_and_shown() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["normal=2"])),
        configure: Box::new(|c| c.sample_interval = Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    let pause = app.url("/api/admin/queues/normal/pause");
    assert_eq!(status(app.anonymous().post(&pause)).await, 401);
    let member = app.client(ALICE).await;
    let (code, body) = post(&app, &member, "/api/admin/queues/normal/pause").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    let admin = app.client(ADMIN).await;
    let (code, body) = post(&app, &admin, "/api/admin/queues/urgent/pause").await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    let (code, _) = post(&app, &admin, "/api/admin/queues/urgent/resume").await;
    assert_eq!(code, 404);
    assert_eq!(queue_stats(&app, "normal").await["paused"], false);
    assert!(
        queue_audit(&app).await.is_empty(),
        "refused calls changed nothing"
    );

    set_paused(&app, "normal", true).await;
    // Pausing again is no error and changes nothing.
    set_paused(&app, "normal", true).await;
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    for q in stats["queues"].as_array().expect("queues") {
        assert_eq!(q["paused"], q["queue"] == "normal", "{q}");
    }
    wait_metric(&app, "docflow_queue_paused{queue=\"normal\"}", 1.0).await;
    wait_metric(&app, "docflow_queue_paused{queue=\"high\"}", 0.0).await;
    // The worker of this process let go of the queue.
    wait_stats(&app, "normal", SOON, "the consumer leaving", |q| {
        q["consumers"] == 0
    })
    .await;

    set_paused(&app, "normal", false).await;
    set_paused(&app, "normal", false).await;
    assert_eq!(queue_stats(&app, "normal").await["paused"], false);
    wait_metric(&app, "docflow_queue_paused{queue=\"normal\"}", 0.0).await;
    wait_stats(&app, "normal", SOON, "the consumer returning", |q| {
        q["consumers"] == 1
    })
    .await;

    let changed = |c: bool| serde_json::json!({ "changed": c });
    assert_eq!(
        queue_audit(&app).await,
        vec![
            ("queue.pause".into(), "normal".into(), changed(true)),
            ("queue.pause".into(), "normal".into(), changed(false)),
            ("queue.resume".into(), "normal".into(), changed(true)),
            ("queue.resume".into(), "normal".into(), changed(false)),
        ]
    );
    let audit: Vec<Value> = app.get_json(ADMIN, "/api/admin/audit").await;
    assert!(
        audit
            .iter()
            .any(|e| e["action"] == "queue.pause" && e["actor"] == ADMIN),
        "{audit:?}"
    );
}

#[tokio::test]
async fn a_paused_queue_keeps_its_messages_ready_and_runs_each_job_once_after_the_resume() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["normal=2"])),
        // A reconciler that would re-publish after a second, were it to
        // take the waiting jobs for lost ones.
        configure: Box::new(|c| c.reconcile_grace = Duration::from_secs(1)),
        ..Default::default()
    })
    .await;
    // The worker runs jobs before the pause.
    let before = upload_many(&app, 1, "before").await;
    all_done_once(&app, &before).await;

    set_paused(&app, "normal", true).await;
    wait_stats(&app, "normal", SOON, "the consumer leaving", |q| {
        q["consumers"] == 0
    })
    .await;
    let ids = upload_many(&app, 20, "paused").await;
    stays_paused(&app, &ids).await;
    let republished: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE reconciled_at IS NOT NULL")
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert_eq!(
        republished, 0,
        "the reconciler took waiting messages for lost ones"
    );

    set_paused(&app, "normal", false).await;
    all_done_once(&app, &ids).await;
    wait_stats(&app, "normal", SOON, "the queue emptying", |q| {
        q["depth"] == 0
    })
    .await;
}

/// The worker follows the pause by a poll, half a second late at most: the
/// pause must not wait for it. Uploads right after the 204, while the
/// consumer is still up and takes their deliveries, start nothing; they
/// wait ready on the queue and run once after the resume.
#[tokio::test]
async fn no_job_starts_after_the_pause_is_acknowledged() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["normal=2"])),
        ..Default::default()
    })
    .await;
    let before = upload_many(&app, 1, "before").await;
    all_done_once(&app, &before).await;
    wait_stats(&app, "normal", SOON, "a consumer on the queue", |q| {
        q["consumers"] == 1
    })
    .await;

    set_paused(&app, "normal", true).await;
    let ids = upload_many(&app, 3, "right-after").await;
    stays_paused(&app, &ids).await;

    set_paused(&app, "normal", false).await;
    all_done_once(&app, &ids).await;
}

#[tokio::test]
async fn a_pause_holds_across_a_worker_restart() {
    let app = spawn_with(Options {
        roles: Roles::web(),
        ..Default::default()
    })
    .await;
    let mut first = WorkerProcess::start(&app, "normal=2", &[]);
    let before = upload_many(&app, 1, "before").await;
    all_done_once(&app, &before).await;

    set_paused(&app, "normal", true).await;
    wait_stats(&app, "normal", SOON, "the consumer leaving", |q| {
        q["consumers"] == 0
    })
    .await;
    assert!(
        first.terminate_and_wait(SOON).is_some(),
        "the worker did not stop: {}",
        first.log_tail()
    );
    let second = WorkerProcess::start(&app, "normal=2", &[]);
    // Wait until the new process is up (its heartbeat is written as it
    // starts, beside its consumers).
    let pid = second.pid() as i32;
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let up: i64 = sqlx::query_scalar("SELECT count(*) FROM workers WHERE pid = $1")
            .bind(pid)
            .fetch_one(&app.pool)
            .await
            .expect("count");
        if up == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new worker did not start: {}",
            second.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids = upload_many(&app, 3, "restart").await;
    stays_paused(&app, &ids).await;

    set_paused(&app, "normal", false).await;
    all_done_once(&app, &ids).await;
}

#[tokio::test]
async fn the_audit_log_filters_by_how_recent_an_entry_is() {
    let app = spawn_with(Options {
        roles: Roles::web(),
        ..Default::default()
    })
    .await;
    set_paused(&app, "normal", true).await;
    set_paused(&app, "normal", false).await;
    // The pause was two days ago.
    sqlx::query("UPDATE audit_log SET at = now() - interval '2 days' WHERE action = 'queue.pause'")
        .execute(&app.pool)
        .await
        .expect("backdate");
    let actions = |entries: Vec<Value>| -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| e["action"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(
        actions(app.get_json(ADMIN, "/api/admin/audit?since=24h").await),
        ["queue.resume"]
    );
    assert_eq!(
        actions(app.get_json(ADMIN, "/api/admin/audit?since=7d").await),
        ["queue.resume", "queue.pause"]
    );
    assert_eq!(
        actions(app.get_json(ADMIN, "/api/admin/audit").await),
        ["queue.resume", "queue.pause"]
    );
    let admin = app.client(ADMIN).await;
    for bad in ["fortnight", "0s", "200y"] {
        let r = admin
            .get(app.url(&format!("/api/admin/audit?since={bad}")))
            .send()
            .await
            .expect("audit");
        assert_eq!(r.status(), 400, "{bad}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], "invalid_since", "{bad}: {body}");
    }
}
