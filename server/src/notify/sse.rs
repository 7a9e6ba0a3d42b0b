//! SSE streams (DESIGN §6): `id:` is the `job_events` row id, so a client
//! reconnecting with `Last-Event-ID` gets what it missed from the database,
//! then live events from the hub; a comment every 15 s keeps proxies from
//! closing the stream; a finished job's stream ends after its final event.
//!
//! A job event's frame is encoded once, by the hub, and shared by every
//! stream; events that arrive together leave in one write.

use std::{
    collections::{BTreeSet, HashSet},
    convert::Infallible,
    sync::Arc,
    time::Duration,
};

use axum::{
    body::Body,
    http::{header, HeaderValue},
    response::{IntoResponse, Response},
};
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use uuid::Uuid;

use super::{ClientGuard, Hub, Published};
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
///
/// The stream is polled by the connection itself: no task or channel per
/// client stands between the hub and the socket.
pub fn stream(pool: PgPool, hub: &Hub, scope: Scope, last_id: i64) -> Response {
    // Subscribe before reading the database, so nothing falls between the two.
    let stream = ClientStream {
        _client: hub.client_guard(),
        live: hub.subscribe(),
        pool,
        scope,
        cursor: last_id,
        sent: Sent::new(),
        notified: HashSet::new(),
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        caught_up: false,
        finished: false,
    };
    let body = futures::stream::unfold(stream, |mut stream| async move {
        match stream.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, Infallible>(chunk), stream)),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "event stream ended early");
                None
            }
        }
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

/// The job events a stream has sent, newest [`Sent::CAPACITY`] of them.
///
/// Event ids come from a sequence, but transactions commit in their own
/// order: event 149 of one job may reach the hub after event 150 of
/// another. So a stream remembers which ids it sent rather than the highest
/// one, and a live event is new unless that very id went out already.
struct Sent {
    ids: BTreeSet<i64>,
}

impl Sent {
    const CAPACITY: usize = 4096;
    /// How far below the newest sent id a catch-up replay looks for late commits.
    const LATE_WINDOW: i64 = 1000;

    fn new() -> Self {
        Sent {
            ids: BTreeSet::new(),
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

/// One client's stream: first what it missed, then the hub's events.
struct ClientStream {
    _client: ClientGuard,
    live: broadcast::Receiver<Arc<Published>>,
    pool: PgPool,
    scope: Scope,
    /// Replays start after this id.
    cursor: i64,
    sent: Sent,
    notified: HashSet<Uuid>,
    keep_alive: tokio::time::Interval,
    caught_up: bool,
    /// A job stream past its job's final event.
    finished: bool,
}

impl ClientStream {
    /// The next bytes to write: all events that are ready, in one chunk;
    /// `None` when the stream is over.
    async fn next_chunk(&mut self) -> sqlx::Result<Option<Bytes>> {
        if self.finished {
            return Ok(None);
        }
        let mut out = BytesMut::new();
        if !self.caught_up {
            self.caught_up = true;
            self.catch_up(&mut out).await?;
            if !out.is_empty() {
                return Ok(Some(out.freeze()));
            }
            if self.finished {
                return Ok(None);
            }
        }
        loop {
            let first = tokio::select! {
                r = self.live.recv() => r,
                _ = self.keep_alive.tick() => return Ok(Some(Bytes::from_static(KEEP_ALIVE_FRAME))),
            };
            // Whatever else has already arrived goes out in the same write.
            let mut next = Some(first);
            while let Some(received) = next.take() {
                match received {
                    Ok(published) => self.take(&published, &mut out),
                    Err(RecvError::Lagged(missed)) => {
                        // Too slow for the hub: catch up from the database,
                        // including events that committed late with an id
                        // below the newest sent.
                        tracing::debug!(missed, "event stream lagged; replaying from the database");
                        let from = self
                            .sent
                            .newest()
                            .map_or(self.cursor, |n| (n - Sent::LATE_WINDOW).max(self.cursor));
                        self.replay_after(from, &mut out).await?;
                    }
                    Err(RecvError::Closed) => self.finished = true,
                }
                if self.finished {
                    break;
                }
                next = match self.live.try_recv() {
                    Ok(p) => Some(Ok(p)),
                    Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
                    Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                    Err(TryRecvError::Empty) => None,
                };
            }
            if !out.is_empty() {
                return Ok(Some(out.freeze()));
            }
            if self.finished {
                return Ok(None);
            }
        }
    }

    /// Unread notifications and the events after the client's last one.
    async fn catch_up(&mut self, out: &mut BytesMut) -> sqlx::Result<()> {
        if let Scope::Tenant { tenant_id, user_id } = self.scope {
            // A fresh tenant stream starts now; its history is in the job pages.
            if self.cursor == 0 {
                self.cursor = sqlx::query_scalar(
                    "SELECT coalesce(max(id), 0) FROM job_events WHERE tenant_id = $1",
                )
                .bind(tenant_id)
                .fetch_one(&self.pool)
                .await?;
            }
            for (n, job_id, at) in unread(&self.pool, user_id).await? {
                self.notified.insert(n.id);
                out.extend_from_slice(&notification_frame(&n, job_id, at));
            }
        }
        self.replay_after(self.cursor, out).await?;
        if let Scope::Job(id) = self.scope {
            // Finished before this connection, final event already seen by the client.
            let state: Option<crate::jobs::JobState> =
                sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
            if state.is_some_and(|s| s.is_terminal()) {
                self.finished = true;
            }
        }
        Ok(())
    }

    /// A live event: its frame unless already sent, and the caller's notification.
    fn take(&mut self, published: &Published, out: &mut BytesMut) {
        let e = &published.event;
        if !self.scope.matches(e) {
            return;
        }
        // An event already replayed from the database still brings its
        // notification, which the replay (job_events rows) does not carry.
        if self.sent.insert(e.id) {
            out.extend_from_slice(&published.frame);
        }
        if let (Scope::Tenant { user_id, .. }, Some(n)) = (self.scope, &e.notification) {
            if e.user_id == Some(user_id) && self.notified.insert(n.id) {
                out.extend_from_slice(&notification_frame(n, Some(e.job_id), e.at));
            }
        }
        if matches!(self.scope, Scope::Job(_)) && is_final(e) {
            self.finished = true;
        }
    }

    /// The stored events after `after` that this stream has not sent.
    async fn replay_after(&mut self, mut after: i64, out: &mut BytesMut) -> sqlx::Result<()> {
        loop {
            let batch = replay(&self.pool, self.scope, after).await?;
            let n = batch.len() as i64;
            for e in batch {
                after = e.id;
                if self.sent.insert(e.id) {
                    out.extend_from_slice(&job_frame(&e));
                }
                if matches!(self.scope, Scope::Job(_)) && is_final(&e) {
                    self.finished = true;
                    return Ok(());
                }
            }
            if n < REPLAY_BATCH {
                return Ok(());
            }
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
