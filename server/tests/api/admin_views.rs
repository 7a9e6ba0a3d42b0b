//! What the admin dashboard and job list show and act on: each queue's
//! backlog ETA, each tenant's share of the work, and the count a bulk
//! action's confirmation states (the server functions the job list calls).

use std::time::Duration;

use docflow::{platform::config::EmbedderKind, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::prose,
    helpers::{queues, spawn_peer_with, spawn_with, Options, TestApp},
    mock_embedder::{EmbedBehaviour, MockEmbedder},
};

/// A PDF that the parse step refuses for good: its job is dead-lettered.
const CORRUPT_PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref";

/// The entry of `queue` in `/api/admin/stats`.
fn queue_of<'a>(stats: &'a Value, queue: &str) -> &'a Value {
    stats["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["queue"] == queue)
        .unwrap_or_else(|| panic!("no queue {queue} in {stats}"))
}

/// The entry of `tenant` in `/api/admin/stats`.
fn tenant_of<'a>(stats: &'a Value, tenant: &str) -> &'a Value {
    stats["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no tenant {tenant} in {stats}"))
}

/// Jobs of `queue` that have ended (done, failed or cancelled).
async fn ended(app: &TestApp, queue: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = $1 AND finished_at IS NOT NULL")
        .bind(queue)
        .fetch_one(&app.pool)
        .await
        .expect("count")
}

/// Uploads `n` small documents as `who`; their job ids.
async fn upload_many(app: &TestApp, who: &str, n: usize, seed: &str) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let body = app
            .upload_ok(
                who,
                &format!("{seed}-{i}.txt"),
                prose(&format!("{seed}{i}"), 5).into_bytes(),
            )
            .await;
        ids.push(body["job_id"].as_str().expect("job id").to_string());
    }
    ids
}

#[tokio::test]
async fn a_backlog_without_workers_has_no_eta_and_a_draining_one_clears_at_its_recent_rate() {
    // Each embedding call takes a second: one worker slot drains `normal`
    // slowly enough to be watched.
    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_secs(1)),
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::web(),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
        }),
        ..Default::default()
    })
    .await;
    let ids = upload_many(&app, BOB, 4, "eta").await;

    // No worker: the backlog waits and does not drain.
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    let normal = queue_of(&stats, "normal");
    assert_eq!(normal["pending"], 4, "{normal}");
    assert!(normal["eta_s"].is_null(), "not draining: {normal}");
    // An empty backlog is cleared already.
    assert_eq!(queue_of(&stats, "high")["eta_s"], 0.0, "{stats}");

    // One worker slot: once jobs have ended with some left, the ETA is the
    // backlog at the rate of the last five minutes (ended / 300 s).
    let worker = spawn_peer_with(&app, Roles::worker(queues(&["normal=1"])), |_| {}).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (eta, backlog, drained) = loop {
        let before = ended(&app, "normal").await;
        let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
        let after = ended(&app, "normal").await;
        let q = queue_of(&stats, "normal").clone();
        let backlog = ["pending", "processing", "retrying"]
            .iter()
            .map(|s| q[*s].as_i64().expect("a count"))
            .sum::<i64>();
        // Nothing ended while the stats were read, so they and the count agree.
        if before == after && after >= 1 && backlog >= 1 {
            break (q["eta_s"].as_f64(), backlog, after);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no moment with jobs ended and a backlog left: {q}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let eta = eta.expect("a draining backlog has an ETA");
    assert!(eta.is_finite() && eta > 0.0, "{eta}");
    let expected = backlog as f64 * 300.0 / drained as f64;
    assert!(
        (eta - expected).abs() < 1e-6,
        "{backlog} left, {drained} ended in 5 min: {eta} s, expected {expected} s"
    );

    // Drained: nothing left to clear.
    for id in &ids {
        app.wait_state(BOB, id, "done").await;
    }
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    assert_eq!(queue_of(&stats, "normal")["eta_s"], 0.0, "{stats}");
    worker.stop().await;
}

#[tokio::test]
async fn each_tenant_shows_its_backlog_share_finished_jobs_in_the_window_and_dead_letters() {
    let app = spawn_with(Options {
        roles: Roles::web(),
        ..Default::default()
    })
    .await;
    // With a worker: acme (alice, paid) gets 2 documents done and 1 dead
    // letter, globex (bob, free) 1 done.
    let worker =
        spawn_peer_with(&app, Roles::worker(queues(&["high=1", "normal=1"])), |_| {}).await;
    let mut finished = upload_many(&app, ALICE, 2, "acme").await;
    finished.extend(upload_many(&app, BOB, 1, "globex").await);
    let broken = app
        .upload_ok(ALICE, "broken.pdf", CORRUPT_PDF.to_vec())
        .await;
    let broken = broken["job_id"].as_str().expect("id").to_string();
    for id in &finished {
        app.wait_job(ADMIN, id, Duration::from_secs(60), |j| j["state"] == "done")
            .await;
    }
    app.wait_state(ALICE, &broken, "failed").await;
    worker.stop().await;
    // Without a worker: 1 of acme's and 3 of globex's wait.
    upload_many(&app, ALICE, 1, "acme-waiting").await;
    upload_many(&app, BOB, 3, "globex-waiting").await;

    // The dead-letter keeper records the failed job's message soon.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let stats: Value = app.get_json(ADMIN, "/api/admin/stats?window=1h").await;
        if tenant_of(&stats, "acme")["dead_letters"] == 1 {
            break stats;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dead letter is not counted: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let tenants: Vec<&str> = stats["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .map(|t| t["tenant"].as_str().expect("slug"))
        .collect();
    assert_eq!(tenants, ["acme", "globex"], "every tenant, by slug");
    assert_eq!(
        tenant_of(&stats, "acme"),
        &serde_json::json!({"tenant": "acme", "plan": "paid", "unfinished": 1, "done": 2,
                            "failed": 1, "dead_letters": 1, "backlog_share": 0.25})
    );
    assert_eq!(
        tenant_of(&stats, "globex"),
        &serde_json::json!({"tenant": "globex", "plan": "free", "unfinished": 3, "done": 1,
                            "failed": 0, "dead_letters": 0, "backlog_share": 0.75})
    );

    // Done and failed count within the window; the backlog and dead letters
    // are counted now, whatever the window.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats?window=10ms").await;
    let acme = tenant_of(&stats, "acme");
    assert_eq!(
        (
            &acme["done"],
            &acme["failed"],
            &acme["unfinished"],
            &acme["dead_letters"]
        ),
        (
            &Value::from(0),
            &Value::from(0),
            &Value::from(1),
            &Value::from(1)
        ),
        "{acme}"
    );

    // Members see none of it.
    let r = app
        .client(ALICE)
        .await
        .get(app.url("/api/admin/stats"))
        .send()
        .await
        .expect("stats");
    assert_eq!(r.status(), 403);
}

/// The admin job list's filter as its form fields.
fn filter<'a>(state: &'a str, tenant: &'a str) -> Vec<(&'static str, &'a str)> {
    vec![
        ("query[state]", state),
        ("query[queue]", ""),
        ("query[tenant]", tenant),
        ("query[q]", ""),
        ("query[before]", ""),
    ]
}

#[tokio::test]
async fn the_count_a_bulk_confirmation_states_is_what_the_bulk_action_then_changes() {
    let app = spawn_with(Options {
        roles: Roles::web(),
        ..Default::default()
    })
    .await;
    // Two of globex's jobs fail for good while a worker runs.
    let worker = spawn_peer_with(&app, Roles::worker(queues(&["normal=1"])), |_| {}).await;
    for i in 0..2 {
        let up = app
            .upload_ok(BOB, &format!("broken-{i}.pdf"), CORRUPT_PDF.to_vec())
            .await;
        app.wait_state(BOB, up["job_id"].as_str().expect("id"), "failed")
            .await;
    }
    worker.stop().await;
    // Then three of globex's and two of acme's wait.
    upload_many(&app, BOB, 3, "globex").await;
    upload_many(&app, ALICE, 2, "acme").await;

    let count = |state: &'static str| {
        let app = &app;
        async move {
            let (status, body) = app
                .server_fn(ADMIN, "count_matching", &filter(state, "globex"))
                .await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };
    assert_eq!(
        count("").await,
        serde_json::json!({"cancellable": 3, "retryable": 2, "permanent": 2, "limit": 10_000})
    );
    assert_eq!(count("pending").await["cancellable"], 3);
    assert_eq!(count("pending").await["retryable"], 0);
    // Both failed ones failed for good: the confirmation says a retry fails
    // them again.
    assert_eq!(count("pending").await["permanent"], 0);
    assert_eq!(count("failed").await["permanent"], 2);
    assert_eq!(count("failed").await["retryable"], 2);

    // Only admins may count or act; a bad filter says what is wrong.
    for name in ["count_matching", "retry_matching", "cancel_matching"] {
        let (status, body) = app.server_fn(BOB, name, &filter("", "globex")).await;
        assert_ne!(status, 200, "{name}: {body}");
        assert_eq!(body, "Forbidden", "{name}");
    }
    let (status, body) = app
        .server_fn(ADMIN, "count_matching", &filter("stuck", ""))
        .await;
    assert_ne!(status, 200, "{body}");
    assert!(
        body["Validation"]
            .as_str()
            .is_some_and(|m| m.contains("unknown state `stuck`")),
        "{body}"
    );

    // Retrying the failed ones makes them pending again (no worker runs them).
    let (status, body) = app
        .server_fn(ADMIN, "retry_matching", &filter("failed", "globex"))
        .await;
    assert_eq!((status, body), (200, serde_json::json!(2)));
    assert_eq!(
        count("").await,
        serde_json::json!({"cancellable": 5, "retryable": 0, "permanent": 0, "limit": 10_000})
    );
    // The count the confirmation stated is what is cancelled.
    let (status, body) = app
        .server_fn(ADMIN, "cancel_matching", &filter("", "globex"))
        .await;
    assert_eq!((status, body), (200, serde_json::json!(5)));
    assert_eq!(
        count("").await,
        serde_json::json!({"cancellable": 0, "retryable": 0, "permanent": 0, "limit": 10_000})
    );
    assert_eq!(
        app.count("jobs j JOIN tenants t ON t.id = j.tenant_id WHERE t.slug = 'globex' AND j.state = 'cancelled'")
            .await,
        5
    );
    assert_eq!(
        app.count("jobs j JOIN tenants t ON t.id = j.tenant_id WHERE t.slug = 'acme' AND j.state = 'pending'")
            .await,
        2,
        "the other tenant's jobs stay"
    );
    let actions: Vec<(String, Value)> = sqlx::query_as(
        "SELECT action, detail FROM audit_log WHERE action LIKE 'job.%_matching' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .expect("audit");
    let summary: Vec<(&str, &Value)> = actions
        .iter()
        .map(|(a, d)| (a.as_str(), &d["count"]))
        .collect();
    assert_eq!(
        summary,
        [
            ("job.retry_matching", &Value::from(2)),
            ("job.cancel_matching", &Value::from(5))
        ]
    );
}
