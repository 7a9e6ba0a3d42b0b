//! Failure handling: permanent failures, retries with backoff, dead letters,
//! re-enqueue and discard by admins.

use std::time::Duration;

use docflow::{platform::config::EmbedderKind, Roles};
use lapin::{options::BasicPublishOptions, BasicProperties};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE};
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{get_json, queues, spawn_with, status, Options, TestApp},
};

async fn app_with(mock: Option<&MockEmbedder>, delays: Vec<Duration>) -> TestApp {
    app_configured(mock, delays, &["high=2", "normal=1"], |_| {}).await
}

/// A docflow with workers for `queues`, these retry delays, the mock as
/// its embedding endpoint (when given), and whatever `more` sets.
async fn app_configured(
    mock: Option<&MockEmbedder>,
    delays: Vec<Duration>,
    queues_spec: &[&str],
    more: impl FnOnce(&mut docflow::platform::config::Config) + Send + 'static,
) -> TestApp {
    let url = mock.map(MockEmbedder::url);
    spawn_with(Options {
        roles: Roles::all(queues(queues_spec)),
        configure: Box::new(move |c| {
            c.retry_delays = docflow::platform::config::RetryDelays(delays);
            if let Some(url) = url {
                c.embedder = EmbedderKind::Openai;
                c.embed_url = Some(url);
            }
            more(c);
        }),
        ..Default::default()
    })
    .await
}

async fn get(app: &TestApp, email: &str, path: &str) -> reqwest::Response {
    app.client(email)
        .await
        .get(app.url(path))
        .send()
        .await
        .expect("request")
}

async fn dead_letters(app: &TestApp) -> Vec<Value> {
    let r = get(app, ADMIN, "/api/admin/dead-letters").await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

async fn wait_dead_letters(app: &TestApp, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let dl = dead_letters(app).await;
        if dl.len() >= n {
            return dl;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} dead letters",
            dl.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An admin's click on Re-enqueue for one dead letter.
async fn requeue(admin: &reqwest::Client, app: &TestApp, dead_letter: &Value) -> reqwest::Response {
    let id = dead_letter["id"].as_str().expect("dead letter id");
    admin
        .post(app.url(&format!("/api/admin/dead-letters/{id}/requeue")))
        .send()
        .await
        .expect("requeue")
}

async fn stats(app: &TestApp) -> Value {
    let r = get(app, ADMIN, "/api/admin/stats?window=1h").await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

#[tokio::test]
async fn a_corrupt_pdf_becomes_a_dead_letter_within_seconds_without_retries() {
    let app = app_with(None, vec![Duration::from_secs(1); 3]).await;
    let started = std::time::Instant::now();
    let b = app
        .upload_ok(
            ALICE,
            "broken.pdf",
            b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref".to_vec(),
        )
        .await;
    let job_id = b["job_id"].as_str().expect("id");
    let job = app.wait_state(ALICE, job_id, "failed").await;
    assert_eq!(job["attempt"], 1, "no retries for a permanent error");
    assert!(
        job["last_error"]
            .as_str()
            .expect("error")
            .contains("PDF is damaged"),
        "{job:#}"
    );
    // The code, not the wording, is what clients and the UI act on.
    assert_eq!(job["last_error_code"], "damaged", "{job:#}");
    assert_eq!(job["steps"][0]["state"], "failed");
    let dl = wait_dead_letters(&app, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(dl[0]["job_id"], job_id);
    assert_eq!(dl[0]["reason"], "permanent");
    assert_eq!(dl[0]["tenant"], "acme");
    assert_eq!(dl[0]["filename"], "broken.pdf");
    assert_eq!(dl[0]["queue"], "high", "named as on the dashboard");
    assert_eq!(dl[0]["attempts"], 1);
    assert!(dl[0]["error"]
        .as_str()
        .expect("error")
        .contains("PDF is damaged"));
    let s = stats(&app).await;
    assert_eq!(s["dead_letters"], 1);
    assert_eq!(s["retries"]["0"], 1);
    // The uploader's inbox says so.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM notifications WHERE kind = 'job_failed'")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(n, 1);
}

#[tokio::test]
async fn an_endpoint_that_answers_503_twice_then_works_finishes_on_attempt_3() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        fail_first: 2,
        ..Default::default()
    })
    .await;
    let app = app_with(Some(&mock), vec![Duration::from_millis(300); 3]).await;
    let b = app
        .upload_ok(ALICE, "flaky.txt", prose("f", 20).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id");
    // While it waits, the job says when it runs next.
    let retrying = app
        .wait_job(ALICE, job_id, Duration::from_secs(30), |j| {
            j["state"] == "retrying" || j["state"] == "done"
        })
        .await;
    if retrying["state"] == "retrying" {
        assert!(retrying["next_attempt_at"].is_string(), "{retrying:#}");
        assert!(retrying["last_error"]
            .as_str()
            .expect("error")
            .contains("503"));
        assert_eq!(retrying["last_error_code"], "temporary", "{retrying:#}");
    }
    let job = app.wait_state(ALICE, job_id, "done").await;
    assert!(
        job["last_error_code"].is_null(),
        "a finished job carries no failure: {job:#}"
    );
    assert_eq!(job["attempt"], 3);
    assert_eq!(job["steps"][2]["attempts"], 3, "embed ran three times");
    assert_eq!(job["steps"][0]["attempts"], 1, "parse was not repeated");
    assert_eq!(mock.calls(), 3);
    let s = stats(&app).await;
    assert_eq!(s["retries"]["2"], 1, "{s:#}");
    let embed = s["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|x| x["step"] == "embed")
        .expect("embed")
        .clone();
    assert_eq!(
        (embed["attempts"].as_i64(), embed["failures"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(s["dead_letters"], 0);
}

#[tokio::test]
async fn a_job_out_of_retries_is_dead_and_an_admin_requeue_finishes_it_without_reparsing() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    let app = app_with(Some(&mock), vec![Duration::from_millis(200); 3]).await;
    let b = app
        .upload_ok(ALICE, "doomed.txt", prose("x", 40).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id");
    let job = app.wait_state(ALICE, job_id, "failed").await;
    assert_eq!(job["attempt"], 4, "first run and three retries");
    let dl = wait_dead_letters(&app, 1).await;
    assert_eq!(dl[0]["reason"], "exhausted");
    assert_eq!(dl[0]["attempts"], 4);
    assert!(dl[0]["error"].as_str().expect("error").contains("503"));

    // The cause is fixed; the admin re-enqueues.
    mock.set(|b| b.always_fail = false);
    let c = app.client(ADMIN).await;
    let r = requeue(&c, &app, &dl[0]).await;
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        serde_json::json!({"job_id": job_id, "state": "pending"})
    );
    let job = app.wait_state(ALICE, job_id, "done").await;
    // The retry budget was reset; the attempts count on, as the steps count them.
    assert_eq!(
        job["attempt"], 5,
        "four runs, then one after the re-enqueue"
    );
    assert_eq!(job["steps"][0]["attempts"], 1, "parse not re-run");
    assert_eq!(job["steps"][1]["attempts"], 1, "chunk not re-run");
    assert_eq!(job["steps"][2]["attempts"], 5, "embed resumed");
    assert!(
        dead_letters(&app).await.is_empty(),
        "the dead letter left the list"
    );
    // A second re-enqueue of the same dead letter conflicts.
    let r = requeue(&c, &app, &dl[0]).await;
    assert_eq!(r.status(), 409);
    let audit: Vec<Value> = app.get_json(ADMIN, "/api/admin/audit").await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["action"], "dead_letter.requeue");
    assert_eq!(audit[0]["actor"], ADMIN);
}

#[tokio::test]
async fn bulk_requeue_and_discard_resolve_dead_letters_with_an_audit_trail() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    // No retries: the first transient failure is final.
    let app = app_with(Some(&mock), vec![]).await;
    for i in 0..4 {
        app.upload_ok(
            ALICE,
            &format!("bulk-{i}.txt"),
            prose(&format!("b{i}"), 10).into_bytes(),
        )
        .await;
    }
    let dl = wait_dead_letters(&app, 4).await;
    mock.set(|b| b.always_fail = false);
    let ids: Vec<&str> = dl
        .iter()
        .take(3)
        .map(|d| d["id"].as_str().expect("id"))
        .collect();
    let c = app.client(ADMIN).await;
    let r = c
        .post(app.url("/api/admin/dead-letters/requeue"))
        .json(&serde_json::json!({"ids": ids}))
        .send()
        .await
        .expect("bulk");
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["requeued"].as_array().expect("requeued").len(), 3);
    for d in dl.iter().take(3) {
        app.wait_state(ALICE, d["job_id"].as_str().expect("job"), "done")
            .await;
    }
    let last = dl[3]["id"].as_str().expect("id");
    let r = c
        .post(app.url(&format!("/api/admin/dead-letters/{last}/discard")))
        .send()
        .await
        .expect("discard");
    assert_eq!(r.status(), 204);
    assert!(dead_letters(&app).await.is_empty());
    assert_eq!(
        app.job(ALICE, dl[3]["job_id"].as_str().expect("job")).await["state"],
        "failed",
        "a discarded job stays failed"
    );
    let r = c
        .post(app.url(&format!("/api/admin/dead-letters/{last}/discard")))
        .send()
        .await
        .expect("discard");
    assert_eq!(r.status(), 409);
    let audit: Vec<Value> = app.get_json(ADMIN, "/api/admin/audit").await;
    assert_eq!(
        audit
            .iter()
            .filter(|a| a["action"] == "dead_letter.requeue")
            .count(),
        3
    );
    assert_eq!(
        audit
            .iter()
            .filter(|a| a["action"] == "dead_letter.discard")
            .count(),
        1
    );
}

#[tokio::test]
async fn members_get_403_and_anonymous_callers_401_on_every_admin_endpoint() {
    let app = app_with(None, vec![]).await;
    let member = app.client(ALICE).await;
    let anon = app.anonymous();
    let id = uuid::Uuid::nil();
    let gets = [
        "/api/admin/stats",
        "/api/admin/jobs",
        "/api/admin/dead-letters",
        "/api/admin/workers",
        "/api/admin/audit",
    ];
    let posts = [
        format!("/api/admin/dead-letters/{id}/requeue"),
        format!("/api/admin/dead-letters/{id}/discard"),
        "/api/admin/dead-letters/requeue".to_string(),
    ];
    for p in gets {
        assert_eq!(status(member.get(app.url(p))).await, 403, "{p}");
        assert_eq!(status(anon.get(app.url(p))).await, 401, "{p}");
    }
    for p in &posts {
        let r = member
            .post(app.url(p))
            .json(&serde_json::json!({"ids": [id]}))
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 403, "{p}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["code"], "forbidden");
        let anonymous_post = anon
            .post(app.url(p))
            .json(&serde_json::json!({"ids": [id]}));
        assert_eq!(status(anonymous_post).await, 401, "{p}");
    }
    // The admin gets a 404 for an unknown dead letter, not a 500.
    let admin = app.client(ADMIN).await;
    assert_eq!(status(admin.post(app.url(&posts[0]))).await, 404);
    // Admin job listing spans tenants.
    app.upload_ok("bob@globex.test", "g.txt", b"globex text".to_vec())
        .await;
    app.upload_ok(ALICE, "a.txt", b"acme text".to_vec()).await;
    let all: Value = get_json(&admin, app.url("/api/admin/jobs?limit=10")).await;
    assert_eq!(all["jobs"].as_array().expect("jobs").len(), 2);
    // The tenant filter takes a slug or its start, in any case.
    for tenant in ["globex", "glo", "GLOB"] {
        let globex: Value =
            get_json(&admin, app.url(&format!("/api/admin/jobs?tenant={tenant}"))).await;
        assert_eq!(globex["jobs"][0]["filename"], "g.txt", "{tenant}");
        assert_eq!(
            globex["jobs"].as_array().expect("jobs").len(),
            1,
            "{tenant}"
        );
    }
    let none: Value = get_json(&admin, app.url("/api/admin/jobs?tenant=lobex")).await;
    assert_eq!(
        none["jobs"],
        serde_json::json!([]),
        "a slug's middle matches nothing"
    );
}

#[tokio::test]
async fn a_malformed_message_is_recorded_as_a_dead_letter() {
    let app = app_with(None, vec![]).await;
    let conn = app.amqp().await;
    let ch = conn.create_channel().await.expect("channel");
    docflow::broker::declare_topology(&ch)
        .await
        .expect("topology");
    ch.basic_publish(
        "docflow.jobs".into(),
        "normal".into(),
        BasicPublishOptions::default(),
        b"{not json",
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let dl = wait_dead_letters(&app, 1).await;
    assert_eq!(dl[0]["reason"], "malformed");
    assert!(dl[0]["job_id"].is_null());
    assert_eq!(dl[0]["queue"], "normal", "named as on the dashboard");
    // It cannot be re-enqueued, only discarded.
    let c = app.client(ADMIN).await;
    let r = requeue(&c, &app, &dl[0]).await;
    assert_eq!(r.status(), 409);
    let workers: Vec<Value> = app.get_json(ADMIN, "/api/admin/workers").await;
    assert_eq!(workers.len(), 1, "this process's worker group is alive");
    assert!(workers[0]["queues"]
        .as_str()
        .expect("queues")
        .contains("high=2"));
}

#[tokio::test]
async fn a_step_past_its_deadline_is_abandoned_and_counts_as_a_failed_attempt() {
    // Every embedding call takes 3 s; a step may take 1 s.
    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let app = app_configured(
        Some(&mock),
        vec![Duration::from_millis(200); 2],
        &["high=1"],
        |c| c.step_timeout = Duration::from_secs(1),
    )
    .await;
    let b = app
        .upload_ok(ALICE, "slow-provider.txt", prose("d", 20).into_bytes())
        .await;
    let job = app
        .wait_state(ALICE, b["job_id"].as_str().expect("id"), "failed")
        .await;
    assert_eq!(
        job["last_error"], "embed: the embed step did not finish within its 1s deadline",
        "{job:#}"
    );
    assert_eq!(job["last_error_code"], "temporary", "{job:#}");
    assert_eq!(job["attempt"], 3, "one run and two retries");
    assert_eq!(job["steps"][2]["attempts"], 3);
    let took = job["steps"][2]["duration_ms"].as_i64().expect("duration");
    assert!(took < 2_000, "the last embed run was cut at {took} ms");
    assert_eq!(wait_dead_letters(&app, 1).await[0]["reason"], "exhausted");
}
