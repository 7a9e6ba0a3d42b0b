//! What users and operators do to jobs and documents, shared by the REST
//! API and the pages: cancel, retry, delete a document, the admin's bulk
//! versions by the job list's filter, and pausing, resuming and retrying
//! the re-embedding after a model change. Members act on their tenant's
//! objects (another tenant's are not found); admins on every tenant's.
//! Each action is one transaction with its audit-log row; its events go out
//! after the commit.

use app::dto::MatchingCounts;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{
    identity::auth::CurrentUser,
    jobs::events::JobEvent,
    jobs::{
        machine,
        repo::{self, JobFilter, JobSort},
        JobState, Step, Tier,
    },
    pipeline::events::EventSink,
    platform::blob::BlobStore,
    platform::error::ApiError,
};

/// Jobs one bulk action changes at most; the rest wait for the next click.
pub const BULK_LIMIT: i64 = 10_000;

/// The tenant's words for who acted: users see that an administrator
/// acted, not who (the audit log says who).
fn by_whom(user: &CurrentUser, verb: &str) -> String {
    if user.is_admin() {
        format!("{verb} by an administrator")
    } else {
        format!("{verb} by its uploader")
    }
}

/// Locks a job the caller may act on; not found for another tenant's
/// (members) or an unknown id.
async fn lock_job(
    conn: &mut PgConnection,
    id: Uuid,
    user: &CurrentUser,
) -> Result<JobState, ApiError> {
    let state = sqlx::query_scalar!(
        r#"SELECT state AS "state: JobState" FROM jobs
           WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2) FOR UPDATE"#,
        id,
        user.readable_tenant()
    )
    .fetch_optional(&mut *conn)
    .await?;
    state.ok_or(ApiError::NotFound("job"))
}

/// Marks a retried job's open dead letter re-enqueued (`by`: who retried it).
pub(crate) async fn resolve_dead_letters_of(
    conn: &mut PgConnection,
    job_id: Uuid,
    by: Option<Uuid>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE dead_letters SET resolved_at = now(), resolution = 'requeued', resolved_by = $2
         WHERE job_id = $1 AND resolved_at IS NULL",
        job_id,
        by
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One action on one job, the shape cancel and retry share: lock the job
/// the caller may act on, make the `transition` (its event, or none when
/// the job's state does not allow it: `refused`), write the audit row,
/// commit, and only then send the event.
async fn act_on_job(
    pool: &PgPool,
    events: &EventSink,
    id: Uuid,
    user: &CurrentUser,
    action: &'static str,
    transition: impl AsyncFnOnce(&mut PgConnection, JobState) -> sqlx::Result<Option<JobEvent>>,
    refused: impl FnOnce(JobState) -> ApiError,
) -> Result<(), ApiError> {
    user.require_writer()?;
    let mut tx = pool.begin().await?;
    let state = lock_job(&mut tx, id, user).await?;
    let event = transition(&mut *tx, state)
        .await?
        .ok_or_else(|| refused(state))?;
    user.audit(
        &mut tx,
        action,
        &id.to_string(),
        serde_json::json!({"was": state.as_str()}),
    )
    .await?;
    tx.commit().await?;
    events.send(event);
    tracing::info!(job_id = %id, by = %user.email, action, "job action done");
    Ok(())
}

/// Cancels a `pending`, `retrying` or `processing` job ([`machine::cancel`]);
/// 409 `job_finished` for one that has ended.
pub async fn cancel(
    pool: &PgPool,
    events: &EventSink,
    id: Uuid,
    user: &CurrentUser,
) -> Result<JobState, ApiError> {
    let by = by_whom(user, "cancelled");
    act_on_job(
        pool,
        events,
        id,
        user,
        "job.cancel",
        async |tx, _| machine::cancel(tx, id, &by, Some(user.id)).await,
        |state| ApiError::Refused {
            code: "job_finished",
            message: format!(
                "the job is already {}; only pending, retrying or processing jobs can be cancelled",
                state.as_str()
            ),
        },
    )
    .await?;
    Ok(JobState::Cancelled)
}

/// Retries a job: a `retrying` one now (skipping its wait), a `failed` one
/// from its failed step (its dead letter resolved as re-enqueued). 409
/// `not_retryable` otherwise. Returns the new state.
pub async fn retry(
    pool: &PgPool,
    events: &EventSink,
    id: Uuid,
    user: &CurrentUser,
) -> Result<JobState, ApiError> {
    act_on_job(
        pool,
        events,
        id,
        user,
        "job.retry",
        async |tx, state| match state {
            JobState::Retrying => machine::retry_now(tx, id, &by_whom(user, "retried now")).await,
            JobState::Failed => {
                let requeued = machine::requeue(tx, id, &by_whom(user, "retried")).await?;
                if requeued.is_some() {
                    resolve_dead_letters_of(tx, id, Some(user.id)).await?;
                }
                Ok(requeued.map(|(_, e)| e))
            }
            _ => Ok(None),
        },
        |state| ApiError::Refused {
            code: "not_retryable",
            message: format!(
                "the job is {}; only failed or retrying jobs can be retried",
                state.as_str()
            ),
        },
    )
    .await?;
    Ok(JobState::Pending)
}

/// Deletes a document: an unfinished job of it is cancelled first, then
/// its chunks (and vectors) go, its blobs (the upload and the parsed text)
/// are removed, and the row is marked deleted so its jobs stay as history.
/// Nothing of it is searchable afterwards. Deleting it again is a no-op.
pub async fn delete_document(
    pool: &PgPool,
    blobs: &BlobStore,
    events: &EventSink,
    id: Uuid,
    user: &CurrentUser,
) -> Result<(), ApiError> {
    struct Doc {
        blob_key: String,
        text_blob_key: Option<String>,
        deleted: bool,
    }
    user.require_writer()?;
    let mut tx = pool.begin().await?;
    // The document's unfinished jobs first, then the document: the order a
    // worker's step takes them in (its job's row, then the document's text,
    // chunks or index). The other order deadlocked with a step under way.
    let unfinished = sqlx::query_scalar!(
        "SELECT id FROM jobs WHERE document_id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)
             AND state IN ('pending', 'retrying', 'processing')
         ORDER BY id FOR UPDATE",
        id,
        user.readable_tenant()
    )
    .fetch_all(&mut *tx)
    .await?;
    let doc = sqlx::query_as!(
        Doc,
        r#"SELECT blob_key, text_blob_key, deleted_at IS NOT NULL AS "deleted!" FROM documents
           WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2) FOR UPDATE"#,
        id,
        user.readable_tenant()
    )
    .fetch_optional(&mut *tx)
    .await?;
    let doc = doc.ok_or(ApiError::NotFound("document"))?;
    if doc.deleted {
        return Ok(());
    }
    let mut out = Vec::new();
    for job in unfinished {
        out.extend(
            machine::cancel(
                &mut tx,
                job,
                &by_whom(user, "cancelled (document deleted)"),
                None,
            )
            .await?,
        );
    }
    sqlx::query!("DELETE FROM chunks WHERE document_id = $1", id)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "UPDATE documents SET deleted_at = now(), indexed_at = NULL, text_blob_key = NULL WHERE id = $1",
        id
    )
    .execute(&mut *tx)
    .await?;
    user.audit(
        &mut tx,
        "document.delete",
        &id.to_string(),
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    events.send_all(out);
    // After the commit: a blob left behind by a failed delete is unreachable
    // (the row no longer names it) and logged; nothing can show it.
    // A text file's parsed text may be the upload itself: one blob, deleted once.
    let text = doc.text_blob_key.filter(|k| *k != doc.blob_key);
    for key in std::iter::once(doc.blob_key).chain(text) {
        if let Err(e) = blobs.delete(&key).await {
            tracing::warn!(document_id = %id, key, error = format!("{e:#}"), "blob of a deleted document not removed");
        }
    }
    tracing::info!(document_id = %id, by = %user.email, "document deleted");
    Ok(())
}

/// The admin job list's filter (`state`, `queue`, `tenant`, `q`, `since`,
/// `step`): what the list shows, what a bulk action changes and what its
/// count counts. Parsed in one place for the REST API and the pages:
/// [`Matching::parse`], then [`Matching::within`] and
/// [`Matching::failed_at`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matching {
    pub state: Option<JobState>,
    pub queue: Option<Tier>,
    /// A tenant's slug.
    pub tenant: Option<String>,
    /// Part of the filename, or the start (4 or more hex digits) of a job
    /// or document id.
    pub filename: Option<String>,
    /// Only jobs enqueued within this long before now.
    pub since: Option<std::time::Duration>,
    /// Only jobs that failed at this step at least once.
    pub failed_at: Option<Step>,
    /// The listing's order; bulk actions ignore it.
    pub sort: JobSort,
}

impl Matching {
    /// Blank strings mean "any"; an unknown state or queue is a 400
    /// (`invalid_state`, `invalid_queue`) saying what is known.
    pub fn parse(state: &str, queue: &str, tenant: &str, q: &str) -> Result<Self, ApiError> {
        fn given(s: &str) -> Option<&str> {
            Some(s.trim()).filter(|s| !s.is_empty())
        }
        Ok(Self {
            state: given(state)
                .map(str::parse)
                .transpose()
                .map_err(|m| ApiError::bad_request("invalid_state", m))?,
            queue: given(queue)
                .map(str::parse)
                .transpose()
                .map_err(|m| ApiError::bad_request("invalid_queue", m))?,
            tenant: given(tenant).map(str::to_string),
            filename: given(q).map(str::to_string),
            since: None,
            failed_at: None,
            sort: JobSort::Enqueued,
        })
    }

    /// The same filter, only jobs enqueued within `since` of now (see
    /// [`parse_since`]).
    pub fn within(self, since: &str) -> Result<Self, ApiError> {
        Ok(Self {
            since: parse_since(since)?,
            ..self
        })
    }

    /// The same filter, only jobs that failed at `step` at least once
    /// (`parse`, `chunk`, `embed`, `store`; blank: any); another word is a
    /// 400 `invalid_step`.
    pub fn failed_at(self, step: &str) -> Result<Self, ApiError> {
        let failed_at = match step.trim() {
            "" => None,
            s => Some(
                Step::ALL
                    .into_iter()
                    .find(|st| st.as_str() == s)
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_step",
                            format!("unknown step `{s}`: expected parse, chunk, embed or store"),
                        )
                    })?,
            ),
        };
        Ok(Self { failed_at, ..self })
    }

    /// The same filter, listed by `sort` (`enqueued`, `started`, `finished`;
    /// blank: enqueued); another word is a 400 `invalid_sort`.
    pub fn sorted_by(self, sort: &str) -> Result<Self, ApiError> {
        let sort = JobSort::parse(sort).map_err(|m| ApiError::bad_request("invalid_sort", m))?;
        Ok(Self { sort, ..self })
    }

    /// The list's filter: jobs older than `before`, at most `limit`.
    pub fn filter(&self, before: Option<Uuid>, limit: i64) -> JobFilter {
        JobFilter {
            tenant_id: None,
            tenant_slug: self.tenant.clone(),
            state: self.state,
            queue: self.queue,
            filename: self.filename.clone(),
            since: self.since,
            failed_at: self.failed_at,
            before,
            limit,
            sort: self.sort,
        }
    }
}

/// The longest `since` range: beyond it PostgreSQL's timestamps run out
/// (and no job is older).
pub const MAX_SINCE: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// A time range as the job list writes it: `1h`, `24h`, `7d`, `90m`.
fn short_duration(d: std::time::Duration) -> String {
    match d.as_secs() {
        s if s >= 2 * 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A time range back from now, as the job list and the audit log take it:
/// `1h`, `24h`, `7d`, any positive duration up to [`MAX_SINCE`]; blank: any
/// time. Another word, or a longer range, is a 400 `invalid_since`.
pub fn parse_since(since: &str) -> Result<Option<std::time::Duration>, ApiError> {
    match since.trim() {
        "" => Ok(None),
        s => humantime::parse_duration(s)
            .ok()
            .filter(|d| !d.is_zero() && *d <= MAX_SINCE)
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_since",
                    format!(
                        "unknown time range `{s}`: use a duration such as 1h, 24h or 7d, at most 100 years"
                    ),
                )
            }),
    }
}

/// The states a bulk cancel acts on.
const CANCELLABLE: [JobState; 3] = [JobState::Pending, JobState::Retrying, JobState::Processing];
/// The states a bulk retry acts on.
const RETRYABLE: [JobState; 2] = [JobState::Failed, JobState::Retrying];

/// The ids of jobs matching the filter among `states`, oldest first, at
/// most [`BULK_LIMIT`].
async fn matching_ids(
    conn: &mut PgConnection,
    m: &Matching,
    states: &[JobState],
) -> sqlx::Result<Vec<Uuid>> {
    repo::matching_ids(conn, &m.filter(None, BULK_LIMIT), states).await
}

/// How many jobs a bulk cancel and a bulk retry by this filter would
/// change now (admins): the count a confirmation states.
pub async fn count_matching(
    pool: &PgPool,
    m: &Matching,
    admin: &CurrentUser,
) -> Result<MatchingCounts, ApiError> {
    admin.require_admin()?;
    let mut conn = pool.acquire().await?;
    let states: Vec<JobState> = CANCELLABLE.into_iter().chain(RETRYABLE).collect();
    let by_state = repo::count_by_state(&mut conn, &m.filter(None, BULK_LIMIT), &states).await?;
    let sum = |among: &[JobState]| {
        by_state
            .iter()
            .filter(|c| among.contains(&c.state))
            .map(|c| c.jobs as u64)
            .sum()
    };
    Ok(MatchingCounts {
        cancellable: sum(&CANCELLABLE),
        retryable: sum(&RETRYABLE),
        permanent: by_state.iter().map(|c| c.permanent as u64).sum(),
        limit: BULK_LIMIT as u64,
    })
}

/// Cancels every unfinished job matching the filter (admins); returns how many.
pub async fn cancel_matching(
    pool: &PgPool,
    events: &EventSink,
    m: &Matching,
    admin: &CurrentUser,
) -> Result<u64, ApiError> {
    bulk(
        pool,
        events,
        m,
        admin,
        &CANCELLABLE,
        "job.cancel_matching",
        |tx, id, admin| {
            Box::pin(async move {
                machine::cancel(tx, id, "cancelled by an administrator", Some(admin.id)).await
            })
        },
    )
    .await
}

/// Retries every failed or retrying job matching the filter (admins);
/// returns how many.
pub async fn retry_matching(
    pool: &PgPool,
    events: &EventSink,
    m: &Matching,
    admin: &CurrentUser,
) -> Result<u64, ApiError> {
    bulk(
        pool,
        events,
        m,
        admin,
        &RETRYABLE,
        "job.retry_matching",
        |tx, id, _| {
            Box::pin(async move {
                if let Some(e) =
                    machine::retry_now(&mut *tx, id, "retried now by an administrator").await?
                {
                    return Ok(Some(e));
                }
                let requeued =
                    machine::requeue(&mut *tx, id, "retried by an administrator").await?;
                if requeued.is_some() {
                    resolve_dead_letters_of(&mut *tx, id, None).await?;
                }
                Ok(requeued.map(|(_, e)| e))
            })
        },
    )
    .await
}

type Transition = for<'c> fn(
    &'c mut PgConnection,
    Uuid,
    &'c CurrentUser,
) -> futures::future::BoxFuture<'c, sqlx::Result<Option<JobEvent>>>;

/// One transaction: `transition` for each matching job in `states`, and
/// one audit row naming the filter and the count.
async fn bulk(
    pool: &PgPool,
    events: &EventSink,
    m: &Matching,
    admin: &CurrentUser,
    states: &[JobState],
    action: &str,
    transition: Transition,
) -> Result<u64, ApiError> {
    admin.require_admin()?;
    let mut tx = pool.begin().await?;
    let ids = matching_ids(&mut tx, m, states).await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.extend(transition(&mut tx, id, admin).await?);
    }
    let count = out.len() as u64;
    admin
        .audit(
            &mut tx,
            action,
            "jobs",
            serde_json::json!({
                "state": m.state.map(JobState::as_str), "queue": m.queue.map(|q| q.as_str()),
                "tenant": m.tenant.as_deref(), "q": m.filename.as_deref(),
                "since": m.since.map(short_duration),
                "step": m.failed_at.map(Step::as_str), "count": count,
            }),
        )
        .await?;
    tx.commit().await?;
    events.send_all(out);
    tracing::info!(action, count, by = %admin.email, "bulk job action");
    Ok(count)
}

/// Locks the running re-embedding (see [`crate::pipeline::reembed`]);
/// whether it is paused. 409 `no_reembedding` when none is running.
async fn running_reembed(conn: &mut PgConnection) -> Result<bool, ApiError> {
    sqlx::query_scalar!(
        "SELECT paused FROM reembed_run
         WHERE finished_at IS NULL AND cardinality(from_models) > 0 FOR UPDATE"
    )
    .fetch_optional(conn)
    .await?
    .ok_or_else(|| ApiError::Refused {
        code: "no_reembedding",
        message: "no re-embedding is running: the stored vectors are all of the chosen model"
            .into(),
    })
}

/// Pauses or resumes the re-embedding after a model change (workers
/// finish the document in hand and take no further one); audited. 409
/// `no_reembedding` when none is running.
pub async fn set_reembed_paused(
    pool: &PgPool,
    paused: bool,
    by: &CurrentUser,
) -> Result<(), ApiError> {
    let mut tx = pool.begin().await?;
    let was = running_reembed(&mut tx).await?;
    sqlx::query!("UPDATE reembed_run SET paused = $1", paused)
        .execute(&mut *tx)
        .await?;
    by.audit(
        &mut tx,
        if paused {
            "reembed.pause"
        } else {
            "reembed.resume"
        },
        "reembed",
        serde_json::json!({ "changed": was != paused }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(paused, admin = %by.email, "re-embedding state set");
    Ok(())
}

/// Makes the documents whose re-embedding failed every retry due again
/// (the cause fixed); audited. How many; 409 `no_reembedding` when no
/// re-embedding is running.
pub async fn retry_reembeds(pool: &PgPool, by: &CurrentUser) -> Result<u64, ApiError> {
    let mut tx = pool.begin().await?;
    running_reembed(&mut tx).await?;
    let retried = sqlx::query!(
        "UPDATE reembeds SET state = 'pending', attempts = 0, due_at = now(), finished_at = NULL,
             last_error = NULL
         WHERE state = 'failed'"
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    by.audit(
        &mut tx,
        "reembed.retry",
        "reembed",
        serde_json::json!({ "count": retried }),
    )
    .await?;
    tx.commit().await?;
    Ok(retried)
}

/// Pauses (`paused`) or resumes `tier`, with an audit row either way;
/// returns whether the state changed (pausing a paused queue changes
/// nothing and is no error).
pub async fn set_queue_paused(
    pool: &PgPool,
    tier: Tier,
    paused: bool,
    by: &CurrentUser,
) -> Result<bool, ApiError> {
    let mut tx = pool.begin().await?;
    let changed = if paused {
        sqlx::query!(
            "INSERT INTO paused_queues (queue, paused_by) VALUES ($1, $2) ON CONFLICT (queue) DO NOTHING",
            tier as _,
            by.id
        )
        .execute(&mut *tx)
        .await?
    } else {
        sqlx::query!("DELETE FROM paused_queues WHERE queue = $1", tier as _)
            .execute(&mut *tx)
            .await?
    }
    .rows_affected()
        == 1;
    by.audit(
        &mut tx,
        if paused {
            "queue.pause"
        } else {
            "queue.resume"
        },
        tier.as_str(),
        serde_json::json!({ "changed": changed }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(queue = %tier, paused, changed, admin = %by.email, "queue state set");
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_parses_blanks_as_any_and_keeps_tenant_and_filename() {
        let m = Matching::parse(" pending ", "", "globex", "  ").expect("a valid filter");
        assert_eq!(
            m,
            Matching {
                state: Some(JobState::Pending),
                queue: None,
                tenant: Some("globex".into()),
                filename: None,
                since: None,
                failed_at: None,
                sort: JobSort::Enqueued,
            }
        );
        let f = Matching::parse("", "slow", "", "report")
            .expect("a valid filter")
            .filter(None, 7);
        assert_eq!(f.queue, Some(Tier::Slow));
        assert_eq!(f.filename.as_deref(), Some("report"));
        assert_eq!((f.tenant_id, f.limit), (None, 7));
        assert_eq!(
            Matching::parse("", "", "", "").expect("any"),
            Matching::default()
        );
    }

    #[test]
    fn an_unknown_state_or_queue_is_a_400_that_names_the_known_ones() {
        let e = Matching::parse("stuck", "", "", "").expect_err("unknown state");
        assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_state"));
        assert!(e.to_string().contains("cancelled"), "{e}");
        let e = Matching::parse("", "urgent", "", "").expect_err("unknown queue");
        assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_queue"));
        assert!(e.to_string().contains("high, normal or slow"), "{e}");
    }

    #[test]
    fn a_time_range_and_a_failed_step_reach_the_listing_and_unknown_ones_are_400s() {
        let f = Matching::parse("failed", "", "", "")
            .and_then(|m| m.within(" 24h "))
            .and_then(|m| m.failed_at("embed"))
            .expect("a valid filter")
            .filter(None, 5);
        assert_eq!(f.since, Some(std::time::Duration::from_secs(86_400)));
        assert_eq!(f.failed_at, Some(Step::Embed));
        let f = Matching::default()
            .within("7d")
            .and_then(|m| m.failed_at(""))
            .expect("a valid filter")
            .filter(None, 5);
        assert_eq!(f.since, Some(std::time::Duration::from_secs(7 * 86_400)));
        assert_eq!(f.failed_at, None);
        assert_eq!(Matching::default().within("").expect("blank").since, None);
        for bad in ["yesterday", "0s", "100000000y", "101y"] {
            let e = Matching::default().within(bad).expect_err("not a range");
            assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_since"));
            assert!(e.to_string().contains("24h"), "{e}");
        }
        let short = |s: &str| short_duration(humantime::parse_duration(s).expect("a duration"));
        assert_eq!(
            ["1h", "24h", "7d", "90m", "1day", "45s"].map(short),
            ["1h", "24h", "7d", "90m", "24h", "45s"]
        );
        let e = Matching::default()
            .failed_at("upload")
            .expect_err("unknown");
        assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_step"));
        assert!(
            e.to_string().contains("parse, chunk, embed or store"),
            "{e}"
        );
    }

    #[test]
    fn a_sort_order_reaches_the_listing_and_an_unknown_one_is_a_400() {
        let m = Matching::parse("", "", "", "01a2")
            .expect("a valid filter")
            .sorted_by("finished")
            .expect("a known order");
        assert_eq!(m.filter(None, 5).sort, JobSort::Finished);
        assert_eq!(
            Matching::default().sorted_by("").expect("blank").sort,
            JobSort::Enqueued
        );
        let e = Matching::default().sorted_by("size").expect_err("unknown");
        assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_sort"));
        assert!(
            e.to_string().contains("enqueued, started or finished"),
            "{e}"
        );
    }
}
