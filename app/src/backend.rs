//! The service interface the UI's server functions call. `server` implements
//! it over PostgreSQL and RabbitMQ and provides it as Leptos context, so the
//! pages and the REST API share the same code and authorization checks.
//! Every `admin_*` method checks the admin role itself (403 otherwise).

use std::sync::Arc;

use http::request::Parts;

use crate::{
    dto::{
        AdminJobQuery, AuditPage, AuditQuery, BatchDto, BatchView, DashboardDto, DeadLetterPage,
        DeadLetterQuery, DeliveryDto, InboxDto, JobDetail, JobDto, JobPage, MatchingCounts,
        NewWebhookDto, RequeueReport, SearchHitDto, UserDto, WebhooksView,
    },
    error::AppError,
};

#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The caller of this request, if logged in.
    async fn current_user(&self, req: &Parts) -> Result<Option<UserDto>, AppError>;
    /// Checks credentials and starts a session (rotating its id).
    async fn login(&self, req: &Parts, email: &str, password: &str) -> Result<UserDto, AppError>;
    /// Ends the session.
    async fn logout(&self, req: &Parts) -> Result<(), AppError>;
    /// The caller's tenant's recent jobs, newest first.
    async fn my_jobs(&self, req: &Parts, limit: i64) -> Result<Vec<JobDto>, AppError>;
    /// One job of the caller's tenant (any tenant for admins).
    async fn job(&self, req: &Parts, id: &str) -> Result<JobDto, AppError>;
    /// One job with its event timeline (any tenant for admins).
    async fn job_detail(&self, req: &Parts, id: &str) -> Result<JobDetail, AppError>;
    /// The newest event id of the caller's tenant: where the live stream starts.
    async fn live_cursor(&self, req: &Parts) -> Result<i64, AppError>;
    /// The caller's notifications.
    async fn inbox(&self, req: &Parts) -> Result<InboxDto, AppError>;
    /// Marks one of the caller's notifications read.
    async fn mark_read(&self, req: &Parts, id: &str) -> Result<(), AppError>;
    /// Marks all of the caller's notifications read; returns how many were unread.
    async fn mark_all_read(&self, req: &Parts) -> Result<u64, AppError>;
    /// The caller's tenant's best `k` chunks for `query`.
    async fn search(
        &self,
        req: &Parts,
        query: &str,
        k: usize,
    ) -> Result<Vec<SearchHitDto>, AppError>;
    /// Admin: stats (last hour), time series since `since_s` seconds, workers.
    async fn admin_dashboard(&self, req: &Parts, since_s: u64) -> Result<DashboardDto, AppError>;
    /// Admin: jobs of all tenants.
    async fn admin_jobs(&self, req: &Parts, query: AdminJobQuery) -> Result<JobPage, AppError>;
    /// Admin: unresolved dead letters, newest first, filtered.
    async fn admin_dead_letters(
        &self,
        req: &Parts,
        query: DeadLetterQuery,
    ) -> Result<DeadLetterPage, AppError>;
    /// Admin: re-enqueues dead letters, each on its own.
    async fn admin_requeue(&self, req: &Parts, ids: Vec<String>)
        -> Result<RequeueReport, AppError>;
    /// Admin: re-enqueues every unresolved dead letter matching the
    /// filters (its cursor aside), on every page, each on its own.
    async fn admin_requeue_matching(
        &self,
        req: &Parts,
        query: DeadLetterQuery,
    ) -> Result<RequeueReport, AppError>;
    /// Admin: discards a dead letter (its job stays failed).
    async fn admin_discard(&self, req: &Parts, id: &str) -> Result<(), AppError>;
    /// Admin: pauses (`paused`) or resumes the queue `high`, `normal` or
    /// `slow`; setting the state it already has changes nothing.
    async fn admin_set_queue_paused(
        &self,
        req: &Parts,
        queue: &str,
        paused: bool,
    ) -> Result<(), AppError>;
    /// Admin: pauses (`paused`) or resumes the re-embedding after a model
    /// change.
    async fn admin_set_reembed_paused(&self, req: &Parts, paused: bool) -> Result<(), AppError>;
    /// Admin: re-embeds again the documents whose re-embedding failed;
    /// how many.
    async fn admin_retry_reembeds(&self, req: &Parts) -> Result<i64, AppError>;
    /// Cancels a pending, retrying or processing job (a member's own
    /// tenant's; any for admins); returns its new state.
    async fn cancel_job(&self, req: &Parts, id: &str) -> Result<String, AppError>;
    /// Retries a failed or retrying job; returns its new state.
    async fn retry_job(&self, req: &Parts, id: &str) -> Result<String, AppError>;
    /// Deletes a document: its blobs, text and chunks; its jobs stay.
    async fn delete_document(&self, req: &Parts, id: &str) -> Result<(), AppError>;
    /// Admin: cancels every unfinished job matching the job list's filter;
    /// returns how many.
    async fn admin_cancel_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<u64, AppError>;
    /// Admin: retries every failed or retrying job matching the job list's
    /// filter; returns how many.
    async fn admin_retry_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<u64, AppError>;
    /// Admin: how many jobs matching the job list's filter a bulk cancel
    /// and a bulk retry would change now.
    async fn admin_count_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<MatchingCounts, AppError>;
    /// Admin: the audit log, newest first, filtered.
    async fn admin_audit(&self, req: &Parts, query: AuditQuery) -> Result<AuditPage, AppError>;
    /// Opens a batch in the caller's tenant (a drop of several files).
    async fn create_batch(&self, req: &Parts, name: &str) -> Result<BatchDto, AppError>;
    /// Closes a batch to uploads.
    async fn close_batch(&self, req: &Parts, id: &str) -> Result<BatchDto, AppError>;
    /// A batch with its jobs (the caller's tenant's; any for operators).
    async fn batch(&self, req: &Parts, id: &str) -> Result<BatchView, AppError>;
    /// `cancel` or `retry` a whole batch; the batch after it.
    async fn act_on_batch(
        &self,
        req: &Parts,
        id: &str,
        action: &str,
    ) -> Result<BatchView, AppError>;
    /// Admins and viewers: the organisation's webhook endpoints.
    async fn webhooks(&self, req: &Parts) -> Result<WebhooksView, AppError>;
    /// Admins and viewers: an endpoint's latest deliveries.
    async fn webhook_deliveries(&self, req: &Parts, id: &str)
        -> Result<Vec<DeliveryDto>, AppError>;
    /// Admin: registers an endpoint; its secret, shown once.
    async fn create_webhook(
        &self,
        req: &Parts,
        url: &str,
        events: Vec<String>,
        description: &str,
    ) -> Result<NewWebhookDto, AppError>;
    /// Admin: deletes an endpoint.
    async fn delete_webhook(&self, req: &Parts, id: &str) -> Result<(), AppError>;
    /// Admin: sends a delivery again now.
    async fn redeliver(&self, req: &Parts, webhook: &str, delivery: &str) -> Result<(), AppError>;
}

/// How the backend travels in Leptos context.
pub type SharedBackend = Arc<dyn Backend>;
