//! `ServerBackend`: the UI's server functions reach PostgreSQL through here,
//! with the same checks as the REST handlers.

use std::time::Duration;

use app::{
    backend::Backend,
    dto::{
        AdminJobQuery, AuditPage, DashboardDto, DeadLetterPage, InboxDto, JobDetail, JobDto,
        JobPage, RequeueFailure, RequeueReport, SearchHitDto, SeriesDto, UserDto,
    },
    error::AppError,
};
use axum::http::request::Parts;
use tower_sessions::Session;
use uuid::Uuid;

use crate::{
    admin,
    auth::{self, CurrentUser},
    error::ApiError,
    inbox,
    jobs::repo::{self, JobFilter},
    sampler, search,
    state::AppState,
    stats,
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
}

fn db_err(e: sqlx::Error) -> AppError {
    ApiError::from(e).into()
}

/// Ids from the browser; a malformed one names nothing that exists.
fn parse_uuid(s: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(s.trim()).map_err(|_| AppError::NotFound)
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

impl From<ApiError> for AppError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Unauthorized(_) => AppError::Unauthorized,
            ApiError::Forbidden(_) => AppError::Forbidden,
            ApiError::NotFound(_) => AppError::NotFound,
            ApiError::Conflict(m) => AppError::Conflict(m),
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
        auth::logout(&session(req)?)
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
        Ok(repo::list(&mut conn, &filter)
            .await
            .map_err(ApiError::from)?)
    }

    async fn job(&self, req: &Parts, id: &str) -> Result<JobDto, AppError> {
        let user = self.user(req).await?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| AppError::NotFound)?;
        let tenant = (!user.is_admin()).then_some(user.tenant_id);
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        repo::get(&mut conn, id, tenant)
            .await
            .map_err(ApiError::from)?
            .ok_or(AppError::NotFound)
    }

    async fn job_detail(&self, req: &Parts, id: &str) -> Result<JobDetail, AppError> {
        let job = self.job(req, id).await?;
        let id = parse_uuid(&job.id)?;
        let mut conn = self.state.pool.acquire().await.map_err(db_err)?;
        let events = repo::events(&mut conn, id, TIMELINE_LIMIT)
            .await
            .map_err(db_err)?;
        Ok(JobDetail { job, events })
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
                filename: h.filename,
                chunk_index: h.chunk_index,
                text: h.text,
                score: h.score,
            })
            .collect())
    }

    async fn admin_dashboard(&self, req: &Parts, since_s: u64) -> Result<DashboardDto, AppError> {
        self.admin(req).await?;
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
        self.admin(req).await?;
        let filter = JobFilter {
            tenant_id: None,
            tenant_slug: non_empty(&query.tenant),
            state: non_empty(&query.state)
                .map(|s| s.parse())
                .transpose()
                .map_err(AppError::Validation)?,
            queue: non_empty(&query.queue)
                .map(|s| s.parse())
                .transpose()
                .map_err(AppError::Validation)?,
            filename: non_empty(&query.q),
            before: non_empty(&query.before)
                .map(|b| Uuid::parse_str(&b))
                .transpose()
                .map_err(|_| AppError::Validation("that page cursor is not valid".into()))?,
            limit: PAGE_SIZE,
        };
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
        before: Option<String>,
    ) -> Result<DeadLetterPage, AppError> {
        self.admin(req).await?;
        let before = before
            .as_deref()
            .and_then(non_empty)
            .map(|b| parse_uuid(&b))
            .transpose()?;
        let items = admin::dead_letters(&self.state.pool, PAGE_SIZE, before)
            .await
            .map_err(db_err)?;
        let next_before = (items.len() as i64 == PAGE_SIZE)
            .then(|| items.last().map(|d| d.id.clone()))
            .flatten();
        Ok(DeadLetterPage {
            now: chrono::Utc::now(),
            items,
            next_before,
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
        let mut report = RequeueReport {
            requeued: Vec::new(),
            failed: Vec::new(),
        };
        for id in ids {
            let Ok(uuid) = Uuid::parse_str(&id) else {
                report.failed.push(RequeueFailure {
                    id,
                    message: "no such dead letter".into(),
                });
                continue;
            };
            match admin::requeue(&self.state.pool, &self.state.events, uuid, &admin_user).await {
                Ok(_) => report.requeued.push(id),
                Err(e @ (ApiError::NotFound(_) | ApiError::Conflict(_))) => {
                    report.failed.push(RequeueFailure {
                        id,
                        message: e.to_string(),
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(report)
    }

    async fn admin_discard(&self, req: &Parts, id: &str) -> Result<(), AppError> {
        let admin_user = self.admin(req).await?;
        let id = parse_uuid(id)?;
        Ok(admin::discard(&self.state.pool, id, &admin_user).await?)
    }

    async fn admin_audit(&self, req: &Parts, before: Option<i64>) -> Result<AuditPage, AppError> {
        self.admin(req).await?;
        let entries = admin::audit(&self.state.pool, PAGE_SIZE, before)
            .await
            .map_err(db_err)?;
        let next_before = (entries.len() as i64 == PAGE_SIZE)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        Ok(AuditPage {
            entries,
            next_before,
        })
    }
}
