//! Paid first without idle slots: `high` and `normal` share one worker
//! group's slots, and a freed slot goes to `high` first.

use std::time::Duration;

use chrono::{DateTime, Utc};
use docflow::{platform::config::EmbedderKind, Roles};

use crate::fixtures::{ALICE, BOB};
use crate::{
    fixtures::{prose, EmbedBehaviour, MockEmbedder},
    helpers::{queues, spawn_with, Options},
};

const PAID: &str = ALICE;
const FREE: &str = BOB;
const SLOTS: usize = 4;

#[derive(sqlx::FromRow)]
struct Run {
    queue: String,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

/// The most jobs running at any one time, and the share of `slots` × the
/// span from the first start to the last start (all that time some queue
/// still had work waiting) during which slots were busy.
fn occupancy(runs: &[Run], slots: usize) -> (usize, f64) {
    let mut edges: Vec<(DateTime<Utc>, i32)> = runs
        .iter()
        .flat_map(|r| [(r.started_at, 1), (r.finished_at, -1)])
        .collect();
    // A job finishing at the instant another starts frees its slot first.
    edges.sort_by_key(|(t, d)| (*t, *d));
    let first = runs.iter().map(|r| r.started_at).min().expect("runs");
    let last = runs.iter().map(|r| r.started_at).max().expect("runs");
    let (mut running, mut peak, mut busy_ms, mut at) = (0i32, 0i32, 0f64, first);
    for (t, d) in edges {
        let clipped = t.clamp(first, last);
        busy_ms += f64::from(running) * (clipped - at).num_microseconds().unwrap_or(0) as f64 / 1e3;
        at = clipped;
        running += d;
        peak = peak.max(running);
    }
    let span_ms = (last - first).num_microseconds().unwrap_or(0) as f64 / 1e3;
    (peak as usize, busy_ms / (slots as f64 * span_ms))
}

#[tokio::test]
async fn paid_documents_start_before_queued_free_ones_and_no_slot_idles() {
    // Each document's embedding takes 150 ms, so a backlog builds; the
    // embedder holds every call until the test lets go, so the paid
    // deliveries are known to be in the worker's hand before any slot frees.
    let mock = MockEmbedder::start(EmbedBehaviour {
        delay: Some(Duration::from_millis(150)),
        hold: true,
        ..Default::default()
    })
    .await;
    let url = mock.url();
    let app = spawn_with(Options {
        // No reservations: 4 slots shared by both queues.
        roles: Roles::all(queues(&["high", "normal"])).with_slots(SLOTS as u16),
        configure: Box::new(move |c| {
            c.embedder = EmbedderKind::Openai;
            c.embed_url = Some(url);
            c.lease = Duration::from_secs(30);
        }),
        ..Default::default()
    })
    .await;
    for i in 0..200 {
        let text = prose(&format!("free{i}"), 4);
        app.upload_ok(FREE, &format!("free-{i}.txt"), text.into_bytes())
            .await;
    }
    // Every slot is busy with a free document, held in its embed step.
    mock.wait_calls(SLOTS).await;
    for i in 0..10 {
        let text = prose(&format!("paid{i}"), 4);
        app.upload_ok(PAID, &format!("paid-{i}.txt"), text.into_bytes())
            .await;
    }
    // The worker takes as many paid deliveries as it could run, plus one,
    // plus half its slots again (room for finished deliveries whose ack is
    // being gathered; see `worker::consume_once`).
    let in_hand = (SLOTS + 1 + SLOTS.div_ceil(2)) as u32;
    wait_ready(&app, "docflow.jobs.high", 10 - in_hand).await;
    let queued_free = app
        .count("jobs WHERE queue = 'normal' AND started_at IS NULL")
        .await;
    assert!(
        queued_free > 50,
        "a free backlog when the slots free up ({queued_free} queued)"
    );
    let (released_at,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()")
        .fetch_one(&app.pool)
        .await
        .expect("clock");
    mock.release();

    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while app.count("jobs WHERE state = 'done'").await < 210 {
        assert!(
            std::time::Instant::now() < deadline,
            "all 210 documents done within 3 min"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let runs: Vec<Run> = sqlx::query_as(
        "SELECT queue::text AS queue, started_at, finished_at FROM jobs ORDER BY started_at",
    )
    .fetch_all(&app.pool)
    .await
    .expect("runs");
    let since: Vec<&Run> = runs
        .iter()
        .filter(|r| r.started_at >= released_at)
        .collect();
    let later: Vec<&str> = since.iter().map(|r| r.queue.as_str()).collect();
    // A free delivery was waiting in hand too, longer than any paid one: the
    // freed slots still went to the paid ones. Slots free in waves (each
    // embedding takes 150 ms), and the jobs granted slots in one wave are
    // claimed on the worker's two commit lanes at once, so within a wave
    // the start times may come in either order: the free one must not
    // start a wave before the last paid one in hand.
    let paid_in_hand = since
        .iter()
        .filter(|r| r.queue == "high")
        .nth(in_hand as usize - 1)
        .expect("the paid deliveries in hand ran");
    let first_free = since
        .iter()
        .find(|r| r.queue == "normal")
        .expect("free documents ran");
    let wave = chrono::Duration::milliseconds(50);
    assert!(
        first_free.started_at >= paid_in_hand.started_at - wave,
        "the free document in hand started {} ms before the last paid one in hand (in order: {:?})",
        (paid_in_hand.started_at - first_free.started_at).num_milliseconds(),
        &later[..20]
    );
    // The rest of the paid documents come from the broker as paid ones
    // finish; a free one may take a slot that frees before that delivery
    // lands, but not the backlog.
    let last_paid = later.iter().rposition(|q| *q == "high").expect("paid");
    let overtaken = later[..last_paid]
        .iter()
        .filter(|q| **q == "normal")
        .count();
    assert!(
        overtaken <= SLOTS,
        "{overtaken} free documents started before the last paid one (in order: {:?})",
        &later[..=last_paid]
    );
    assert_eq!(
        runs.iter().filter(|r| r.queue == "high").count(),
        10,
        "every paid document ran"
    );
    let (peak, busy) = occupancy(&runs, SLOTS);
    println!("peak {peak} jobs at once, slots busy {:.1}%", busy * 100.0);
    assert!(peak <= SLOTS, "{peak} jobs ran at once on {SLOTS} slots");
    // Fixed slots (2 + 2) would leave half idle while only free work waits.
    assert!(
        busy >= 0.8,
        "slots busy {:.0}% of the time while work was queued",
        busy * 100.0
    );
}

/// Waits until `queue` has exactly `ready` messages waiting in the broker
/// (the rest delivered).
async fn wait_ready(app: &crate::helpers::TestApp, queue: &str, ready: u32) {
    let conn = app.amqp().await;
    let ch = conn.create_channel().await.expect("channel");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let q = ch
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("queue exists");
        if q.message_count() == ready {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{queue}: {} ready, waiting for {ready}",
            q.message_count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_worker_refuses_queues_without_any_slot() {
    let refused =
        docflow::worker::Groups::new(&queues(&["high", "normal"]), 0).expect_err("no slot at all");
    assert!(
        refused.to_string().contains("--slots"),
        "says what to give: {refused}"
    );
    let twice = docflow::worker::Groups::new(&queues(&["high=1", "high=2"]), 4)
        .expect_err("a queue given twice");
    assert!(twice.to_string().contains("twice"), "{twice}");
}
