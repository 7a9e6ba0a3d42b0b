//! The isolation matrix: every REST route (as the OpenAPI document, built
//! from the router, lists them) and every server function (as the server
//! function registry lists them) is called as four callers: no
//! credentials, a member of tenant A on tenant B's objects, a member on
//! admin actions, and an admin. A route or server function this test does
//! not know fails it, so none can be added without a place in the matrix.
//!
//! DESIGN §6: unauthenticated → 401; authenticated but not allowed → 403;
//! another tenant's object → 404. Platform operators (admins) read every
//! tenant's jobs and act through the admin actions; notifications stay
//! personal. Nothing of B appears in what A reads.

use std::time::Duration;

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::helpers::{queues, sfn_name, spawn_with, Options, TestApp};

/// Tenant B's objects, and what would give them away.
struct Foreign {
    job: String,
    document: String,
    notification: String,
    /// Re-enqueued by the bulk route.
    dead_letter: String,
    /// One each for the routes that act on one dead letter, so each acts.
    requeue_letter: String,
    discard_letter: String,
    /// For the `discard` server function.
    sfn_discard_letter: String,
    batch: String,
    webhook: String,
    /// Strings that must never reach tenant A.
    secrets: Vec<String>,
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Access {
    Public,
    User,
    Admin,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Caller {
    Anonymous,
    /// A member of tenant A.
    Member,
    Admin,
}

/// The open dead letter of `job`.
async fn dead_letter_of(app: &TestApp, job: &str) -> String {
    let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM dead_letters WHERE job_id = $1::uuid")
        .bind(job)
        .fetch_one(&app.pool)
        .await
        .expect("a dead letter");
    id.to_string()
}

/// A dead letter of tenant B of its own: a broken PDF (`n` makes its bytes
/// new) that failed.
async fn another_dead_letter(app: &TestApp, n: u32) -> String {
    let broken = app
        .upload_ok(
            BOB,
            &format!("globex-broken-{n}.pdf"),
            format!("%PDF-1.7\n{n} 0 obj << /Type /Catalog >>\ngarbage without xref").into_bytes(),
        )
        .await;
    let job = broken["job_id"].as_str().expect("id");
    app.wait_state(BOB, job, "failed").await;
    dead_letter_of(app, job).await
}

async fn foreign_objects(app: &TestApp) -> Foreign {
    let done = app
        .upload_ok(
            BOB,
            "globex-secret-plans.txt",
            crate::fixtures::prose("globex", 30).into_bytes(),
        )
        .await;
    let broken = app
        .upload_ok(
            BOB,
            "globex-broken.pdf",
            b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref".to_vec(),
        )
        .await;
    let job = done["job_id"].as_str().expect("id").to_string();
    let broken_job = broken["job_id"].as_str().expect("id").to_string();
    app.wait_state(BOB, &job, "done").await;
    app.wait_state(BOB, &broken_job, "failed").await;
    let notification: uuid::Uuid = sqlx::query_scalar(
        "SELECT n.id FROM notifications n JOIN users u ON u.id = n.user_id WHERE u.email = $1 LIMIT 1",
    )
    .bind(BOB)
    .fetch_one(&app.pool)
    .await
    .expect("bob has a notification");
    let dead_letter = dead_letter_of(app, &broken_job).await;
    let requeue_letter = another_dead_letter(app, 1).await;
    let discard_letter = another_dead_letter(app, 2).await;
    let document = done["document_id"].as_str().expect("doc").to_string();
    let batch: Value = app
        .client(BOB)
        .await
        .post(app.url("/api/batches"))
        .json(&serde_json::json!({"name": "globex-nightly-sync"}))
        .send()
        .await
        .expect("batch")
        .json()
        .await
        .expect("json");
    let batch = batch["id"].as_str().expect("batch id").to_string();
    // Globex's own admin would register it; the demo has none.
    let webhook = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret)
         SELECT $1, id, 'https://hooks.globex.test/secret-plans', '{job.done}', 'whsec_globex' FROM tenants WHERE slug = 'globex'",
    )
    .bind(webhook)
    .execute(&app.pool)
    .await
    .expect("globex's webhook");
    Foreign {
        secrets: vec![
            job.clone(),
            broken_job,
            document.clone(),
            "globex".into(),
            "secret-plans".into(),
            notification.to_string(),
            batch.clone(),
            "globex-nightly-sync".into(),
            webhook.to_string(),
            "hooks.globex.test".into(),
            "whsec_globex".into(),
        ],
        batch,
        webhook: webhook.to_string(),
        job,
        document,
        notification: notification.to_string(),
        dead_letter,
        requeue_letter,
        discard_letter,
        // Made once the REST routes have run (`requeue-matching` would take it).
        sfn_discard_letter: String::new(),
    }
}

/// Who may call `path`.
fn access_of(path: &str) -> Access {
    match path {
        "/api/login" | "/api/openapi.json" => Access::Public,
        p if p.starts_with("/api/admin/") || p.starts_with("/api/webhooks") => Access::Admin,
        _ => Access::User,
    }
}

/// `template` with tenant B's objects in its parameters.
fn concrete(template: &str, b: &Foreign) -> String {
    let with = |id: &str| template.replace("{id}", id);
    match template {
        t if !t.contains('{') => t.to_string(),
        t if t.starts_with("/api/jobs/{id}") => with(&b.job),
        t if t.starts_with("/api/documents/{id}") => with(&b.document),
        t if t.starts_with("/api/notifications/{id}") => with(&b.notification),
        "/api/admin/dead-letters/{id}/requeue" => with(&b.requeue_letter),
        "/api/admin/dead-letters/{id}/discard" => with(&b.discard_letter),
        t if t.starts_with("/api/admin/dead-letters/{id}") => with(&b.dead_letter),
        t if t.starts_with("/api/admin/queues/{queue}") => t.replace("{queue}", "normal"),
        t if t.starts_with("/api/batches/{id}") => with(&b.batch),
        t if t.starts_with("/api/webhooks/{id}") => {
            with(&b.webhook).replace("{delivery_id}", &uuid::Uuid::now_v7().to_string())
        }
        t => panic!("the isolation matrix has no object for {t}: add one"),
    }
}

/// The query a route needs to get past validation.
fn query_for(template: &str) -> &'static str {
    match template {
        "/api/search" => "?q=globex%20secret%20plans&k=10",
        "/api/admin/series" => "?metric=queue_depth",
        _ => "",
    }
}

/// The request body a route needs to get past validation.
fn body_for(method: &str, path: &str, b: &Foreign) -> Option<reqwest::Body> {
    if method == "get" || method == "delete" {
        return None;
    }
    let json = match path {
        // Not an account of the test: its failures throttle nobody here.
        "/api/login" => serde_json::json!({"email": "nobody@rest.test", "password": "wrong"}),
        "/api/admin/dead-letters/requeue" => serde_json::json!({"ids": [b.dead_letter]}),
        "/api/batches" => serde_json::json!({"name": "matrix"}),
        // A public address needs no DNS (the test machine may have none).
        "/api/webhooks" => {
            serde_json::json!({"url": "https://93.184.215.14/matrix", "events": ["job.done"]})
        }
        "/api/admin/jobs/cancel" | "/api/admin/jobs/retry" => {
            serde_json::json!({"state": "pending", "queue": "", "tenant": "globex", "q": ""})
        }
        _ => serde_json::json!({}),
    };
    Some(json.to_string().into())
}

async fn call(
    client: &reqwest::Client,
    app: &TestApp,
    method: &str,
    path: &str,
    b: &Foreign,
) -> (u16, String) {
    let url = app.url(path);
    let mut req = match method {
        "get" => client.get(url),
        "post" => client.post(url),
        "delete" => client.delete(url),
        "put" => client.put(url),
        m => panic!("method {m} of {path}"),
    };
    if path == "/api/documents" {
        let part =
            reqwest::multipart::Part::bytes(b"matrix upload".to_vec()).file_name("matrix.txt");
        req = req.multipart(reqwest::multipart::Form::new().part("file", part));
    } else if let Some(body) = body_for(method, path, b) {
        req = req.header("content-type", "application/json").body(body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let sse = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = if sse {
        // A live stream: whatever it sends in its first moments.
        let mut resp = resp;
        let mut seen = String::new();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while let Ok(Some(chunk)) = resp.chunk().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        seen
    } else {
        resp.text().await.expect("body")
    };
    (status, text)
}

/// What `caller` must get from a REST route; `None` when any 2xx will do.
fn expected(caller: Caller, access: Access, method: &str, template: &str) -> Expect {
    use Expect::*;
    match (caller, access) {
        (_, Access::Public) => Answered,
        (Caller::Anonymous, _) => Status(401),
        (Caller::Member, Access::Admin) => Status(403),
        // Another tenant's object is not there.
        (Caller::Member, Access::User) if template.contains("{id}") => Status(404),
        (Caller::Member, Access::User) => Success,
        // Webhooks belong to one organisation, the operator's too.
        (Caller::Admin, Access::Admin) if template.starts_with("/api/webhooks/{id}") => Status(404),
        (Caller::Admin, Access::Admin) => admin_action(template),
        // Admins read every tenant's jobs; notifications are personal.
        (Caller::Admin, Access::User) if template.starts_with("/api/notifications/{id}") => {
            Status(404)
        }
        (Caller::Admin, Access::User)
            if template.starts_with("/api/jobs/{id}") && method == "get" =>
        {
            Success
        }
        (Caller::Admin, Access::User) if template.contains("{id}") => admin_action(template),
        (Caller::Admin, Access::User) => Success,
    }
}

/// What an administrator's action on tenant B's objects comes to: each
/// acts (its own dead letter), or is refused for the object's state.
fn admin_action(template: &str) -> Expect {
    match template {
        // The model never changed: no re-embedding runs.
        "/api/admin/reembed/pause" | "/api/admin/reembed/resume" | "/api/admin/reembed/retry" => {
            Expect::Refused(409, "no_reembedding")
        }
        // B's job is done; B's batch has no failed job.
        "/api/jobs/{id}/cancel" => Expect::Refused(409, "job_finished"),
        "/api/jobs/{id}/retry" | "/api/batches/{id}/retry" => Expect::Refused(409, "not_retryable"),
        _ => Expect::Success,
    }
}

#[derive(Debug, Clone, Copy)]
enum Expect {
    Status(u16),
    /// 2xx.
    Success,
    /// Refused with this status and error code: the caller got past the
    /// access check, and the object's state said no.
    Refused(u16, &'static str),
    /// Anything but a server error (a public route refusing bad input).
    Answered,
}

impl Expect {
    fn holds(self, status: u16, text: &str) -> bool {
        match self {
            Expect::Status(s) => status == s,
            Expect::Success => (200..300).contains(&status),
            Expect::Refused(s, code) => {
                let body: Value = serde_json::from_str(text).unwrap_or_default();
                status == s && body["error"]["code"] == code
            }
            Expect::Answered => status < 500,
        }
    }
}

/// Every `(method, path)` of the OpenAPI document.
async fn rest_routes(app: &TestApp) -> Vec<(String, String)> {
    let doc: Value = app
        .anonymous()
        .get(app.url("/api/openapi.json"))
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "post", "put", "delete", "patch"] {
            if item.get(method).is_some() {
                routes.push((method.to_string(), path.clone()));
            }
        }
    }
    // State-changing admin actions last, so reads see the objects first;
    // re-enqueueing every matching dead letter after the actions on one.
    routes.sort_by_key(|(m, p)| (m != "get", p.ends_with("/requeue-matching"), p.clone()));
    routes
}

fn assert_no_secrets(b: &Foreign, who: &str, what: &str, text: &str) {
    for s in &b.secrets {
        assert!(
            !text.contains(s.as_str()),
            "{who} saw `{s}` of tenant B in {what}: {text:.300}"
        );
    }
}

#[tokio::test]
async fn every_rest_route_and_server_function_keeps_tenants_and_roles_apart() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1", "slow=1"])),
        ..Default::default()
    })
    .await;
    let mut b = foreign_objects(&app).await;
    let routes = rest_routes(&app).await;
    assert!(routes.len() >= 20, "the document lists the API: {routes:?}");

    let anonymous = app.anonymous();
    let member = app.client(ALICE).await;
    let admin = app.client(ADMIN).await;
    for (caller, client) in [
        (Caller::Anonymous, &anonymous),
        (Caller::Member, &member),
        (Caller::Admin, &admin),
    ] {
        for (method, template) in &routes {
            // Logging out would end the caller's session mid-matrix; its
            // place is the end.
            if template == "/api/logout" {
                continue;
            }
            let path = concrete(template, &b) + query_for(template);
            let (status, text) = call(client, &app, method, &path, &b).await;
            let want = expected(caller, access_of(template), method, template);
            assert!(
                want.holds(status, &text),
                "{caller:?} {method} {path}: {status}, expected {want:?}: {text:.300}"
            );
            if !(200..300).contains(&status) {
                let body: Value = serde_json::from_str(&text).unwrap_or_default();
                assert!(
                    body["error"]["code"].is_string() && body["error"]["message"].is_string(),
                    "{caller:?} {method} {path}: {status} without an error body: {text:.300}"
                );
            }
            if caller == Caller::Member {
                assert_no_secrets(
                    &b,
                    "a member of another tenant",
                    &format!("{method} {path}"),
                    &text,
                );
            }
        }
    }
    // Tenant A's cursors: B's job id pages like a random id.
    let (_, text) = call(
        &member,
        &app,
        "get",
        &format!("/api/jobs?before={}", b.job),
        &b,
    )
    .await;
    assert_no_secrets(&b, "a member", "a page after B's job", &text);

    b.sfn_discard_letter = another_dead_letter(&app, 3).await;
    server_functions(&app, &b, &anonymous, &member, &admin).await;

    for (caller, client, want) in [
        (Caller::Anonymous, &anonymous, 401),
        (Caller::Member, &member, 204),
        (Caller::Admin, &admin, 204),
    ] {
        let (status, _) = call(client, &app, "post", "/api/logout", &b).await;
        assert_eq!(status, want, "{caller:?} logout");
    }
}

/// A server function's arguments (form-encoded), by its name; unknown
/// names fail the test.
fn sfn_args(name: &str, b: &Foreign) -> (Access, Vec<(String, String)>) {
    let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
    match name {
        "whoami" => (Access::Public, vec![]),
        "login" => (
            Access::Public,
            vec![kv("email", "nobody@sfn.test"), kv("password", "wrong")],
        ),
        "logout" => (Access::Public, vec![]),
        "my_jobs" => (Access::User, vec![kv("limit", "50")]),
        "job" | "job_with_events" => (Access::User, vec![kv("id", &b.job)]),
        "live_cursor" | "inbox" | "mark_all_read" => (Access::User, vec![]),
        "mark_read" => (Access::User, vec![kv("id", &b.notification)]),
        "search" => (
            Access::User,
            vec![kv("q", "globex secret plans"), kv("k", "10")],
        ),
        "dashboard" => (Access::Admin, vec![kv("since_s", "3600")]),
        "admin_jobs" => (
            Access::Admin,
            ["state", "queue", "tenant", "q", "before"]
                .iter()
                .map(|f| kv(&format!("query[{f}]"), ""))
                .collect(),
        ),
        "dead_letters" | "audit" => (Access::Admin, vec![]),
        "requeue" => (Access::Admin, vec![kv("ids[0]", &b.dead_letter)]),
        "requeue_matching" => (Access::Admin, vec![kv("tenant", "globex")]),
        "discard" => (Access::Admin, vec![kv("id", &b.sfn_discard_letter)]),
        "cancel_job" | "retry_job" => (Access::User, vec![kv("id", &b.job)]),
        "delete_document" => (Access::User, vec![kv("id", &b.document)]),
        "cancel_matching" | "retry_matching" | "count_matching" => (
            Access::Admin,
            ["state", "queue", "tenant", "q", "before"]
                .iter()
                .map(|f| {
                    kv(
                        &format!("query[{f}]"),
                        if *f == "tenant" { "globex" } else { "" },
                    )
                })
                .collect(),
        ),
        // Paused before resumed: the server functions run in name order.
        "pause_queue" | "resume_queue" => (Access::Admin, vec![kv("queue", "normal")]),
        "set_reembed_paused" => (Access::Admin, vec![kv("paused", "true")]),
        "retry_reembeds" => (Access::Admin, vec![]),
        "batch" | "close_batch" => (Access::User, vec![kv("id", &b.batch)]),
        "create_batch" => (Access::User, vec![kv("name", "matrix")]),
        "act_on_batch" => (
            Access::User,
            vec![kv("id", &b.batch), kv("action", "retry")],
        ),
        "webhooks" => (Access::Admin, vec![]),
        "webhook_deliveries" | "delete_webhook" => (Access::Admin, vec![kv("id", &b.webhook)]),
        "redeliver" => (
            Access::Admin,
            vec![kv("webhook", &b.webhook), kv("delivery", &b.batch)],
        ),
        "create_webhook" => (
            Access::Admin,
            vec![
                kv("url", "https://93.184.215.14/matrix-sfn"),
                kv("events[0]", "job.done"),
                kv("description", ""),
            ],
        ),
        n => panic!("the isolation matrix does not know server function {n}: add it"),
    }
}

/// The `AppError` variant of a failed server function call, or `None` on success.
fn sfn_error(status: u16, text: &str) -> Option<String> {
    if (200..300).contains(&status) {
        return None;
    }
    let v: Value = serde_json::from_str(text).unwrap_or(Value::String(text.into()));
    Some(match v {
        Value::String(s) => s,
        Value::Object(o) => o.keys().next().cloned().unwrap_or_default(),
        other => other.to_string(),
    })
}

async fn server_functions(
    app: &TestApp,
    b: &Foreign,
    anonymous: &reqwest::Client,
    member: &reqwest::Client,
    admin: &reqwest::Client,
) {
    let mut fns: Vec<(String, String)> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, method)| (path.to_string(), method.to_string()))
        .collect();
    assert!(
        fns.len() >= 15,
        "the registry lists the server functions: {fns:?}"
    );
    // Acting last: discarding one dead letter, then re-enqueueing or
    // retrying everything matching (which would take it) and deleting;
    // logging out would end the session mid-matrix.
    fns.sort_by_key(|(p, _)| {
        let rank = if p.contains("discard") {
            1
        } else if [
            "requeue_matching",
            "retry_matching",
            "logout",
            "delete_document",
        ]
        .iter()
        .any(|n| p.contains(n))
        {
            2
        } else {
            0
        };
        (rank, p.clone())
    });
    for (caller, client) in [
        (Caller::Anonymous, anonymous),
        (Caller::Member, member),
        (Caller::Admin, admin),
    ] {
        for (path, method) in &fns {
            let name = sfn_name(path);
            if name == "logout" && caller != Caller::Anonymous {
                continue;
            }
            assert_eq!(method, "POST", "{path}");
            let (access, args) = sfn_args(name, b);
            let resp = client
                .post(app.url(path))
                .form(&args)
                .send()
                .await
                .expect("server function");
            let status = resp.status().as_u16();
            let text = resp.text().await.expect("body");
            let error = sfn_error(status, &text);
            let want: Option<&str> = match (caller, access) {
                (_, Access::Public) => error.as_deref().filter(|e| *e == "Validation"),
                (Caller::Anonymous, _) => Some("Unauthorized"),
                (Caller::Member, Access::Admin) => Some("Forbidden"),
                (Caller::Member, Access::User) if args.iter().any(|(k, _)| k == "id") => {
                    Some("NotFound")
                }
                (Caller::Admin, Access::User) if name == "mark_read" => Some("NotFound"),
                // B's job is done: nothing to cancel or retry.
                (Caller::Admin, Access::User) if name == "cancel_job" || name == "retry_job" => {
                    Some("Conflict")
                }
                // B's batch has no failed job; B's webhook is not the
                // operator organisation's.
                (Caller::Admin, Access::User) if name == "act_on_batch" => Some("Conflict"),
                (Caller::Admin, Access::Admin)
                    if matches!(name, "webhook_deliveries" | "delete_webhook" | "redeliver") =>
                {
                    Some("NotFound")
                }
                // The model never changed: no re-embedding to pause.
                (Caller::Admin, Access::Admin)
                    if matches!(name, "set_reembed_paused" | "retry_reembeds") =>
                {
                    Some("Conflict")
                }
                _ => None,
            };
            assert_eq!(
                error.as_deref(),
                want,
                "{caller:?} calling {name}: {status} {text:.300}"
            );
            if caller == Caller::Member {
                assert_no_secrets(b, "a member of another tenant", name, &text);
            }
        }
    }
    // Marking all of A's notifications read left B's alone.
    let unread: Option<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM notifications WHERE id = $1::uuid AND read_at IS NULL")
            .bind(&b.notification)
            .fetch_optional(&app.pool)
            .await
            .expect("query");
    assert!(
        unread.is_some(),
        "B's notification was marked read by someone else"
    );
}

/// A viewer (`docflow user add --role viewer`) reads what admins read and
/// acts on nothing: every REST route (as the OpenAPI document lists them)
/// and every server function (as the registry lists them) is called, reads
/// answer, every action is a 403 that says why, and nothing changed.
#[tokio::test]
async fn a_viewer_reads_what_admins_read_and_every_action_is_refused() {
    use crate::fixtures::VIEWER;
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1", "slow=1"])),
        ..Default::default()
    })
    .await;
    let b = foreign_objects(&app).await;
    let snapshot = || async {
        sqlx::query_as::<_, (i64, i64, i64, i64, i64)>(
            "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM documents WHERE deleted_at IS NOT NULL),
                    (SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL),
                    (SELECT count(*) FROM audit_log), (SELECT count(*) FROM paused_queues)",
        )
        .fetch_one(&app.pool)
        .await
        .expect("snapshot")
    };
    let before = snapshot().await;
    let viewer = app.client(VIEWER).await;
    let refused = |what: &str, status: u16, text: &str| {
        assert_eq!(status, 403, "{what}: {text:.300}");
        assert!(
            text.contains("viewer role reads only"),
            "{what}: {text:.300}"
        );
    };

    let routes = rest_routes(&app).await;
    let doc: Value = app.get_json(ADMIN, "/api/openapi.json").await;
    let (mut reads, mut actions) = (0, 0);
    for (method, template) in &routes {
        if matches!(
            template.as_str(),
            "/api/login" | "/api/logout" | "/api/openapi.json"
        ) {
            continue;
        }
        let path = concrete(template, &b) + query_for(template);
        let (status, text) = call(&viewer, &app, method, &path, &b).await;
        let what = format!("viewer {method} {path}");
        if template.starts_with("/api/notifications") {
            // The inbox is personal: B's notification is not the viewer's.
            let want = if template.contains("{id}") { 404 } else { 200 };
            assert_eq!(status, want, "{what}: {text:.300}");
        } else if template.starts_with("/api/webhooks/{id}") && method == "get" {
            // Webhooks belong to one organisation: B's is not the viewer's.
            assert_eq!(status, 404, "{what}: {text:.300}");
        } else if method == "get" {
            assert!((200..300).contains(&status), "{what}: {status} {text:.300}");
            reads += 1;
        } else {
            refused(&what, status, &text);
            assert!(
                doc["paths"][template][method]["responses"]["403"]["description"]
                    .as_str()
                    .is_some_and(|d| d.contains("viewer")),
                "the OpenAPI document says why {what} is a 403"
            );
            actions += 1;
        }
    }
    assert!(
        reads >= 8 && actions >= 10,
        "{reads} reads, {actions} actions"
    );

    let fns: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .collect();
    for path in &fns {
        let name = sfn_name(path);
        if matches!(name, "login" | "logout") {
            continue;
        }
        let (_, args) = sfn_args(name, &b);
        let resp = viewer
            .post(app.url(path))
            .form(&args)
            .send()
            .await
            .expect("server function");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let error = sfn_error(status, &text);
        let want = match name {
            "requeue" | "requeue_matching" | "discard" | "cancel_job" | "retry_job"
            | "delete_document" | "cancel_matching" | "retry_matching" | "count_matching"
            | "pause_queue" | "resume_queue" | "set_reembed_paused" | "retry_reembeds"
            | "act_on_batch" | "create_webhook" | "create_batch" | "close_batch"
            | "delete_webhook" | "redeliver" => Some("Forbidden"),
            "mark_read" | "webhook_deliveries" => Some("NotFound"),
            _ => None,
        };
        assert_eq!(
            error.as_deref(),
            want,
            "viewer {name}: {status} {text:.300}"
        );
    }
    // Its pages and the job page read as an operator's, without actions.
    let (status, page) = app
        .server_fn(VIEWER, "job_with_events", &[("id", &b.job)])
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        (page["for_operator"].as_bool(), page["can_act"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(snapshot().await, before, "the viewer changed nothing");
}
