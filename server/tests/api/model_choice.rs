//! The deployment's embedding model is recorded once, in the database: the
//! newest process to start records its own. During a rolling deploy a
//! worker still running with the earlier settings stores no vector of its
//! model; the job waits, without spending its retries, for a worker with
//! the chosen one.

use docflow::{pipeline::vectors::Choice, platform::config::EmbedderKind, Roles};

use crate::fixtures::ALICE;
use crate::{
    fixtures::prose,
    helpers::{queues, spawn_peer_with, spawn_with, Options},
    mock_embedder::{EmbedBehaviour, MockEmbedder},
};

const NEXT_MODEL: &str = "docflow-test-next-model";

#[tokio::test]
async fn a_worker_with_the_earlier_model_leaves_embedding_to_one_with_the_chosen_model() {
    // The earlier deploy: a web process and a worker with the local model.
    let web = spawn_with(Options::default()).await;
    let old_worker =
        spawn_peer_with(&web, Roles::worker(queues(&["high=2", "normal=1"])), |_| {}).await;
    let first = web
        .upload_ok(ALICE, "first.md", prose("before", 6).into_bytes())
        .await;
    let first = first["job_id"].as_str().expect("job id").to_string();
    web.wait_state(ALICE, &first, "done").await;
    let model_of = |name: &'static str| {
        let pool = web.pool.clone();
        async move {
            sqlx::query_scalar::<_, i16>("SELECT id FROM embedding_models WHERE name = $1")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("model registered")
        }
    };
    let local = model_of(docflow::pipeline::embedder::LOCAL_MODEL).await;

    // The next deploy starts a web process with another model: from now on
    // the deployment stores that model's vectors.
    let mock = MockEmbedder::start(EmbedBehaviour::default()).await;
    let url = mock.url();
    let next_settings = move |c: &mut docflow::platform::config::Config| {
        c.embedder = EmbedderKind::Openai;
        c.embed_url = Some(url);
        c.embed_model = NEXT_MODEL.into();
        c.embed_dims = Some(docflow::platform::config::LOCAL_DIMS);
    };
    let next_web = spawn_peer_with(&web, Roles::web(), next_settings.clone()).await;
    let next = model_of(NEXT_MODEL).await;
    let chosen: i16 = sqlx::query_scalar("SELECT model_id FROM embedding_choice")
        .fetch_one(&web.pool)
        .await
        .expect("choice");
    assert_eq!(chosen, next, "the newest process's model is the choice");

    // The old worker's answer about the choice is at most this old.
    tokio::time::sleep(Choice::FRESH).await;
    let second = next_web
        .upload_ok(ALICE, "second.md", prose("after", 6).into_bytes())
        .await;
    let second = second["job_id"].as_str().expect("job id").to_string();
    let waiting = web
        .wait_job(ALICE, &second, std::time::Duration::from_secs(30), |j| {
            j["state"] == "retrying"
        })
        .await;
    let retries_of = |job: String| {
        let pool = web.pool.clone();
        async move {
            sqlx::query_as::<_, (i32, Option<String>)>(
                "SELECT retries, waiting_for FROM jobs WHERE id = $1::uuid",
            )
            .bind(job)
            .fetch_one(&pool)
            .await
            .expect("job")
        }
    };
    assert_eq!(
        retries_of(second.clone()).await,
        (0, Some("embedder".to_string())),
        "it waits for an embedder, spending no retry: {waiting:#}"
    );
    assert!(
        waiting["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no longer stores")),
        "{waiting:#}"
    );
    let document: uuid::Uuid =
        sqlx::query_scalar("SELECT document_id FROM jobs WHERE id = $1::uuid")
            .bind(&second)
            .fetch_one(&web.pool)
            .await
            .expect("document");
    let vectors = |document: uuid::Uuid| {
        let pool = web.pool.clone();
        async move {
            sqlx::query_as::<_, (i64, i64)>(
                "SELECT count(*), count(embedding) FROM chunks WHERE document_id = $1",
            )
            .bind(document)
            .fetch_one(&pool)
            .await
            .expect("chunks")
        }
    };
    let (chunks, embedded) = vectors(document).await;
    assert!(chunks > 0, "the old worker chunked the document");
    assert_eq!(embedded, 0, "the old worker stored no vector of its model");
    assert_eq!(mock.calls(), 0, "nothing embedded with the next model yet");

    // Whatever a stale worker tries, the database stores no vector of a
    // model other than the chosen one.
    let refused = sqlx::query(
        "UPDATE chunks SET embedding = array_fill(0.1::real, ARRAY[384])::vector, model_id = $2
         WHERE document_id = $1",
    )
    .bind(document)
    .bind(local)
    .execute(&web.pool)
    .await
    .expect_err("a vector of the earlier model is refused");
    assert!(
        refused
            .to_string()
            .contains("the deployment has chosen model"),
        "{refused}"
    );

    // A worker of the next deploy takes the job over and embeds it with the
    // chosen model; the old worker goes.
    let next_worker = spawn_peer_with(
        &web,
        Roles::worker(queues(&["high=2", "normal=1"])),
        next_settings,
    )
    .await;
    old_worker.stop().await;
    let done = web
        .wait_job(ALICE, &second, std::time::Duration::from_secs(60), |j| {
            j["state"] == "done"
        })
        .await;
    assert_eq!(retries_of(second.clone()).await, (0, None), "{done:#}");
    let models: Vec<(i16, i64)> =
        sqlx::query_as("SELECT model_id, count(*) FROM chunks WHERE document_id = $1 GROUP BY 1")
            .bind(document)
            .fetch_all(&web.pool)
            .await
            .expect("models");
    assert_eq!(
        models,
        vec![(next, chunks)],
        "every vector is the chosen model's"
    );
    assert!(mock.calls() > 0);
    next_worker.stop().await;
    next_web.stop().await;
}
