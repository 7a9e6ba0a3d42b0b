//! Credentials end, and what was opened with them ends too: logout, a
//! password change and a session's absolute lifetime for sessions;
//! revocation and expiry for API tokens (managed with `docflow token`).
//! Also the admin scope: platform operators read any tenant's job.

use std::{process::Command, time::Duration};

use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::prose,
    helpers::{spawn_app, spawn_peer, spawn_with, Options, SseReader, TestApp, PASSWORD},
};

/// A fresh session of `email` (not the app's cached client).
async fn log_in(app: &TestApp, email: &str, password: &str) -> reqwest::Client {
    let c = app.anonymous();
    log_in_with(app, &c, email, password).await;
    c
}

/// Logs `client` in; the login's answer (its session cookie).
async fn log_in_with(
    app: &TestApp,
    client: &reqwest::Client,
    email: &str,
    password: &str,
) -> reqwest::Response {
    let r = client
        .post(app.url("/api/login"))
        .json(&serde_json::json!({"email": email, "password": password}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200, "login as {email}");
    r
}

/// True when the stream ends (without error) within `within`, whatever it
/// sends first.
async fn ends_within(stream: &mut SseReader, within: Duration) -> bool {
    tokio::time::timeout(within, async { while stream.next().await.is_some() {} })
        .await
        .is_ok()
}

async fn status_of(client: &reqwest::Client, url: String) -> u16 {
    client
        .get(url)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

/// Runs `docflow <args>` against the app's database; its standard output.
fn docflow(app: &TestApp, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_docflow"))
        .args(args)
        .env("DATABASE_URL", &app.iso.database_url)
        .env("DOCFLOW_PASSWORD", "a-new-password")
        .env_remove("RUST_LOG")
        .output()
        .expect("docflow runs");
    assert!(
        out.status.success(),
        "docflow {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Uses `client`'s session for `during`, a request every half second, each
/// of them accepted.
async fn in_use(app: &TestApp, client: &reqwest::Client, during: Duration) {
    let started = std::time::Instant::now();
    while started.elapsed() < during {
        assert_eq!(
            status_of(client, app.url("/api/jobs")).await,
            200,
            "a session in use ended {:?} after login",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn logout_ends_that_sessions_event_streams_and_no_other() {
    let app = spawn_app().await;
    let here = log_in(&app, ALICE, PASSWORD).await;
    let elsewhere = log_in(&app, ALICE, PASSWORD).await;
    let mut here_stream = SseReader::open(&here, &app.url("/api/events"), None).await;
    let mut elsewhere_stream = SseReader::open(&elsewhere, &app.url("/api/events"), None).await;

    let r = here
        .post(app.url("/api/logout"))
        .send()
        .await
        .expect("logout");
    assert_eq!(r.status(), 204);
    assert!(
        ends_within(&mut here_stream, Duration::from_secs(10)).await,
        "the logged-out session's stream is still open"
    );
    assert_eq!(status_of(&here, app.url("/api/jobs")).await, 401);

    // The other session goes on, its stream too.
    assert_eq!(status_of(&elsewhere, app.url("/api/jobs")).await, 200);
    let job = app
        .upload_ok(ALICE, "still-live.txt", prose("live", 30).into_bytes())
        .await;
    let event = tokio::time::timeout(Duration::from_secs(30), elsewhere_stream.next())
        .await
        .expect("an event")
        .expect("the stream is open");
    assert_eq!(event.data["job_id"], job["job_id"]);
}

#[tokio::test]
async fn a_password_change_ends_every_session_of_the_user_and_their_streams() {
    let app = spawn_app().await;
    let one = log_in(&app, ALICE, PASSWORD).await;
    let two = log_in(&app, ALICE, PASSWORD).await;
    let bob = log_in(&app, BOB, PASSWORD).await;
    let mut stream = SseReader::open(&one, &app.url("/api/events"), None).await;
    let mut bob_stream = SseReader::open(&bob, &app.url("/api/events"), None).await;

    docflow(&app, &["user", "password", "--email", ALICE]);

    assert!(
        ends_within(&mut stream, Duration::from_secs(10)).await,
        "a stream outlived its user's password change"
    );
    assert_eq!(status_of(&one, app.url("/api/jobs")).await, 401);
    assert_eq!(status_of(&two, app.url("/api/jobs")).await, 401);
    // The old password is gone, the new one works.
    let r = app
        .anonymous()
        .post(app.url("/api/login"))
        .json(&serde_json::json!({"email": ALICE, "password": PASSWORD}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 401);
    let fresh = log_in(&app, ALICE, "a-new-password").await;
    assert_eq!(status_of(&fresh, app.url("/api/jobs")).await, 200);
    // Another user is untouched.
    assert_eq!(status_of(&bob, app.url("/api/jobs")).await, 200);
    assert!(
        !ends_within(&mut bob_stream, Duration::from_secs(1)).await,
        "another user's stream ended"
    );
}

#[tokio::test]
async fn a_session_ends_at_its_absolute_lifetime_however_active() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.session_max = Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let alice = log_in(&app, ALICE, PASSWORD).await;
    let mut stream = SseReader::open(&alice, &app.url("/api/events"), None).await;
    in_use(&app, &alice, Duration::from_secs(2)).await;
    assert!(
        ends_within(&mut stream, Duration::from_secs(5)).await,
        "the stream outlived its session"
    );
    assert_eq!(status_of(&alice, app.url("/api/jobs")).await, 401);
    // Logging in again starts a new lifetime.
    let again = log_in(&app, ALICE, PASSWORD).await;
    assert_eq!(status_of(&again, app.url("/api/jobs")).await, 200);
}

#[tokio::test]
async fn a_session_in_use_outlives_its_idle_time_and_an_unused_one_ends() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.session_idle = Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let alice = log_in(&app, ALICE, PASSWORD).await;
    // In use for twice its idle time.
    in_use(&app, &alice, Duration::from_secs(6)).await;
    // Then unused for longer than its idle time.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(status_of(&alice, app.url("/api/jobs")).await, 401);
}

#[tokio::test]
async fn a_logout_ends_the_session_in_every_web_process_at_once() {
    let app = spawn_app().await;
    let peer = spawn_peer(&app).await;
    // The session cookie by hand, so that it can be sent again after the
    // logout (a browser would drop it; a stolen copy would not).
    let plain = reqwest::Client::new();
    let r = log_in_with(&app, &plain, ALICE, PASSWORD).await;
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_string();
    let status = |base: &TestApp| {
        plain
            .get(base.url("/api/jobs"))
            .header("cookie", &cookie)
            .send()
    };
    // Both processes have just read the session (and may remember it).
    assert_eq!(status(&peer).await.expect("jobs").status(), 200);
    assert_eq!(status(&app).await.expect("jobs").status(), 200);
    let r = plain
        .post(app.url("/api/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("logout");
    assert_eq!(r.status(), 204);
    assert_eq!(status(&app).await.expect("jobs").status(), 401);
    // The other process learns it within moments, well before its memory
    // of the session would have lapsed.
    let ended = std::time::Instant::now();
    let mut answer = 200;
    while answer != 401 && ended.elapsed() < Duration::from_secs(2) {
        answer = status(&peer).await.expect("jobs").status().as_u16();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answer, 401, "the other process still accepts the session");
}

fn bearer(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

/// The `docflow token list` line of the token named `name`.
fn listed(app: &TestApp, name: &str) -> String {
    docflow(app, &["token", "list", "--email", ALICE])
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("token {name} listed"))
        .to_string()
}

/// Opens a batch with `client`; its id.
async fn open_batch(client: &reqwest::Client, app: &TestApp) -> String {
    let r = client
        .post(app.url("/api/batches"))
        .json(&serde_json::json!({"name": "open"}))
        .send()
        .await
        .expect("create a batch");
    assert_eq!(r.status(), 201);
    let b: Value = r.json().await.expect("json");
    b["id"].as_str().expect("id").to_string()
}

#[tokio::test]
async fn tokens_are_managed_from_the_command_line_and_stop_working_when_revoked_or_expired() {
    let app = spawn_app().await;
    let secret = docflow(&app, &["token", "create", "--email", ALICE, "--name", "ci"]);
    let ci = bearer(secret.trim());
    assert_eq!(status_of(&ci, app.url("/api/jobs")).await, 200);
    let mut stream = SseReader::open(&ci, &app.url("/api/events"), None).await;
    // A batch's stream (an open batch streams until it is done) ends too.
    let batch = open_batch(&ci, &app).await;
    let mut batch_stream =
        SseReader::open(&ci, &app.url(&format!("/api/batches/{batch}/events")), None).await;
    let line = listed(&app, "ci");
    assert!(line.ends_with("active"), "{line}");
    assert!(!line.contains(secret.trim()), "the list shows no secret");

    let id = line.split_whitespace().next().expect("id").to_string();
    let out = docflow(&app, &["token", "revoke", "--email", ALICE, "--id", &id]);
    assert!(out.contains("revoked 1"), "{out}");
    let r = ci.get(app.url("/api/jobs")).send().await.expect("request");
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    assert!(
        ends_within(&mut stream, Duration::from_secs(10)).await,
        "a stream outlived its revoked token"
    );
    assert!(
        ends_within(&mut batch_stream, Duration::from_secs(10)).await,
        "a batch's stream outlived its revoked token"
    );
    assert!(listed(&app, "ci").ends_with("revoked"));

    let secret = docflow(
        &app,
        &[
            "token",
            "create",
            "--email",
            ALICE,
            "--name",
            "brief",
            "--expires-in",
            "2s",
        ],
    );
    let brief = bearer(secret.trim());
    assert_eq!(status_of(&brief, app.url("/api/jobs")).await, 200);
    let mut stream = SseReader::open(&brief, &app.url("/api/events"), None).await;
    let batch = open_batch(&brief, &app).await;
    let mut batch_stream = SseReader::open(
        &brief,
        &app.url(&format!("/api/batches/{batch}/events")),
        None,
    )
    .await;
    assert!(
        ends_within(&mut stream, Duration::from_secs(6)).await,
        "a stream outlived its token's expiry"
    );
    assert!(
        ends_within(&mut batch_stream, Duration::from_secs(6)).await,
        "a batch's stream outlived its token's expiry"
    );
    assert_eq!(status_of(&brief, app.url("/api/jobs")).await, 401);
    assert!(listed(&app, "brief").ends_with("expired"));
}

#[tokio::test]
async fn administrators_read_any_tenants_job_and_its_events_members_only_their_own() {
    let app = spawn_with(Options {
        roles: docflow::Roles::all(crate::helpers::queues(&["high=1", "normal=1"])),
        ..Default::default()
    })
    .await;
    let job = app
        .upload_ok(BOB, "globex.txt", prose("globex", 20).into_bytes())
        .await;
    let id = job["job_id"].as_str().expect("id");
    app.wait_state(BOB, id, "done").await;

    let admin = app.client(ADMIN).await;
    let seen: Value = admin
        .get(app.url(&format!("/api/jobs/{id}")))
        .send()
        .await
        .expect("job")
        .json()
        .await
        .expect("json");
    assert_eq!(seen["id"], id);
    let mut events =
        SseReader::open(&admin, &app.url(&format!("/api/jobs/{id}/events")), None).await;
    let first = events.next().await.expect("the job's events replay");
    assert_eq!(first.data["job_id"], id);

    let alice = app.client(ALICE).await;
    assert_eq!(
        status_of(&alice, app.url(&format!("/api/jobs/{id}"))).await,
        404
    );
    assert_eq!(
        status_of(&alice, app.url(&format!("/api/jobs/{id}/events"))).await,
        404
    );
}

/// A page that needs a login answers an anonymous visitor with an HTTP
/// redirect, so that clients without JavaScript (curl, link previews) are
/// sent to the login page too; a signed-in visitor gets the page.
#[tokio::test]
async fn an_anonymous_visitor_to_a_page_is_redirected_by_http_to_the_login_page() {
    let app = spawn_app().await;
    let no_js = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for (path, to) in [
        ("/admin", "/login?next=%2Fadmin"),
        ("/", "/login"),
        (
            "/admin/jobs?state=failed",
            "/login?next=%2Fadmin%2Fjobs%3Fstate%3Dfailed",
        ),
    ] {
        let r = see_other(&no_js, &app, path, to).await;
        assert_eq!(r.text().await.expect("body"), "", "{path}: no page body");
    }
    // The login page itself and the API are not redirected.
    let login = no_js.get(app.url("/login")).send().await.expect("login");
    assert_eq!(login.status(), 200);
    let api = no_js.get(app.url("/api/jobs")).send().await.expect("api");
    assert_eq!(api.status(), 401);
    // Signed in, the page is served.
    let alice = app.client(ALICE).await;
    let page = alice
        .get(app.url("/admin/jobs"))
        .send()
        .await
        .expect("page");
    assert!(
        page.status() == 200 || page.status() == 403,
        "{}",
        page.status()
    );
    let home = alice.get(app.url("/")).send().await.expect("home");
    assert_eq!(home.status(), 200);
}

/// A signed-in visitor to the login page is sent on to where they were
/// going: where a login posted before the page hydrated ends (the server
/// function sends the browser back to the login page it came from).
#[tokio::test]
async fn a_signed_in_visitor_to_the_login_page_is_sent_on_by_http() {
    let app = spawn_app().await;
    let no_js = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .cookie_store(true)
        .build()
        .expect("client");
    log_in_with(&app, &no_js, ALICE, PASSWORD).await;
    for (path, to) in [
        ("/login?next=%2Fsearch%3Fq%3Dharbour", "/search?q=harbour"),
        ("/login", "/"),
        // Only a path on this site is followed.
        ("/login?next=https%3A%2F%2Fevil.test%2F", "/"),
    ] {
        see_other(&no_js, &app, path, to).await;
    }
}

/// Asserts that `GET path` answers `303 See Other` to `to`; the answer.
async fn see_other(
    client: &reqwest::Client,
    app: &TestApp,
    path: &str,
    to: &str,
) -> reqwest::Response {
    let r = client.get(app.url(path)).send().await.expect("page");
    assert_eq!(r.status(), 303, "{path}");
    assert_eq!(
        r.headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some(to),
        "{path}"
    );
    r
}
