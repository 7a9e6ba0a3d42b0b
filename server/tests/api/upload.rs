//! Foundation: upload → 202 → outbox → RabbitMQ, and every way an upload can be refused.

use std::time::Duration;

use docflow::Roles;
use serde_json::Value;

use crate::helpers::{get_json, spawn_app, spawn_with, status, Options, TcpGate, TestApp};

fn text(n: usize) -> Vec<u8> {
    "docflow takes documents and makes them searchable. "
        .repeat(n)
        .into_bytes()
}

async fn assert_nothing_written(app: &TestApp) {
    for table in ["documents", "jobs", "outbox", "job_events"] {
        assert_eq!(app.count(table).await, 0, "{table} must stay empty");
    }
    assert!(
        app.blob_files().is_empty(),
        "blobs left behind: {:?}",
        app.blob_files()
    );
}

async fn error_of(r: reqwest::Response, status: u16) -> (String, String) {
    assert_eq!(r.status().as_u16(), status);
    let v: Value = r.json().await.expect("error body is json");
    (
        v["error"]["code"].as_str().expect("code").to_string(),
        v["error"]["message"].as_str().expect("message").to_string(),
    )
}

#[tokio::test]
async fn upload_is_accepted_and_its_message_reaches_the_tier_queue() {
    let app = spawn_app().await;
    let r = app.upload("alice@acme.test", "notes.txt", text(20)).await;
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["state"], "pending");
    assert_eq!(body["queue"], "high", "acme is a paid tenant");
    let job_id = body["job_id"].as_str().expect("job_id");
    assert_eq!(location, format!("/api/jobs/{job_id}"));
    assert_eq!(body["status_url"], location);
    assert_eq!(body["events_url"], format!("/api/jobs/{job_id}/events"));

    let msgs = app
        .wait_messages("docflow.jobs.high", 1, Duration::from_secs(10))
        .await;
    let (msg, _) = &msgs[0];
    let mut keys: Vec<_> = msg.as_object().expect("object").keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "attempt",
            "document_id",
            "enqueued_at",
            "job_id",
            "queue",
            "tenant_id"
        ]
    );
    assert_eq!(msg["job_id"], job_id);
    assert_eq!(msg["document_id"], body["document_id"]);
    assert_eq!(msg["queue"], "high");
    assert_eq!(msg["attempt"], 1);

    // The free tenant's upload goes to the normal queue.
    let b = app
        .upload_ok("bob@globex.test", "b.md", b"# Bob\n\nfree plan".to_vec())
        .await;
    assert_eq!(b["queue"], "normal");
    let msgs = app
        .wait_messages("docflow.jobs.normal", 1, Duration::from_secs(10))
        .await;
    assert_eq!(msgs[0].0["job_id"], b["job_id"]);

    let job = app.job("alice@acme.test", job_id).await;
    assert_eq!(job["state"], "pending");
    assert_eq!(job["filename"], "notes.txt");
    let steps: Vec<_> = job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(steps, ["parse", "chunk", "embed", "store"]);
    assert_eq!(
        app.count("outbox WHERE sent_at IS NULL").await,
        0,
        "the relay marked both rows sent"
    );
}

#[tokio::test]
async fn long_documents_go_to_the_slow_queue() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.slow_pages = 2),
        ..Default::default()
    })
    .await;
    // 3,000 bytes of text make a page: this is four pages.
    let body = app
        .upload_ok("alice@acme.test", "long.txt", vec![b'a'; 10_000])
        .await;
    assert_eq!(body["queue"], "slow");
    app.wait_messages("docflow.jobs.slow", 1, Duration::from_secs(10))
        .await;
}

#[tokio::test]
async fn uploads_are_accepted_while_rabbitmq_is_unreachable_and_published_when_it_is_back() {
    let gate = TcpGate::new("127.0.0.1:5672".parse().expect("addr")).await;
    let app = spawn_with(Options {
        amqp_port: gate.port,
        ..Default::default()
    })
    .await;
    let r = app
        .client("alice@acme.test")
        .await
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503, "not ready without RabbitMQ");

    let mut ids = Vec::new();
    for i in 0..3 {
        let b = app
            .upload_ok("alice@acme.test", &format!("offline-{i}.txt"), text(5))
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.count("outbox WHERE sent_at IS NULL").await,
        3,
        "rows wait in the outbox"
    );

    gate.open().await;
    let msgs = app
        .wait_messages("docflow.jobs.high", 3, Duration::from_secs(20))
        .await;
    let mut got: Vec<_> = msgs
        .iter()
        .map(|(m, _)| m["job_id"].as_str().expect("id").to_string())
        .collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 200);
    app.stop().await;
    gate.close().await;
}

#[tokio::test]
async fn two_relays_at_once_publish_each_row_exactly_once() {
    // Uploads land with no relay running; then two processes relay together.
    let app = spawn_with(Options {
        roles: Roles {
            web: true,
            background: false,
            queues: vec![],
            slots: 0,
        },
        ..Default::default()
    })
    .await;
    let n = 300;
    sqlx::query(
        "INSERT INTO outbox (exchange, routing_key, payload)
         SELECT 'docflow.jobs', 'normal', jsonb_build_object('n', g) FROM generate_series(1, $1) g",
    )
    .bind(n as i32)
    .execute(&app.pool)
    .await
    .expect("rows");
    let relay = |name: &str| {
        let pool = app.pool.clone();
        let broker = docflow::broker::Broker::new(&app.iso.amqp_url(5672), name);
        let stop = tokio_util::sync::CancellationToken::new();
        let handle = tokio::spawn(docflow::jobs::outbox::run_relay(pool, broker, stop.clone()));
        (handle, stop)
    };
    let a = relay("relay-a");
    let b = relay("relay-b");
    let msgs = app
        .wait_messages("docflow.jobs.normal", n, Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = app.drain("docflow.jobs.normal").await;
    a.1.cancel();
    b.1.cancel();
    let _ = a.0.await;
    let _ = b.0.await;
    assert!(late.is_empty(), "{} duplicate messages", late.len());
    let mut seen: Vec<i64> = msgs
        .iter()
        .map(|(m, _)| m["n"].as_i64().expect("n"))
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "each row published once");
    assert_eq!(app.count("outbox WHERE sent_at IS NULL").await, 0);
}

#[tokio::test]
async fn idempotency_key_replays_the_first_answer() {
    let app = spawn_app().await;
    let first = app
        .upload_with("alice@acme.test", "a.txt", text(3), Some("key-1"))
        .await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    let again = app
        .upload_with("alice@acme.test", "a.txt", text(3), Some("key-1"))
        .await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.expect("json");
    assert_eq!(first, again);
    assert_eq!(app.count("jobs").await, 1);
    assert_eq!(app.blob_files().len(), 1);
    // Keys are per tenant: bob's identical key is a new upload.
    let bob = app
        .upload_with("bob@globex.test", "a.txt", text(3), Some("key-1"))
        .await;
    assert_eq!(bob.status(), 202);
    assert_eq!(app.count("jobs").await, 2);
}

#[tokio::test]
async fn too_large_unsupported_and_anonymous_uploads_leave_nothing_behind() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.max_upload_bytes = 100_000),
        ..Default::default()
    })
    .await;

    let (code, msg) = error_of(
        app.upload("alice@acme.test", "big.txt", text(3_000)).await,
        413,
    )
    .await;
    assert_eq!(code, "payload_too_large");
    assert!(msg.contains("100000"), "{msg}");

    // An image of a kind OCR does not read (PNG, JPEG and TIFF it does).
    let gif = [b"GIF89a".as_slice(), &[0u8; 64]].concat();
    let (code, _) = error_of(app.upload("alice@acme.test", "photo.gif", gif).await, 415).await;
    assert_eq!(code, "unsupported_media_type");

    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(text(2)).file_name("a.txt"),
    );
    let r = app
        .anonymous()
        .post(app.url("/api/documents"))
        .multipart(form)
        .send()
        .await
        .expect("send");
    let (code, _) = error_of(r, 401).await;
    assert_eq!(code, "unauthorized");

    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn malformed_uploads_get_a_clear_error_and_change_nothing() {
    let app = spawn_app().await;
    let (code, _) = error_of(
        app.upload("alice@acme.test", "empty.txt", Vec::new()).await,
        400,
    )
    .await;
    assert_eq!(code, "empty_file");

    let c = app.client("alice@acme.test").await;
    let form = reqwest::multipart::Form::new().part(
        "document",
        reqwest::multipart::Part::bytes(text(2)).file_name("a.txt"),
    );
    let r = c
        .post(app.url("/api/documents"))
        .multipart(form)
        .send()
        .await
        .expect("send");
    let (code, msg) = error_of(r, 400).await;
    assert_eq!(code, "missing_file");
    assert!(msg.contains("`file`"), "{msg}");

    // A multipart body cut off in the middle of the file.
    let truncated = "--XBOUND\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhalf a fi";
    let r = c
        .post(app.url("/api/documents"))
        .header("content-type", "multipart/form-data; boundary=XBOUND")
        .body(truncated)
        .send()
        .await
        .expect("send");
    let (code, _) = error_of(r, 400).await;
    assert_eq!(code, "malformed_multipart");

    let long = format!("{}.txt", "n".repeat(300));
    let (code, msg) = error_of(app.upload("alice@acme.test", &long, text(1)).await, 400).await;
    assert_eq!(code, "invalid_filename");
    assert!(msg.contains("255"), "{msg}");

    let (code, msg) = error_of(
        app.upload("alice@acme.test", "../../etc/passwd", text(1))
            .await,
        400,
    )
    .await;
    assert_eq!(code, "invalid_filename");
    assert!(msg.contains("path separators"), "{msg}");

    let r = c
        .post(app.url("/api/documents"))
        .json(&serde_json::json!({"file": "x"}))
        .send()
        .await
        .expect("send");
    let (code, _) = error_of(r, 400).await;
    assert_eq!(code, "invalid_content_type");

    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn bearer_tokens_work_and_unknown_or_orphaned_tokens_are_refused() {
    let app = spawn_app().await;
    let mut conn = app.pool.acquire().await.expect("conn");
    let alice: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.test'")
            .fetch_one(&mut *conn)
            .await
            .expect("alice");
    let token = docflow::identity::auth::create_token(&mut conn, alice, "ci", None)
        .await
        .expect("token");
    let c = reqwest::Client::new();
    let r = c
        .get(app.url("/api/jobs"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);

    let r = c
        .get(app.url("/api/jobs"))
        .bearer_auth("dft_0000")
        .send()
        .await
        .expect("send");
    let (code, _) = error_of(r, 401).await;
    assert_eq!(code, "unauthorized");

    // A token whose tenant no longer exists is worthless.
    let globex_user: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'bob@globex.test'")
            .fetch_one(&mut *conn)
            .await
            .expect("bob");
    let bob_token = docflow::identity::auth::create_token(&mut conn, globex_user, "ci", None)
        .await
        .expect("token");
    sqlx::query("DELETE FROM tenants WHERE slug = 'globex'")
        .execute(&mut *conn)
        .await
        .expect("delete tenant");
    let r = c
        .get(app.url("/api/jobs"))
        .bearer_auth(&bob_token)
        .send()
        .await
        .expect("send");
    let (_, msg) = error_of(r, 401).await;
    assert!(msg.contains("unknown"), "{msg}");
    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn jobs_are_listed_newest_first_with_keyset_paging_and_scoped_to_the_tenant() {
    let app = spawn_app().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            app.upload_ok("alice@acme.test", &format!("{i}.txt"), text(1))
                .await["job_id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    let c = app.client("alice@acme.test").await;
    let page1: Value = get_json(&c, app.url("/api/jobs?limit=3")).await;
    let got1: Vec<_> = page1["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(got1, ids.iter().rev().take(3).cloned().collect::<Vec<_>>());
    let before = page1["next_before"].as_str().expect("cursor");
    let page2: Value = get_json(&c, app.url(&format!("/api/jobs?limit=3&before={before}"))).await;
    let got2: Vec<_> = page2["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(got2, ids.iter().rev().skip(3).cloned().collect::<Vec<_>>());

    // Bob (another tenant) sees none of them, and alice's job is a 404 for him.
    let bob = app.client("bob@globex.test").await;
    let theirs: Value = get_json(&bob, app.url("/api/jobs")).await;
    assert_eq!(theirs["jobs"].as_array().expect("jobs").len(), 0);
    assert_eq!(
        status(bob.get(app.url(&format!("/api/jobs/{}", ids[0])))).await,
        404
    );
    assert_eq!(status(app.anonymous().get(app.url("/api/jobs"))).await, 401);
}

/// The `name=value` of the session cookie a response sets, after checking
/// that it is `HttpOnly` and `SameSite=Lax`.
fn session_cookie(r: &reqwest::Response) -> String {
    let set = r.headers()["set-cookie"].to_str().expect("cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax"),
        "{set}"
    );
    let pair = set.split(';').next().expect("name=value");
    assert!(pair.starts_with("docflow_session="), "{set}");
    pair.to_string()
}

#[tokio::test]
async fn login_rotates_the_session_and_logout_ends_it() {
    let app = spawn_app().await;
    let c = app.anonymous();
    let login = |password: &str| {
        c.post(app.url("/api/login"))
            .json(&serde_json::json!({"email": "alice@acme.test", "password": password}))
    };
    assert_eq!(status(login("nope")).await, 401);
    let r = login(crate::helpers::PASSWORD).send().await.expect("send");
    assert_eq!(r.status(), 200);
    let first = session_cookie(&r);
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        v["user"],
        serde_json::json!({"email": "alice@acme.test", "role": "member", "tenant": "acme"})
    );

    // Logging in on a session that already exists (one an attacker could
    // have planted) hands out a new id, and the old one stops working.
    let r = login(crate::helpers::PASSWORD).send().await.expect("send");
    assert_eq!(r.status(), 200);
    let second = session_cookie(&r);
    assert_ne!(first, second, "the session id must change at login");
    let with_cookie = |cookie: &str| {
        reqwest::Client::new()
            .get(app.url("/api/jobs"))
            .header("cookie", cookie)
    };
    assert_eq!(status(with_cookie(&first)).await, 401, "old id is dead");
    assert_eq!(status(with_cookie(&second)).await, 200);

    assert_eq!(status(c.get(app.url("/api/jobs"))).await, 200);
    assert_eq!(status(c.post(app.url("/api/logout"))).await, 204);
    assert_eq!(status(c.get(app.url("/api/jobs"))).await, 401);
    assert_eq!(
        status(with_cookie(&second)).await,
        401,
        "logout ends the session on the server, not only in the browser"
    );
}

#[tokio::test]
async fn uploads_over_the_backlog_get_503_and_over_the_tenant_quota_429_with_retry_after() {
    let app = spawn_with(Options {
        roles: Roles {
            web: true,
            background: false,
            queues: vec![],
            slots: 0,
        },
        configure: Box::new(|c| c.max_backlog = 3),
        ..Default::default()
    })
    .await;
    sqlx::query("UPDATE tenants SET max_unfinished_jobs = 1 WHERE slug = 'globex'")
        .execute(&app.pool)
        .await
        .expect("quota");
    app.upload_ok("bob@globex.test", "one.txt", text(1)).await;
    let r = app.upload("bob@globex.test", "two.txt", text(1)).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let (code, msg) = error_of(r, 429).await;
    assert_eq!(code, "too_many_requests");
    assert!(msg.contains("plan allows 1"), "{msg}");

    app.upload_ok("alice@acme.test", "a.txt", text(1)).await;
    app.upload_ok("alice@acme.test", "b.txt", text(1)).await;
    // The backlog count is refreshed at most once a second.
    tokio::time::sleep(docflow::jobs::repo::Backlog::MAX_AGE + Duration::from_millis(100)).await;
    let r = app.upload("alice@acme.test", "c.txt", text(1)).await;
    assert_eq!(r.headers()["retry-after"], "30");
    let (code, _) = error_of(r, 503).await;
    assert_eq!(code, "unavailable");
    assert_eq!(app.count("jobs").await, 3, "refused uploads wrote nothing");
    assert_eq!(app.blob_files().len(), 3);
}
