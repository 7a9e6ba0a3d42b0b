//! Security: what one tenant can learn about another, and what a hostile
//! filename can do.

use std::time::Duration;

use serde_json::Value;

use crate::fixtures::{ALICE, BOB};
use crate::{
    fixtures::prose,
    helpers::{spawn_with, Options},
};

#[tokio::test]
async fn a_foreign_job_id_as_a_cursor_answers_like_a_random_one() {
    let app = spawn_with(Options::default()).await;
    for i in 0..3 {
        app.upload_ok(ALICE, &format!("a-{i}.txt"), prose("a", 3).into_bytes())
            .await;
    }
    let b = app
        .upload_ok(BOB, "b.txt", prose("b", 3).into_bytes())
        .await;
    let foreign = b["job_id"].as_str().expect("id");
    let random = uuid::Uuid::now_v7().to_string();
    let page = |before: String| {
        let app = &app;
        async move {
            let r = app
                .client(ALICE)
                .await
                .get(app.url(&format!("/api/jobs?before={before}")))
                .send()
                .await
                .expect("list");
            let status = r.status().as_u16();
            let body: Value = r.json().await.expect("json");
            (status, body)
        }
    };
    let (foreign_status, foreign_page) = page(foreign.to_string()).await;
    let (random_status, random_page) = page(random).await;
    assert_eq!(
        (foreign_status, &foreign_page),
        (random_status, &random_page),
        "another tenant's job id must tell nothing"
    );
}

#[tokio::test]
async fn filenames_with_bidi_overrides_are_refused() {
    let app = spawn_with(Options::default()).await;
    for name in [
        "invoice\u{202E}txt.exe",
        "report\u{2066}.pdf",
        "a\u{200F}b.txt",
    ] {
        let r = app.upload(ALICE, name, prose("x", 2).into_bytes()).await;
        assert_eq!(r.status(), 400, "{name:?}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], "invalid_filename", "{body}");
    }
    assert_eq!(app.count("documents").await, 0, "nothing was written");
}

#[tokio::test]
async fn a_tenant_never_sees_which_administrator_acted_on_its_job() {
    let app = spawn_with(Options {
        roles: docflow::Roles::all(crate::helpers::queues(&["high=1"])),
        ..Default::default()
    })
    .await;
    let b = app
        .upload_ok(ALICE, "broken.pdf", b"%PDF-1.7\n1 0 obj garbage".to_vec())
        .await;
    let job_id = b["job_id"].as_str().expect("id");
    app.wait_state(ALICE, job_id, "failed").await;
    let admin = app.client("admin@demo.test").await;
    let dead: Vec<Value> = loop {
        let dl: Vec<Value> = app
            .get_json("admin@demo.test", "/api/admin/dead-letters")
            .await;
        if !dl.is_empty() {
            break dl;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let id = dead[0]["id"].as_str().expect("dead letter id");
    let r = admin
        .post(app.url(&format!("/api/admin/dead-letters/{id}/requeue")))
        .send()
        .await
        .expect("requeue");
    assert_eq!(r.status(), 202);
    let timeline = app.timeline(job_id).await;
    assert!(
        timeline
            .iter()
            .any(|m| m == "re-enqueued by an administrator"),
        "{timeline:?}"
    );
    assert!(
        !timeline.iter().any(|m| m.contains("admin@demo.test")),
        "{timeline:?}"
    );
    // Who did it stays in the audit log, for admins.
    let audit: Vec<Value> = app.get_json("admin@demo.test", "/api/admin/audit").await;
    assert_eq!(audit[0]["actor"], "admin@demo.test");
}

#[tokio::test]
async fn search_does_not_show_users_what_the_embedding_provider_said() {
    let mock = crate::fixtures::MockEmbedder::start(crate::fixtures::EmbedBehaviour {
        refuse: true,
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        configure: Box::new(move |c| {
            c.embedder = docflow::platform::config::EmbedderKind::Openai;
            c.embed_url = Some(url);
        }),
        ..Default::default()
    })
    .await;
    let r = app
        .client(ALICE)
        .await
        .get(app.url("/api/search?q=quarterly+revenue"))
        .send()
        .await
        .expect("search");
    assert_eq!(r.status(), 503);
    let body = r.text().await.expect("body");
    for secret in [mock.url().as_str(), "127.0.0.1", "model not found", "400"] {
        assert!(!body.contains(secret), "{secret:?} leaked: {body}");
    }
    assert!(body.contains("search is unavailable right now"), "{body}");
}

#[tokio::test]
async fn pages_and_api_answers_carry_the_security_headers() {
    let app = spawn_with(Options::default()).await;
    for path in ["/login", "/api/jobs", "/healthz"] {
        let r = app
            .anonymous()
            .get(app.url(path))
            .send()
            .await
            .expect("get");
        let h = r.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert!(
            h["content-security-policy"]
                .to_str()
                .expect("ascii")
                .contains("frame-ancestors 'none'"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn pages_allow_only_their_own_scripts_through_a_per_answer_nonce() {
    let app = spawn_with(Options::default()).await;
    let mut nonces = Vec::new();
    for path in ["/login", "/no-such-page"] {
        let r = app
            .anonymous()
            .get(app.url(path))
            .send()
            .await
            .expect("get");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .expect("ascii")
            .to_string();
        let html = r.text().await.expect("html");
        let nonce = csp
            .split(['\'', ' '])
            .find_map(|w| w.strip_prefix("nonce-"))
            .unwrap_or_else(|| panic!("{path}: no nonce in {csp}"))
            .to_string();
        for directive in [
            "default-src 'self'",
            "'wasm-unsafe-eval'",
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {directive} in {csp}");
        }
        assert!(!csp.contains("'unsafe-eval'") && !csp.contains("script-src 'unsafe-inline'"));
        // Every script element carries this answer's nonce.
        let scripts: Vec<&str> = html.split("<script").skip(1).collect();
        assert!(
            !scripts.is_empty(),
            "{path}: the page hydrates with a script"
        );
        for script in scripts {
            let tag = &script[..script.find('>').expect("tag end")];
            assert!(
                tag.contains(&format!("nonce=\"{nonce}\"")),
                "{path}: a script without the nonce: <script{tag}>"
            );
        }
        nonces.push(nonce);
    }
    assert_ne!(nonces[0], nonces[1], "a nonce is used once");
    // API answers allow nothing at all.
    let r = app
        .anonymous()
        .get(app.url("/api/jobs"))
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.headers()["content-security-policy"],
        "default-src 'none'; frame-ancestors 'none'"
    );
}

#[tokio::test]
async fn metrics_can_require_a_bearer_token() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.metrics_token = Some("scrape-secret".into())),
        ..Default::default()
    })
    .await;
    let c = app.anonymous();
    let url = app.url("/metrics");
    assert_eq!(c.get(&url).send().await.expect("get").status(), 401);
    let wrong = c.get(&url).bearer_auth("guess").send().await.expect("get");
    assert_eq!(wrong.status(), 401);
    let right = c
        .get(&url)
        .bearer_auth("scrape-secret")
        .send()
        .await
        .expect("get");
    assert_eq!(right.status(), 200);
    assert!(right
        .text()
        .await
        .expect("text")
        .contains("docflow_sse_clients"));
}

#[tokio::test]
async fn failed_logins_are_throttled_per_account_with_retry_after() {
    let app = spawn_with(Options::default()).await;
    let login = |email: &'static str, password: &'static str| {
        let app = &app;
        async move {
            app.anonymous()
                .post(app.url("/api/login"))
                .json(&serde_json::json!({"email": email, "password": password}))
                .send()
                .await
                .expect("login")
        }
    };
    for _ in 0..docflow::identity::throttle::ACCOUNT_FAILURES_PER_MINUTE {
        assert_eq!(login(ALICE, "wrong").await.status(), 401);
    }
    let r = login(ALICE, "wrong").await;
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "too_many_requests");
    // The account waits, even with the right password...
    assert_eq!(login(ALICE, crate::helpers::PASSWORD).await.status(), 429);
    // ...but other accounts from the same address do not.
    assert_eq!(login(BOB, crate::helpers::PASSWORD).await.status(), 200);
    // An address longer than any account's is refused before any lookup.
    let long: &'static str = Box::leak(format!("{}@x.test", "a".repeat(300)).into_boxed_str());
    assert_eq!(login(long, "wrong").await.status(), 400);
}

#[tokio::test]
async fn a_tenant_that_fills_its_share_of_the_backlog_leaves_room_for_others() {
    let app = spawn_with(Options {
        roles: docflow::Roles {
            web: true,
            background: false,
            queues: vec![],
            slots: 0,
        },
        // No workers: everything stays unfinished. A tenant may hold half of 6.
        configure: Box::new(|c| {
            c.max_backlog = 6;
            c.tenant_share = 50;
        }),
        ..Default::default()
    })
    .await;
    let upload = |who: &'static str, name: &'static str| {
        let app = &app;
        async move { app.upload(who, name, prose(name, 2).into_bytes()).await }
    };
    for name in ["a1.txt", "a2.txt", "a3.txt"] {
        assert_eq!(upload(ALICE, name).await.status(), 202);
        // Counts are refreshed at most once a second.
        tokio::time::sleep(docflow::jobs::repo::Backlog::MAX_AGE).await;
    }
    let r = upload(ALICE, "a4.txt").await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "too_many_requests");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("share"),
        "{body}"
    );
    // The other tenant still gets in.
    assert_eq!(upload(BOB, "b1.txt").await.status(), 202);
    assert_eq!(
        app.count("jobs").await,
        4,
        "the refused upload wrote nothing"
    );
}

#[tokio::test]
async fn each_plan_has_its_limit_of_unfinished_documents_from_config() {
    let app = spawn_with(Options {
        roles: docflow::Roles {
            web: true,
            background: false,
            queues: vec![],
            slots: 0,
        },
        // No workers: everything stays unfinished. Globex is on the free
        // plan, Acme on the paid one.
        configure: Box::new(|c| {
            c.free_max_unfinished = Some(2);
            c.paid_max_unfinished = Some(3);
        }),
        ..Default::default()
    })
    .await;
    let upload = |who: &'static str, name: &'static str| {
        let app = &app;
        async move { app.upload(who, name, prose(name, 2).into_bytes()).await }
    };
    for name in ["b1.txt", "b2.txt"] {
        assert_eq!(upload(BOB, name).await.status(), 202);
    }
    let r = upload(BOB, "b3.txt").await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("your plan allows 2 documents"),
        "{body}"
    );
    for name in ["a1.txt", "a2.txt", "a3.txt"] {
        assert_eq!(upload(ALICE, name).await.status(), 202);
    }
    assert_eq!(upload(ALICE, "a4.txt").await.status(), 429);
    assert_eq!(app.count("jobs").await, 5, "refused uploads wrote nothing");
    assert_eq!(app.count("documents").await, 5);
    // A tenant's own limit takes precedence over its plan's, from the
    // moment it is set (by hand here): web processes keep a session's user
    // and tenant for up to 5 s, but forget them when the row changes.
    sqlx::query("UPDATE tenants SET max_unfinished_jobs = 4 WHERE slug = 'globex'")
        .execute(&app.pool)
        .await
        .expect("update");
    let changed = std::time::Instant::now();
    loop {
        let status = upload(BOB, "b3.txt").await.status();
        if status == 202 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            changed.elapsed() < Duration::from_secs(2),
            "the new limit did not apply within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.count("jobs").await, 6);
}

#[tokio::test]
async fn a_user_gets_a_bounded_number_of_event_streams() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.sse_per_user = 3),
        ..Default::default()
    })
    .await;
    let alice = app.client(ALICE).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let r = alice.get(app.url("/api/events")).send().await.expect("sse");
        assert_eq!(r.status(), 200);
        open.push(r);
    }
    let r = alice.get(app.url("/api/events")).send().await.expect("sse");
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("3 live event streams"),
        "{body}"
    );
    // Another user is not affected.
    let bob = app.client(BOB).await;
    assert_eq!(
        bob.get(app.url("/api/events"))
            .send()
            .await
            .expect("sse")
            .status(),
        200
    );
    drop(open);
}

#[tokio::test]
async fn requests_from_another_site_cannot_log_in_or_change_anything() {
    use leptos::server_fn::ServerFn;
    let app = spawn_with(Options::default()).await;
    let evil = "https://evil.example";
    let credentials = serde_json::json!({"email": ALICE, "password": crate::helpers::PASSWORD});
    // A cross-site login (login CSRF), through the REST API...
    let r = app
        .anonymous()
        .post(app.url("/api/login"))
        .header("origin", evil)
        .json(&credentials)
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none(), "no session");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "cross_origin");
    // ...and through the login server function, as a plain HTML form would.
    let r = app
        .anonymous()
        .post(app.url(app::api::session::Login::PATH))
        .header("origin", evil)
        .form(&[("email", ALICE), ("password", crate::helpers::PASSWORD)])
        .send()
        .await
        .expect("server fn");
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none(), "no session");
    // A logged-in user's browser sending an upload from another site.
    let alice = app.client(ALICE).await;
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(prose("x", 2).into_bytes()).file_name("x.txt"),
    );
    let r = alice
        .post(app.url("/api/documents"))
        .header("referer", format!("{evil}/page"))
        .multipart(form)
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 403);
    assert_eq!(app.count("documents").await, 0, "nothing written");
    // The site's own pages, and clients that name no origin, go through.
    let own = app.base.clone();
    let r = app
        .anonymous()
        .post(app.url("/api/login"))
        .header("origin", own)
        .json(&credentials)
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200);
    app.upload_ok(ALICE, "y.txt", prose("y", 2).into_bytes())
        .await;
}

#[tokio::test]
async fn behind_https_session_cookies_are_secure_host_only_and_pages_send_hsts() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.public_url = Some("https://docs.example".into())),
        ..Default::default()
    })
    .await;
    // The browser's page is https://docs.example (a proxy in front of docflow).
    let r = app
        .anonymous()
        .post(app.url("/api/login"))
        .header("origin", "https://docs.example")
        .json(&serde_json::json!({"email": ALICE, "password": crate::helpers::PASSWORD}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(cookie.starts_with("__Host-docflow_session="), "{cookie}");
    for attribute in ["Secure", "HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");
    // Plain http without a public URL: no HSTS (it would lock out the site).
    let plain = spawn_with(Options::default()).await;
    let r = plain
        .anonymous()
        .get(plain.url("/login"))
        .send()
        .await
        .expect("page");
    assert!(r.headers().get("strict-transport-security").is_none());
}

#[tokio::test]
async fn a_stream_resumed_from_far_back_is_told_to_reload_instead_of_replaying_history() {
    let app = spawn_with(Options::default()).await;
    app.upload_ok(ALICE, "old.txt", prose("o", 2).into_bytes())
        .await;
    let over = docflow::notify::sse::MAX_REPLAY + 500;
    sqlx::query(
        "INSERT INTO job_events (job_id, tenant_id, state, message)
         SELECT id, tenant_id, 'pending', 'history ' || g FROM jobs, generate_series(1, $1) g",
    )
    .bind(over)
    .execute(&app.pool)
    .await
    .expect("history");
    let newest: i64 = sqlx::query_scalar("SELECT max(id) FROM job_events")
        .fetch_one(&app.pool)
        .await
        .expect("max");
    let alice = app.client(ALICE).await;
    let mut sse = crate::helpers::SseReader::open(&alice, &app.url("/api/events"), Some(1)).await;
    let first = sse.next().await.expect("an event");
    assert_eq!(first.event, "reload", "{first:?}");
    assert_eq!(first.id, Some(newest), "the client resumes from now");
    // Nothing of the history follows: the next event is a new one.
    app.upload_ok(ALICE, "new.txt", prose("n", 2).into_bytes())
        .await;
    let next = sse.next().await.expect("an event");
    assert_eq!(next.event, "job");
    assert!(next.id.expect("id") > newest, "{next:?}");
    assert_eq!(next.data["message"], "queued on high");
}
