//! Changing the embedding model without downtime: once the deployment
//! chooses another model, every document is re-embedded in the background
//! by workers with that model; search answers throughout; a worker killed
//! half-way costs at most the batch it had in flight; a paid tenant's
//! upload does not wait behind the re-embedding; at the end no vector of
//! the earlier model and no index of it is left.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use docflow::{pipeline::embedder, platform::config::EmbedderKind, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE};
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder, WorkerProcess},
    helpers::{queues, spawn_peer_with, spawn_with, Options, TestApp},
};

const NEXT_MODEL: &str = "docflow-test-next-model";

/// The settings of a deployment that embeds with the mock endpoint.
fn next_settings(
    mock: &MockEmbedder,
) -> impl FnOnce(&mut docflow::platform::config::Config) + Clone {
    let url = mock.url();
    move |c: &mut docflow::platform::config::Config| {
        c.embedder = EmbedderKind::Openai;
        c.embed_url = Some(url);
        c.embed_model = NEXT_MODEL.into();
        c.embed_dims = Some(docflow::platform::config::LOCAL_DIMS);
    }
}

/// A web process and a worker with the local model; `n` documents of
/// alice's embedded by it, the worker stopped. Returns the web process
/// and the documents' filenames.
async fn embedded_with_local(n: usize, sentences: usize) -> (TestApp, HashSet<String>) {
    let web = spawn_with(Options::default()).await;
    let worker =
        spawn_peer_with(&web, Roles::worker(queues(&["high=4", "normal=1"])), |_| {}).await;
    let mut jobs = Vec::new();
    let mut names = HashSet::new();
    for i in 0..n {
        let name = format!("note-{i:03}.md");
        let text = format!(
            "# Ledger {i}\n\n{}",
            prose(&format!("ledger{i} quarterly"), sentences)
        );
        let accepted = web.upload_ok(ALICE, &name, text.into_bytes()).await;
        jobs.push(accepted["job_id"].as_str().expect("job id").to_string());
        names.insert(name);
    }
    for job in &jobs {
        web.wait_job(ALICE, job, Duration::from_secs(240), |j| {
            j["state"] == "done"
        })
        .await;
    }
    worker.stop().await;
    (web, names)
}

async fn model_id(app: &TestApp, name: &str) -> i16 {
    sqlx::query_scalar("SELECT id FROM embedding_models WHERE name = $1")
        .bind(name)
        .fetch_one(&app.pool)
        .await
        .expect("model registered")
}

/// Chunks holding a vector of `model`.
async fn vectors_of(app: &TestApp, model: i16) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM chunks WHERE model_id = $1")
        .bind(model)
        .fetch_one(&app.pool)
        .await
        .expect("count")
}

/// Every chunk's text.
async fn chunk_texts(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT text FROM chunks")
        .fetch_all(&app.pool)
        .await
        .expect("texts")
}

/// The dashboard's re-embedding numbers.
async fn progress(app: &TestApp) -> Value {
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    stats["reembed"].clone()
}

/// Waits up to `within` until the dashboard's re-embedding numbers are
/// what `wants` wants, and returns them; `what` says what did not happen.
async fn wait_progress(
    app: &TestApp,
    within: Duration,
    what: impl Fn() -> String,
    wants: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let p = progress(app).await;
        if wants(&p) {
            return p;
        }
        assert!(Instant::now() < deadline, "{}: {p:#}", what());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the re-embedding has finished (its earlier indexes dropped).
async fn finished(app: &TestApp, within: Duration) -> Value {
    wait_progress(
        app,
        within,
        || "re-embedding did not finish".into(),
        |p| !p["finished_at"].is_null(),
    )
    .await
}

/// Documents re-embedded so far.
fn done(p: &Value) -> i64 {
    p["done"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn a_model_change_re_embeds_every_document_while_search_keeps_answering() {
    let (web, names) = embedded_with_local(200, 3).await;
    let local = model_id(&web, embedder::LOCAL_MODEL).await;
    let local_index = format!("chunks_embedding_m{local}");
    let chunks: i64 = vectors_of(&web, local).await;
    assert!(
        chunks >= 200,
        "every document has vectors of the local model"
    );
    assert!(
        progress(&web).await.is_null(),
        "no re-embedding before the model changes"
    );

    // The next deploy: a web process and a worker with another model.
    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_millis(5)),
        ..Default::default()
    })
    .await;
    let next_web = spawn_peer_with(&web, Roles::web(), next_settings(&mock)).await;
    let next = model_id(&web, NEXT_MODEL).await;

    // A search every 100 ms until the end.
    let done = Arc::new(AtomicBool::new(false));
    let searcher = {
        let client = next_web.client(ALICE).await;
        let url = next_web.url("/api/search?q=ledger%20quarterly%20notes&k=10");
        let done = done.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let resp = client.get(&url).send().await.expect("search answers");
                let status = resp.status().as_u16();
                let hits: Value = resp.json().await.unwrap_or(Value::Null);
                answers.push((status, hits));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answers
        })
    };
    let worker = spawn_peer_with(
        &web,
        Roles::worker(queues(&["high=2", "normal=1"])),
        next_settings(&mock),
    )
    .await;

    let end = finished(&web, Duration::from_secs(180)).await;
    // A few more searches after the end, with the new model's vectors only.
    tokio::time::sleep(Duration::from_millis(500)).await;
    done.store(true, Ordering::SeqCst);
    let answers = searcher.await.expect("searcher");

    assert_eq!(end["model"], NEXT_MODEL, "{end:#}");
    assert_eq!(end["from"], serde_json::json!([embedder::LOCAL_MODEL]));
    assert_eq!(end["total"], 200, "{end:#}");
    assert_eq!(end["done"], 200, "{end:#}");
    assert_eq!(end["failed"], 0, "{end:#}");
    assert_eq!(end["pending"], 0, "{end:#}");

    assert!(answers.len() >= 5, "searched throughout: {}", answers.len());
    for (status, hits) in &answers {
        assert_eq!(*status, 200, "search answered {status}: {hits}");
        let hits = hits.as_array().expect("a list of hits");
        assert!(!hits.is_empty(), "search found alice's documents");
        for h in hits {
            let name = h["filename"].as_str().expect("filename");
            assert!(names.contains(name), "a hit from alice's documents: {h}");
        }
    }

    // Every chunk now has the next model's vector, embedded by the mock.
    assert_eq!(
        vectors_of(&web, local).await,
        0,
        "no vector of the old model left"
    );
    assert_eq!(vectors_of(&web, next).await, chunks);
    let texts = chunk_texts(&web).await;
    let counts = mock.text_counts();
    for t in &texts {
        assert!(counts.get(t).copied().unwrap_or(0) >= 1, "re-embedded: {t}");
    }
    let index: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&local_index)
        .fetch_one(&web.pool)
        .await
        .expect("regclass");
    assert_eq!(index, None, "the old model's index is gone");
    // The gauge the alert rules read comes down to nothing left.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = reqwest::get(next_web.url("/metrics"))
            .await
            .expect("scrape")
            .text()
            .await
            .expect("metrics text");
        if text.lines().any(|l| l == "docflow_reembed_pending 0") {
            break;
        }
        assert!(Instant::now() < deadline, "docflow_reembed_pending: {text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    worker.stop().await;
}

#[tokio::test]
async fn a_worker_killed_while_re_embedding_costs_at_most_its_batch_in_flight() {
    let (web, _) = embedded_with_local(24, 40).await;
    let local = model_id(&web, embedder::LOCAL_MODEL).await;
    let chunks = vectors_of(&web, local).await;
    assert!(chunks >= 48, "several chunks per document: {chunks}");

    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_millis(150)),
        ..Default::default()
    })
    .await;
    let next_web = spawn_peer_with(&web, Roles::web(), next_settings(&mock)).await;
    let next = model_id(&web, NEXT_MODEL).await;
    const BATCH: usize = 2;
    let env = |mock: &MockEmbedder| {
        vec![
            ("DOCFLOW_EMBEDDER", "openai".to_string()),
            ("DOCFLOW_EMBED_URL", mock.url()),
            ("DOCFLOW_EMBED_MODEL", NEXT_MODEL.to_string()),
            (
                "DOCFLOW_EMBED_DIMS",
                docflow::platform::config::LOCAL_DIMS.to_string(),
            ),
            ("DOCFLOW_EMBED_BATCH", BATCH.to_string()),
        ]
    };
    let mut first = WorkerProcess::start(&next_web, "high=2,normal=1", &env(&mock));
    // Killed once a few documents are done and more calls are on the way.
    wait_progress(
        &web,
        Duration::from_secs(120),
        || format!("re-embedding started\n{}", first.log_tail()),
        |p| done(p) >= 4,
    )
    .await;
    mock.wait_calls(mock.calls() + 1).await;
    first.kill();
    let at_kill = progress(&web).await;
    assert!(
        at_kill["pending"].as_i64().unwrap_or(0) > 0,
        "killed half-way: {at_kill:#}"
    );

    // Another worker takes over once the dead one's lease has run out.
    let second = WorkerProcess::start(&next_web, "high=2,normal=1", &env(&mock));
    let end = finished(&web, Duration::from_secs(180)).await;
    assert_eq!(end["done"], 24, "{end:#}\n{}", second.log_tail());
    assert_eq!(vectors_of(&web, local).await, 0);
    assert_eq!(vectors_of(&web, next).await, chunks);

    // Each chunk embedded once by the new model, but for the one batch
    // the killed worker had in flight.
    let texts = chunk_texts(&web).await;
    let counts = mock.text_counts();
    let mut again = 0;
    for t in &texts {
        let n = counts.get(t).copied().unwrap_or(0);
        assert!((1..=2).contains(&n), "embedded {n} times: {t}");
        again += n - 1;
    }
    assert!(
        again <= BATCH,
        "{again} chunks embedded twice: more than the batch in flight at the kill"
    );
}

#[tokio::test]
async fn a_paid_upload_during_re_embedding_does_not_wait_behind_it() {
    let (web, _) = embedded_with_local(40, 3).await;
    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_millis(200)),
        ..Default::default()
    })
    .await;
    let next_web = spawn_peer_with(&web, Roles::web(), next_settings(&mock)).await;
    let worker = spawn_peer_with(
        &web,
        Roles::worker(queues(&["high", "normal"])).with_slots(1),
        next_settings(&mock),
    )
    .await;
    wait_progress(
        &web,
        Duration::from_secs(60),
        || "re-embedding started".into(),
        |p| done(p) >= 2,
    )
    .await;

    // Alice's tenant pays: her new upload takes the worker's one slot as
    // soon as the document in hand is done, before the next document.
    let accepted = next_web
        .upload_ok(ALICE, "urgent.md", prose("urgent", 6).into_bytes())
        .await;
    let job = accepted["job_id"].as_str().expect("job id").to_string();
    next_web
        .wait_job(ALICE, &job, Duration::from_secs(60), |j| {
            j["state"] == "done"
        })
        .await;
    let p = progress(&web).await;
    assert!(
        p["pending"].as_i64().unwrap_or(0) >= 10,
        "the upload was done while most of the re-embedding still waited: {p:#}"
    );
    // Pausing holds the rest; resuming lets it finish.
    let admin = next_web.client(ADMIN).await;
    let paused = admin
        .post(next_web.url("/api/admin/reembed/pause"))
        .send()
        .await
        .expect("pause");
    assert_eq!(paused.status(), 204);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = progress(&web).await;
    assert_eq!(held["paused"], true, "{held:#}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        progress(&web).await["done"],
        held["done"],
        "nothing re-embedded while paused"
    );
    let resumed = admin
        .post(next_web.url("/api/admin/reembed/resume"))
        .send()
        .await
        .expect("resume");
    assert_eq!(resumed.status(), 204);
    let end = finished(&web, Duration::from_secs(120)).await;
    assert_eq!(end["done"], 40, "{end:#}");
    // Nothing left to pause.
    let none = admin
        .post(next_web.url("/api/admin/reembed/pause"))
        .send()
        .await
        .expect("pause");
    assert_eq!(none.status(), 409);
    let body: Value = none.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "no_reembedding");
    worker.stop().await;
}

#[tokio::test]
async fn a_switch_to_a_model_with_its_own_word_pieces_chunks_documents_again_for_it() {
    use docflow::pipeline::minilm;
    // Chunked for the local model: about 2,000 characters each, longer
    // than all-MiniLM-L6-v2 reads.
    let (web, _) = embedded_with_local(3, 60).await;
    let local = model_id(&web, embedder::LOCAL_MODEL).await;
    let before = vectors_of(&web, local).await;
    let worker = spawn_peer_with(&web, Roles::worker(queues(&["high=1", "normal=1"])), |c| {
        c.embedder = EmbedderKind::Minilm
    })
    .await;
    let end = finished(&web, Duration::from_secs(240)).await;
    assert_eq!(end["done"], 3, "{end:#}");
    let model = model_id(&web, minilm::MODEL_NAME).await;
    let after = vectors_of(&web, model).await;
    assert_eq!(vectors_of(&web, local).await, 0);
    assert!(
        after > before,
        "chunked again in the model's word pieces: {before} chunks before, {after} after"
    );
    let chunks: Vec<(String, Vec<f32>)> = sqlx::query_as(
        "SELECT text, embedding::real[] FROM chunks ORDER BY document_id, chunk_index",
    )
    .fetch_all(&web.pool)
    .await
    .expect("chunks");
    let reference = minilm::MiniLm::load(&minilm::default_dir(), 1).expect("the model");
    let tokenizer = minilm::MiniLm::load_tokenizer(&minilm::default_dir()).expect("tokenizer");
    for (text, stored) in &chunks {
        let pieces = tokenizer
            .encode(text.as_str(), false)
            .expect("encode")
            .len();
        assert!(
            pieces <= minilm::MAX_TOKENS - 2,
            "the model reads the whole chunk: {pieces} word pieces"
        );
        let want = reference.embed(std::slice::from_ref(text)).expect("embed");
        let cosine: f32 = want[0].iter().zip(stored).map(|(a, b)| a * b).sum();
        assert!(cosine > 0.999, "the stored vector is the model's: {cosine}");
    }
    // Every sentence is still in some chunk.
    let all: String = chunks
        .iter()
        .map(|(t, _)| t.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    for i in 0..3 {
        assert!(
            all.contains(&format!("Section ledger{i} quarterly note 59")),
            "the end of document {i}"
        );
    }
    worker.stop().await;
}

#[tokio::test]
async fn documents_whose_re_embedding_failed_are_counted_and_retried_once_the_cause_is_fixed() {
    let (web, names) = embedded_with_local(5, 3).await;
    let mock = MockEmbedder::start(EmbedBehaviour {
        refuse: true,
        ..Default::default()
    })
    .await;
    let next_web = spawn_peer_with(&web, Roles::web(), next_settings(&mock)).await;
    let worker = spawn_peer_with(
        &web,
        Roles::worker(queues(&["high=1", "normal=1"])),
        next_settings(&mock),
    )
    .await;
    // The provider refuses every text: each document fails for good.
    let failed = wait_progress(
        &web,
        Duration::from_secs(60),
        || "the documents failed".into(),
        |p| p["failed"] == 5,
    )
    .await;
    assert_eq!(failed["done"], 0, "{failed:#}");
    assert_eq!(failed["pending"], 0, "{failed:#}");
    assert!(
        failed["finished_at"].is_null(),
        "their earlier vectors stay: {failed:#}"
    );
    let local = model_id(&web, embedder::LOCAL_MODEL).await;
    assert!(vectors_of(&web, local).await >= 5);
    // (Searched through a web process of the earlier deploy: the new
    // model's provider refuses queries too.)
    let hits: Vec<Value> = web
        .get_json(ALICE, "/api/search?q=ledger2%20quarterly&k=3")
        .await;
    assert!(
        hits.iter()
            .any(|h| h["filename"] == "note-002.md" && names.contains("note-002.md")),
        "still found: {hits:?}"
    );

    // The cause fixed, one click re-embeds them.
    mock.set(|b| b.refuse = false);
    let admin = next_web.client(ADMIN).await;
    let retried = admin
        .post(next_web.url("/api/admin/reembed/retry"))
        .send()
        .await
        .expect("retry");
    assert_eq!(retried.status(), 202);
    let body: Value = retried.json().await.expect("count");
    assert_eq!(body["count"], 5);
    let end = finished(&web, Duration::from_secs(60)).await;
    assert_eq!(
        (end["done"].clone(), end["failed"].clone()),
        (5.into(), 0.into()),
        "{end:#}"
    );
    assert_eq!(vectors_of(&web, local).await, 0);
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'reembed.retry'")
            .fetch_one(&web.pool)
            .await
            .expect("audit");
    assert_eq!(audited, 1, "the retry is audited");
    worker.stop().await;
}
