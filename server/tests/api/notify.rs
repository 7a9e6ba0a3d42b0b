//! Live notifications: events fan-out over RabbitMQ, SSE with replay, inbox.

use std::time::Duration;

use serde_json::Value;

use crate::fixtures::ALICE;
use crate::{
    fixtures::{prose, WorkerProcess},
    helpers::{get_json, spawn_app, spawn_peer, SseReader, TestApp},
};

async fn db_event_ids(app: &TestApp, job_id: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM job_events WHERE job_id = $1::uuid ORDER BY id")
        .bind(job_id)
        .fetch_all(&app.pool)
        .await
        .expect("events")
}

#[tokio::test]
async fn a_client_on_web_process_b_sees_every_event_of_a_job_uploaded_through_a_in_order() {
    let a = spawn_app().await;
    let b = spawn_peer(&a).await;
    let up = a
        .upload_ok(ALICE, "live.txt", prose("l", 150).into_bytes())
        .await;
    let job_id = up["job_id"].as_str().expect("id").to_string();
    let mut sse = SseReader::open(
        &b.client(ALICE).await,
        &b.url(&format!("/api/jobs/{job_id}/events")),
        None,
    )
    .await;
    let _worker = WorkerProcess::start(&a, "high=1", &[("DOCFLOW_EMBED_BATCH", "2".to_string())]);
    let mut events = Vec::new();
    while let Some(e) = sse.next().await {
        assert_eq!(e.event, "job");
        events.push(e);
    }
    let last = events.last().expect("events");
    assert_eq!(last.data["state"], "done", "the stream ends with done");
    let ids: Vec<i64> = events.iter().map(|e| e.id.expect("id")).collect();
    assert_eq!(
        ids,
        db_event_ids(&a, &job_id).await,
        "every event, in order, once"
    );
    let states: Vec<&str> = events
        .iter()
        .map(|e| e.data["state"].as_str().expect("state"))
        .collect();
    assert_eq!(states.first(), Some(&"pending"));
    assert!(states.contains(&"processing"));
    let progress: Vec<(i64, i64)> = events
        .iter()
        .filter(|e| e.data["step"] == "embed" && e.data["progress"].is_object())
        .map(|e| {
            (
                e.data["progress"]["done"].as_i64().expect("done"),
                e.data["progress"]["total"].as_i64().expect("total"),
            )
        })
        .collect();
    assert!(
        progress.len() >= 3,
        "embed progress arrives batch by batch: {progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "{progress:?}"
    );
    for key in ["job_id", "state", "step", "progress", "message", "at"] {
        assert!(
            last.data.get(key).is_some(),
            "{key} missing in {}",
            last.data
        );
    }
    // Polling tells the same final state.
    assert_eq!(a.job(ALICE, &job_id).await["state"], "done");
}

#[tokio::test]
async fn reconnecting_with_last_event_id_delivers_the_rest_exactly_once() {
    let app = spawn_app().await;
    let up = app
        .upload_ok(ALICE, "resume.txt", prose("q", 150).into_bytes())
        .await;
    let job_id = up["job_id"].as_str().expect("id").to_string();
    let client = app.client(ALICE).await;
    let url = app.url(&format!("/api/jobs/{job_id}/events"));
    let _worker = WorkerProcess::start(&app, "high=1", &[("DOCFLOW_EMBED_BATCH", "1".to_string())]);
    let mut first = SseReader::open(&client, &url, None).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(first.next().await.expect("event").id.expect("id"));
    }
    drop(first);
    let mut second = SseReader::open(&client, &url, seen.last().copied()).await;
    while let Some(e) = second.next().await {
        seen.push(e.id.expect("id"));
    }
    assert_eq!(
        seen,
        db_event_ids(&app, &job_id).await,
        "no gap, no duplicate"
    );
    // A stream opened after the job finished replays and ends at once.
    let mut late = SseReader::open(&client, &url, None).await;
    let mut n = 0;
    while late.next().await.is_some() {
        n += 1;
    }
    assert_eq!(n, seen.len());
}

#[tokio::test]
async fn the_inbox_holds_the_outcome_for_a_user_who_was_away_and_read_marks_are_per_user() {
    let app = spawn_app().await;
    let _worker = WorkerProcess::start(&app, "high=1", &[]);
    let up = app
        .upload_ok(
            ALICE,
            "away.txt",
            b"a short document for the inbox".to_vec(),
        )
        .await;
    let job_id = up["job_id"].as_str().expect("id");
    app.wait_state(ALICE, job_id, "done").await;
    let alice = app.client(ALICE).await;
    let inbox: Value = get_json(&alice, app.url("/api/notifications")).await;
    assert_eq!(inbox["unread"], 1);
    let n = &inbox["notifications"][0];
    assert_eq!(n["kind"], "job_done");
    assert_eq!(n["title"], "away.txt is ready");
    assert_eq!(n["link"], format!("/jobs/{job_id}"));
    assert!(n["read_at"].is_null());
    let id = n["id"].as_str().expect("id");
    // Others cannot see or mark it: the admin of the same tenant, and bob of another.
    for other in ["admin@demo.test", "bob@globex.test"] {
        let c = app.client(other).await;
        let theirs: Value = get_json(&c, app.url("/api/notifications")).await;
        assert_eq!(theirs["unread"], 0, "{other}");
        assert_eq!(
            c.post(app.url(&format!("/api/notifications/{id}/read")))
                .send()
                .await
                .expect("read")
                .status(),
            404,
            "{other}"
        );
    }
    // Unread notifications arrive on the tenant stream too.
    let mut sse = SseReader::open(&alice, &app.url("/api/events"), None).await;
    let first = sse.next().await.expect("event");
    assert_eq!(first.event, "notification");
    assert_eq!(first.data["id"], id);
    assert_eq!(
        alice
            .post(app.url(&format!("/api/notifications/{id}/read")))
            .send()
            .await
            .expect("read")
            .status(),
        204
    );
    let inbox: Value = get_json(&alice, app.url("/api/notifications")).await;
    assert_eq!(inbox["unread"], 0);
    assert!(inbox["notifications"][0]["read_at"].is_string());
}

#[tokio::test]
async fn the_tenant_stream_carries_only_the_callers_tenant_and_other_tenants_jobs_are_404() {
    let app = spawn_app().await;
    let bob = app.client("bob@globex.test").await;
    let alice = app.client(ALICE).await;
    let mut bob_sse = SseReader::open(&bob, &app.url("/api/events"), None).await;
    let mut alice_sse = SseReader::open(&alice, &app.url("/api/events"), None).await;
    let up = app
        .upload_ok(ALICE, "mine.txt", b"alice's private document".to_vec())
        .await;
    let job_id = up["job_id"].as_str().expect("id");
    let _worker = WorkerProcess::start(&app, "high=1", &[]);
    // Alice sees her job through to done, then her notification.
    let mut saw_done = false;
    let mut saw_notification = false;
    while !(saw_done && saw_notification) {
        let e = alice_sse.next().await.expect("event");
        match e.event.as_str() {
            "job" => {
                assert_eq!(e.data["job_id"], job_id);
                saw_done |= e.data["state"] == "done";
            }
            "notification" => saw_notification = true,
            other => panic!("unexpected event {other}"),
        }
    }
    // Bob's stream got nothing of it (only keep-alives would come).
    let nothing = tokio::time::timeout(Duration::from_millis(500), bob_sse.next()).await;
    assert!(
        nothing.is_err(),
        "bob received {:?}",
        nothing.ok().flatten()
    );
    let r = bob
        .get(app.url(&format!("/api/jobs/{job_id}/events")))
        .send()
        .await
        .expect("sse");
    assert_eq!(r.status(), 404);
    let r = app
        .anonymous()
        .get(app.url("/api/events"))
        .send()
        .await
        .expect("sse");
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn events_of_two_jobs_that_commit_out_of_id_order_both_reach_the_tenant_stream() {
    // Event ids come from a sequence but transactions commit in their own
    // order: event n+1 of one job can be published before event n of another.
    let app = spawn_app().await;
    let alice = app.client(ALICE).await;
    let mut sse = SseReader::open(&alice, &app.url("/api/events"), None).await;
    let tenant: uuid::Uuid = sqlx::query_scalar("SELECT tenant_id FROM users WHERE email = $1")
        .bind(ALICE)
        .fetch_one(&app.pool)
        .await
        .expect("tenant");
    let conn = app.amqp().await;
    let ch = conn.create_channel().await.expect("channel");
    let (first, second) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for (id, job_id) in [(1_000_001_i64, first), (1_000_000, second)] {
        let event = serde_json::json!({
            "id": id, "job_id": job_id, "tenant_id": tenant, "user_id": null,
            "state": "processing", "step": "chunk", "progress": null,
            "message": "chunk started", "at": chrono::Utc::now(), "notification": null,
        });
        ch.basic_publish(
            "docflow.events".into(),
            "job.processing".into(),
            lapin::options::BasicPublishOptions::default(),
            event.to_string().as_bytes(),
            lapin::BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
    let mut got = Vec::new();
    let both = async {
        while got.len() < 2 {
            let e = sse.next().await.expect("event");
            if e.event == "job" {
                got.push((e.id, e.data["job_id"].as_str().map(str::to_string)));
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), both).await;
    assert_eq!(
        got,
        vec![
            (Some(1_000_001), Some(first.to_string())),
            (Some(1_000_000), Some(second.to_string())),
        ]
    );
}

#[tokio::test]
async fn a_resume_longer_than_one_replay_batch_arrives_whole_in_order_and_once() {
    // No worker: the job stays pending while its history is written here,
    // 1,200 embed-progress events, more than two replay batches.
    let app = spawn_app().await;
    let up = app
        .upload_ok(ALICE, "long-history.txt", b"a document".to_vec())
        .await;
    let job_id = up["job_id"].as_str().expect("id").to_string();
    sqlx::query(
        "INSERT INTO job_events (job_id, tenant_id, state, step, progress_done, progress_total, message)
         SELECT j.id, j.tenant_id, 'processing', 'embed', n, 1200, 'embedding'
         FROM jobs j, generate_series(1, 1200) AS n WHERE j.id = $1::uuid",
    )
    .bind(&job_id)
    .execute(&app.pool)
    .await
    .expect("history");
    let ids = db_event_ids(&app, &job_id).await;
    assert_eq!(ids.len(), 1201);
    let client = app.client(ALICE).await;
    let url = app.url(&format!("/api/jobs/{job_id}/events"));
    let mut sse = SseReader::open(&client, &url, Some(ids[0])).await;
    let mut seen = Vec::new();
    let all = async {
        while seen.len() < 1200 {
            seen.push(sse.next().await.expect("event").id.expect("id"));
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), all).await;
    assert_eq!(seen, ids[1..], "every missed event, in order, once");
}
