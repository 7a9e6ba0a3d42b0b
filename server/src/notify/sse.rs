//! SSE streams (DESIGN §6): `id:` is the `job_events` row id, so a client
//! reconnecting with `Last-Event-ID` gets what it missed from the database,
//! then live events from the hub; a comment every 15 s keeps proxies from
//! closing the stream; a finished job's stream ends after its final event.
//!
//! A job event's frame is encoded once, by the hub, and shared by every
//! stream; events that arrive together leave in one write.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{header, HeaderValue},
    response::{IntoResponse, Response},
};
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::{
    broadcast::error::{RecvError, TryRecvError},
    mpsc,
};
use uuid::Uuid;

use super::Hub;
use crate::pipeline::events::{JobEvent, NotificationRef, Progress};

/// What a stream carries.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// One job's events; ends after its final event.
    Job(Uuid),
    /// A tenant's job events and one user's notifications.
    Tenant { tenant_id: Uuid, user_id: Uuid },
}

impl Scope {
    fn matches(&self, e: &JobEvent) -> bool {
        match self {
            Scope::Job(id) => e.job_id == *id,
            Scope::Tenant { tenant_id, .. } => e.tenant_id == *tenant_id,
        }
    }
}

const REPLAY_BATCH: i64 = 500;
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(sqlx::FromRow)]
struct EventRow {
    id: i64,
    job_id: Uuid,
    tenant_id: Uuid,
    state: crate::jobs::JobState,
    step: Option<String>,
    progress_done: Option<i32>,
    progress_total: Option<i32>,
    message: String,
    at: DateTime<Utc>,
}

impl From<EventRow> for JobEvent {
    fn from(r: EventRow) -> Self {
        JobEvent {
            id: r.id,
            job_id: r.job_id,
            tenant_id: r.tenant_id,
            user_id: None,
            state: r.state.as_str().into(),
            step: r.step,
            progress: r
                .progress_done
                .zip(r.progress_total)
                .map(|(done, total)| Progress { done, total }),
            message: r.message,
            at: r.at,
            notification: None,
        }
    }
}

async fn replay(pool: &PgPool, scope: Scope, after: i64) -> sqlx::Result<Vec<JobEvent>> {
    let (job, tenant) = match scope {
        Scope::Job(id) => (Some(id), None),
        Scope::Tenant { tenant_id, .. } => (None, Some(tenant_id)),
    };
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT id, job_id, tenant_id, state, step, progress_done, progress_total, message, at FROM job_events
         WHERE ($1::uuid IS NULL OR job_id = $1) AND ($2::uuid IS NULL OR tenant_id = $2) AND id > $3
         ORDER BY id LIMIT $4",
    )
    .bind(job)
    .bind(tenant)
    .bind(after)
    .bind(REPLAY_BATCH)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(JobEvent::from).collect())
}

/// The `data:` of a job event (DESIGN §6).
fn job_data(e: &JobEvent) -> String {
    json!({
        "job_id": e.job_id, "state": e.state, "step": e.step,
        "progress": e.progress.map(|p| json!({"done": p.done, "total": p.total})),
        "message": e.message, "at": e.at,
    })
    .to_string()
}

/// One SSE frame; `data` is single-line JSON.
fn frame(id: Option<i64>, event: &str, data: &str) -> Bytes {
    let id = id.map(|id| format!("id: {id}\n")).unwrap_or_default();
    Bytes::from(format!("{id}event: {event}\ndata: {data}\n\n"))
}

/// The frame of a job event, as every stream sends it.
pub fn job_frame(e: &JobEvent) -> Bytes {
    frame(Some(e.id), "job", &job_data(e))
}

fn notification_frame(n: &NotificationRef, job_id: Option<Uuid>, at: DateTime<Utc>) -> Bytes {
    let data = json!({"id": n.id, "kind": n.kind, "title": n.title, "body": n.body, "link": n.link, "job_id": job_id, "created_at": at, "read_at": null});
    frame(None, "notification", &data.to_string())
}

const KEEP_ALIVE_FRAME: &[u8] = b":keep-alive\n\n";

fn is_final(e: &JobEvent) -> bool {
    e.progress.is_none() && (e.state == "done" || e.state == "failed")
}

/// The SSE response for `scope`, resuming after event `last_id`.
pub fn stream(pool: PgPool, hub: Hub, scope: Scope, last_id: i64) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        if let Err(e) = pump(&pool, &hub, scope, last_id, &tx).await {
            tracing::debug!(error = %e, "event stream ended early");
        }
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Proxies such as nginx must pass events on as they come.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

#[derive(Debug, thiserror::Error)]
enum PumpError {
    #[error("client went away")]
    Gone,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

async fn send(tx: &mpsc::Sender<Bytes>, frame: Bytes) -> Result<(), PumpError> {
    tx.send(frame).await.map_err(|_| PumpError::Gone)
}

/// The job events a stream has sent, newest [`Sent::CAPACITY`] of them.
///
/// Event ids come from a sequence, but transactions commit in their own
/// order: event 149 of one job may reach the hub after event 150 of
/// another. So a stream remembers which ids it sent rather than the highest
/// one, and a live event is new unless that very id went out already.
struct Sent {
    ids: std::collections::BTreeSet<i64>,
}

impl Sent {
    const CAPACITY: usize = 4096;
    /// How far below the newest sent id a catch-up replay looks for late commits.
    const LATE_WINDOW: i64 = 1000;

    fn new() -> Self {
        Sent {
            ids: std::collections::BTreeSet::new(),
        }
    }

    /// Records `id`; false when it was sent before.
    fn insert(&mut self, id: i64) -> bool {
        let new = self.ids.insert(id);
        if self.ids.len() > Self::CAPACITY {
            self.ids.pop_first();
        }
        new
    }

    fn newest(&self) -> Option<i64> {
        self.ids.last().copied()
    }
}

async fn pump(
    pool: &PgPool,
    hub: &Hub,
    scope: Scope,
    last_id: i64,
    tx: &mpsc::Sender<Bytes>,
) -> Result<(), PumpError> {
    let _client = hub.client_guard();
    // Subscribe before reading the database, so nothing falls between the two.
    let mut live = hub.subscribe();
    let mut cursor = last_id;
    let mut sent = Sent::new();
    let mut notified = std::collections::HashSet::new();
    if let Scope::Tenant { tenant_id, .. } = scope {
        // A fresh tenant stream starts now; its history is in the job pages.
        if cursor == 0 {
            cursor = sqlx::query_scalar(
                "SELECT coalesce(max(id), 0) FROM job_events WHERE tenant_id = $1",
            )
            .bind(tenant_id)
            .fetch_one(pool)
            .await?;
        }
    }
    if let Scope::Tenant { user_id, .. } = scope {
        for (n, job_id, at) in unread(pool, user_id).await? {
            notified.insert(n.id);
            send(tx, notification_frame(&n, job_id, at)).await?;
        }
    }
    // Replay what the client has not seen.
    if replay_after(pool, scope, cursor, &mut sent, tx).await? {
        return Ok(());
    }
    if let Scope::Job(id) = scope {
        // Finished before this connection, final event already seen by the client.
        let state: Option<crate::jobs::JobState> =
            sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?;
        if state.is_some_and(|s| s.is_terminal()) {
            return Ok(());
        }
    }
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let mut out = BytesMut::new();
    loop {
        let first = tokio::select! {
            r = live.recv() => r,
            _ = keep_alive.tick() => {
                send(tx, Bytes::from_static(KEEP_ALIVE_FRAME)).await?;
                continue;
            }
        };
        // Whatever else has already arrived goes out in the same write.
        let mut next = Some(first);
        while let Some(received) = next.take() {
            let published: Arc<super::Published> = match received {
                Ok(p) => p,
                Err(RecvError::Lagged(missed)) => {
                    // Too slow for the hub: catch up from the database,
                    // including events that committed late with an id below
                    // the newest sent.
                    tracing::debug!(missed, "event stream lagged; replaying from the database");
                    flush(tx, &mut out).await?;
                    let from = sent
                        .newest()
                        .map_or(cursor, |n| (n - Sent::LATE_WINDOW).max(cursor));
                    if replay_after(pool, scope, from, &mut sent, tx).await? {
                        return Ok(());
                    }
                    next = try_next(&mut live);
                    continue;
                }
                Err(RecvError::Closed) => return flush(tx, &mut out).await,
            };
            let e = &published.event;
            if scope.matches(e) {
                // An event already replayed from the database still brings its
                // notification, which the replay (job_events rows) does not carry.
                if sent.insert(e.id) {
                    out.extend_from_slice(&published.frame);
                }
                if let (Scope::Tenant { user_id, .. }, Some(n)) = (scope, &e.notification) {
                    if e.user_id == Some(user_id) && notified.insert(n.id) {
                        out.extend_from_slice(&notification_frame(n, Some(e.job_id), e.at));
                    }
                }
                if matches!(scope, Scope::Job(_)) && is_final(e) {
                    return flush(tx, &mut out).await;
                }
            }
            next = try_next(&mut live);
        }
        flush(tx, &mut out).await?;
    }
}

/// The next event the hub already holds, without waiting.
fn try_next(
    live: &mut tokio::sync::broadcast::Receiver<Arc<super::Published>>,
) -> Option<Result<Arc<super::Published>, RecvError>> {
    match live.try_recv() {
        Ok(p) => Some(Ok(p)),
        Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
        Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
        Err(TryRecvError::Empty) => None,
    }
}

async fn flush(tx: &mpsc::Sender<Bytes>, out: &mut BytesMut) -> Result<(), PumpError> {
    if out.is_empty() {
        return Ok(());
    }
    send(tx, out.split().freeze()).await
}

/// Sends the stored events after `after` that this stream has not sent;
/// true when a job stream reached its job's final event.
async fn replay_after(
    pool: &PgPool,
    scope: Scope,
    mut after: i64,
    sent: &mut Sent,
    tx: &mpsc::Sender<Bytes>,
) -> Result<bool, PumpError> {
    loop {
        let batch = replay(pool, scope, after).await?;
        let n = batch.len() as i64;
        for e in batch {
            after = e.id;
            if sent.insert(e.id) {
                send(tx, job_frame(&e)).await?;
            }
            if matches!(scope, Scope::Job(_)) && is_final(&e) {
                return Ok(true);
            }
        }
        if n < REPLAY_BATCH {
            return Ok(false);
        }
    }
}

#[derive(sqlx::FromRow)]
struct UnreadRow {
    id: Uuid,
    kind: String,
    title: String,
    body: String,
    link: String,
    job_id: Option<Uuid>,
    created_at: DateTime<Utc>,
}

async fn unread(
    pool: &PgPool,
    user_id: Uuid,
) -> sqlx::Result<Vec<(NotificationRef, Option<Uuid>, DateTime<Utc>)>> {
    let rows: Vec<UnreadRow> = sqlx::query_as(
        "SELECT id, kind, title, body, link, job_id, created_at FROM notifications
         WHERE user_id = $1 AND read_at IS NULL ORDER BY created_at LIMIT 100",
    )
    .bind(user_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let n = NotificationRef {
                id: r.id,
                kind: r.kind,
                title: r.title,
                body: r.body,
                link: r.link,
            };
            (n, r.job_id, r.created_at)
        })
        .collect())
}
