//! `ServerBackend`: the UI's server functions reach PostgreSQL through here,
//! with the same checks as the REST handlers.

use std::time::Duration;

use app::{
    backend::Backend,
    dto::{
        AdminJobQuery, AuditPage, AuditQuery, BatchDto, BatchView, DashboardDto, DeadLetterPage,
        DeadLetterQuery, DeliveryDto, InboxDto, JobDetail, JobDto, JobPage, MatchingCounts,
        NewWebhookDto, RequeueFailure, RequeueReport, SearchHitDto, SeriesDto, UserDto,
        WebhooksView,
    },
    error::AppError,
};
use axum::http::request::Parts;
use tower_sessions::Session;
use uuid::Uuid;

use crate::{
    identity::auth::{self, CurrentUser},
    jobs::inbox,
    jobs::{
        repo::{self, JobFilter},
        view,
    },
    ops::admin,
    ops::controls::{self, Matching},
    ops::sampler,
    ops::stats,
    platform::error::ApiError,
    search,
    state::AppState,
    worker::queues,
};

/// Events shown on a job page.
const TIMELINE_LIMIT: i64 = 1_000;
/// Rows per page of the admin lists.
const PAGE_SIZE: i64 = 50;
/// The window of the dashboard's stats, as `/api/admin/stats` defaults to.
const STATS_WINDOW: Duration = Duration::from_secs(3600);

pub struct ServerBackend {
    state: AppState,
}

impl ServerBackend {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    async fn user(&self, req: &Parts) -> Result<CurrentUser, AppError> {
        auth::resolve(&self.state, req)
            .await
            .map_err(AppError::from)?
            .ok_or(AppError::Unauthorized)
    }

    /// The caller, who must be an admin (403 otherwise).
    async fn admin(&self, req: &Parts) -> Result<CurrentUser, AppError> {
        let user = self.user(req).await?;
        user.require_admin()?;
        Ok(user)
    }

    /// The caller, who must be an operator, admin or viewer (403 otherwise).
    async fn operator(&self, req: &Parts) -> Result<CurrentUser, AppError> {
        let user = self.user(req).await?;
        user.require_operator()?;
        Ok(user)
    }

    /// A batch's page as `user` may see it.
    async fn batch_view(&self, user: &CurrentUser, id: Uuid) -> Result<BatchView, AppError> {
        let batch = crate::batches::get(&self.state.pool, user, id).await?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let mut jobs = repo::list_of_batch(&mut conn, id, 1000)
            .await
            .map_err(db_err)?;
        if !user.is_operator() {
            view::hide_uploaders(&mut jobs);
        }
        Ok(BatchView {
            batch,
            jobs,
            can_act: user.may_write(),
        })
    }

    /// Job `id` as `user` may see it: its uploader named to admins only.
    async fn job_for(&self, user: &CurrentUser, id: &str) -> Result<JobDto, AppError> {
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let mut job = repo::get(&mut conn, id, user.readable_tenant())
            .await
            .map_err(ApiError::from)?
            .ok_or(AppError::NotFound)?;
        if !user.is_operator() {
            view::hide_uploaders(std::slice::from_mut(&mut job));
        }
        Ok(job)
    }
}

fn db_err(e: sqlx::Error) -> AppError {
    ApiError::from(e).into()
}

/// Ids from the browser; a malformed one names nothing that exists.
fn parse_uuid(s: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(s.trim()).map_err(|_| AppError::NotFound)
}

/// The admin job list's filter, parsed as the REST API parses it.
fn matching(q: &AdminJobQuery) -> Result<Matching, AppError> {
    Ok(Matching::parse(&q.state, &q.queue, &q.tenant, &q.q)?
        .within(&q.since)?
        .failed_at(&q.step)?)
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The dead-letter list's filter for `q`, a page long.
fn dead_letter_filter(q: &DeadLetterQuery) -> Result<admin::DeadLetterFilter, AppError> {
    Ok(admin::DeadLetterFilter {
        reason: non_empty(&q.reason),
        queue: non_empty(&q.queue),
        tenant: non_empty(&q.tenant),
        before: non_empty(&q.before).map(|b| parse_uuid(&b)).transpose()?,
        limit: PAGE_SIZE,
    })
}

/// A bulk re-enqueue's outcome as the dead-letter page reads it.
fn requeue_report(r: admin::Requeued) -> RequeueReport {
    RequeueReport {
        requeued: r.requeued.iter().map(|(id, _)| id.to_string()).collect(),
        failed: r
            .refused
            .into_iter()
            .map(|(id, e)| RequeueFailure {
                id: id.to_string(),
                message: e.to_string(),
            })
            .collect(),
    }
}

impl From<ApiError> for AppError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Unauthorized(_) => AppError::Unauthorized,
            ApiError::Forbidden(_) => AppError::Forbidden,
            ApiError::NotFound(_) => AppError::NotFound,
            ApiError::Conflict(m) | ApiError::Refused { message: m, .. } => AppError::Conflict(m),
            ApiError::Unavailable { message, .. } => AppError::Unavailable(message),
            ApiError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "server function failed");
                AppError::Internal("it has been logged".into())
            }
            other => AppError::Validation(other.to_string()),
        }
    }
}

fn session(req: &Parts) -> Result<Session, AppError> {
    req.extensions
        .get::<Session>()
        .cloned()
        .ok_or_else(|| AppError::Internal("no session layer".into()))
}

#[async_trait::async_trait]
impl Backend for ServerBackend {
    async fn current_user(&self, req: &Parts) -> Result<Option<UserDto>, AppError> {
        let user = auth::resolve(&self.state, req).await?;
        Ok(user.as_ref().map(super::auth::user_dto))
    }

    async fn login(&self, req: &Parts, email: &str, password: &str) -> Result<UserDto, AppError> {
        let client = auth::client_address(req);
        let user = auth::login(&self.state, &session(req)?, email, password, client)
            .await
            .map_err(|e| match e {
                ApiError::Unauthorized(m) => AppError::Validation(m),
                other => other.into(),
            })?;
        Ok(super::auth::user_dto(&user))
    }

    async fn logout(&self, req: &Parts) -> Result<(), AppError> {
        // Logging out twice (another tab did it) is no error.
        let Some(user) = auth::resolve(&self.state, req).await? else {
            return Ok(());
        };
        auth::logout(&self.state, &session(req)?, &user)
            .await
            .map_err(|e| AppError::from(ApiError::Internal(e)))
    }

    async fn my_jobs(&self, req: &Parts, limit: i64) -> Result<Vec<JobDto>, AppError> {
        let user = self.user(req).await?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let filter = JobFilter {
            tenant_id: Some(user.tenant_id),
            limit: limit.clamp(1, 200),
            ..Default::default()
        };
        let mut jobs = repo::list(&mut conn, &filter)
            .await
            .map_err(ApiError::from)?;
        if !user.is_operator() {
            view::hide_uploaders(&mut jobs);
        }
        Ok(jobs)
    }

    async fn job(&self, req: &Parts, id: &str) -> Result<JobDto, AppError> {
        let user = self.user(req).await?;
        self.job_for(&user, id).await
    }

    async fn job_detail(&self, req: &Parts, id: &str) -> Result<JobDetail, AppError> {
        let user = self.user(req).await?;
        let job = self.job_for(&user, id).await?;
        let id = parse_uuid(&job.id)?;
        let mut conn = self.state.pool.acquire().await.map_err(db_err)?;
        let events = repo::events(&mut conn, id, TIMELINE_LIMIT)
            .await
            .map_err(db_err)?;
        Ok(JobDetail {
            job,
            events,
            now: chrono::Utc::now(),
            for_operator: user.is_operator(),
            can_act: user.may_write(),
        })
    }

    async fn live_cursor(&self, req: &Parts) -> Result<i64, AppError> {
        let user = self.user(req).await?;
        let mut conn = self.state.pool.acquire().await.map_err(db_err)?;
        repo::latest_event_id(&mut conn, user.tenant_id)
            .await
            .map_err(db_err)
    }

    async fn inbox(&self, req: &Parts) -> Result<InboxDto, AppError> {
        let user = self.user(req).await?;
        inbox::list(&self.state.pool, user.id).await.map_err(db_err)
    }

    async fn mark_read(&self, req: &Parts, id: &str) -> Result<(), AppError> {
        let user = self.user(req).await?;
        let id = parse_uuid(id)?;
        if inbox::mark_read(&self.state.pool, user.id, id)
            .await
            .map_err(db_err)?
        {
            Ok(())
        } else {
            Err(AppError::NotFound)
        }
    }

    async fn mark_all_read(&self, req: &Parts) -> Result<u64, AppError> {
        let user = self.user(req).await?;
        inbox::mark_all_read(&self.state.pool, user.id)
            .await
            .map_err(db_err)
    }

    async fn search(
        &self,
        req: &Parts,
        query: &str,
        k: usize,
    ) -> Result<Vec<SearchHitDto>, AppError> {
        let user = self.user(req).await?;
        let query = query.trim();
        if query.is_empty() {
            return Err(AppError::Validation("type something to search for".into()));
        }
        if query.len() > 2_000 {
            return Err(AppError::Validation(
                "the query may have at most 2,000 bytes".into(),
            ));
        }
        let hits = search::search(&self.state, user.tenant_id, query, k.clamp(1, 100))
            .await
            .map_err(|e| match e {
                search::SearchError::Db(e) => db_err(e),
                e @ search::SearchError::Embed => AppError::Unavailable(e.to_string()),
            })?;
        Ok(hits
            .into_iter()
            .map(|h| SearchHitDto {
                document_id: h.document_id.to_string(),
                job_id: h.job_id.map(|id| id.to_string()),
                filename: h.filename,
                chunk_index: h.chunk_index,
                snippet: search::snippet_runs(&h.snippet),
                text: h.text,
                page: h.page,
                score: h.score,
                matched_words: h.matched_words,
            })
            .collect())
    }

    async fn admin_dashboard(&self, req: &Parts, since_s: u64) -> Result<DashboardDto, AppError> {
        self.operator(req).await?;
        let since = Duration::from_secs(since_s.clamp(600, 7 * 86_400));
        let now = chrono::Utc::now();
        let stats = stats::collect(&self.state, STATS_WINDOW)
            .await
            .map_err(db_err)?;
        let mut wanted: Vec<(&str, String)> = Vec::new();
        for metric in ["queue_depth", "age_p99_s"] {
            for tier in crate::jobs::Tier::ALL {
                wanted.push((metric, tier.as_str().to_string()));
            }
        }
        for metric in ["throughput_per_min", "failures_per_min", "dead_letters"] {
            wanted.push((metric, String::new()));
        }
        let mut series = Vec::with_capacity(wanted.len());
        for (metric, queue) in wanted {
            let points = sampler::series(&self.state.pool, metric, &queue, since)
                .await
                .map_err(db_err)?;
            series.push(SeriesDto {
                metric: metric.into(),
                queue,
                points,
            });
        }
        let workers = admin::workers(&self.state.pool).await.map_err(db_err)?;
        Ok(DashboardDto {
            now,
            since_s: since.as_secs(),
            stats,
            series,
            workers,
        })
    }

    async fn admin_jobs(&self, req: &Parts, query: AdminJobQuery) -> Result<JobPage, AppError> {
        self.operator(req).await?;
        let before = non_empty(&query.before)
            .map(|b| Uuid::parse_str(&b))
            .transpose()
            .map_err(|_| AppError::Validation("that page cursor is not valid".into()))?;
        let filter = matching(&query)?
            .sorted_by(&query.sort)?
            .filter(before, PAGE_SIZE);
        let mut conn = self.state.pool.acquire().await.map_err(db_err)?;
        let jobs = repo::list(&mut conn, &filter).await.map_err(db_err)?;
        let next_before = (jobs.len() as i64 == filter.limit)
            .then(|| jobs.last().map(|j| j.id.clone()))
            .flatten();
        Ok(JobPage { jobs, next_before })
    }

    async fn admin_dead_letters(
        &self,
        req: &Parts,
        query: DeadLetterQuery,
    ) -> Result<DeadLetterPage, AppError> {
        self.operator(req).await?;
        let filter = dead_letter_filter(&query)?;
        let pool = &self.state.pool;
        let items = admin::dead_letters(pool, &filter).await.map_err(db_err)?;
        let next_before = (items.len() as i64 == PAGE_SIZE)
            .then(|| items.last().map(|d| d.id.clone()))
            .flatten();
        let tenants = admin::tenant_slugs(pool).await.map_err(db_err)?;
        let count = admin::count_dead_letters(pool, &filter)
            .await
            .map_err(db_err)?;
        Ok(DeadLetterPage {
            now: chrono::Utc::now(),
            items,
            next_before,
            tenants,
            matching: count.total,
            matching_permanent: count.permanent,
        })
    }

    async fn admin_requeue(
        &self,
        req: &Parts,
        ids: Vec<String>,
    ) -> Result<RequeueReport, AppError> {
        let admin_user = self.admin(req).await?;
        if ids.is_empty() || ids.len() > 500 {
            return Err(AppError::Validation(
                "select between 1 and 500 dead letters".into(),
            ));
        }
        let (ids, unknown): (Vec<_>, Vec<_>) = ids
            .into_iter()
            .map(|id| Uuid::parse_str(&id).map_err(|_| id))
            .partition(Result::is_ok);
        let outcome = admin::requeue_each(
            &self.state.pool,
            &self.state.events,
            ids.into_iter().flatten(),
            &admin_user,
        )
        .await?;
        let mut report = requeue_report(outcome);
        report
            .failed
            .extend(
                unknown
                    .into_iter()
                    .filter_map(Result::err)
                    .map(|id| RequeueFailure {
                        id,
                        message: "no such dead letter".into(),
                    }),
            );
        Ok(report)
    }

    async fn admin_requeue_matching(
        &self,
        req: &Parts,
        query: DeadLetterQuery,
    ) -> Result<RequeueReport, AppError> {
        let admin_user = self.admin(req).await?;
        let filter = dead_letter_filter(&DeadLetterQuery {
            before: String::new(),
            ..query
        })?;
        let outcome =
            admin::requeue_matching(&self.state.pool, &self.state.events, &filter, &admin_user)
                .await?;
        Ok(requeue_report(outcome))
    }

    async fn admin_discard(&self, req: &Parts, id: &str) -> Result<(), AppError> {
        let admin_user = self.admin(req).await?;
        let id = parse_uuid(id)?;
        Ok(admin::discard(&self.state.pool, id, &admin_user).await?)
    }

    async fn cancel_job(&self, req: &Parts, id: &str) -> Result<String, AppError> {
        let user = self.user(req).await?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let state = controls::cancel(&self.state.pool, &self.state.events, id, &user).await?;
        Ok(state.as_str().into())
    }

    async fn retry_job(&self, req: &Parts, id: &str) -> Result<String, AppError> {
        let user = self.user(req).await?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let state = controls::retry(&self.state.pool, &self.state.events, id, &user).await?;
        Ok(state.as_str().into())
    }

    async fn delete_document(&self, req: &Parts, id: &str) -> Result<(), AppError> {
        let user = self.user(req).await?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let s = &self.state;
        Ok(controls::delete_document(&s.pool, &s.blobs, &s.events, id, &user).await?)
    }

    async fn admin_cancel_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<u64, AppError> {
        let admin_user = self.admin(req).await?;
        let m = matching(&query)?;
        let s = &self.state;
        Ok(controls::cancel_matching(&s.pool, &s.events, &m, &admin_user).await?)
    }

    async fn admin_retry_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<u64, AppError> {
        let admin_user = self.admin(req).await?;
        let m = matching(&query)?;
        let s = &self.state;
        Ok(controls::retry_matching(&s.pool, &s.events, &m, &admin_user).await?)
    }

    async fn admin_count_matching(
        &self,
        req: &Parts,
        query: AdminJobQuery,
    ) -> Result<MatchingCounts, AppError> {
        let admin_user = self.admin(req).await?;
        let m = matching(&query)?;
        Ok(controls::count_matching(&self.state.pool, &m, &admin_user).await?)
    }

    async fn admin_set_queue_paused(
        &self,
        req: &Parts,
        queue: &str,
        paused: bool,
    ) -> Result<(), AppError> {
        let admin_user = self.admin(req).await?;
        let tier = queues::parse(queue)?;
        crate::ops::controls::set_queue_paused(&self.state.pool, tier, paused, &admin_user).await?;
        Ok(())
    }

    async fn admin_set_reembed_paused(&self, req: &Parts, paused: bool) -> Result<(), AppError> {
        let admin_user = self.admin(req).await?;
        controls::set_reembed_paused(&self.state.pool, paused, &admin_user).await?;
        Ok(())
    }

    async fn admin_retry_reembeds(&self, req: &Parts) -> Result<i64, AppError> {
        let admin_user = self.admin(req).await?;
        let count = controls::retry_reembeds(&self.state.pool, &admin_user).await?;
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    async fn admin_audit(&self, req: &Parts, query: AuditQuery) -> Result<AuditPage, AppError> {
        self.operator(req).await?;
        let filter = admin::AuditFilter {
            actor: non_empty(&query.actor),
            action: non_empty(&query.action),
            since: crate::ops::controls::parse_since(&query.since)?,
            before: query.before,
            limit: PAGE_SIZE,
        };
        let entries = admin::audit(&self.state.pool, &filter)
            .await
            .map_err(db_err)?;
        let next_before = (entries.len() as i64 == PAGE_SIZE)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        let (actors, actions) = admin::audit_choices(&self.state.pool)
            .await
            .map_err(db_err)?;
        Ok(AuditPage {
            entries,
            next_before,
            actors,
            actions,
        })
    }

    async fn create_batch(&self, req: &Parts, name: &str) -> Result<BatchDto, AppError> {
        let user = self.user(req).await?;
        Ok(crate::batches::create(&self.state.pool, &user, name).await?)
    }

    async fn close_batch(&self, req: &Parts, id: &str) -> Result<BatchDto, AppError> {
        let user = self.user(req).await?;
        let id = Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        Ok(crate::batches::close(&self.state.pool, &user, id).await?)
    }

    async fn batch(&self, req: &Parts, id: &str) -> Result<BatchView, AppError> {
        let user = self.user(req).await?;
        let id = Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        self.batch_view(&user, id).await
    }

    async fn act_on_batch(
        &self,
        req: &Parts,
        id: &str,
        action: &str,
    ) -> Result<BatchView, AppError> {
        let user = self.user(req).await?;
        let id = Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let s = &self.state;
        match action {
            "cancel" => crate::batches::cancel(&s.pool, &s.events, &user, id).await?,
            "retry" => crate::batches::retry(&s.pool, &s.events, &user, id).await?,
            other => {
                return Err(AppError::Validation(format!(
                    "unknown batch action `{other}`: cancel or retry"
                )))
            }
        };
        self.batch_view(&user, id).await
    }

    async fn webhooks(&self, req: &Parts) -> Result<WebhooksView, AppError> {
        let user = self.operator(req).await?;
        Ok(WebhooksView {
            endpoints: crate::webhooks::list(&self.state.pool, &user).await?,
            can_act: user.is_admin(),
        })
    }

    async fn webhook_deliveries(
        &self,
        req: &Parts,
        id: &str,
    ) -> Result<Vec<DeliveryDto>, AppError> {
        let user = self.operator(req).await?;
        let id = Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        Ok(crate::webhooks::deliveries(&self.state.pool, &user, id).await?)
    }

    async fn create_webhook(
        &self,
        req: &Parts,
        url: &str,
        events: Vec<String>,
        description: &str,
    ) -> Result<NewWebhookDto, AppError> {
        let admin = self.admin(req).await?;
        Ok(crate::webhooks::register(
            &self.state.pool,
            crate::webhooks::deliver::Settings::from_config(&self.state.config).policy,
            &admin,
            crate::webhooks::NewEndpoint {
                url,
                events: &events,
                description,
            },
        )
        .await?)
    }

    async fn delete_webhook(&self, req: &Parts, id: &str) -> Result<(), AppError> {
        let admin = self.admin(req).await?;
        let id = Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        Ok(crate::webhooks::delete(&self.state.pool, &admin, id).await?)
    }

    async fn redeliver(&self, req: &Parts, webhook: &str, delivery: &str) -> Result<(), AppError> {
        let admin = self.admin(req).await?;
        let webhook = Uuid::parse_str(webhook).map_err(|_| AppError::NotFound)?;
        let delivery = Uuid::parse_str(delivery).map_err(|_| AppError::NotFound)?;
        Ok(crate::webhooks::redeliver(&self.state.pool, &admin, webhook, delivery).await?)
    }
}
