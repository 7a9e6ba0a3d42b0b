//! Outages of the real services: a RabbitMQ node and a PostgreSQL cluster
//! that the test starts on its own ports, stops and starts again, without
//! disturbing the shared servers other tests use.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use docflow::{platform::config::EmbedderKind, Roles};

use crate::fixtures::ALICE;
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_with, Options},
    services::{run, PgCluster, RabbitNode},
};

#[tokio::test]
async fn rabbitmq_stopped_and_started_with_200_jobs_in_flight_loses_none_and_runs_none_twice() {
    let node = tokio::task::spawn_blocking(RabbitNode::start)
        .await
        .expect("node");
    let port = node.port;
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=4"])),
        // The node is the test's own: its default vhost is isolation enough.
        configure: Box::new(move |c| {
            c.amqp_url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
            c.embed_batch = 4;
        }),
        ..Default::default()
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..200 {
        let b = app
            .upload_ok(
                ALICE,
                &format!("flight-{i}.txt"),
                prose(&format!("f{i}"), 30).into_bytes(),
            )
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    // Wait until work is under way, then take the broker away.
    let deadline = Instant::now() + Duration::from_secs(60);
    while app.count("jobs WHERE state = 'done'").await < 10 {
        assert!(
            Instant::now() < deadline,
            "no job finished before the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::spawn_blocking({
        let name = node.name.clone();
        move || run(Command::new("rabbitmqctl").args(["-q", "-n", &name, "stop_app"]))
    })
    .await
    .expect("stop_app");
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503, "not ready while RabbitMQ is down");
    // Uploads still work meanwhile.
    for i in 0..5 {
        let b = app
            .upload_ok(
                ALICE,
                &format!("during-{i}.txt"),
                prose(&format!("d{i}"), 5).into_bytes(),
            )
            .await;
        ids.push(b["job_id"].as_str().expect("id").to_string());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = tokio::task::spawn_blocking(move || {
        node.start_app();
        node
    })
    .await
    .expect("start_app");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let done = app.count("jobs WHERE state = 'done'").await;
        if done == ids.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} jobs done after the broker came back",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Each job finished exactly once and its chunks exist once.
    let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT job_id FROM job_events WHERE state = 'done' GROUP BY job_id HAVING count(*) <> 1) x")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(twice, 0, "jobs finished more than once");
    let embedded_twice: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE chunks_embedded <> chunks_total")
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert_eq!(embedded_twice, 0);
    assert_eq!(app.count("dead_letters").await, 0);
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 200);
    app.stop().await;
    drop(node);
}

#[tokio::test]
async fn postgresql_unreachable_means_503_with_nothing_written_and_workers_pause_until_it_is_back()
{
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("cluster");
    let url = cluster.url();
    let mock = MockEmbedder::start(EmbedBehaviour {
        hang_at: Some(1),
        ..Default::default()
    })
    .await;
    let embed_url = mock.url();
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        configure: Box::new(move |c| {
            c.database_url = url;
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(embed_url);
            c.lease = Duration::from_secs(2);
        }),
        ..Default::default()
    })
    .await;
    // A job is in the middle of embedding when PostgreSQL goes away.
    let b = app
        .upload_ok(ALICE, "interrupted.txt", prose("i", 20).into_bytes())
        .await;
    let job_id = b["job_id"].as_str().expect("id").to_string();
    mock.wait_calls(1).await;
    let blobs_before = app.blob_files().len();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop();
        cluster
    })
    .await
    .expect("stop");
    mock.release();

    let r = app
        .upload(ALICE, "refused.txt", prose("z", 5).into_bytes())
        .await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "unavailable");
    assert_eq!(
        app.blob_files().len(),
        blobs_before,
        "no blob left half-written"
    );
    let r = app
        .anonymous()
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.start_again();
        cluster
    })
    .await
    .expect("start");
    let job = app.wait_state(ALICE, &job_id, "done").await;
    assert_eq!(job["steps"][0]["attempts"], 1, "parse kept its checkpoint");
    let r = app
        .upload(ALICE, "after.txt", prose("a", 5).into_bytes())
        .await;
    assert_eq!(r.status(), 202, "uploads work again");
    assert_eq!(
        app.count("documents WHERE filename = 'refused.txt'").await,
        0
    );
    app.stop().await;
    drop(cluster);
}

#[tokio::test]
async fn a_process_with_the_smallest_pool_is_ready_and_runs_jobs() {
    // Its listeners hold connections for as long as it runs: they come on
    // top of the pool for queries, or they would take all of it.
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1", "normal=1"])),
        configure: Box::new(|c| c.db_pool = 1),
        ..Default::default()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = app
            .anonymous()
            .get(app.url("/readyz"))
            .send()
            .await
            .expect("readyz");
        if r.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ready: {}",
            r.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let accepted = app
        .upload_ok(ALICE, "small-pool.txt", prose("small", 5).into_bytes())
        .await;
    let job = accepted["job_id"].as_str().expect("job id");
    app.wait_state(ALICE, job, "done").await;
}
