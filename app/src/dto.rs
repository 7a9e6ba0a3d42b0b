//! Data sent to browsers and API clients: plain serde structs shared by the
//! REST API, the server functions and the pages. Those the server reads
//! straight from a query derive `sqlx::FromRow` (with `ssr` only); their ids
//! come as text (`id::text AS id`). Those of the REST API derive
//! `utoipa::ToSchema` (with `ssr` only): they are the schemas of its
//! OpenAPI document, `GET /api/openapi.json`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The caller, as `POST /api/login` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UserDto {
    pub email: String,
    /// `admin` or `member`.
    pub role: String,
    /// Tenant slug.
    pub tenant: String,
}

impl UserDto {
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }

    /// An admin, or a viewer who sees what admins see and acts on nothing.
    pub fn is_operator(&self) -> bool {
        self.role == "admin" || self.role == "viewer"
    }

    /// A viewer: reads only, no upload, no action.
    pub fn reads_only(&self) -> bool {
        self.role == "viewer"
    }
}

/// `202 Accepted` answer of an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UploadAccepted {
    pub job_id: String,
    pub document_id: String,
    pub state: String,
    pub queue: String,
    pub status_url: String,
    pub events_url: String,
    /// The tenant's latest earlier upload of the same bytes, if any.
    #[serde(default)]
    pub duplicate_of: Option<DuplicateDto>,
}

/// An earlier upload of the same file (same SHA-256) by the same tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DuplicateDto {
    pub document_id: String,
    /// Its latest job, for a link to its page.
    pub job_id: Option<String>,
    pub filename: String,
    /// RFC 3339.
    pub uploaded_at: String,
}

/// One pipeline step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct StepDto {
    /// `parse`, `chunk`, `embed` or `store`.
    pub name: String,
    /// `pending`, `running`, `done` or `failed`.
    pub state: String,
    /// Times the step was started, in runs that count as attempts (a run
    /// cut short by a dependency outage or a worker's shutdown does not).
    pub attempts: i32,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    /// When the step last started: while `running`, the time it has run
    /// is `now − started_at`.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ProgressDto {
    pub chunks_total: i32,
    pub chunks_embedded: i32,
    /// Pages (slides, sheets) the parse step has read, while it runs and
    /// after; 0 of 0 for a document it does not count in pages.
    #[serde(default)]
    pub pages_parsed: i32,
    #[serde(default)]
    pub pages_total: i32,
}

/// A job as `GET /api/jobs/{id}` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct JobDto {
    pub id: String,
    pub document_id: String,
    pub filename: String,
    pub tenant: String,
    pub queue: String,
    pub state: String,
    /// Runs started over the job's whole life: 1 for the first. A run cut
    /// short without a fault of the document (a dependency outage, a
    /// worker's shutdown, a hand-over to `slow`) does not count; a
    /// re-enqueue resets the retry budget, not this count.
    pub attempt: i32,
    pub current_step: Option<String>,
    pub steps: Vec<StepDto>,
    pub progress: ProgressDto,
    pub last_error: Option<String>,
    /// What kind of failure `last_error` is, for a program (and the UI's
    /// words) to tell apart without reading the text.
    #[serde(default)]
    pub last_error_code: Option<FailureCode>,
    /// When a `retrying` job runs again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Its document was deleted (blob, text and chunks are gone); the job
    /// stays as history.
    #[serde(default)]
    pub document_deleted: bool,
    pub enqueued_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// When its document was uploaded.
    pub uploaded_at: DateTime<Utc>,
    /// Who uploaded it (e-mail); told to administrators only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_by: Option<String>,
    /// Each time the job lay failed in the dead-letter list, oldest first:
    /// time spent there is not working time.
    #[serde(default)]
    pub dead_periods: Vec<DeadPeriodDto>,
}

/// What kind of failure a job's `last_error` is: the API's
/// `last_error_code`, stored beside the text when the failure is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// A password-protected PDF.
    Encrypted,
    /// A file that is damaged or not what its type says.
    Damaged,
    /// A document with no text in it.
    NoText,
    /// A text file that is not UTF-8.
    NotUtf8,
    /// A file type docflow does not read.
    UnsupportedType,
    /// A document past a size limit (pages, text).
    TooLarge,
    /// A document that broke a parser limit (memory, time) and was stopped.
    Unsafe,
    /// A dependency (the embedding service) refused the document.
    Refused,
    /// A dependency is down; the job waits for it without spending retries.
    Unavailable,
    /// A dependency asked docflow to slow down.
    RateLimited,
    /// A temporary error (a timeout, a lost connection): retried.
    Temporary,
    /// The worker running it stopped too often while on it.
    Crashed,
    /// RabbitMQ gave up delivering its message.
    Undeliverable,
    /// docflow itself failed (a bug); an administrator can re-enqueue it.
    Internal,
}

impl FailureCode {
    pub const ALL: [FailureCode; 14] = [
        Self::Encrypted,
        Self::Damaged,
        Self::NoText,
        Self::NotUtf8,
        Self::UnsupportedType,
        Self::TooLarge,
        Self::Unsafe,
        Self::Refused,
        Self::Unavailable,
        Self::RateLimited,
        Self::Temporary,
        Self::Crashed,
        Self::Undeliverable,
        Self::Internal,
    ];

    /// The code as the API and the database write it: `no_text`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Encrypted => "encrypted",
            Self::Damaged => "damaged",
            Self::NoText => "no_text",
            Self::NotUtf8 => "not_utf8",
            Self::UnsupportedType => "unsupported_type",
            Self::TooLarge => "too_large",
            Self::Unsafe => "unsafe",
            Self::Refused => "refused",
            Self::Unavailable => "unavailable",
            Self::RateLimited => "rate_limited",
            Self::Temporary => "temporary",
            Self::Crashed => "crashed",
            Self::Undeliverable => "undeliverable",
            Self::Internal => "internal",
        }
    }

    /// The code `s` names; `None` for one this build does not know.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A time a job lay failed in the dead-letter list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadPeriodDto {
    /// Why it was dead-lettered: `permanent`, `exhausted`, `crashed`, …
    pub reason: String,
    pub dead_at: DateTime<Utc>,
    /// When it left the list; `null` while it is still there.
    pub resolved_at: Option<DateTime<Utc>>,
    /// `requeued` (it ran again) or `discarded` (it stays failed).
    pub resolution: Option<String>,
    /// The role of who resolved it: `admin` or `member` (its tenant's
    /// user retried it).
    pub resolved_by: Option<String>,
}

/// A page of jobs, newest first; `next_before` continues the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct JobPage {
    pub jobs: Vec<JobDto>,
    pub next_before: Option<String>,
}

/// `progress` of an event: chunks embedded of all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventProgress {
    pub done: i32,
    pub total: i32,
}

/// One row of a job's timeline (`job_events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEventDto {
    /// The SSE event id.
    pub id: i64,
    pub state: String,
    pub step: Option<String>,
    pub progress: Option<EventProgress>,
    pub message: String,
    pub at: DateTime<Utc>,
}

/// The `data` of an SSE `event: job` (`/api/events`, `/api/jobs/{id}/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct LiveJobEvent {
    pub job_id: String,
    pub state: String,
    pub step: Option<String>,
    pub progress: Option<EventProgress>,
    pub message: String,
    pub at: DateTime<Utc>,
}

/// A job with its timeline, oldest event first, read at `now` (the page
/// counts a running step's time from it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDetail {
    pub job: JobDto,
    pub events: Vec<JobEventDto>,
    pub now: DateTime<Utc>,
    /// Read by an operator (an admin or a viewer): the page speaks of
    /// queues, attempts and the dead-letter list; to its tenant's members
    /// it speaks of their document.
    #[serde(default)]
    pub for_operator: bool,
    /// The caller may act on the job (cancel, retry, delete); a viewer
    /// only reads.
    #[serde(default)]
    pub can_act: bool,
}

/// An inbox entry; also the `data` of an SSE `event: notification`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NotificationDto {
    pub id: String,
    /// `job_done`, `job_failed` or `job_cancelled` (by someone else than the uploader).
    pub kind: String,
    pub title: String,
    pub body: String,
    /// Where the notification leads (the job page).
    pub link: String,
    pub job_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub read_at: Option<DateTime<Utc>>,
}

/// `GET /api/notifications`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct InboxDto {
    pub unread: i64,
    pub notifications: Vec<NotificationDto>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHitDto {
    pub document_id: String,
    /// The document's latest job (its page), when it has one.
    pub job_id: Option<String>,
    pub filename: String,
    pub chunk_index: i32,
    pub text: String,
    /// About 35 words around the match, in runs: `true` for a run of the
    /// query's words (plain text, never HTML).
    pub snippet: Vec<(String, bool)>,
    /// The PDF page the passage starts on, from 1.
    pub page: Option<i32>,
    /// Cosine similarity under the configured model, higher is better;
    /// `None` for a passage found by its words before it has a vector of
    /// that model.
    pub score: Option<f32>,
    /// The passage holds words of the query.
    pub matched_words: bool,
}

/// Per-queue numbers of `GET /api/admin/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct QueueStatsDto {
    pub queue: String,
    /// Ready messages on the queue; `None` (`null`) while RabbitMQ is unreachable.
    pub depth: Option<u32>,
    /// Delivered, not yet acked: one per job a worker is running.
    pub unacked: i64,
    pub consumers: Option<u32>,
    pub pending: i64,
    pub processing: i64,
    pub retrying: i64,
    /// 99th percentile of `now − enqueued_at` over unfinished jobs.
    pub age_p99_s: f64,
    pub oldest_age_s: f64,
    /// Paused by an admin: workers take nothing from it, its messages wait.
    #[serde(default)]
    pub paused: bool,
    /// Seconds until the backlog (`pending + processing + retrying`) is
    /// cleared at the rate jobs of this queue ended (done, failed or
    /// cancelled) over the last five minutes: 0 without a backlog; `null`
    /// while it is not draining (nothing ended or was read in five
    /// minutes, or the queue is paused). A document still being parsed
    /// counts by its pages: 120 of 300 read is 0.6 of a job left, and its
    /// pages read in the five minutes count as that share of a job ended;
    /// while no job ended in five minutes (a long scan being read), the
    /// rate is the documents' own pace of reading.
    #[serde(default)]
    pub eta_s: Option<f64>,
    /// Pages read so far, of how many, of the documents whose parse step
    /// is running and reports pages.
    #[serde(default)]
    pub pages_parsed: i64,
    #[serde(default)]
    pub pages_total: i64,
    /// `DOCFLOW_AGE_WARN` in seconds: past it `oldest_age_s` is shown in
    /// warning colour.
    #[serde(default)]
    pub age_warn_s: f64,
}

/// Per-step numbers of `GET /api/admin/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct StepStatsDto {
    pub step: String,
    pub attempts: i64,
    pub failures: i64,
    pub failure_rate: f64,
}

/// `GET /api/admin/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct StatsDto {
    pub window_s: u64,
    pub queues: Vec<QueueStatsDto>,
    pub steps: Vec<StepStatsDto>,
    /// Finished jobs in the window by retries spent, `"0"` to `"3"` (three or more).
    pub retries: BTreeMap<String, i64>,
    /// Unresolved dead letters.
    pub dead_letters: i64,
    /// Jobs done per minute over the window.
    pub throughput_per_min: f64,
    /// Services docflow depends on that sit behind a circuit breaker.
    #[serde(default)]
    pub dependencies: Vec<DependencyDto>,
    /// Every tenant's share of the work, by slug.
    #[serde(default)]
    pub tenants: Vec<TenantStatsDto>,
    /// The re-embedding after the latest change of the embedding model;
    /// `null` when the model never changed.
    #[serde(default)]
    pub reembed: Option<ReembedDto>,
}

/// Re-embedding after a change of the embedding model, as the dashboard
/// shows it (`reembed` in `GET /api/admin/stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ReembedDto {
    /// The model documents are re-embedded with.
    pub model: String,
    /// The models whose vectors it replaces.
    pub from: Vec<String>,
    /// Documents in the run.
    pub total: i64,
    /// Documents re-embedded.
    pub done: i64,
    /// Documents that failed every retry (their earlier vectors stay searched).
    pub failed: i64,
    /// Documents still to do (`docflow_reembed_pending`).
    pub pending: i64,
    /// Documents re-embedded per minute, over the last minute.
    pub rate_per_min: f64,
    /// Seconds left at that rate; `null` when nothing was done lately.
    pub eta_s: Option<f64>,
    /// Paused by an admin: workers take no further document.
    pub paused: bool,
    pub started_at: DateTime<Utc>,
    /// Set once every earlier vector was replaced and its index dropped.
    pub finished_at: Option<DateTime<Utc>>,
}

/// One tenant's numbers in `GET /api/admin/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct TenantStatsDto {
    /// The tenant's slug.
    pub tenant: String,
    /// `paid` (queue `high`) or `free` (queue `normal`).
    pub plan: String,
    /// Its jobs now `pending`, `processing` or `retrying`.
    pub unfinished: i64,
    /// Its jobs that ended `done` in the window.
    pub done: i64,
    /// Its jobs that ended `failed` in the window.
    pub failed: i64,
    /// Its unresolved dead letters.
    pub dead_letters: i64,
    /// `unfinished` over all tenants' unfinished jobs, 0 to 1 (0 when
    /// nothing is unfinished).
    pub backlog_share: f64,
}

/// A dependency behind a circuit breaker (the embedding provider), as the
/// dashboard shows it: down while any process has its breaker open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DependencyDto {
    /// `embedder`: the `dependency` label of `docflow_dependency_up`.
    pub name: String,
    /// What users read: "embedding provider".
    pub label: String,
    pub up: bool,
    /// Jobs waiting for it as `retrying`, without spending their retries.
    pub waiting_jobs: i64,
    /// When the next single probe goes out, while it is down.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// The failure that opened the breaker, while it is down.
    pub error: Option<String>,
}

/// One sample of a dashboard series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SeriesPointDto {
    pub at: DateTime<Utc>,
    pub value: f64,
}

/// A dashboard series (`metric`, and `queue` where per queue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesDto {
    pub metric: String,
    pub queue: String,
    pub points: Vec<SeriesPointDto>,
}

/// A worker process that sent a heartbeat recently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WorkerDto {
    pub id: String,
    pub hostname: String,
    pub pid: i32,
    pub queues: String,
    pub running_jobs: Vec<String>,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
}

/// Everything the admin dashboard shows, read at `now`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DashboardDto {
    pub now: DateTime<Utc>,
    /// What the charts cover, in seconds.
    pub since_s: u64,
    pub stats: StatsDto,
    pub series: Vec<SeriesDto>,
    pub workers: Vec<WorkerDto>,
}

/// Filters of the admin job list; empty strings mean "any". Kept in the
/// page's URL (`url::UrlQuery`), where blank ones are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminJobQuery {
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub state: String,
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub queue: String,
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub tenant: String,
    /// Part of the filename, or the start (4 or more hex digits) of a job or
    /// document id.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub q: String,
    /// Only jobs enqueued within this long before now (`1h`, `24h`, `7d`;
    /// blank: any time).
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub since: String,
    /// Only jobs that failed at this step at least once (blank: any).
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub step: String,
    /// Order, newest first: `enqueued` (blank), `started` or `finished`.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub sort: String,
    /// Keyset cursor: `next_before` of the previous page.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub before: String,
}

/// How many jobs the admin job list's bulk actions would change now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchingCounts {
    /// Jobs matching the filter that can be cancelled (pending, retrying, processing).
    pub cancellable: u64,
    /// Jobs matching the filter that can be retried (failed, retrying).
    pub retryable: u64,
    /// Of the retryable, those that failed permanently: a retry fails them
    /// the same way unless the cause changed.
    #[serde(default)]
    pub permanent: u64,
    /// One action changes at most this many (the oldest first).
    pub limit: u64,
}

/// An unresolved dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetterDto {
    pub id: String,
    pub job_id: Option<String>,
    pub tenant: Option<String>,
    pub filename: Option<String>,
    pub queue: String,
    /// `permanent`, `exhausted`, `crashed`, `malformed`, `delivery_limit` or `rejected`.
    pub reason: String,
    pub error: String,
    pub attempts: i32,
    pub dead_at: DateTime<Utc>,
}

/// A page of dead letters, read at `now` (for their ages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterPage {
    pub now: DateTime<Utc>,
    pub items: Vec<DeadLetterDto>,
    pub next_before: Option<String>,
    /// Every tenant's slug, for the tenant filter.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Unresolved dead letters matching the filters on every page.
    #[serde(default)]
    pub matching: i64,
    /// How many of `matching` failed permanently.
    #[serde(default)]
    pub matching_permanent: i64,
}

/// Filters of the dead-letter list; empty strings mean "any". Kept in the
/// page's URL (`url::UrlQuery`), where blank ones are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetterQuery {
    /// `permanent`, `exhausted`, `crashed`, `malformed`, …
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub reason: String,
    /// `high`, `normal` or `slow`.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub queue: String,
    /// A tenant's slug.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub tenant: String,
    /// Keyset cursor: `next_before` of the previous page.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub before: String,
}

impl DeadLetterQuery {
    /// The filters as a server function receives them, absent as "any".
    pub fn from_fields(
        reason: Option<String>,
        queue: Option<String>,
        tenant: Option<String>,
        before: Option<String>,
    ) -> Self {
        Self {
            reason: reason.unwrap_or_default(),
            queue: queue.unwrap_or_default(),
            tenant: tenant.unwrap_or_default(),
            before: before.unwrap_or_default(),
        }
    }
}

/// One dead letter that could not be re-enqueued, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueFailure {
    pub id: String,
    pub message: String,
}

/// The outcome of re-enqueuing one or more dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueReport {
    /// Dead-letter ids whose jobs are pending again.
    pub requeued: Vec<String>,
    pub failed: Vec<RequeueFailure>,
}

/// An admin action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AuditEntryDto {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    /// The action's details.
    pub detail: serde_json::Value,
    pub at: DateTime<Utc>,
    /// The job the target is or leads to (a job, its document, its dead
    /// letter), if any.
    #[serde(default)]
    pub job_id: Option<String>,
    /// That job's file name.
    #[serde(default)]
    pub filename: Option<String>,
}

/// A page of the audit log, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntryDto>,
    pub next_before: Option<i64>,
    /// Everyone who appears in the log, for the filter.
    #[serde(default)]
    pub actors: Vec<String>,
    /// Every action in the log, for the filter.
    #[serde(default)]
    pub actions: Vec<String>,
}

/// Filters of the audit log; empty strings mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditQuery {
    /// The actor's e-mail.
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub actor: String,
    /// `dead_letter.requeue`, `job.cancel`, …
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub action: String,
    /// Only entries of this last stretch of time (`1h`, `24h`, `7d`; blank: any).
    #[serde(skip_serializing_if = "crate::url::blank")]
    pub since: String,
    /// Keyset cursor: `next_before` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
}

/// How many of a batch's jobs are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct BatchCountsDto {
    pub pending: i64,
    pub processing: i64,
    pub retrying: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
}

impl BatchCountsDto {
    pub fn total(&self) -> i64 {
        self.pending + self.processing + self.retrying + self.done + self.failed + self.cancelled
    }

    /// Jobs that have ended (done, failed or cancelled).
    pub fn ended(&self) -> i64 {
        self.done + self.failed + self.cancelled
    }
}

/// A batch as `GET /api/batches/{id}` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct BatchDto {
    pub id: String,
    pub name: String,
    /// `open` (taking uploads, none yet), `running`, `done` (closed and
    /// every job ended) or `cancelled`.
    pub state: String,
    pub counts: BatchCountsDto,
    /// Jobs in the batch.
    pub total: i64,
    pub created_at: DateTime<Utc>,
    /// When it was closed to uploads; `null` while open.
    pub closed_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Seconds until every job has ended, at the batch's own rate so far;
    /// `null` before the first ends and once all have.
    pub eta_seconds: Option<i64>,
}

/// A webhook endpoint, as `GET /api/webhooks` lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WebhookDto {
    pub id: String,
    pub url: String,
    /// `job.done`, `job.failed`, `job.cancelled`, `batch.done`, `document.deleted`.
    pub events: Vec<String>,
    pub description: String,
    pub created_at: DateTime<Utc>,
    /// When it was disabled for failing, and why; `null` while enabled.
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub last_success_at: Option<DateTime<Utc>>,
}

/// A webhook endpoint just registered: the only time its secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NewWebhookDto {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub description: String,
    /// `whsec_…`: the HMAC-SHA256 key of `Docflow-Signature`. Store it now;
    /// it is never shown again.
    pub secret: String,
}

/// One delivery of an event to an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryDto {
    pub id: String,
    /// The `Docflow-Event-Id`, the same on every attempt.
    pub event_id: String,
    /// `job.done`, `batch.done`, …
    pub event_type: String,
    /// `pending` (to be tried, or retried), `delivered` or `failed` (given up).
    pub state: String,
    pub attempts: i32,
    /// The endpoint's last HTTP status; `null` when it could not be reached.
    pub last_status: Option<i32>,
    pub last_latency_ms: Option<i32>,
    /// The start of the endpoint's last answer (at most 512 bytes).
    pub last_response: Option<String>,
    /// Why the last attempt failed, when it did.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A batch's page: the batch, its jobs, and whether the caller may act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchView {
    pub batch: BatchDto,
    /// Newest first, at most 1,000.
    pub jobs: Vec<JobDto>,
    /// Cancel and retry are offered (not to a viewer).
    pub can_act: bool,
}

/// The webhooks page: the organisation's endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhooksView {
    pub endpoints: Vec<WebhookDto>,
    /// Register, delete and redeliver are offered (admins, not viewers).
    pub can_act: bool,
}

/// The events a webhook endpoint may subscribe to.
pub const WEBHOOK_EVENTS: [&str; 5] = [
    "job.done",
    "job.failed",
    "job.cancelled",
    "batch.done",
    "document.deleted",
];
