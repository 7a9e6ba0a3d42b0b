//! What an operator and a user read on the dead-letter list, the job page
//! and the audit log (issue 18): dead letters filtered by reason, queue and
//! tenant with queues named as on the dashboard; attempts that agree across
//! a job's header, its steps, its timeline and its dead letter; the time a
//! job lay dead-lettered told apart from its working time; the uploader
//! told to administrators only; audit entries that name the file.

use std::time::Duration;

use docflow::{platform::config::EmbedderKind, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::{pdf, prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_with, Options, TestApp},
};

/// Bytes that claim to be a PDF: the parse step fails them for good.
const BROKEN_PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref";

/// Workers for `high` and `normal`, one retry after 100 ms, embeddings
/// from `mock`.
async fn app_with(mock: &MockEmbedder) -> TestApp {
    app_configured(mock, |_| {}).await
}

/// [`app_with`], and whatever `more` sets.
async fn app_configured(
    mock: &MockEmbedder,
    more: impl FnOnce(&mut docflow::platform::config::Config) + Send + 'static,
) -> TestApp {
    let url = mock.url();
    spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1"])),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            c.retry_delays =
                docflow::platform::config::RetryDelays(vec![Duration::from_millis(100)]);
            c.breaker_failures = 1_000;
            more(c);
        }),
        ..Default::default()
    })
    .await
}

/// Calls the server function `name` as `who` with form fields, as a page
/// does; its JSON answer (200 expected).
async fn server_fn(app: &TestApp, who: &str, name: &str, args: &[(&str, &str)]) -> Value {
    let (status, answer) = app.server_fn(who, name, args).await;
    assert_eq!(status, 200, "{name}: {answer}");
    answer
}

/// The dead letters `GET /api/admin/dead-letters?{query}` lists, by file name.
async fn listed(app: &TestApp, query: &str) -> Vec<String> {
    let list: Vec<Value> = app
        .get_json(ADMIN, &format!("/api/admin/dead-letters?{query}"))
        .await;
    let mut names: Vec<String> = list
        .iter()
        .map(|d| d["filename"].as_str().unwrap_or("?").to_string())
        .collect();
    names.sort();
    names
}

/// `POST path` as `who`, without a body.
async fn post(app: &TestApp, who: &str, path: &str) -> reqwest::Response {
    app.client(who)
        .await
        .post(app.url(path))
        .send()
        .await
        .expect("request")
}

/// Waits until `n` dead letters are unresolved.
async fn wait_dead_letters(app: &TestApp, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list: Vec<Value> = app
            .get_json(ADMIN, "/api/admin/dead-letters?limit=500")
            .await;
        if list.len() >= n {
            return list;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} dead letters: {list:?}",
            list.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The lines of a job's timeline as its page shows them.
async fn page_timeline(app: &TestApp, who: &str, job_id: &str) -> Vec<String> {
    let detail = server_fn(app, who, "job_with_events", &[("id", job_id)]).await;
    detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The "attempt N …" lines of a timeline.
fn run_lines(timeline: &[String]) -> Vec<&str> {
    timeline
        .iter()
        .map(String::as_str)
        .filter(|m| m.starts_with("attempt "))
        .collect()
}

#[tokio::test]
async fn dead_letters_filter_by_reason_queue_and_tenant_and_name_queues_as_the_dashboard_does() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    let app = app_with(&mock).await;
    // acme is paid (queue high), globex free (queue normal).
    let doomed = app
        .upload_ok(ALICE, "doomed.txt", prose("doomed", 20).into_bytes())
        .await;
    app.upload_ok(ALICE, "acme-broken.pdf", BROKEN_PDF.to_vec())
        .await;
    app.upload_ok(BOB, "globex-broken.pdf", BROKEN_PDF.to_vec())
        .await;
    let all = wait_dead_letters(&app, 3).await;
    for d in &all {
        let queue = d["queue"].as_str().expect("queue");
        assert!(queue == "high" || queue == "normal", "{d}");
    }

    assert_eq!(
        listed(&app, "reason=permanent").await,
        ["acme-broken.pdf", "globex-broken.pdf"]
    );
    assert_eq!(listed(&app, "reason=exhausted").await, ["doomed.txt"]);
    assert_eq!(listed(&app, "queue=normal").await, ["globex-broken.pdf"]);
    assert_eq!(
        listed(&app, "tenant=acme").await,
        ["acme-broken.pdf", "doomed.txt"]
    );
    assert_eq!(
        listed(&app, "tenant=acme&reason=permanent&queue=high").await,
        ["acme-broken.pdf"]
    );
    assert_eq!(
        listed(&app, "queue=docflow.jobs.high").await,
        Vec::<String>::new(),
        "the queue is named as on the dashboard"
    );
    assert_eq!(listed(&app, "reason=&queue=&tenant=").await.len(), 3);

    // The exhausted one ran twice (a run and its one retry), and its row
    // says what its job page says.
    let job_id = doomed["job_id"].as_str().expect("id");
    let job = app.job(ALICE, job_id).await;
    let row = all
        .iter()
        .find(|d| d["job_id"] == job_id)
        .expect("doomed's dead letter");
    assert_eq!(job["attempt"], 2, "{job:#}");
    assert_eq!(row["attempts"], job["attempt"]);
    assert_eq!(
        job["steps"][2]["attempts"], job["attempt"],
        "embed ran each time"
    );

    // The page's server function filters the same way and offers the tenants.
    let page = server_fn(
        &app,
        ADMIN,
        "dead_letters",
        &[("reason", "permanent"), ("tenant", "globex")],
    )
    .await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page:#}");
    assert_eq!(items[0]["filename"], "globex-broken.pdf");
    assert_eq!(items[0]["queue"], "normal");
    assert_eq!(page["tenants"], serde_json::json!(["acme", "globex"]));
}

#[tokio::test]
async fn a_re_enqueued_job_counts_its_attempts_on_and_keeps_its_dead_time_apart_from_its_working_time(
) {
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    let app = app_with(&mock).await;
    let accepted = app
        .upload_ok(ALICE, "ledger.txt", prose("ledger", 20).into_bytes())
        .await;
    let job_id = accepted["job_id"].as_str().expect("id");
    let failed = app.wait_state(ALICE, job_id, "failed").await;
    assert_eq!(failed["attempt"], 2, "a run and one retry: {failed:#}");
    let dl = wait_dead_letters(&app, 1).await;
    assert_eq!(
        dl[0]["attempts"], 2,
        "the dead letter counts as the job does"
    );
    let open = &failed["dead_periods"];
    assert_eq!(open.as_array().map(Vec::len), Some(1), "{failed:#}");
    assert!(open[0]["resolved_at"].is_null(), "still dead: {open}");

    // It lies in the list a while before the cause is fixed.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    mock.set(|b| b.always_fail = false);
    let id = dl[0]["id"].as_str().expect("dead letter id");
    let r = post(
        &app,
        ADMIN,
        &format!("/api/admin/dead-letters/{id}/requeue"),
    )
    .await;
    assert_eq!(r.status(), 202);
    let job = app.wait_state(ALICE, job_id, "done").await;

    // Header, steps, timeline and dead letter agree: three runs in all.
    assert_eq!(job["attempt"], 3, "{job:#}");
    assert_eq!(job["steps"][0]["attempts"], 1, "parse ran once");
    assert_eq!(job["steps"][1]["attempts"], 1, "chunk ran once");
    assert_eq!(job["steps"][2]["attempts"], 3, "embed ran in each run");
    let timeline = page_timeline(&app, ALICE, job_id).await;
    assert_eq!(
        run_lines(&timeline),
        [
            "attempt 1 started",
            "attempt 2 started",
            "attempt 3 started"
        ],
        "{timeline:?}"
    );
    assert!(
        timeline
            .iter()
            .any(|m| m == "re-enqueued by an administrator"),
        "{timeline:?}"
    );

    // The time in the dead-letter list is told apart, with who ended it.
    let periods = job["dead_periods"].as_array().expect("dead periods");
    assert_eq!(periods.len(), 1, "{job:#}");
    let p = &periods[0];
    assert_eq!(p["reason"], "exhausted");
    assert_eq!(p["resolution"], "requeued");
    assert_eq!(p["resolved_by"], "admin");
    let time = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().expect("time")).expect("rfc 3339")
    };
    let dead = time(&p["resolved_at"]) - time(&p["dead_at"]);
    let total = time(&job["finished_at"]) - time(&job["enqueued_at"]);
    assert!(
        dead >= chrono::Duration::milliseconds(1_400),
        "dead for {dead:?}"
    );
    assert!(
        time(&p["dead_at"]) >= time(&job["enqueued_at"])
            && time(&p["resolved_at"]) <= time(&job["finished_at"])
            && dead < total,
        "the dead time lies within the job's life: {job:#}"
    );
}

#[tokio::test]
async fn a_run_cut_short_by_a_rate_limit_resumes_its_attempt_and_is_not_counted_twice() {
    // A call waits at most a quarter of the step timeout (1 s) for a rate
    // limit; a longer one (2 s) ends the run, and the job waits for it.
    let mock = MockEmbedder::start(EmbedBehaviour {
        rate_limit: Some(2),
        ..Default::default()
    })
    .await;
    let app = app_configured(&mock, |c| c.step_timeout = Duration::from_secs(4)).await;
    let accepted = app
        .upload_ok(ALICE, "limited.txt", prose("limited", 12).into_bytes())
        .await;
    let job_id = accepted["job_id"].as_str().expect("id");
    // At least one run waits for the provider before it answers again.
    mock.wait_calls(2).await;
    mock.set(|b| b.rate_limit = None);
    let job = app.wait_state(ALICE, job_id, "done").await;
    assert_eq!(job["attempt"], 1, "waiting spends nothing: {job:#}");
    assert_eq!(
        job["steps"][2]["attempts"], 1,
        "nor does it count as a start of embed: {job:#}"
    );
    let timeline = page_timeline(&app, ALICE, job_id).await;
    let runs = run_lines(&timeline);
    assert_eq!(
        runs.iter().filter(|m| **m == "attempt 1 started").count(),
        1,
        "{timeline:?}"
    );
    assert!(runs.len() >= 2, "a resumed run is named: {timeline:?}");
    assert!(
        runs[1..].iter().all(|m| *m == "attempt 1 resumed"),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn a_hand_over_to_the_slow_queue_resumes_the_attempt_on_the_job_page() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "slow=1"])),
        configure: Box::new(|c| c.slow_pages = 2),
        ..Default::default()
    })
    .await;
    let pages: Vec<Vec<String>> = (0..3)
        .map(|i| vec![format!("Page {i} of the long operating manual.")])
        .collect();
    let accepted = app.upload_ok(ALICE, "manual.pdf", pdf(&pages)).await;
    let job_id = accepted["job_id"].as_str().expect("id");
    let job = app.wait_state(ALICE, job_id, "done").await;
    assert_eq!(job["queue"], "slow");
    let timeline = page_timeline(&app, ALICE, job_id).await;
    assert_eq!(
        run_lines(&timeline),
        ["attempt 1 started", "attempt 1 resumed"],
        "{timeline:?}"
    );
    assert!(job["dead_periods"].as_array().is_some_and(Vec::is_empty));
}

#[tokio::test]
async fn a_job_says_when_its_document_was_uploaded_and_only_administrators_learn_by_whom() {
    let app = spawn_with(Options::default()).await;
    let accepted = app
        .upload_ok(ALICE, "memo.txt", prose("memo", 4).into_bytes())
        .await;
    let job_id = accepted["job_id"].as_str().expect("id");
    let as_admin = app.job(ADMIN, job_id).await;
    assert_eq!(as_admin["uploaded_by"], ALICE);
    assert!(as_admin["uploaded_at"].is_string(), "{as_admin:#}");
    let as_member = app.job(ALICE, job_id).await;
    assert!(as_member["uploaded_at"].is_string());
    assert!(
        as_member.get("uploaded_by").is_none(),
        "members are not told: {as_member:#}"
    );
    let list: Value = app.get_json(ALICE, "/api/jobs").await;
    assert!(list["jobs"][0].get("uploaded_by").is_none(), "{list:#}");
    let mine = server_fn(&app, ALICE, "my_jobs", &[("limit", "10")]).await;
    assert!(mine[0].get("uploaded_by").is_none(), "{mine:#}");
    assert_eq!(mine[0]["uploaded_at"], as_member["uploaded_at"]);
}

#[tokio::test]
async fn audit_entries_name_the_file_they_touched_and_filter_by_admin_and_action() {
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = app_with(&mock).await;
    let broken = app
        .upload_ok(ALICE, "audited.pdf", BROKEN_PDF.to_vec())
        .await;
    let job_id = broken["job_id"].as_str().expect("id");
    let dl = wait_dead_letters(&app, 1).await;
    let admin = app.client(ADMIN).await;
    let id = dl[0]["id"].as_str().expect("id");
    let r = admin
        .post(app.url(&format!("/api/admin/dead-letters/{id}/discard")))
        .send()
        .await
        .expect("discard");
    assert_eq!(r.status(), 204);
    let r = admin
        .post(app.url("/api/admin/queues/slow/pause"))
        .send()
        .await
        .expect("pause");
    assert_eq!(r.status(), 204);
    // A member's own retry is audited too, under the member's name.
    let r = post(&app, ALICE, &format!("/api/jobs/{job_id}/retry")).await;
    assert_eq!(r.status(), 202);

    let all: Vec<Value> = app.get_json(ADMIN, "/api/admin/audit").await;
    assert_eq!(all.len(), 3, "{all:?}");
    let discard = all
        .iter()
        .find(|e| e["action"] == "dead_letter.discard")
        .expect("the discard");
    assert_eq!(discard["target"], id);
    assert_eq!(
        discard["job_id"], job_id,
        "the dead letter leads to its job"
    );
    assert_eq!(discard["filename"], "audited.pdf");
    let retry = all
        .iter()
        .find(|e| e["action"] == "job.retry")
        .expect("the retry");
    assert_eq!(retry["filename"], "audited.pdf");
    let pause = all
        .iter()
        .find(|e| e["action"] == "queue.pause")
        .expect("the pause");
    assert!(pause["filename"].is_null() && pause["job_id"].is_null());

    let by_admin: Vec<Value> = app
        .get_json(ADMIN, &format!("/api/admin/audit?actor={ADMIN}"))
        .await;
    assert_eq!(by_admin.len(), 2, "{by_admin:?}");
    let discards: Vec<Value> = app
        .get_json(ADMIN, "/api/admin/audit?action=dead_letter.discard")
        .await;
    assert_eq!(discards.len(), 1);
    let page = server_fn(
        &app,
        ADMIN,
        "audit",
        &[("actor", ALICE), ("action", "job.retry")],
    )
    .await;
    assert_eq!(
        page["entries"].as_array().map(Vec::len),
        Some(1),
        "{page:#}"
    );
    assert_eq!(page["actors"], serde_json::json!([ADMIN, ALICE]));
    assert_eq!(
        page["actions"],
        serde_json::json!(["dead_letter.discard", "job.retry", "queue.pause"])
    );
}

#[tokio::test]
async fn re_enqueue_all_that_match_takes_every_page_of_the_filter_and_nothing_else() {
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = app_with(&mock).await;
    // More of acme's than a page of the list holds (50), and two of globex's.
    let acme = 55;
    for i in 0..acme {
        let bytes = [BROKEN_PDF, format!(" {i}").as_bytes()].concat();
        app.upload_ok(ALICE, &format!("acme-{i}.pdf"), bytes).await;
    }
    for i in 0..2 {
        let bytes = [BROKEN_PDF, format!(" globex {i}").as_bytes()].concat();
        app.upload_ok(BOB, &format!("globex-{i}.pdf"), bytes).await;
    }
    wait_dead_letters(&app, acme + 2).await;
    let ids_of = |list: &[Value]| -> std::collections::BTreeSet<String> {
        list.iter()
            .map(|d| d["id"].as_str().expect("id").to_string())
            .collect()
    };
    let acme_ids = ids_of(
        &app.get_json::<Vec<Value>>(ADMIN, "/api/admin/dead-letters?tenant=acme&limit=500")
            .await,
    );
    let globex_ids = ids_of(
        &app.get_json::<Vec<Value>>(ADMIN, "/api/admin/dead-letters?tenant=globex&limit=500")
            .await,
    );
    assert_eq!((acme_ids.len(), globex_ids.len()), (acme, 2));

    // The page shows one page of them and counts them all, as the button does.
    let page = server_fn(&app, ADMIN, "dead_letters", &[("tenant", "acme")]).await;
    assert_eq!(page["items"].as_array().expect("items").len(), 50);
    assert_eq!(page["matching"], acme);
    assert_eq!(page["matching_permanent"], acme);
    let none = server_fn(&app, ADMIN, "dead_letters", &[("reason", "exhausted")]).await;
    assert_eq!(
        (
            none["matching"].as_i64(),
            none["matching_permanent"].as_i64()
        ),
        (Some(0), Some(0))
    );

    // A member may not; an admin's filter that matches nothing re-enqueues nothing.
    let refused = post(
        &app,
        ALICE,
        "/api/admin/dead-letters/requeue-matching?tenant=acme",
    )
    .await;
    assert_eq!(refused.status(), 403);
    let nothing = server_fn(&app, ADMIN, "requeue_matching", &[("reason", "exhausted")]).await;
    assert_eq!(nothing["requeued"], serde_json::json!([]));

    // Every one of acme's, from every page, and none of globex's.
    let r = post(
        &app,
        ADMIN,
        "/api/admin/dead-letters/requeue-matching?tenant=acme&reason=permanent",
    )
    .await;
    assert_eq!(r.status(), 202);
    let outcome: Value = r.json().await.expect("json");
    assert_eq!(outcome["failed"], serde_json::json!([]), "{outcome:#}");
    let requeued: std::collections::BTreeSet<String> = outcome["requeued"]
        .as_array()
        .expect("requeued")
        .iter()
        .map(|d| {
            assert_eq!(d["state"], "pending");
            d["id"].as_str().expect("id").to_string()
        })
        .collect();
    assert_eq!(requeued, acme_ids);
    let still: Vec<Value> = app
        .get_json(ADMIN, "/api/admin/dead-letters?tenant=globex&limit=500")
        .await;
    assert_eq!(ids_of(&still), globex_ids);
    // Each one is in the audit log, as a re-enqueue of one is.
    let audit: Vec<Value> = app
        .get_json(
            ADMIN,
            "/api/admin/audit?action=dead_letter.requeue&limit=200",
        )
        .await;
    assert_eq!(ids_of_targets(&audit), acme_ids);
}

/// The targets of audit entries.
fn ids_of_targets(entries: &[Value]) -> std::collections::BTreeSet<String> {
    entries
        .iter()
        .map(|e| e["target"].as_str().expect("target").to_string())
        .collect()
}

/// Alice's inbox entries about job `job_id`.
async fn notices_about(app: &TestApp, job_id: &str) -> (Vec<Value>, i64) {
    let inbox: Value = app.get_json(ALICE, "/api/notifications").await;
    let about = inbox["notifications"]
        .as_array()
        .expect("notifications")
        .iter()
        .filter(|n| n["link"] == format!("/jobs/{job_id}"))
        .cloned()
        .collect();
    (about, inbox["unread"].as_i64().expect("unread"))
}

/// An administrator's re-enqueue of dead letter `id`; waits until its job
/// has failed again and lies in the list once more.
async fn requeue_and_fail_again(app: &TestApp, id: &str, job_id: &str) -> String {
    let r = post(app, ADMIN, &format!("/api/admin/dead-letters/{id}/requeue")).await;
    assert_eq!(r.status(), 202);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list: Vec<Value> = app
            .get_json(ADMIN, "/api/admin/dead-letters?limit=500")
            .await;
        if let Some(d) = list.iter().find(|d| d["job_id"] == job_id && d["id"] != id) {
            return d["id"].as_str().expect("id").to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not dead again: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_member_reads_of_their_document_and_gets_one_failure_notice_however_often_it_is_retried()
{
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = app_with(&mock).await;
    let accepted = app.upload_ok(ALICE, "scan.pdf", BROKEN_PDF.to_vec()).await;
    let job_id = accepted["job_id"].as_str().expect("job id");
    let first = wait_dead_letters(&app, 1).await;
    let dl = first[0]["id"].as_str().expect("id").to_string();
    let (notices, unread) = notices_about(&app, job_id).await;
    assert_eq!((notices.len(), unread), (1, 1), "{notices:?}");
    assert_eq!(notices[0]["kind"], "job_failed");

    // An administrator re-enqueues it and it fails the same way: the
    // member's notice is the same one, still unread, not a second one.
    let dl = requeue_and_fail_again(&app, &dl, job_id).await;
    let (again, unread) = notices_about(&app, job_id).await;
    assert_eq!((again.len(), unread), (1, 1), "{again:?}");
    assert_eq!(again[0]["id"], notices[0]["id"]);

    // Once read, a further failure neither adds a notice nor raises the bell.
    let id = again[0]["id"].as_str().expect("id");
    let r = post(&app, ALICE, &format!("/api/notifications/{id}/read")).await;
    assert!(r.status().is_success(), "{}", r.status());
    requeue_and_fail_again(&app, &dl, job_id).await;
    let (third, unread) = notices_about(&app, job_id).await;
    assert_eq!((third.len(), unread), (1, 0), "{third:?}");

    // The member's page is about the document; the administrator's about
    // queues, attempts and the dead-letter list.
    let member = server_fn(&app, ALICE, "job_with_events", &[("id", job_id)]).await;
    assert_eq!(member["for_operator"], false);
    let admin = server_fn(&app, ADMIN, "job_with_events", &[("id", job_id)]).await;
    assert_eq!(admin["for_operator"], true);
    assert_eq!(admin["job"]["attempt"], 3, "{admin:#}");
}

#[tokio::test]
async fn re_enqueue_all_that_match_takes_at_most_5000_at_once_oldest_first() {
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let app = app_with(&mock).await;
    // 5,001 unreadable messages (no job to run again), one a second apart.
    sqlx::query(
        "INSERT INTO dead_letters (id, queue, reason, error, attempts, payload, dead_at)
         SELECT gen_random_uuid(), 'docflow.jobs.normal', 'malformed', 'not a job message', 1, 'x',
                now() - make_interval(secs => g)
         FROM generate_series(1, 5001) g",
    )
    .execute(&app.pool)
    .await
    .expect("dead letters");
    let newest: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM dead_letters ORDER BY dead_at DESC LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .expect("newest");

    let r = post(
        &app,
        ADMIN,
        "/api/admin/dead-letters/requeue-matching?reason=malformed",
    )
    .await;
    assert_eq!(r.status(), 202);
    let outcome: Value = r.json().await.expect("json");
    let taken: Vec<&str> = outcome["requeued"]
        .as_array()
        .expect("requeued")
        .iter()
        .chain(outcome["failed"].as_array().expect("failed"))
        .map(|d| d["id"].as_str().unwrap_or_default())
        .collect();
    // The oldest 5,000 were tried (none has a job: each is refused, and
    // stays listed); the newest waits for the next click.
    assert_eq!(taken.len(), 5_000);
    assert!(!taken.contains(&newest.to_string().as_str()));
    let page = server_fn(&app, ADMIN, "dead_letters", &[("reason", "malformed")]).await;
    assert_eq!(page["matching"], 5_001);
}
