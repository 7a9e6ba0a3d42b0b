//! Outages cost nothing: the embedding provider's circuit breaker, 429
//! slow-downs, the reconciler that rebuilds lost messages from PostgreSQL,
//! dead letters that cannot go missing, the keeper's guard, and retention.

use std::time::{Duration, Instant};

use docflow::{platform::config::EmbedderKind, Roles};
use lapin::{
    options::BasicPublishOptions,
    types::{AMQPValue, FieldArray, FieldTable},
    BasicProperties,
};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_peer_with, spawn_with, Options, TcpGate, TestApp},
    isolation::rabbitmqctl,
};

/// A docflow whose embedding endpoint is `mock`, with workers for `spec`.
async fn provider_app(
    mock: &MockEmbedder,
    spec: &[&str],
    more: impl FnOnce(&mut docflow::platform::config::Config) + Send + 'static,
) -> TestApp {
    let url = mock.url();
    spawn_with(Options {
        roles: Roles::all(queues(spec)),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            more(c);
        }),
        ..Default::default()
    })
    .await
}

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&app.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Waits until `sql` (a count) reaches `n`.
async fn wait_count(app: &TestApp, sql: &str, n: i64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = scalar(app, sql).await;
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql}: {got}, not {n}, after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of a metric line (`name{labels}` exactly) on `/metrics`.
async fn metric(app: &TestApp, series: &str) -> Option<f64> {
    let text = reqwest::get(app.url("/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

async fn stats(app: &TestApp) -> Value {
    app.get_json(ADMIN, "/api/admin/stats?window=1h").await
}

#[tokio::test]
async fn an_embedding_provider_down_for_60_s_costs_the_documents_nothing() {
    const OUTAGE: Duration = Duration::from_secs(60);
    const FAILURES: u32 = 3;
    const CONCURRENCY: usize = 4;
    let mock = MockEmbedder::start(EmbedBehaviour {
        always_fail: true,
        ..Default::default()
    })
    .await;
    let app = provider_app(&mock, &["high=2", "normal=2"], |c| {
        c.breaker_failures = FAILURES;
        c.breaker_probe = Duration::from_secs(1);
        c.breaker_probe_max = Duration::from_secs(4);
    })
    .await;
    let down_since = Instant::now();
    let mut ids = Vec::new();
    for i in 0..20 {
        let who = if i % 2 == 0 { ALICE } else { BOB };
        let b = app
            .upload_ok(
                who,
                &format!("outage-{i}.txt"),
                prose(&format!("o{i}"), 12).into_bytes(),
            )
            .await;
        ids.push((who, b["job_id"].as_str().expect("id").to_string()));
    }

    // Users and admins see why the jobs wait.
    let (who, id) = &ids[0];
    let waiting = app
        .wait_job(who, id, Duration::from_secs(30), |j| {
            j["state"] == "retrying"
                && j["last_error"].as_str().is_some_and(|e| {
                    e.starts_with("embedding provider unavailable, next probe at ")
                })
        })
        .await;
    assert!(waiting["next_attempt_at"].is_string(), "{waiting:#}");
    let s = stats(&app).await;
    let card = &s["dependencies"][0];
    assert_eq!(card["name"], "embedder", "{s:#}");
    assert_eq!(card["up"], false, "{card:#}");
    assert!(
        card["waiting_jobs"].as_i64().expect("waiting") >= 1,
        "{card:#}"
    );
    assert!(card["next_probe_at"].is_string(), "{card:#}");
    assert_eq!(
        metric(&app, "docflow_dependency_up{dependency=\"embedder\"}").await,
        Some(0.0)
    );

    tokio::time::sleep(OUTAGE.saturating_sub(down_since.elapsed())).await;
    let during = mock.times();
    mock.set(|b| b.always_fail = false);

    for (who, id) in &ids {
        app.wait_job(who, id, Duration::from_secs(60), |j| j["state"] == "done")
            .await;
    }
    assert_eq!(app.count("dead_letters").await, 0);
    // Only the failures before the breaker opened were the documents' own.
    let most = scalar(&app, "SELECT max(retries)::bigint FROM jobs").await;
    assert!(most < i64::from(FAILURES), "a job spent {most} retries");

    // While it was down the endpoint saw the calls that opened the breaker
    // (the threshold, plus what was already in flight), then single probes,
    // at least a probe interval (1 s, doubling to 4 s) apart.
    let before_open = FAILURES as usize + CONCURRENCY - 1;
    assert!(
        during.len() > before_open,
        "no probe in 60 s: {} calls",
        during.len()
    );
    let probes = &during[before_open..];
    for pair in probes.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(900),
            "two probes {gap:?} apart"
        );
    }
    assert!(
        during.len() <= before_open + 18,
        "{} calls during a 60 s outage",
        during.len()
    );

    let card = &stats(&app).await["dependencies"][0];
    assert_eq!(card["up"], true, "{card:#}");
    assert_eq!(card["waiting_jobs"], 0);
    assert_eq!(
        metric(&app, "docflow_dependency_up{dependency=\"embedder\"}").await,
        Some(1.0)
    );
}

#[tokio::test]
async fn a_429_with_retry_after_slows_the_process_and_spends_no_budget() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        rate_limit: Some(2),
        ..Default::default()
    })
    .await;
    let app = provider_app(&mock, &["high=2"], |_| {}).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        let b = app
            .upload_ok(
                ALICE,
                &format!("limited-{i}.txt"),
                prose(&format!("l{i}"), 12).into_bytes(),
            )
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    mock.wait_calls(1).await;
    let limited_since = Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let during = mock.calls();
    let window = limited_since.elapsed();
    mock.set(|b| b.rate_limit = None);
    for id in &ids {
        app.wait_state(ALICE, id, "done").await;
    }
    assert_eq!(
        scalar(&app, "SELECT max(retries)::bigint FROM jobs").await,
        0,
        "no retry was spent"
    );
    assert_eq!(
        scalar(&app, "SELECT max(attempt)::bigint FROM jobs").await,
        1
    );
    assert_eq!(app.count("dead_letters").await, 0);
    // Two worker slots, each waiting Retry-After (2 s) between calls: a
    // handful of calls, not the hundreds an unthrottled loop would make.
    let bound = 2 * (window.as_secs() as usize / 2 + 3);
    assert!(during <= bound, "{during} calls in {window:?} of 429s");
    assert!(
        metric(
            &app,
            "docflow_embed_requests_total{outcome=\"rate_limited\"}"
        )
        .await
        .is_some_and(|n| n >= 2.0),
        "rate-limited calls are counted"
    );
}

#[tokio::test]
async fn purged_job_queues_are_rebuilt_from_postgresql() {
    // No workers yet: the 100 messages wait on the queues.
    let app = spawn_with(Options {
        roles: Roles::web(),
        // Longer than the relay takes to publish a re-published job's
        // message on a loaded machine, so none is re-published twice
        // (which would be harmless, but counted).
        configure: Box::new(|c| c.reconcile_grace = Duration::from_secs(5)),
        ..Default::default()
    })
    .await;
    for i in 0..100 {
        let who = if i % 2 == 0 { ALICE } else { BOB };
        app.upload_ok(
            who,
            &format!("purged-{i}.txt"),
            prose(&format!("p{i}"), 4).into_bytes(),
        )
        .await;
    }
    let unsent = "SELECT count(*) FROM outbox WHERE sent_at IS NULL";
    wait_count(&app, unsent, 0, Duration::from_secs(30)).await;
    for q in ["docflow.jobs.high", "docflow.jobs.normal"] {
        rabbitmqctl(&["purge_queue", "-p", &app.iso.vhost, q]);
    }
    // The reconciler finds 100 jobs waiting for messages that are gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    let series = "docflow_reconciled_total";
    while metric(&app, series).await != Some(100.0) {
        assert!(
            Instant::now() < deadline,
            "reconciled: {:?}",
            metric(&app, series).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_count(&app, unsent, 0, Duration::from_secs(30)).await;
    // Nothing more is missing: the count stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(metric(&app, series).await, Some(100.0));
    // And the 100 re-published are the 100 jobs, each once.
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM jobs j
             WHERE (SELECT count(*) FROM outbox o WHERE o.job_id = j.id) <> 2"
        )
        .await,
        0,
        "every job has its upload's message and one re-published"
    );
    app.stop().await;

    // Workers take what the reconciler re-published. They run the relay
    // and the lease sweeper too, as some process of a deployment does (a
    // job retried on a loaded machine still finishes), but with a grace so
    // long that their reconciler cannot mistake messages waiting in a
    // consumer's prefetch buffer for lost ones.
    let roles = Roles {
        background: true,
        ..Roles::worker(queues(&["high=4", "normal=4"]))
    };
    let workers = spawn_peer_with(&app, roles, |c| {
        c.reconcile_grace = Duration::from_secs(3600);
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while scalar(&workers, "SELECT count(*) FROM jobs WHERE state = 'done'").await != 100 {
        if Instant::now() > deadline {
            let rows: Vec<(String, i32, i64)> = sqlx::query_as(
                "SELECT state::text, attempt, count(*) FROM jobs
                 WHERE state <> 'done' GROUP BY 1, 2",
            )
            .fetch_all(&workers.pool)
            .await
            .expect("states");
            panic!(
                "not all 100 jobs done after 120 s; the others (state, attempt, count): {rows:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        app.count("jobs WHERE attempt <> 1").await,
        0,
        "each job ran once"
    );
}

/// Takes every job message on the job queues; returns their jobs' ids.
async fn take_job_messages(app: &TestApp) -> Vec<String> {
    let mut ids = Vec::new();
    for q in ["docflow.jobs.high", "docflow.jobs.normal"] {
        for (m, _) in app.drain(q).await {
            ids.push(m["job_id"].as_str().expect("job_id").to_string());
        }
    }
    ids.sort();
    ids
}

#[tokio::test]
async fn the_reconciler_republishes_the_job_that_has_no_message() {
    // Rounds are run by hand below; the process's own would find nothing
    // old enough.
    let app = spawn_with(Options {
        configure: Box::new(|c| c.reconcile_grace = Duration::from_secs(3600)),
        ..Default::default()
    })
    .await;
    let older = app
        .upload_ok(ALICE, "older.txt", prose("o", 4).into_bytes())
        .await;
    let newer = app
        .upload_ok(ALICE, "newer.txt", prose("n", 4).into_bytes())
        .await;
    let older = older["job_id"].as_str().expect("id").to_string();
    let newer = newer["job_id"].as_str().expect("id").to_string();
    let unsent = "SELECT count(*) FROM outbox WHERE sent_at IS NULL";
    wait_count(&app, unsent, 0, Duration::from_secs(30)).await;
    // Both messages are lost.
    assert_eq!(take_job_messages(&app).await.len(), 2);
    let broker = docflow::broker::Broker::new(&app.iso.amqp_url(5672), "reconcile-test");
    let grace = Duration::from_secs(5);
    let age = |id: &str, sql: &'static str| {
        let (pool, id) = (app.pool.clone(), id.to_string());
        async move {
            sqlx::query(sql)
                .bind(uuid::Uuid::parse_str(&id).expect("uuid"))
                .execute(&pool)
                .await
                .expect("ageing a job");
        }
    };
    // The older job has waited past the grace period, the newer one not
    // yet: the first round re-publishes the older one only.
    age(
        &older,
        "UPDATE jobs SET updated_at = now() - interval '10 seconds' WHERE id = $1",
    )
    .await;
    let n = docflow::jobs::reconcile::reconcile(&app.pool, &broker, grace)
        .await
        .expect("round");
    assert_eq!(n, 1);
    wait_count(&app, unsent, 0, Duration::from_secs(30)).await;
    // A grace period later both are past it. One message is missing, the
    // newer job's: the older one's re-published message is on its queue.
    age(
        &older,
        "UPDATE jobs SET reconciled_at = now() - interval '6 seconds' WHERE id = $1",
    )
    .await;
    age(
        &newer,
        "UPDATE jobs SET updated_at = now() - interval '10 seconds' WHERE id = $1",
    )
    .await;
    let n = docflow::jobs::reconcile::reconcile(&app.pool, &broker, grace)
        .await
        .expect("round");
    assert_eq!(n, 1, "one message was missing");
    wait_count(&app, unsent, 0, Duration::from_secs(30)).await;
    let mut both = vec![older, newer];
    both.sort();
    assert_eq!(
        take_job_messages(&app).await,
        both,
        "each waiting job has one message"
    );
    broker.close().await;
}

#[tokio::test]
async fn a_job_whose_nack_is_lost_still_has_exactly_one_dead_letter() {
    let gate = TcpGate::new("127.0.0.1:5672".parse().expect("addr")).await;
    gate.open().await;
    // The embedding call hangs until released, then is refused (permanent).
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(1),
        refuse: true,
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        amqp_port: gate.port,
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
        }),
        ..Default::default()
    })
    .await;
    let b = app
        .upload_ok(ALICE, "refused.txt", prose("r", 10).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id").to_string();
    mock.wait_calls(1).await;
    // The channel the delivery came on closes before the worker can nack.
    gate.close().await;
    mock.release();
    app.wait_state(ALICE, &job_id, "failed").await;
    gate.open().await;
    let one = format!("SELECT count(*) FROM dead_letters WHERE job_id = '{job_id}'");
    wait_count(&app, &one, 1, Duration::from_secs(10)).await;
    // The broker redelivers the unsettled message; nothing adds a second row.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(scalar(&app, &one).await, 1);
    assert_eq!(app.count("dead_letters").await, 1);
    let reason: String = sqlx::query_scalar("SELECT reason FROM dead_letters")
        .fetch_one(&app.pool)
        .await
        .expect("reason");
    assert_eq!(reason, "permanent");
}

/// Publishes `body` to the dead-letter exchange as RabbitMQ would after
/// `reason` (e.g. `delivery_limit`) on `docflow.jobs.high`.
async fn dead_letter_as_broker(app: &TestApp, body: &Value, reason: &str) {
    let conn = app.amqp().await;
    let ch = conn.create_channel().await.expect("channel");
    docflow::broker::declare_topology(&ch)
        .await
        .expect("topology");
    let mut death = FieldTable::default();
    death.insert("reason".into(), AMQPValue::LongString(reason.into()));
    death.insert(
        "queue".into(),
        AMQPValue::LongString("docflow.jobs.high".into()),
    );
    death.insert("count".into(), AMQPValue::LongLongInt(21));
    let mut headers = FieldTable::default();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    ch.basic_publish(
        "docflow.dlx".into(),
        "".into(),
        BasicPublishOptions::default(),
        body.to_string().as_bytes(),
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_headers(headers),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
}

async fn message_of(app: &TestApp, job_id: &str) -> Value {
    let (tenant, document, enqueued): (uuid::Uuid, uuid::Uuid, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT tenant_id, document_id, enqueued_at FROM jobs WHERE id = $1::uuid")
            .bind(job_id)
            .fetch_one(&app.pool)
            .await
            .expect("job");
    serde_json::json!({
        "job_id": job_id, "tenant_id": tenant, "document_id": document,
        "queue": "high", "attempt": 1, "enqueued_at": enqueued,
    })
}

#[tokio::test]
async fn the_keeper_fails_a_job_the_broker_killed_but_never_one_a_live_worker_holds() {
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(1),
        ..Default::default()
    })
    .await;
    let app = provider_app(&mock, &["high=1"], |_| {}).await;
    let running = app
        .upload_ok(ALICE, "running.txt", prose("k", 10).into_bytes())
        .await;
    let running = running["job_id"].as_str().expect("id").to_string();
    mock.wait_calls(1).await;
    // A stale copy of its message dies of the delivery limit meanwhile.
    dead_letter_as_broker(&app, &message_of(&app, &running).await, "delivery-limit").await;
    // And a job no worker holds: pending on `normal`, which nobody consumes here.
    let orphan = app
        .upload_ok(BOB, "orphan.txt", prose("o", 10).into_bytes())
        .await;
    let orphan = orphan["job_id"].as_str().expect("id").to_string();
    dead_letter_as_broker(&app, &message_of(&app, &orphan).await, "delivery-limit").await;

    let job = app.wait_state(BOB, &orphan, "failed").await;
    assert!(
        job["last_error"]
            .as_str()
            .expect("error")
            .contains("RabbitMQ dead-lettered the message (delivery_limit)"),
        "{job:#}"
    );
    let one = format!(
        "SELECT count(*) FROM dead_letters WHERE job_id = '{orphan}' AND reason = 'delivery_limit'"
    );
    assert_eq!(scalar(&app, &one).await, 1);
    let inbox = format!(
        "SELECT count(*) FROM notifications WHERE job_id = '{orphan}' AND kind = 'job_failed'"
    );
    assert_eq!(scalar(&app, &inbox).await, 1, "the uploader is told");

    assert_eq!(app.job(ALICE, &running).await["state"], "processing");
    mock.release();
    app.wait_state(ALICE, &running, "done").await;
    let none = format!("SELECT count(*) FROM dead_letters WHERE job_id = '{running}'");
    assert_eq!(scalar(&app, &none).await, 0);
}

#[tokio::test]
async fn retention_prunes_old_rows_in_batches_and_keeps_the_rest() {
    let app = spawn_with(Options::default()).await;
    let b = app
        .upload_ok(ALICE, "kept.txt", prose("r", 4).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id").to_string();
    // 2,500 events, read notifications and samples from 40 days ago, sent
    // outbox rows from two hours ago, breaker rows of processes silent for
    // two days; and one of each from now.
    for sql in [
        "INSERT INTO job_events (job_id, tenant_id, state, message, at)
         SELECT id, tenant_id, 'pending', 'old', now() - interval '40 days' FROM jobs, generate_series(1, 2500)",
        "INSERT INTO notifications (id, user_id, job_id, kind, title, body, link, created_at, read_at)
         SELECT gen_random_uuid(), d.uploaded_by, j.id, 'job_done', 't', 'b', '/', now() - interval '41 days', now() - interval '40 days'
         FROM jobs j JOIN documents d ON d.id = j.document_id, generate_series(1, 2500)",
        "INSERT INTO notifications (id, user_id, job_id, kind, title, body, link)
         SELECT gen_random_uuid(), d.uploaded_by, j.id, 'job_done', 'unread', 'b', '/'
         FROM jobs j JOIN documents d ON d.id = j.document_id",
        "INSERT INTO metric_samples (metric, queue, at, value)
         SELECT 'depth', 'high', now() - interval '40 days' - g * interval '1 second', 1 FROM generate_series(1, 2500) g",
        "INSERT INTO metric_samples (metric, queue, at, value) VALUES ('depth', 'high', now(), 1)",
        "INSERT INTO dependency_status (dependency, process, up, updated_at)
         SELECT 'embedder', 'gone-' || g, false, now() - interval '2 days' FROM generate_series(1, 2500) g",
        "INSERT INTO dependency_status (dependency, process, up) VALUES ('embedder', 'alive', true)",
        "INSERT INTO outbox (exchange, routing_key, payload, available_at, sent_at)
         SELECT 'docflow.jobs', 'high', '{}', now() - interval '2 hours', now() - interval '2 hours' FROM generate_series(1, 2500)",
        // Webhook events of 40 days ago with their deliveries, and one of now.
        "INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret)
         SELECT gen_random_uuid(), id, 'https://hooks.example.com/', '{job.done}', 'whsec_x' FROM tenants WHERE slug = 'acme'",
        "INSERT INTO webhook_events (id, tenant_id, type, created_at)
         SELECT gen_random_uuid(), t.id, 'job.done', now() - interval '40 days' - g * interval '1 second'
         FROM tenants t, generate_series(1, 2500) g WHERE t.slug = 'acme'",
        "INSERT INTO webhook_events (id, tenant_id, type) SELECT gen_random_uuid(), id, 'job.done' FROM tenants WHERE slug = 'acme'",
        "INSERT INTO webhook_deliveries (endpoint_id, event_id, state)
         SELECT e.id, ev.id, 'delivered' FROM webhook_endpoints e, webhook_events ev",
    ] {
        sqlx::query(sql).execute(&app.pool).await.expect(sql);
    }
    let events_now = scalar(
        &app,
        "SELECT count(*) FROM job_events WHERE at > now() - interval '1 day'",
    )
    .await;
    assert!(events_now >= 1);
    let pruned = docflow::worker::retention::prune(
        &app.pool,
        Duration::from_secs(30 * 24 * 3600),
        1000,
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("prune");
    assert_eq!(
        (
            pruned.events,
            pruned.notifications,
            pruned.samples,
            pruned.outbox,
            pruned.breaker_rows,
            pruned.webhook_events
        ),
        (2500, 2500, 2500, 2500, 2500, 2500)
    );
    assert_eq!(
        app.count("webhook_deliveries").await,
        1,
        "old events go with their deliveries; today's stays"
    );
    assert_eq!(
        app.count("dependency_status").await,
        1,
        "a live process's breaker row is kept"
    );
    assert_eq!(app.count("job_events").await, events_now);
    assert_eq!(app.count("notifications").await, 1, "unread kept");
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM metric_samples WHERE at < now() - interval '7 days'"
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM outbox WHERE sent_at < now() - interval '1 hour'"
        )
        .await,
        0
    );
    // The job itself and its timeline of today are untouched.
    assert_eq!(app.job(ALICE, &job_id).await["state"], "pending");
}
