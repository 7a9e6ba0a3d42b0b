//! Other systems drive docflow: signed webhooks delivered at least once
//! through an outage, never to an internal address, and batches that end
//! once with their counts.

use std::{collections::HashMap, time::Duration};

use docflow::{webhooks::signature, Roles};
use serde_json::{json, Value};

use crate::fixtures::{ADMIN, ALICE};
use crate::{
    helpers::{queues, spawn_with, Options, TestApp},
    webhook_receiver::Receiver,
};

const CORRUPT_PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref";

/// A whole docflow whose webhooks may reach this machine's test receivers.
async fn app_reaching_local_receivers() -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=3", "normal=1"])),
        configure: Box::new(|c| {
            c.webhook_allow_private = true;
            c.webhook_allow_http = true;
            c.webhook_backoff = Duration::from_millis(200);
        }),
        ..Default::default()
    })
    .await
}

async fn register(app: &TestApp, url: &str, events: &[&str]) -> (u16, Value) {
    let r = app
        .client(ADMIN)
        .await
        .post(app.url("/api/webhooks"))
        .json(&json!({"url": url, "events": events, "description": "integration test"}))
        .send()
        .await
        .expect("register");
    (r.status().as_u16(), r.json().await.expect("json"))
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a batch as `client`; the 201's body.
async fn create_batch(client: &reqwest::Client, app: &TestApp, name: &str) -> Value {
    let r = client
        .post(app.url("/api/batches"))
        .json(&json!({ "name": name }))
        .send()
        .await
        .expect("create a batch");
    assert_eq!(r.status(), 201);
    r.json().await.expect("json")
}

/// Uploads a short text as alice; its job id.
async fn upload_prose(app: &TestApp, name: &str) -> String {
    let b = app
        .upload_ok(ALICE, name, crate::fixtures::prose(name, 3).into_bytes())
        .await;
    b["job_id"].as_str().expect("job").to_string()
}

fn event_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("a JSON event")
}

#[tokio::test]
async fn fifty_documents_each_reach_the_webhook_once_signed_and_an_outage_loses_nothing() {
    // Retries at most 2 s apart, so the end of the outage is seen soon.
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=3", "normal=1"])),
        configure: Box::new(|c| {
            c.webhook_allow_private = true;
            c.webhook_allow_http = true;
            c.webhook_backoff = Duration::from_millis(200);
            c.webhook_backoff_max = Duration::from_secs(2);
        }),
        ..Default::default()
    })
    .await;
    let receiver = Receiver::start().await;
    let (status, created) = register(&app, &receiver.url(), &["job.done"]).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"]
        .as_str()
        .expect("the secret, once")
        .to_string();
    let listed: Value = app.get_json(ADMIN, "/api/webhooks").await;
    assert!(
        !listed.to_string().contains(&secret),
        "the secret is never shown again"
    );

    // The receiver is down for a minute, while the first half is processed.
    receiver.answer(500);
    let outage = tokio::time::Instant::now();
    let mut jobs = Vec::new();
    for i in 0..25 {
        jobs.push(upload_prose(&app, &format!("hook-{i}.txt")).await);
    }
    for id in &jobs {
        app.wait_state(ALICE, id, "done").await;
    }
    wait_for(
        "refused attempts at every first-half event",
        Duration::from_secs(30),
        || {
            let ids: std::collections::HashSet<String> = receiver
                .received()
                .into_iter()
                .map(|r| r.event_id)
                .collect();
            ids.len() >= 25
        },
    )
    .await;
    tokio::time::sleep_until(outage + Duration::from_secs(60)).await;
    assert!(receiver.acknowledged().is_empty());
    let retried = receiver.received().len();
    assert!(
        retried > 25,
        "deliveries were retried during the outage: {retried}"
    );

    // It comes back; the second half arrives while the first is retried.
    receiver.answer(200);
    for i in 25..50 {
        jobs.push(upload_prose(&app, &format!("hook-{i}.txt")).await);
    }
    wait_for("50 events acknowledged", Duration::from_secs(90), || {
        receiver.acknowledged().len() >= 50
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let acked = receiver.acknowledged();
    assert_eq!(acked.len(), 50, "no event acknowledged twice");
    let now = chrono::Utc::now().timestamp();
    let mut by_job: HashMap<String, String> = HashMap::new();
    for r in &acked {
        signature::verify(&secret, &r.signature, &r.body, now)
            .unwrap_or_else(|e| panic!("{}: {}", e.code(), r.signature));
        let event = event_of(&r.body);
        assert_eq!(
            event["id"],
            r.event_id.as_str(),
            "the header names the body's id"
        );
        assert_eq!(event["type"], "job.done");
        assert_eq!(event["data"]["state"], "done");
        let job = event["data"]["id"].as_str().expect("the job").to_string();
        assert!(
            by_job.insert(job.clone(), r.event_id.clone()).is_none(),
            "one job.done per job: {job}"
        );
    }
    let mut expected = jobs.clone();
    expected.sort();
    let mut got: Vec<String> = by_job.keys().cloned().collect();
    got.sort();
    assert_eq!(got, expected, "every document's job.done arrived");
    // A retried event kept its id and body: each of the first half's
    // refused attempts carried the id it was finally delivered under.
    for r in receiver.received().iter().filter(|r| r.status == 500) {
        let delivered = acked
            .iter()
            .find(|a| a.event_id == r.event_id)
            .expect("every refused event was delivered later");
        assert_eq!(delivered.body, r.body, "a retry sends the same body");
    }
    // The data is the job as the API shows it.
    let job = app.job(ALICE, &jobs[0]).await;
    let sent = event_of(
        &acked
            .iter()
            .find(|r| event_of(&r.body)["data"]["id"] == jobs[0].as_str())
            .expect("sent")
            .body,
    );
    assert_eq!(sent["data"]["filename"], job["filename"]);
    assert_eq!(sent["data"]["document_id"], job["document_id"]);

    // A tampered body and a replay after the tolerance fail verification.
    let r = &acked[0];
    let mut tampered = r.body.to_vec();
    let at = tampered
        .iter()
        .position(|b| *b == b'd')
        .expect("a byte to change");
    tampered[at] = b'x';
    assert_eq!(
        signature::verify(&secret, &r.signature, &tampered, now).map_err(|e| e.code()),
        Err("signature_mismatch")
    );
    assert_eq!(
        signature::verify(
            &secret,
            &r.signature,
            &r.body,
            now + signature::TOLERANCE_SECS + 60
        )
        .map_err(|e| e.code()),
        Err("signature_expired")
    );

    // The delivery list tells it: all delivered, the first half after
    // several attempts, with status and latency.
    let id = created["id"].as_str().expect("id");
    let deliveries: Vec<Value> = app
        .get_json(ADMIN, &format!("/api/webhooks/{id}/deliveries"))
        .await;
    assert_eq!(deliveries.len(), 50);
    assert!(deliveries
        .iter()
        .all(|d| d["state"] == "delivered" && d["last_status"] == 200));
    assert!(
        deliveries
            .iter()
            .filter(|d| d["attempts"].as_i64() > Some(1))
            .count()
            >= 25
    );
    assert!(deliveries.iter().all(|d| d["last_latency_ms"].is_i64()));

    // Redeliver sends the same event again, under the same id.
    let one = &deliveries[0];
    let r = app
        .client(ADMIN)
        .await
        .post(app.url(&format!(
            "/api/webhooks/{id}/deliveries/{}/redeliver",
            one["id"].as_str().expect("delivery")
        )))
        .send()
        .await
        .expect("redeliver");
    assert_eq!(r.status(), 202);
    wait_for("the redelivery", Duration::from_secs(10), || {
        receiver.acknowledged().len() == 51
    })
    .await;
    let again = receiver.acknowledged().pop().expect("the redelivery");
    assert_eq!(again.event_id, one["event_id"].as_str().expect("event id"));
}

#[tokio::test]
async fn internal_targets_are_refused_at_registration_and_again_at_delivery() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2"])),
        configure: Box::new(|c| {
            c.webhook_allow_http = true;
            c.webhook_backoff = Duration::from_millis(200);
        }),
        ..Default::default()
    })
    .await;
    for url in [
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://10.1.2.3/hook",
        "https://192.168.0.10:8443/hook",
        "https://[::1]/hook",
        "https://localhost/hook",
        "https://user:secret@93.184.215.14/hook",
    ] {
        let (status, body) = register(&app, url, &["job.done"]).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_webhook_url")),
            "{url}: {body}"
        );
    }
    assert_eq!(app.count("webhook_endpoints").await, 0);

    // Endpoints that passed when registered (their names resolved
    // elsewhere then) and point inside now: by name and by address.
    let receiver = Receiver::start().await;
    for url in [
        format!("http://localhost:{}/hook", receiver.addr.port()),
        format!("http://127.0.0.1:{}/hook", receiver.addr.port()),
    ] {
        sqlx::query(
            "INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret)
             SELECT gen_random_uuid(), id, $1, '{job.done}', 'whsec_test' FROM tenants WHERE slug = 'acme'",
        )
        .bind(url)
        .execute(&app.pool)
        .await
        .expect("endpoint");
    }
    let job = upload_prose(&app, "inside.txt").await;
    app.wait_state(ALICE, &job, "done").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let errors: Vec<Option<String>> =
            sqlx::query_scalar("SELECT last_error FROM webhook_deliveries ORDER BY endpoint_id")
                .fetch_all(&app.pool)
                .await
                .expect("deliveries");
        if errors.len() == 2
            && errors
                .iter()
                .all(|e| e.as_deref().is_some_and(|e| e.contains("internal address")))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both refused at delivery: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        receiver.received().is_empty(),
        "nothing reached the internal receiver"
    );
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let app = app_reaching_local_receivers().await;
    let inside = Receiver::start().await;
    let front = Receiver::start().await;
    front.redirect(&inside.url());
    let (status, _) = register(&app, &front.url(), &["job.done"]).await;
    assert_eq!(status, 201);
    let job = upload_prose(&app, "redirect.txt").await;
    app.wait_state(ALICE, &job, "done").await;
    wait_for("an attempt", Duration::from_secs(20), || {
        !front.received().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        inside.received().is_empty(),
        "the redirect was not followed"
    );
    let (last_status, error): (Option<i32>, Option<String>) =
        sqlx::query_as("SELECT last_status, last_error FROM webhook_deliveries")
            .fetch_one(&app.pool)
            .await
            .expect("delivery");
    assert_eq!(last_status, Some(302));
    assert!(error.is_some_and(|e| e.contains("redirects are not followed")));
}

#[tokio::test]
async fn a_batch_of_twenty_with_one_corrupt_file_ends_once_with_nineteen_done_and_one_failed() {
    let app = app_reaching_local_receivers().await;
    let receiver = Receiver::start().await;
    let (status, created) = register(&app, &receiver.url(), &["batch.done"]).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().expect("secret").to_string();
    let alice = app.client(ALICE).await;
    let batch = create_batch(&alice, &app, "nightly sync").await;
    let id = batch["id"].as_str().expect("id").to_string();
    assert_eq!(batch["state"], "open");
    assert_eq!(batch["total"], 0);

    // The batch's live stream, open from the start.
    let mut live = crate::helpers::SseReader::open(
        &alice,
        &app.url(&format!("/api/batches/{id}/events")),
        None,
    )
    .await;

    for i in 0..20 {
        let (name, bytes) = if i == 7 {
            ("scan-7.pdf".to_string(), CORRUPT_PDF.to_vec())
        } else {
            (
                format!("doc-{i}.txt"),
                crate::fixtures::prose(&format!("batch{i}"), 3).into_bytes(),
            )
        };
        // `batch_id` before the file, or after it (as some generated
        // clients order the fields): the document joins the batch either way.
        let file = reqwest::multipart::Part::bytes(bytes).file_name(name);
        let form = if i % 2 == 0 {
            reqwest::multipart::Form::new()
                .text("batch_id", id.clone())
                .part("file", file)
        } else {
            reqwest::multipart::Form::new()
                .part("file", file)
                .text("batch_id", id.clone())
        };
        let r = alice
            .post(app.url("/api/documents"))
            .multipart(form)
            .send()
            .await
            .expect("upload");
        assert_eq!(r.status(), 202);
    }
    let closed: Value = alice
        .post(app.url(&format!("/api/batches/{id}/close")))
        .send()
        .await
        .expect("close")
        .json()
        .await
        .expect("json");
    assert_eq!(closed["total"], 20);
    assert!(closed["closed_at"].is_string());

    // After the close, the batch takes nothing more.
    let late = alice
        .post(app.url(&format!("/api/documents?batch_id={id}")))
        .multipart(reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(b"late".to_vec()).file_name("late.txt"),
        ))
        .send()
        .await
        .expect("late upload");
    assert_eq!(late.status(), 409);
    let body: Value = late.json().await.expect("json");
    assert_eq!(body["error"]["code"], "batch_closed");

    // The stream follows it to the end.
    let mut frames = Vec::new();
    let last = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let e = live.next().await.expect("the stream ends only after done");
            assert_eq!(e.event, "batch");
            let b = e.data;
            frames.push(b.clone());
            if b["state"] == "done" {
                return b;
            }
        }
    })
    .await
    .expect("the batch is done within 90 s");
    assert_eq!(last["counts"]["done"], 19, "{last}");
    assert_eq!(last["counts"]["failed"], 1, "{last}");
    assert!(
        frames.len() >= 3,
        "the stream showed progress: {} frames",
        frames.len()
    );
    assert!(live.next().await.is_none(), "the stream ends after done");

    wait_for("batch.done", Duration::from_secs(20), || {
        !receiver.acknowledged().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = receiver.acknowledged();
    assert_eq!(got.len(), 1, "batch.done arrives once");
    let now = chrono::Utc::now().timestamp();
    signature::verify(&secret, &got[0].signature, &got[0].body, now).expect("signed");
    let event = event_of(&got[0].body);
    assert_eq!(event["type"], "batch.done");
    assert_eq!(event["data"]["id"], id.as_str());
    assert_eq!(event["data"]["state"], "done");
    assert_eq!(event["data"]["counts"]["done"], 19);
    assert_eq!(event["data"]["counts"]["failed"], 1);
    assert_eq!(event["data"]["total"], 20);
    // Sent after the last job ended.
    let last_ended: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(finished_at) FROM jobs WHERE batch_id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .expect("jobs");
    let sent: chrono::DateTime<chrono::Utc> = event["created_at"]
        .as_str()
        .expect("created_at")
        .parse()
        .expect("a time");
    assert!(
        sent >= last_ended,
        "batch.done at {sent}, last job ended {last_ended}"
    );

    // Retrying the batch runs its failed job again; the batch runs again.
    let retried: Value = alice
        .post(app.url(&format!("/api/batches/{id}/retry")))
        .send()
        .await
        .expect("retry")
        .json()
        .await
        .expect("json");
    assert!(
        retried["state"] == "running" || retried["state"] == "done",
        "{retried}"
    );
    let jobs: Vec<Value> = app
        .get_json(ALICE, &format!("/api/batches/{id}/jobs"))
        .await;
    assert_eq!(jobs.len(), 20);
    assert!(
        jobs.iter().all(|j| j.get("uploaded_by").is_none()),
        "members are not told who uploaded"
    );
}

/// A job's end in a transaction that wrote the job's row before (as a
/// step's does, which re-checks the job's key to its batch: a key-share
/// lock on the batch row), while a close holds the batch row and checks
/// the batch itself: neither waits for the other (they deadlocked when the
/// job's own transaction checked its batch, found by
/// scripts/client-test.sh), and the batch ends done.
#[tokio::test]
async fn a_job_ending_while_its_batch_is_closed_deadlocks_neither() {
    let app = spawn_with(Options {
        roles: Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        ..Default::default()
    })
    .await;
    let alice = app.client(ALICE).await;
    let batch = create_batch(&alice, &app, "closing").await;
    let id = batch["id"].as_str().expect("id").to_string();
    let up: Value = alice
        .post(app.url(&format!("/api/documents?batch_id={id}")))
        .multipart(
            reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(crate::fixtures::prose("closing", 3).into_bytes())
                    .file_name("closing.txt"),
            ),
        )
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("json");
    let job = up["job_id"].as_str().expect("job").to_string();

    // The close, up to its check of the batch: the batch row written.
    let mut close = app.pool.begin().await.expect("begin");
    sqlx::query("UPDATE batches SET closed_at = now() WHERE id = $1::uuid")
        .bind(&id)
        .execute(&mut *close)
        .await
        .expect("closed");
    // The job's end, in a transaction that wrote its row before.
    let pool = app.pool.clone();
    let end = tokio::spawn(async move {
        let mut step = pool.begin().await?;
        sqlx::query("UPDATE jobs SET updated_at = now() WHERE id = $1::uuid")
            .bind(&job)
            .execute(&mut *step)
            .await?;
        sqlx::query("UPDATE jobs SET state = 'done', finished_at = now() WHERE id = $1::uuid")
            .bind(&job)
            .execute(&mut *step)
            .await?;
        step.commit().await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // PostgreSQL looks for a deadlock after a second of waiting.
    sqlx::query("SELECT docflow_batch_check($1::uuid)")
        .bind(&id)
        .execute(&mut *close)
        .await
        .expect("the close checks its batch");
    close.commit().await.expect("the close commits");
    end.await
        .expect("the job's end")
        .expect("the job's end commits");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let b: Value = app.get_json(ALICE, &format!("/api/batches/{id}")).await;
        if b["state"] == "done" {
            assert_eq!(b["counts"]["done"], 1, "{b}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the batch ends done: {b}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_endpoint_that_fails_a_whole_retry_period_is_disabled_its_admins_told_and_redeliver_enables_it(
) {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2"])),
        configure: Box::new(|c| {
            c.webhook_allow_private = true;
            c.webhook_allow_http = true;
            c.webhook_backoff = Duration::from_millis(200);
            c.webhook_retry_for = Duration::from_secs(2);
        }),
        ..Default::default()
    })
    .await;
    let receiver = Receiver::start().await;
    receiver.answer(500);
    let (status, created) = register(&app, &receiver.url(), &["job.done"]).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_string();
    let job = upload_prose(&app, "unlucky.txt").await;
    app.wait_state(ALICE, &job, "done").await;

    // Given up after the retry period, and the endpoint disabled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let endpoint = loop {
        let list: Vec<Value> = app.get_json(ADMIN, "/api/webhooks").await;
        let e = list
            .into_iter()
            .find(|e| e["id"] == id.as_str())
            .expect("listed");
        if e["disabled_at"].is_string() {
            break e;
        }
        assert!(tokio::time::Instant::now() < deadline, "disabled: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        endpoint["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains("answered 500 Internal Server Error")),
        "{endpoint}"
    );
    let deliveries: Vec<Value> = app
        .get_json(ADMIN, &format!("/api/webhooks/{id}/deliveries"))
        .await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0]["state"], "failed");
    assert!(
        deliveries[0]["attempts"].as_i64() > Some(1),
        "retried first"
    );
    let tried = receiver.received().len();
    assert!(tried > 1, "{tried} attempts");
    // The tenant's admins are told; its members are not.
    let told: Vec<(String, String)> = sqlx::query_as(
        "SELECT u.email, n.title FROM notifications n JOIN users u ON u.id = n.user_id
         WHERE n.kind = 'webhook_disabled'",
    )
    .fetch_all(&app.pool)
    .await
    .expect("notifications");
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, ADMIN);
    assert!(told[0].1.contains(&receiver.url()), "{told:?}");

    // A disabled endpoint gets nothing new.
    let second = upload_prose(&app, "unheard.txt").await;
    app.wait_state(ALICE, &second, "done").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        receiver.received().len(),
        tried,
        "nothing sent while disabled"
    );

    // The receiver is fixed; a redeliver enables the endpoint again.
    receiver.answer(200);
    let r = app
        .client(ADMIN)
        .await
        .post(app.url(&format!(
            "/api/webhooks/{id}/deliveries/{}/redeliver",
            deliveries[0]["id"].as_str().expect("delivery")
        )))
        .send()
        .await
        .expect("redeliver");
    assert_eq!(r.status(), 202);
    wait_for("the redelivery", Duration::from_secs(10), || {
        !receiver.acknowledged().is_empty()
    })
    .await;
    // The receiver has answered; the success is written once its answer
    // is read, a moment later.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let e = loop {
        let list: Vec<Value> = app.get_json(ADMIN, "/api/webhooks").await;
        let e = list
            .into_iter()
            .find(|e| e["id"] == id.as_str())
            .expect("listed");
        if e["last_success_at"].is_string() || tokio::time::Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(e["disabled_at"].is_null(), "enabled again: {e}");
    assert!(e["last_success_at"].is_string(), "{e}");
}
