//! Acting on jobs and documents: cancel (single and in bulk), retry (now,
//! and after failure), delete a document. Who may act: a member on their
//! tenant's, an admin on any; another tenant's is not found.

use std::time::Duration;

use docflow::{platform::config::EmbedderKind, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::{markdown, prose},
    helpers::{queues, spawn_with, Options, SseReader, TestApp},
    mock_embedder::{EmbedBehaviour, MockEmbedder},
};

/// A docflow that accepts uploads but runs no job.
async fn without_workers() -> TestApp {
    spawn_with(Options {
        roles: Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        ..Default::default()
    })
    .await
}

async fn post(app: &TestApp, who: &str, path: &str) -> (u16, Value) {
    let r = app
        .client(who)
        .await
        .post(app.url(path))
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn audit_actions(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT action FROM audit_log ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .expect("audit")
}

/// An administrator's cancel is news to the uploader: a notice in the
/// inbox, live on their stream too, that says who cancelled it and where
/// it stopped; the job itself says where it stopped.
#[tokio::test]
async fn a_job_cancelled_by_an_administrator_tells_its_uploader_who_and_where() {
    let app = without_workers().await;
    let up = app
        .upload_ok(BOB, "quarterly.txt", prose("quarterly", 20).into_bytes())
        .await;
    let id = up["job_id"].as_str().expect("id");
    let mut live = SseReader::open(&app.client(BOB).await, &app.url("/api/events"), None).await;

    let (status, body) = post(&app, ADMIN, &format!("/api/jobs/{id}/cancel")).await;
    assert_eq!(status, 202, "{body}");
    let notice = loop {
        let frame = live.next().await.expect("the stream goes on");
        if frame.event == "notification" {
            break frame.data;
        }
        assert_eq!(frame.event, "job", "{:?}", frame.data);
    };
    assert_eq!(notice["kind"], "job_cancelled", "{notice}");
    assert_eq!(notice["title"], "quarterly.txt was cancelled");
    assert_eq!(
        notice["body"],
        "Cancelled by an administrator before it started: it is not searchable. Upload it again to have it processed."
    );
    assert_eq!(notice["link"], format!("/jobs/{id}"));
    let inbox: Value = app.get_json(BOB, "/api/notifications").await;
    assert_eq!(inbox["unread"], 1, "{inbox}");
    assert_eq!(inbox["notifications"][0]["id"], notice["id"], "{inbox}");
    // The administrator's own inbox stays theirs.
    let admin_inbox: Value = app.get_json(ADMIN, "/api/notifications").await;
    assert_eq!(admin_inbox["unread"], 0, "{admin_inbox}");
    let timeline = app.timeline(id).await;
    assert_eq!(
        timeline.last().map(String::as_str),
        Some("cancelled by an administrator")
    );
}

#[tokio::test]
async fn a_pending_job_is_cancelled_by_its_tenant_live_and_never_runs() {
    let app = without_workers().await;
    let up = app
        .upload_ok(BOB, "cancel-me.txt", prose("cancel", 20).into_bytes())
        .await;
    let id = up["job_id"].as_str().expect("id");
    let mut live = SseReader::open(
        &app.client(BOB).await,
        &app.url(&format!("/api/jobs/{id}/events")),
        None,
    )
    .await;
    assert_eq!(
        live.next().await.expect("the queued event").data["state"],
        "pending"
    );

    // Another tenant's job is not there; an anonymous caller must log in.
    assert_eq!(
        post(&app, ALICE, &format!("/api/jobs/{id}/cancel")).await.0,
        404
    );
    let anon = app
        .anonymous()
        .post(app.url(&format!("/api/jobs/{id}/cancel")))
        .send()
        .await
        .expect("post");
    assert_eq!(anon.status(), 401);

    let (status, body) = post(&app, BOB, &format!("/api/jobs/{id}/cancel")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"job_id": id, "state": "cancelled"})
    );
    let event = live.next().await.expect("the cancel, live");
    assert_eq!(event.data["state"], "cancelled");
    assert_eq!(event.data["message"], "cancelled by its uploader");
    assert!(live.next().await.is_none(), "a cancelled job's stream ends");

    let job = app.job(BOB, id).await;
    assert_eq!(job["state"], "cancelled");
    assert!(job["finished_at"].is_string());
    // Their own cancel: nothing to tell them.
    let inbox: Value = app.get_json(BOB, "/api/notifications").await;
    assert_eq!(inbox["notifications"], serde_json::json!([]), "{inbox}");
    let (status, body) = post(&app, BOB, &format!("/api/jobs/{id}/cancel")).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "job_finished", "{body}");
    let (status, body) = post(&app, BOB, &format!("/api/jobs/{id}/retry")).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "not_retryable", "{body}");
    assert_eq!(audit_actions(&app).await, ["job.cancel"]);

    // A worker that starts later skips it: it never runs.
    let _worker = crate::helpers::spawn_peer_with(
        &app,
        Roles::worker(queues(&["normal=1", "high=1"])),
        |_| {},
    )
    .await;
    let other = app
        .upload_ok(BOB, "runs.txt", prose("runs", 20).into_bytes())
        .await;
    app.wait_state(BOB, other["job_id"].as_str().expect("id"), "done")
        .await;
    let job = app.job(BOB, id).await;
    assert_eq!(job["state"], "cancelled");
    assert!(job["started_at"].is_null(), "{job:#}");
}

#[tokio::test]
async fn a_job_cancelled_during_embed_stops_within_one_batch_and_nothing_of_it_is_found() {
    // The third embedding call hangs until released: the job is mid-embed.
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(3),
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1", "normal=1", "slow=1"])),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            c.embed_batch = 4;
        }),
        ..Default::default()
    })
    .await;
    let text = prose("lighthouse keeper", 1_500);
    let up = app
        .upload_ok(ALICE, "long-manual.txt", text.into_bytes())
        .await;
    let id = up["job_id"].as_str().expect("id");
    mock.wait_calls(3).await;
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM chunks WHERE document_id = $1::uuid")
            .bind(up["document_id"].as_str())
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert!(
        stored > 0,
        "the chunk step wrote the chunks before embedding"
    );

    let (status, body) = post(&app, ALICE, &format!("/api/jobs/{id}/cancel")).await;
    assert_eq!(status, 202, "{body}");
    mock.release();
    let job = app.wait_state(ALICE, id, "cancelled").await;
    let total = job["progress"]["chunks_total"].as_i64().expect("total");
    assert!(total > 20, "a long document: {total} chunks");
    // The hanging batch was the last: no batch started after the cancel.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(mock.calls(), 3, "embedding went on after the cancel");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE document_id = $1::uuid")
        .bind(up["document_id"].as_str())
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(left, 0, "its partial chunks are removed");
    let hits: Vec<Value> = app
        .get_json(ALICE, "/api/search?q=lighthouse%20keeper&k=5")
        .await;
    assert!(hits.is_empty(), "{hits:?}");
    // The worker is free for the next job.
    let next = app
        .upload_ok(ALICE, "next.txt", prose("next", 10).into_bytes())
        .await;
    app.wait_state(ALICE, next["job_id"].as_str().expect("id"), "done")
        .await;
}

#[tokio::test]
async fn retry_now_skips_the_wait_and_retry_after_failure_resumes_it() {
    // Every call fails until told otherwise; retries wait a minute.
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1", "normal=1"])),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            c.retry_delays = docflow::platform::config::RetryDelays(vec![Duration::from_secs(600)]);
            c.breaker_failures = 1_000;
        }),
        ..Default::default()
    })
    .await;
    let up = app
        .upload_ok(ALICE, "flaky.txt", prose("flaky", 20).into_bytes())
        .await;
    let id = up["job_id"].as_str().expect("id");
    app.wait_state(ALICE, id, "retrying").await;
    assert_eq!(
        post(&app, BOB, &format!("/api/jobs/{id}/retry")).await.0,
        404
    );

    mock.set(|b| b.always_fail = false);
    let (status, body) = post(&app, ALICE, &format!("/api/jobs/{id}/retry")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "pending");
    // Done long before the ten-minute wait.
    let job = app.wait_state(ALICE, id, "done").await;
    assert_eq!(job["attempt"], 2);
    let timeline = app.timeline(id).await;
    assert!(
        timeline.iter().any(|m| m == "retried now by its uploader"),
        "{timeline:?}"
    );

    // A failed job: retried from the step that failed, its dead letter resolved.
    mock.set(|b| b.refuse = true);
    let up = app
        .upload_ok(ALICE, "refused.txt", prose("refused", 20).into_bytes())
        .await;
    let id = up["job_id"].as_str().expect("id");
    app.wait_state(ALICE, id, "failed").await;
    mock.set(|b| b.refuse = false);
    let (status, _) = post(&app, ADMIN, &format!("/api/jobs/{id}/retry")).await;
    assert_eq!(status, 202);
    let job = app.wait_state(ALICE, id, "done").await;
    assert_eq!(
        job["steps"][0]["attempts"], 1,
        "parse was not redone: {job:#}"
    );
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL")
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert_eq!(open, 0);
    assert!(app
        .timeline(id)
        .await
        .iter()
        .any(|m| m == "retried by an administrator"));
    assert_eq!(audit_actions(&app).await, ["job.retry", "job.retry"]);
}

#[tokio::test]
async fn a_deleted_document_is_gone_from_search_and_storage_and_its_jobs_say_so() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1", "normal=1"])),
        ..Default::default()
    })
    .await;
    let up = app
        .upload_ok(
            ALICE,
            "tidal-atlas.txt",
            prose("tidal atlas", 40).into_bytes(),
        )
        .await;
    let id = up["job_id"].as_str().expect("id");
    let doc = up["document_id"].as_str().expect("doc");
    app.wait_state(ALICE, id, "done").await;
    let hits: Vec<Value> = app.get_json(ALICE, "/api/search?q=tidal%20atlas&k=5").await;
    assert!(!hits.is_empty());
    assert_eq!(
        app.blobs_of(doc),
        ["original"],
        "the upload is its own text"
    );
    let blobs_before = app.blob_files().len();

    let delete = |who: &'static str, doc: &str| {
        let app = &app;
        let url = app.url(&format!("/api/documents/{doc}"));
        async move {
            app.client(who)
                .await
                .delete(url)
                .send()
                .await
                .expect("delete")
                .status()
                .as_u16()
        }
    };
    assert_eq!(delete(BOB, doc).await, 404, "another tenant's document");
    assert_eq!(delete(ALICE, doc).await, 204);
    assert_eq!(
        delete(ALICE, doc).await,
        204,
        "deleting again changes nothing"
    );

    let hits: Vec<Value> = app.get_json(ALICE, "/api/search?q=tidal%20atlas&k=5").await;
    assert!(hits.is_empty(), "{hits:?}");
    assert_eq!(
        app.count(&format!("chunks WHERE document_id = '{doc}'"))
            .await,
        0
    );
    assert!(app.blobs_of(doc).is_empty(), "its blob is removed");
    assert_eq!(app.blob_files().len(), blobs_before - 1, "and nothing else");
    let job = app.job(ALICE, id).await;
    assert_eq!(job["state"], "done", "the job stays as history");
    assert_eq!(job["document_deleted"], true);
    assert!(audit_actions(&app)
        .await
        .contains(&"document.delete".to_string()));

    // A Markdown file has its parsed text apart from the upload: both go.
    let md = app.upload_ok(ALICE, "atlas.md", markdown("md", 20)).await;
    let md_doc = md["document_id"].as_str().expect("doc");
    app.wait_state(ALICE, md["job_id"].as_str().expect("id"), "done")
        .await;
    assert_eq!(app.blobs_of(md_doc), ["original", "text.txt"]);
    assert_eq!(delete(ALICE, md_doc).await, 204);
    assert!(app.blobs_of(md_doc).is_empty(), "both blobs are removed");
}

#[tokio::test]
async fn deleting_the_document_of_a_pending_job_cancels_the_job_first() {
    let app = without_workers().await;
    let up = app
        .upload_ok(BOB, "never.txt", prose("never", 20).into_bytes())
        .await;
    let r = app
        .client(ADMIN)
        .await
        .delete(app.url(&format!(
            "/api/documents/{}",
            up["document_id"].as_str().expect("doc")
        )))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 204, "admins delete any tenant's document");
    let job = app.job(BOB, up["job_id"].as_str().expect("id")).await;
    assert_eq!(job["state"], "cancelled");
    assert_eq!(job["document_deleted"], true);
}

/// A worker's step holds its job's row, then writes the document (its
/// text, chunks, index). A delete arriving meanwhile waits for the step
/// and then cancels the job; it took the two rows in the other order and
/// PostgreSQL broke the deadlock by failing one side (a 500, found by
/// scripts/fuzz-api.sh).
#[tokio::test]
async fn deleting_a_document_while_a_step_writes_it_waits_for_the_step() {
    let app = without_workers().await;
    let up = app
        .upload_ok(ALICE, "busy.txt", prose("busy", 20).into_bytes())
        .await;
    let job = up["job_id"].as_str().expect("id").to_string();
    let document = up["document_id"].as_str().expect("doc").to_string();

    // The step: its job's row locked, as `machine::hold` and every step's
    // statement lock it…
    let mut step = app.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1::uuid FOR UPDATE")
        .bind(&job)
        .execute(&mut *step)
        .await
        .expect("job locked");
    let alice = app.client(ALICE).await;
    let url = app.url(&format!("/api/documents/{document}"));
    let delete = tokio::spawn(async move { alice.delete(url).send().await.expect("delete") });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // …then its output written to the document, while the delete waits.
    sqlx::query("UPDATE documents SET pages = pages WHERE id = $1::uuid")
        .bind(&document)
        .execute(&mut *step)
        .await
        .expect("the step writes its document");
    step.commit().await.expect("the step commits");

    let r = delete.await.expect("delete task");
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    let job = app.job(ALICE, &job).await;
    assert_eq!(job["state"], "cancelled");
    assert_eq!(job["document_deleted"], true);
}

#[tokio::test]
async fn an_admin_cancels_every_pending_job_of_one_tenant_by_filter() {
    let app = without_workers().await;
    for i in 0..5 {
        app.upload_ok(BOB, &format!("globex-{i}.txt"), prose("g", 5).into_bytes())
            .await;
    }
    for i in 0..3 {
        app.upload_ok(ALICE, &format!("acme-{i}.txt"), prose("a", 5).into_bytes())
            .await;
    }
    let filter = serde_json::json!({"state": "pending", "queue": "", "tenant": "globex", "q": ""});
    let as_member = app
        .client(ALICE)
        .await
        .post(app.url("/api/admin/jobs/cancel"))
        .json(&filter)
        .send()
        .await
        .expect("post");
    assert_eq!(as_member.status(), 403);
    let r = app
        .client(ADMIN)
        .await
        .post(app.url("/api/admin/jobs/cancel"))
        .json(&filter)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 202);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        serde_json::json!({"count": 5})
    );
    assert_eq!(app.count("jobs WHERE state = 'cancelled'").await, 5);
    assert_eq!(
        app.count("jobs WHERE state = 'pending'").await,
        3,
        "the other tenant's stay"
    );
    let detail: Value =
        sqlx::query_scalar("SELECT detail FROM audit_log WHERE action = 'job.cancel_matching'")
            .fetch_one(&app.pool)
            .await
            .expect("audited");
    assert_eq!(detail["count"], 5);
    assert_eq!(detail["tenant"], "globex");
    // Retrying by filter finds nothing to retry among cancelled jobs.
    let r = app
        .client(ADMIN)
        .await
        .post(app.url("/api/admin/jobs/retry"))
        .json(&serde_json::json!({"state": "", "queue": "", "tenant": "globex", "q": ""}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.json::<Value>().await.expect("json")["count"], 0);
}
