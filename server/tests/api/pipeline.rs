//! The worker pipeline: parse → chunk → embed → store, checkpoints, leases,
//! idempotent redelivery.

use std::time::Duration;

use docflow::Roles;
use lapin::{options::BasicPublishOptions, BasicProperties};
use serde_json::Value;

use crate::fixtures::ALICE;
use crate::{
    fixtures::{markdown, pdf, prose, EmbedBehaviour, MockEmbedder, WorkerProcess},
    helpers::{queues, spawn_with, Options, TcpGate, TestApp},
};

async fn all_workers(batch: u16) -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=4", "normal=2", "slow=1"])),
        configure: Box::new(move |c| c.embed_batch = batch),
        ..Default::default()
    })
    .await
}

/// A job held in the middle of its embed step: embedding call `hang_at` of
/// the mock endpoint does not answer. The job runs on a worker process
/// (`high=1`, lease 2 s) that a test can kill or stop.
struct HeldInEmbed {
    // Dropped in this order: the worker process before the app's database.
    worker: WorkerProcess,
    mock: MockEmbedder,
    app: TestApp,
    env: Vec<(&'static str, String)>,
    /// The upload's 202 body.
    accepted: Value,
    job_id: String,
}

impl HeldInEmbed {
    /// Returns once call `hang_at` is in flight, so the steps before it
    /// (parse, chunk and any earlier batches) have their checkpoints.
    async fn start(hang_at: usize, batch: u16, filename: &str, text: String) -> Self {
        let app = spawn_with(Options {
            configure: Box::new(|c| c.lease = Duration::from_secs(2)),
            ..Default::default()
        })
        .await;
        let mock = MockEmbedder::start(EmbedBehaviour {
            hang_at: Some(hang_at),
            ..Default::default()
        })
        .await;
        let env = vec![
            ("DOCFLOW_EMBEDDER", "openai".to_string()),
            ("DOCFLOW_EMBED_URL", mock.url()),
            ("DOCFLOW_EMBED_BATCH", batch.to_string()),
        ];
        let worker = WorkerProcess::start(&app, "high=1", &env);
        let accepted = app.upload_ok(ALICE, filename, text.into_bytes()).await;
        let job_id = accepted["job_id"].as_str().expect("id").to_string();
        mock.wait_calls(hang_at).await;
        Self {
            app,
            mock,
            env,
            worker,
            accepted,
            job_id,
        }
    }

    /// Lets the endpoint answer again, starts a fresh worker and waits for
    /// the job to be done; returns the job and its chunk rows.
    async fn finish_on_a_new_worker(&self) -> (Value, Vec<(i32, String, bool)>) {
        self.mock.release();
        let _worker = WorkerProcess::start(&self.app, "high=1", &self.env);
        let job = self.app.wait_state(ALICE, &self.job_id, "done").await;
        let document = self.accepted["document_id"].as_str().expect("doc");
        (job, chunk_rows(&self.app, document).await)
    }
}

fn step_attempts(job: &Value) -> Vec<(String, String, i64)> {
    job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("").to_string(),
                s["state"].as_str().unwrap_or("").to_string(),
                s["attempts"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

async fn search(app: &TestApp, email: &str, q: &str) -> Vec<Value> {
    let r = app
        .client(email)
        .await
        .get(app.url("/api/search"))
        .query(&[("q", q), ("k", "3")])
        .send()
        .await
        .expect("search");
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

async fn chunk_rows(app: &TestApp, document_id: &str) -> Vec<(i32, String, bool)> {
    sqlx::query_as("SELECT chunk_index, text, embedding IS NOT NULL FROM chunks WHERE document_id = $1::uuid ORDER BY chunk_index")
        .bind(document_id)
        .fetch_all(&app.pool)
        .await
        .expect("chunks")
}

#[tokio::test]
async fn text_markdown_html_and_pdf_documents_become_searchable() {
    let app = all_workers(8).await;
    let docs: Vec<(&str, Vec<u8>, &str)> = vec![
        ("notes.txt", format!("{}\n\nThe walrus ledger balances every Tuesday at dawn.\n\n{}", prose("t", 60), prose("u", 60)).into_bytes(), "walrus ledger balances every Tuesday"),
        ("guide.md", format!("# Guide\n\n{}\n\n## Saffron\n\nSaffron kites navigate the northern archipelago.\n", prose("m", 40)).into_bytes(), "saffron kites navigate the northern archipelago"),
        ("page.html", format!("<!doctype html><html><body><h1>Page</h1><p>{}</p><p>Copper violins hum beneath glacier bridges.</p></body></html>", prose("h", 30)).into_bytes(), "copper violins hum beneath glacier bridges"),
        (
            "report.pdf",
            pdf(&[
                vec!["Quarterly report, page one.".into(), "Revenue figures are summarised here.".into()],
                vec!["Page two lists the risks.".into()],
                vec!["Velvet turbines whisper across midnight orchards.".into()],
            ]),
            "velvet turbines whisper across midnight orchards",
        ),
    ];
    let mut jobs = Vec::new();
    for (name, bytes, sentence) in docs {
        let b = app.upload_ok(ALICE, name, bytes).await;
        jobs.push((
            name,
            b["job_id"].as_str().expect("id").to_string(),
            b["document_id"].as_str().expect("doc").to_string(),
            sentence,
        ));
    }
    for (name, job_id, document_id, sentence) in &jobs {
        let job = app.wait_state(ALICE, job_id, "done").await;
        assert_eq!(job["attempt"], 1, "{name}");
        for (step, state, attempts) in step_attempts(&job) {
            assert_eq!(
                (state.as_str(), attempts),
                ("done", 1),
                "{name}: step {step}"
            );
        }
        let rows = chunk_rows(&app, document_id).await;
        assert_eq!(
            rows.len() as i64,
            job["progress"]["chunks_total"].as_i64().expect("total"),
            "{name}"
        );
        assert_eq!(
            job["progress"]["chunks_embedded"], job["progress"]["chunks_total"],
            "{name}"
        );
        assert!(
            rows.iter().enumerate().all(|(i, r)| r.0 == i as i32 && r.2),
            "{name}: indexes contiguous, all embedded"
        );
        let hits = search(&app, ALICE, sentence).await;
        assert_eq!(
            hits[0]["document_id"],
            document_id.as_str(),
            "{name}: best hit for {sentence:?} was {:#}",
            hits[0]
        );
        assert!(hits[0]["text"]
            .as_str()
            .expect("text")
            .to_lowercase()
            .contains(&sentence.split(' ').nth(1).expect("word").to_lowercase()));
        assert_eq!(hits[0]["filename"], *name);
    }
    // The long text file became several chunks; the PDF's three pages were counted.
    assert!(chunk_rows(&app, &jobs[0].2).await.len() >= 3);
    let pages: i32 = sqlx::query_scalar("SELECT pages FROM documents WHERE id = $1::uuid")
        .bind(&jobs[3].2)
        .fetch_one(&app.pool)
        .await
        .expect("pages");
    assert_eq!(pages, 3);
    // Search is scoped to the tenant: bob sees nothing of acme's.
    assert!(search(&app, "bob@globex.test", "velvet turbines")
        .await
        .is_empty());
    // Each state change and progress step left an event.
    let events = app.timeline(&jobs[0].1).await;
    assert_eq!(events.first().map(String::as_str), Some("queued on high"));
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("embed ") && e.contains('/')),
        "{events:?}"
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("done: the document is searchable")
    );
}

async fn snapshot(
    app: &TestApp,
    job_id: &str,
) -> (
    Vec<(i32, String, Option<Vec<f32>>)>,
    Vec<(String, i32)>,
    i64,
) {
    let chunks = sqlx::query_as("SELECT chunk_index, text, embedding::real[] FROM chunks c JOIN jobs j ON j.document_id = c.document_id WHERE j.id = $1::uuid ORDER BY chunk_index")
        .bind(job_id)
        .fetch_all(&app.pool)
        .await
        .expect("chunks");
    let steps = sqlx::query_as(
        "SELECT step, attempts FROM job_steps WHERE job_id = $1::uuid ORDER BY step",
    )
    .bind(job_id)
    .fetch_all(&app.pool)
    .await
    .expect("steps");
    let events = sqlx::query_scalar("SELECT count(*) FROM job_events WHERE job_id = $1::uuid")
        .bind(job_id)
        .fetch_one(&app.pool)
        .await
        .expect("events");
    (chunks, steps, events)
}

#[tokio::test]
async fn the_same_message_delivered_twice_leaves_exactly_the_same_rows() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        ..Default::default()
    })
    .await;
    let b = app
        .upload_ok(ALICE, "twice.txt", prose("d", 120).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id").to_string();
    app.wait_state(ALICE, &job_id, "done").await;
    let before = snapshot(&app, &job_id).await;
    let job: Value = app.job(ALICE, &job_id).await;

    // Publish the original message again, as a redelivery would.
    let body = serde_json::json!({
        "job_id": job_id, "tenant_id": sqlx::query_scalar::<_, uuid::Uuid>("SELECT tenant_id FROM jobs WHERE id = $1::uuid").bind(&job_id).fetch_one(&app.pool).await.expect("tenant"),
        "document_id": b["document_id"], "queue": "high", "attempt": 1, "enqueued_at": job["enqueued_at"],
    });
    let conn = app.amqp().await;
    let ch = conn.create_channel().await.expect("channel");
    for _ in 0..2 {
        ch.basic_publish(
            "docflow.jobs".into(),
            "high".into(),
            BasicPublishOptions::default(),
            &serde_json::to_vec(&body).expect("json"),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish");
    }
    // A later job on the same single-slot queue finishing means the duplicates were consumed first.
    let marker = app
        .upload_ok(ALICE, "marker.txt", b"marker document".to_vec())
        .await;
    app.wait_state(ALICE, marker["job_id"].as_str().expect("id"), "done")
        .await;
    let after = snapshot(&app, &job_id).await;
    assert_eq!(before, after, "a duplicate delivery changed rows");
    assert_eq!(app.job(ALICE, &job_id).await["attempt"], 1, "no second run");
}

#[tokio::test]
async fn a_worker_that_dies_after_chunk_resumes_at_embed() {
    // The first embedding call is in flight: parse and chunk have their checkpoints.
    let mut held = HeldInEmbed::start(1, 4, "resume.txt", prose("r", 80)).await;
    held.worker.kill();
    let (job, rows) = held.finish_on_a_new_worker().await;
    let attempts: Vec<(String, i64)> = step_attempts(&job)
        .into_iter()
        .map(|(n, _, a)| (n, a))
        .collect();
    assert_eq!(attempts[0], ("parse".to_string(), 1), "parse ran once");
    assert_eq!(attempts[1], ("chunk".to_string(), 1), "chunk ran once");
    assert_eq!(attempts[2], ("embed".to_string(), 2), "embed ran again");
    assert_eq!(attempts[3], ("store".to_string(), 1));
    assert_eq!(
        rows.len() as i64,
        job["progress"]["chunks_total"].as_i64().expect("total")
    );
    assert!(rows.iter().all(|r| r.2));
}

#[tokio::test]
async fn a_text_file_is_its_own_parsed_text_and_chunk_reads_it_in_a_later_run() {
    let app = spawn_with(Options::default()).await;
    let text = prose("own", 60);
    let plain = app
        .upload_ok(ALICE, "plain.txt", text.clone().into_bytes())
        .await;
    let plain_doc = plain["document_id"].as_str().expect("doc").to_string();
    let plain_job = plain["job_id"].as_str().expect("id").to_string();
    // What a worker killed right after parse's commit leaves: parse done,
    // the job waiting at chunk, the document naming its text, nothing carried.
    let mut tx = app.pool.begin().await.expect("begin");
    for sql in [
        "UPDATE documents SET text_blob_key = blob_key WHERE id = $2::uuid",
        "INSERT INTO job_steps (job_id, step, state, attempts, started_at, finished_at)
         VALUES ($1::uuid, 'parse', 'done', 1, now(), now())",
        "UPDATE jobs SET current_step = 'chunk' WHERE id = $1::uuid",
    ] {
        sqlx::query(sql)
            .bind(&plain_job)
            .bind(&plain_doc)
            .execute(&mut *tx)
            .await
            .expect(sql);
    }
    tx.commit().await.expect("commit");
    let _worker = WorkerProcess::start(&app, "high=1", &[]);
    let job = app.wait_state(ALICE, &plain_job, "done").await;
    let steps = step_attempts(&job);
    assert_eq!(steps[0], ("parse".into(), "done".into(), 1), "{job:#}");
    assert_eq!(steps[1], ("chunk".into(), "done".into(), 1), "{job:#}");
    let rows = chunk_rows(&app, &plain_doc).await;
    assert!(!rows.is_empty() && rows.iter().all(|r| r.2), "{rows:?}");
    let found = search(&app, ALICE, &rows[0].1).await;
    assert_eq!(found[0]["document_id"], plain_doc.as_str(), "{found:#?}");

    // A normal run: the text file gets no copy, a Markdown file its own text.
    let again = app
        .upload_ok(ALICE, "again.txt", prose("twice", 40).into_bytes())
        .await;
    let notes = app.upload_ok(ALICE, "notes.md", markdown("md", 40)).await;
    for accepted in [&again, &notes] {
        app.wait_state(ALICE, accepted["job_id"].as_str().expect("id"), "done")
            .await;
    }
    let doc_of = |accepted: &Value| accepted["document_id"].as_str().expect("doc").to_string();
    assert_eq!(
        app.blobs_of(&doc_of(&again)),
        ["original"],
        "no copy of a text file"
    );
    assert_eq!(app.blobs_of(&doc_of(&notes)), ["original", "text.txt"]);
    let keys: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT blob_key, text_blob_key FROM documents WHERE id = ANY($1::uuid[]) ORDER BY filename",
    )
    .bind([&again, &notes].map(doc_of))
    .fetch_all(&app.pool)
    .await
    .expect("keys");
    assert_eq!(
        keys[0].1.as_deref(),
        Some(keys[0].0.as_str()),
        "again.txt names its upload"
    );
    assert!(
        keys[1]
            .1
            .as_deref()
            .is_some_and(|k| k.ends_with("/text.txt")),
        "{keys:?}"
    );
}

#[tokio::test]
async fn a_worker_killed_in_the_middle_of_embed_repeats_at_most_one_batch() {
    // Two batches of two chunks are stored; the third is in flight.
    let mut held = HeldInEmbed::start(3, 2, "midway.txt", prose("k", 200)).await;
    held.worker.kill();
    let (job, rows) = held.finish_on_a_new_worker().await;
    let total = job["progress"]["chunks_total"].as_i64().expect("total") as usize;
    let batches = total.div_ceil(2);
    assert!(
        batches >= 4,
        "the document needs several batches ({total} chunks)"
    );
    assert!(
        held.mock.calls() <= batches + 1,
        "{} embedding calls for {batches} batches",
        held.mock.calls()
    );
    assert_eq!(rows.len(), total, "no duplicate chunks");
    assert!(rows.iter().all(|r| r.2));
    let done_events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_events WHERE job_id = $1::uuid AND state = 'done'",
    )
    .bind(&held.job_id)
    .fetch_one(&held.app.pool)
    .await
    .expect("count");
    assert_eq!(done_events, 1, "finished once");
}

#[tokio::test]
async fn sigterm_stops_a_worker_within_its_grace_period_and_another_worker_finishes_the_job() {
    let mut held = HeldInEmbed::start(1, 32, "graceful.txt", prose("g", 20)).await;
    let started = std::time::Instant::now();
    let status = held.worker.terminate_and_wait(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "the worker exits cleanly: {status:?}; its log:\n{}",
        held.worker.log_tail()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "grace is 2 s; took {:?}",
        started.elapsed()
    );
    // The job was handed back, not left leased.
    let job = held.app.job(ALICE, &held.job_id).await;
    assert_eq!(job["state"], "pending", "{job:#}");
    assert_eq!(job["steps"][2]["state"], "pending");
    let (job, _) = held.finish_on_a_new_worker().await;
    assert_eq!(job["steps"][0]["attempts"], 1);
    assert_eq!(
        job["attempt"], 1,
        "a released run does not count as an attempt"
    );
}

#[tokio::test]
async fn a_worker_whose_broker_stops_answering_still_exits_soon_after_its_grace_period() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.lease = Duration::from_secs(2)),
        ..Default::default()
    })
    .await;
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(1),
        ..Default::default()
    })
    .await;
    let gate = TcpGate::new("127.0.0.1:5672".parse().expect("addr")).await;
    gate.open().await;
    let env = vec![
        ("DOCFLOW_EMBEDDER", "openai".to_string()),
        ("DOCFLOW_EMBED_URL", mock.url()),
    ];
    let mut through_gate = env.clone();
    through_gate.push(("AMQP_URL", app.iso.amqp_url(gate.port)));
    let mut worker = WorkerProcess::start(&app, "high=1", &through_gate);
    let accepted = app
        .upload_ok(ALICE, "stalled.txt", prose("s", 20).into_bytes())
        .await;
    let job_id = accepted["job_id"].as_str().expect("id");
    mock.wait_calls(1).await;
    // RabbitMQ stops answering this worker: no consumer-cancel, channel-close
    // or connection-close reply will ever come.
    gate.black_hole();
    let started = std::time::Instant::now();
    let status = worker.terminate_and_wait(Duration::from_secs(30));
    let took = started.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "the worker exits cleanly: {status:?}; its log:\n{}",
        worker.log_tail()
    );
    // Grace 2 s, then 2 s for the broker; the rest is room for a busy machine.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let job = app.job(ALICE, job_id).await;
    assert_eq!(job["state"], "pending", "released: {job:#}");
    // Its connection is gone, so RabbitMQ hands the message to the next worker.
    mock.release();
    let _worker = WorkerProcess::start(&app, "high=1", &env);
    let job = app.wait_state(ALICE, job_id, "done").await;
    assert_eq!(job["steps"][0]["attempts"], 1, "parse ran once");
}

#[tokio::test]
async fn a_long_pdf_is_handed_over_to_the_slow_queue_by_its_parse_step() {
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
    assert_eq!(accepted["queue"], "high", "the upload never reads a PDF");
    let job_id = accepted["job_id"].as_str().expect("id");
    let job = app.wait_state(ALICE, job_id, "done").await;
    assert_eq!(job["queue"], "slow", "{job:#}");
    assert_eq!(job["attempt"], 1, "a hand-over is not a failed attempt");
    assert_eq!(step_attempts(&job)[0], ("parse".into(), "done".into(), 1));
    let messages = app.timeline(job_id).await;
    assert!(
        messages
            .iter()
            .any(|m| m == "3 pages (over 2); handed over to the slow queue"),
        "{messages:#?}"
    );
}

#[tokio::test]
async fn a_job_that_kills_its_worker_twice_is_dead_lettered_as_crashed_and_never_runs_again() {
    let mut held = HeldInEmbed::start(1, 4, "poison.txt", prose("p", 40)).await;
    held.worker.kill();
    // The sweeper counts the first crash and re-publishes the job; the next
    // worker resumes it at embed, and dies there too.
    held.mock.set(|b| b.hang_at = Some(2));
    let mut second = WorkerProcess::start(&held.app, "high=1", &held.env);
    held.mock.wait_calls(2).await;
    second.kill();

    let job = held.app.wait_state(ALICE, &held.job_id, "failed").await;
    let error = job["last_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("embed: ") && error.contains("stopped 2 times"),
        "{error}"
    );
    assert_eq!(job["last_error_code"], "crashed", "{job:#}");
    let dead: Vec<(String, String)> = sqlx::query_as(
        "SELECT reason, error FROM dead_letters WHERE job_id = $1::uuid AND resolved_at IS NULL",
    )
    .bind(&held.job_id)
    .fetch_all(&held.app.pool)
    .await
    .expect("dead letters");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "crashed");
    let crashes: i32 = sqlx::query_scalar("SELECT crashes FROM jobs WHERE id = $1::uuid")
        .bind(&held.job_id)
        .fetch_one(&held.app.pool)
        .await
        .expect("crashes");
    assert_eq!(crashes, 2);

    // A fresh worker (the broker hands it the dead workers' deliveries)
    // does not run the job again.
    held.mock.release();
    let _third = WorkerProcess::start(&held.app, "high=1", &held.env);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        held.mock.calls(),
        2,
        "no embedding call after the second crash"
    );
    let again = held.app.job(ALICE, &held.job_id).await;
    assert_eq!(again["state"], "failed");
    assert_eq!(
        step_attempts(&again),
        step_attempts(&job),
        "no step ran again"
    );
    assert_eq!(held.app.count("dead_letters").await, 1);
}

/// The local embedder, except that a text saying "detonate" makes it panic
/// and one saying "hold" waits until released, counting how many wait.
#[derive(Default)]
struct Explosive {
    holding: std::sync::atomic::AtomicUsize,
    released: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl docflow::pipeline::embedder::Embedder for Explosive {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, docflow::pipeline::StepError> {
        use std::sync::atomic::Ordering::SeqCst;
        if texts.iter().any(|t| t.contains("detonate")) {
            panic!("the embedder exploded");
        }
        if texts.iter().any(|t| t.contains("hold")) {
            self.holding.fetch_add(1, SeqCst);
            while !self.released.load(SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(texts
            .iter()
            .map(|t| docflow::pipeline::embedder::local_embedding(t))
            .collect())
    }

    fn model(&self) -> docflow::pipeline::vectors::ModelSpec {
        docflow::pipeline::embedder::local_spec()
    }
}

#[tokio::test]
async fn a_step_that_panics_fails_its_job_and_frees_its_worker_slot() {
    use std::sync::atomic::Ordering::SeqCst;
    let embedder = std::sync::Arc::new(Explosive::default());
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2"])),
        embedder: Some(embedder.clone()),
        ..Default::default()
    })
    .await;
    let boom = app
        .upload_ok(
            ALICE,
            "boom.txt",
            b"These words detonate the embedder.".to_vec(),
        )
        .await;
    let job = app
        .wait_state(ALICE, boom["job_id"].as_str().expect("id"), "failed")
        .await;
    let error = job["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("internal error in the embed step") && error.contains("exploded"),
        "{error}"
    );
    assert_eq!(step_attempts(&job)[2], ("embed".into(), "failed".into(), 1));

    // Both slots are free: two documents are in embed at the same time.
    let held: Vec<String> = futures::future::join_all((0..2).map(|i| {
        let app = &app;
        async move {
            let r = app
                .upload_ok(
                    ALICE,
                    &format!("hold-{i}.txt"),
                    format!("Please hold document {i}.").into_bytes(),
                )
                .await;
            r["job_id"].as_str().expect("id").to_string()
        }
    }))
    .await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while embedder.holding.load(SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("two jobs in embed at once after the panic");
    embedder.released.store(true, SeqCst);
    for id in &held {
        app.wait_state(ALICE, id, "done").await;
    }
    assert_eq!(app.count("jobs WHERE state = 'processing'").await, 0);
}

/// Deliveries are acknowledged a few at a time (`broker::acks`): a job
/// that is still running must not hold back the acknowledgement of those
/// that finished after it (nor be acknowledged with them), and every
/// delivery is settled as its outcome says, once.
#[tokio::test]
async fn jobs_that_finish_behind_a_running_one_are_acknowledged_at_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let embedder = std::sync::Arc::new(Explosive::default());
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=4"])),
        embedder: Some(embedder.clone()),
        ..Default::default()
    })
    .await;
    let upload = |name: &'static str, text: String| {
        let app = &app;
        async move {
            let r = app.upload_ok(ALICE, name, text.into_bytes()).await;
            r["job_id"].as_str().expect("id").to_string()
        }
    };
    let held = upload("held.txt", "Please hold this document.".into()).await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while embedder.holding.load(SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first job is held in embed");
    // Delivered after it: three that finish and one that fails.
    let mut done = Vec::new();
    for name in ["a.txt", "b.txt", "c.txt"] {
        done.push(upload(name, prose(name, 30)).await);
    }
    let failed = upload("boom.txt", "These words detonate the embedder.".into()).await;
    for id in &done {
        app.wait_state(ALICE, id, "done").await;
    }
    app.wait_state(ALICE, &failed, "failed").await;

    // The broker has forgotten all but the running job's message.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ready, unacked, _) = crate::controls::broker_counts(&app, "high");
        if (ready, unacked) == (0, 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "docflow.jobs.high: {ready} ready, {unacked} unacknowledged; want 0 and 1 (the held job)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The failed one was rejected to the dead-letter queue, not requeued.
    assert_eq!(app.job(ALICE, &failed).await["attempt"], 1);

    embedder.released.store(true, SeqCst);
    let job = app.wait_state(ALICE, &held, "done").await;
    assert_eq!(job["attempt"], 1, "the held job ran once");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while crate::controls::broker_counts(&app, "high") != (0, 0, 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the last delivery was not acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for id in &done {
        assert_eq!(app.job(ALICE, id).await["attempt"], 1, "{id} ran once");
    }
}
