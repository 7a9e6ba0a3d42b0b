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
use crate::jobs::events::{JobEvent, NotificationRef, Progress};

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

/// Who opened a stream, with what: it ends when that credential ends (see
/// [`super::ended`]) or expires.
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    pub user: Uuid,
    /// The session login or token.
    pub credential: Uuid,
    /// When the credential stops working by itself.
    pub ends_at: Option<DateTime<Utc>>,
}
/// Most events a tenant stream replays on reconnect. A client further
/// behind (or one asking for `last_event_id=1`) gets a `reload` event and
/// the stream from now: its page reloads what it shows instead of
/// replaying the tenant's history.
pub const MAX_REPLAY: i64 = 5_000;
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
    // Planned with its values each time: see `db::connect`.
    .persistent(false)
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
    e.progress.is_none() && matches!(e.state.as_str(), "done" | "failed" | "cancelled")
}

/// The SSE response for `scope`, resuming after event `last_id`; it ends
/// when `user`'s credential does.
///
/// The stream is polled by the connection itself: no task or channel per
/// client stands between the hub and the socket.
pub fn stream(
    pool: PgPool,
    hub: &Hub,
    client: super::ClientGuard,
    holder: Holder,
    scope: Scope,
    last_id: i64,
) -> Response {
    let expires = super::ended::until(holder.ends_at).map(|d| Box::pin(tokio::time::sleep(d)));
    // Subscribe before reading the database, so nothing falls between the two.
    let stream = ClientStream {
        _client: client,
        holder: (holder.user, holder.credential),
        ended: hub.subscribe_ended(),
        resync: hub.subscribe_resync(),
        expires,
        live: hub.subscribe(),
        pool,
        scope,
        cursor: last_id,
        sent: Sent::new(),
        notified: HashSet::new(),
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        started: false,
        replay_from: None,
        ends_after_replay: false,
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
    response(Body::from_stream(body))
}

/// A `text/event-stream` answer with `body`: not cached, and passed on by
/// proxies such as nginx as it comes.
pub fn response(body: Body) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        body,
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
    /// The user and the credential the stream was opened with.
    holder: (Uuid, Uuid),
    ended: broadcast::Receiver<super::ended::Ended>,
    /// The hub may have missed events: replay from the database.
    resync: broadcast::Receiver<()>,
    /// When the credential expires by itself.
    expires: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    live: broadcast::Receiver<Arc<Published>>,
    pool: PgPool,
    scope: Scope,
    /// The client's last event id; replays never go below it.
    cursor: i64,
    sent: Sent,
    notified: HashSet<Uuid>,
    keep_alive: tokio::time::Interval,
    started: bool,
    /// Stored events still to send, after this id: one batch per write, so
    /// a long catch-up is never held in memory whole.
    replay_from: Option<i64>,
    /// A job stream whose job had finished before it connected: it ends
    /// once the replay is done.
    ends_after_replay: bool,
    /// A job stream past its job's final event.
    finished: bool,
}

impl ClientStream {
    /// The next bytes to write: the events that are ready, in one chunk;
    /// `None` when the stream is over.
    async fn next_chunk(&mut self) -> sqlx::Result<Option<Bytes>> {
        let mut out = BytesMut::new();
        loop {
            if !self.started {
                self.start(&mut out).await?;
            } else if let Some(after) = self.replay_from.take() {
                self.replay_batch(after, &mut out).await?;
            } else if self.finished {
                return Ok(None);
            } else {
                self.receive(&mut out).await;
            }
            if !out.is_empty() {
                return Ok(Some(out.freeze()));
            }
        }
    }

    /// Unread notifications, and where the replay of missed events starts.
    async fn start(&mut self, out: &mut BytesMut) -> sqlx::Result<()> {
        self.started = true;
        match self.scope {
            Scope::Tenant { tenant_id, user_id } => {
                // A fresh tenant stream starts now; its history is in the job pages.
                let behind: i64 = if self.cursor == 0 {
                    0
                } else {
                    sqlx::query_scalar!(
                        r#"SELECT count(*) AS "missed!"
                           FROM (SELECT 1 FROM job_events WHERE tenant_id = $1 AND id > $2 LIMIT $3) AS missed"#,
                        tenant_id,
                        self.cursor,
                        MAX_REPLAY + 1
                    )
                    .fetch_one(&self.pool)
                    .await?
                };
                if self.cursor == 0 || behind > MAX_REPLAY {
                    self.cursor = sqlx::query_scalar!(
                        r#"SELECT coalesce(max(id), 0) AS "cursor!" FROM job_events WHERE tenant_id = $1"#,
                        tenant_id
                    )
                    .fetch_one(&self.pool)
                    .await?;
                }
                if behind > MAX_REPLAY {
                    let data = json!({"reason": format!("more than {MAX_REPLAY} events were missed; reload")});
                    out.extend_from_slice(&frame(Some(self.cursor), "reload", &data.to_string()));
                }
                for (n, job_id, at) in unread(&self.pool, user_id).await? {
                    self.notified.insert(n.id);
                    out.extend_from_slice(&notification_frame(&n, job_id, at));
                }
            }
            Scope::Job(id) => {
                // Finished before this connection: the replay holds the rest
                // (or the client has seen the final event already).
                let state = sqlx::query_scalar!(
                    r#"SELECT state AS "state: crate::jobs::JobState" FROM jobs WHERE id = $1"#,
                    id
                )
                .fetch_optional(&self.pool)
                .await?;
                self.ends_after_replay = state.is_some_and(|s| s.is_terminal());
            }
        }
        self.replay_from = Some(self.cursor);
        Ok(())
    }

    /// Waits for the hub (or the keep-alive), then takes whatever else has
    /// already arrived, so it goes out in the same write.
    async fn receive(&mut self, out: &mut BytesMut) {
        let expires = &mut self.expires;
        let expired = async {
            match expires.as_mut() {
                Some(sleep) => sleep.await,
                None => std::future::pending().await,
            }
        };
        let mut next = Some(tokio::select! {
            r = self.live.recv() => r,
            _ = self.keep_alive.tick() => {
                out.extend_from_slice(KEEP_ALIVE_FRAME);
                return;
            }
            e = self.ended.recv() => {
                let (user, credential) = self.holder;
                // A lagging receiver may have missed its own ending.
                if e.is_err() || e.is_ok_and(|e| e.ends(user, credential)) {
                    tracing::debug!(%user, "event stream ended with its credential");
                    self.finished = true;
                }
                return;
            }
            _ = expired => {
                self.finished = true;
                return;
            }
            r = self.resync.recv() => {
                if !matches!(r, Err(RecvError::Closed)) {
                    tracing::debug!("event stream replays what the hub may have missed");
                    self.replay_from = Some(self.catch_up_from());
                }
                return;
            }
        });
        while let Some(received) = next.take() {
            match received {
                Ok(published) => self.take(&published, out),
                Err(RecvError::Lagged(missed)) => {
                    // Too slow for the hub: catch up from the database,
                    // including events that committed late with an id below
                    // the newest sent.
                    tracing::debug!(missed, "event stream lagged; replaying from the database");
                    self.replay_from = Some(self.catch_up_from());
                    return;
                }
                Err(RecvError::Closed) => self.finished = true,
            }
            if self.finished {
                return;
            }
            next = match self.live.try_recv() {
                Ok(p) => Some(Ok(p)),
                Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
                Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                Err(TryRecvError::Empty) => None,
            };
        }
    }

    /// Where a catch-up replay starts: below the newest sent id by the
    /// window in which events may commit late, never below the cursor.
    fn catch_up_from(&self) -> i64 {
        self.sent
            .newest()
            .map_or(self.cursor, |n| (n - Sent::LATE_WINDOW).max(self.cursor))
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

    /// One batch of the stored events after `after` that this stream has
    /// not sent; schedules the next batch when this one was full.
    async fn replay_batch(&mut self, after: i64, out: &mut BytesMut) -> sqlx::Result<()> {
        let batch = replay(&self.pool, self.scope, after).await?;
        let full = batch.len() as i64 == REPLAY_BATCH;
        let last = batch.last().map_or(after, |e| e.id);
        for e in batch {
            if self.sent.insert(e.id) {
                out.extend_from_slice(&job_frame(&e));
            }
            if matches!(self.scope, Scope::Job(_)) && is_final(&e) {
                self.finished = true;
                return Ok(());
            }
        }
        if full {
            self.replay_from = Some(last);
        } else if self.ends_after_replay {
            self.finished = true;
        }
        Ok(())
    }
}

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
    let rows = sqlx::query_as!(
        UnreadRow,
        r#"SELECT id, kind, title, body, link, job_id, created_at AS "created_at: _" FROM notifications
           WHERE user_id = $1 AND read_at IS NULL ORDER BY created_at LIMIT 100"#,
        user_id
    )
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
