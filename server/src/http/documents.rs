//! `POST /api/documents`: stream the file to the blob store, hashing and
//! sniffing it on the way, then write document + job + outbox row in one
//! transaction and answer 202. RabbitMQ is never touched here.

use axum::{
    extract::{
        multipart::{MultipartError, MultipartRejection},
        Multipart, State,
    },
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use app::dto::{DuplicateDto, UploadAccepted};

use crate::{
    identity::auth::CurrentUser,
    jobs::repo,
    platform::blob::{self, BlobWriter},
    platform::db::Plan,
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    state::AppState,
    upload::{self, NewDocument, Sniffer},
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(upload_document))
        .routes(routes!(delete_document))
}

/// Deletes a document: a job still running is cancelled first; its blob,
/// parsed text, chunks and vectors are removed; its jobs stay as history
/// (`"document_deleted": true`). Nothing of it is searchable afterwards.
#[utoipa::path(
    delete,
    path = "/api/documents/{id}",
    tag = "documents",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The document id")),
    responses(
        (status = 204, description = "Deleted (or already deleted)"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 404, description = "No such document (or another tenant's, for a member)", body = ErrorBody),
    )
)]
async fn delete_document(
    State(state): State<AppState>,
    user: CurrentUser,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<StatusCode> {
    let id = crate::http::jobs::parse_id(&id, "document")?;
    crate::ops::controls::delete_document(&state.pool, &state.blobs, &state.events, id, &user)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// For the OpenAPI document only; the doc comment is the schema's description.
/// The multipart form of an upload.
#[derive(ToSchema)]
#[allow(dead_code)]
struct UploadForm {
    /// The open batch the document joins (`POST /api/batches`), before or
    /// after `file`.
    batch_id: Option<uuid::Uuid>,
    /// The document: PDF, plain text, Markdown or HTML, with its filename.
    #[schema(format = Binary, content_media_type = "application/octet-stream")]
    file: String,
}

/// What to do with a file the tenant uploaded before (same SHA-256).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum Duplicates {
    /// Keep the new copy and name the earlier one in `duplicate_of`.
    #[default]
    Allow,
    /// Keep nothing: 409 `duplicate`, whose message says when and as what
    /// the file was uploaded.
    Refuse,
}

#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UploadParams {
    /// `allow` (default) or `refuse` a file the tenant uploaded before.
    #[serde(default)]
    #[param(inline)]
    duplicates: Duplicates,
    /// The open batch the document joins (or send it as the multipart
    /// field `batch_id`).
    batch_id: Option<String>,
}

fn accepted(job_id: Uuid, document_id: Uuid, queue: &str, replayed: bool) -> Response {
    accepted_with(job_id, document_id, queue, replayed, None)
}

fn accepted_with(
    job_id: Uuid,
    document_id: Uuid,
    queue: &str,
    replayed: bool,
    duplicate_of: Option<DuplicateDto>,
) -> Response {
    let status_url = format!("/api/jobs/{job_id}");
    let body = UploadAccepted {
        job_id: job_id.to_string(),
        document_id: document_id.to_string(),
        state: "pending".into(),
        queue: queue.into(),
        events_url: format!("/api/jobs/{job_id}/events"),
        status_url: status_url.clone(),
        duplicate_of,
    };
    let mut resp = (StatusCode::ACCEPTED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&status_url) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    if replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    resp
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    // Exactly what the OpenAPI document's pattern `^[!-~]{1,255}$` allows.
    let visible =
        |k: &&[u8]| (1..=255).contains(&k.len()) && k.iter().all(|b| (b'!'..=b'~').contains(b));
    let key = Some(v.as_bytes())
        .filter(visible)
        .and_then(|k| std::str::from_utf8(k).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            )
        })?;
    Ok(Some(key.to_string()))
}

fn multipart_error(e: MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        // The body limit tripped inside the multipart stream.
        return ApiError::PayloadTooLarge(0);
    }
    ApiError::bad_request(
        "malformed_multipart",
        format!("the multipart body could not be read: {}", e.body_text()),
    )
}

/// Uploads a document and queues its processing job. Counts every upload
/// by outcome (`accepted`, `replayed` or the error code).
#[utoipa::path(
    post,
    path = "/api/documents",
    tag = "documents",
    security(("bearer" = []), ("session" = [])),
    params(
        UploadParams,
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
         description = "1 to 255 visible ASCII characters (no spaces): a retry with the same \
                        key answers the first upload's job instead of making another"),
    ),
    request_body(content = UploadForm, content_type = "multipart/form-data",
                 description = "One field named `file`"),
    responses(
        (status = 202, description = "Stored; the job is pending", body = UploadAccepted,
         headers(
            ("Location" = String, description = "The job: `/api/jobs/{id}`"),
            ("Idempotent-Replayed" = String, description = "`true` when the key was seen before"),
         )),
        (status = 400, description = "Malformed multipart, no `file` field, a bad filename or key, or an empty file", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "A browser request from another site", body = ErrorBody),
        (status = 404, description = "`batch_id` names no batch of the organisation", body = ErrorBody),
        (status = 409, description = "`duplicates=refuse` and the tenant uploaded this file before (`duplicate`), or the batch is closed (`batch_closed`) or full (`batch_full`)", body = ErrorBody),
        (status = 413, description = "Larger than `DOCFLOW_MAX_UPLOAD_BYTES`", body = ErrorBody),
        (status = 415, description = "Not a PDF, text (including CSV and TSV), Markdown or HTML file", body = ErrorBody),
        (status = 429, description = "The plan's quota or the tenant's share of the queue is used up; see `Retry-After`", body = ErrorBody),
        (status = 503, description = "The backlog is full or the database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn upload_document(
    State(state): State<AppState>,
    user: Result<CurrentUser, ApiError>,
    params: Result<Query<UploadParams>, ApiError>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
    let result = match (user, params) {
        (Ok(user), Ok(Query(params))) => {
            accept_upload(&state, user, params, headers, multipart).await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let outcome = match &result {
        Ok(r) if r.headers().contains_key("idempotent-replayed") => "replayed",
        Ok(_) => "accepted",
        Err(e) => e.code(),
    };
    state
        .metrics
        .uploads_total
        .with_label_values(&[outcome])
        .inc();
    result
}

async fn accept_upload(
    state: &AppState,
    user: CurrentUser,
    params: UploadParams,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
    user.require_writer()?;
    let duplicates = params.duplicates;
    let mut batch = params.batch_id.as_deref().map(parse_batch).transpose()?;
    let max = state.config.max_upload_bytes;
    let key = idempotency_key(&headers)?;
    let mut conn = state.pool.acquire().await?;
    if let Some(key) = &key {
        if let Some((job_id, doc_id, queue, _)) =
            upload::job_by_idempotency_key(&mut conn, user.tenant_id, key).await?
        {
            return Ok(accepted(job_id, doc_id, &queue, true));
        }
    }
    let unfinished = state.backlog.get(&mut conn).await?;
    if unfinished >= state.config.max_backlog {
        return Err(ApiError::Unavailable {
            message: format!("{unfinished} documents are waiting to be processed; uploads resume when the backlog drains"),
            retry_after: std::time::Duration::from_secs(30),
        });
    }
    // The tenant's own limit, else its plan's.
    let quota = user.max_unfinished_jobs.map(i64::from).or(match user.plan {
        Plan::Free => state.config.free_max_unfinished,
        Plan::Paid => state.config.paid_max_unfinished,
    }
    .map(i64::from));
    // One count serves the quota (exact, when there is one) and the fair
    // share of the backlog (cached for a second otherwise).
    let mine = match quota {
        Some(_) => repo::tenant_unfinished(&mut conn, user.tenant_id).await?,
        None => state.tenant_backlog.get(&mut conn, user.tenant_id).await?,
    };
    if let Some(limit) = quota {
        if mine >= limit {
            return Err(ApiError::TooManyRequests {
                message: format!("your plan allows {limit} documents in processing at once; wait for some to finish"),
                retry_after: std::time::Duration::from_secs(10),
            });
        }
    }
    // Fair shares: one tenant may not fill the whole backlog.
    let share = state.config.max_backlog * i64::from(state.config.tenant_share) / 100;
    if mine >= share.max(1) {
        return Err(ApiError::TooManyRequests {
            message: format!("your organisation has {mine} documents waiting, its share of the queue; uploads resume as they finish"),
            retry_after: std::time::Duration::from_secs(30),
        });
    }
    drop(conn);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max + 64 * 1024) {
        return Err(ApiError::PayloadTooLarge(max));
    }
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(
            "invalid_content_type",
            format!("send the file as multipart/form-data in a field named `file`: {e}"),
        )
    })?;

    // The file is streamed to the blob store as it comes; a `batch_id` may
    // come before it (then a closed or unknown batch is refused before the
    // file is read) or after it (as some generated clients order fields).
    let mut stored: Option<Stored> = None;
    let outcome = async {
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| multipart_error(e).with_limit(max))?
        {
            match field.name() {
                Some("batch_id") => batch = Some(parse_batch(&small_text(field).await?)?),
                Some("file") if stored.is_none() => {
                    if let Some(batch) = batch {
                        let mut tx = state.pool.begin().await?;
                        crate::batches::admit(&mut tx, user.tenant_id, batch).await?;
                        tx.rollback().await?;
                    }
                    let filename = field
                        .file_name()
                        .ok_or_else(|| {
                            ApiError::bad_request(
                                "invalid_filename",
                                "the `file` field needs a filename",
                            )
                        })?
                        .to_string();
                    upload::validate_filename(&filename)
                        .map_err(|m| ApiError::bad_request("invalid_filename", m))?;
                    stored = Some(stream(state, filename, field).await?);
                }
                _ => {}
            }
        }
        Ok::<_, ApiError>(())
    }
    .await;
    match (outcome, stored) {
        (Ok(()), Some(stored)) => {
            record(state, &user, key.as_deref(), duplicates, batch, stored).await
        }
        (Ok(()), None) => Err(ApiError::bad_request(
            "missing_file",
            "no multipart field named `file` was sent",
        )),
        (Err(e), stored) => {
            if let Some(stored) = stored {
                discard(state, &stored.blob_key).await;
            }
            Err(e)
        }
    }
}

impl ApiError {
    fn with_limit(self, max: u64) -> ApiError {
        match self {
            ApiError::PayloadTooLarge(_) => ApiError::PayloadTooLarge(max),
            other => other,
        }
    }
}

/// An uploaded file in the blob store, not recorded yet.
struct Stored {
    document_id: Uuid,
    blob_key: String,
    filename: String,
    kind: crate::parser::Kind,
    size: u64,
    pages: u32,
    sha: [u8; 32],
}

/// Streams the file field to the blob store, hashing and sniffing it; on
/// any failure the blob is removed, so nothing is left half-written.
async fn stream(
    state: &AppState,
    filename: String,
    mut field: axum::extract::multipart::Field<'_>,
) -> ApiResult<Stored> {
    let max = state.config.max_upload_bytes;
    let document_id = Uuid::now_v7();
    let blob_key = blob::original_key(document_id);
    let mut writer = state.blobs.writer(&blob_key).await?;
    let mut hasher = Sha256::new();
    let mut sniffer = Sniffer::new();
    let mut size: u64 = 0;
    loop {
        let chunk = match field.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return abort(writer, multipart_error(e).with_limit(max)).await,
        };
        size += chunk.len() as u64;
        if size > max {
            return abort(writer, ApiError::PayloadTooLarge(max)).await;
        }
        hasher.update(&chunk);
        sniffer.feed(&chunk);
        if let Err(e) = writer.write(&chunk).await {
            return abort(writer, e.into()).await;
        }
    }
    if size == 0 {
        return abort(
            writer,
            ApiError::bad_request("empty_file", "the file is empty"),
        )
        .await;
    }
    let kind = match sniffer.finish(&filename) {
        Ok(k) => k,
        Err(m) => return abort(writer, ApiError::UnsupportedMediaType(m)).await,
    };
    // The web process never parses a document: a PDF's pages are counted
    // by the parse step, which hands a long one over to `slow`.
    let pages = upload::count_pages(kind, size);
    writer.finish().await?;
    Ok(Stored {
        document_id,
        blob_key,
        filename,
        kind,
        size,
        pages,
        sha: hasher.finalize().into(),
    })
}

/// Removes the blob of an upload that is not recorded.
async fn discard(state: &AppState, blob_key: &str) {
    if let Err(e) = state.blobs.delete(blob_key).await {
        tracing::error!(error = format!("{e:#}"), %blob_key, "could not remove the blob of a failed upload");
    }
}

/// Records a stored file: document, job and outbox row in one transaction
/// (in `batch` when given); on any failure the blob is removed.
async fn record(
    state: &AppState,
    user: &CurrentUser,
    key: Option<&str>,
    duplicates: Duplicates,
    batch: Option<Uuid>,
    stored: Stored,
) -> ApiResult<Response> {
    let Stored {
        document_id,
        blob_key,
        filename,
        kind,
        size,
        pages,
        sha,
    } = stored;
    let filename = filename.as_str();
    let tier = upload::pick_tier(user.plan, pages, state.config.slow_pages);
    let doc = NewDocument {
        id: document_id,
        tenant_id: user.tenant_id,
        user_id: user.id,
        filename,
        kind,
        size: size as i64,
        sha256: &sha,
        pages,
        blob_key: &blob_key,
        idempotency_key: key,
        tier,
    };
    let result = async {
        let mut tx = state.pool.begin().await?;
        if let Some(batch) = batch {
            crate::batches::admit(&mut tx, user.tenant_id, batch).await?;
        }
        let earlier = upload::latest_copy(&mut tx, user.tenant_id, &sha).await?;
        if duplicates == Duplicates::Refuse {
            if let Some(earlier) = earlier {
                return Ok(Err(earlier));
            }
        }
        let job = upload::insert(&mut tx, &doc).await?;
        if let (Some(batch), Some(event)) = (batch, &job) {
            crate::jobs::machine::join_batch(&mut tx, event.job_id, batch).await?;
        }
        tx.commit().await?;
        Ok::<_, ApiError>(Ok((job, earlier)))
    }
    .await;
    match result {
        Ok(Err(earlier)) => {
            state.blobs.delete(&blob_key).await?;
            let day = earlier
                .uploaded_at
                .get(..10)
                .unwrap_or(&earlier.uploaded_at);
            Err(ApiError::Refused {
                code: "duplicate",
                message: format!(
                    "you uploaded this file on {day} as {}; upload it with duplicates=allow to keep a second copy",
                    earlier.filename
                ),
            })
        }
        Ok(Ok((Some(event), earlier))) => {
            let job_id = event.job_id;
            state.events.send(event);
            tracing::info!(%job_id, %document_id, queue = %tier, size, pages, duplicate = earlier.is_some(), "upload accepted");
            Ok(accepted_with(
                job_id,
                document_id,
                tier.as_str(),
                false,
                earlier,
            ))
        }
        Ok(Ok((None, _))) => {
            // Another request with the same key won the race: answer as it did.
            state.blobs.delete(&blob_key).await?;
            let mut conn = state.pool.acquire().await?;
            let key = key.unwrap_or_default();
            let (job_id, doc_id, queue, _) =
                upload::job_by_idempotency_key(&mut conn, user.tenant_id, key)
                    .await?
                    .ok_or_else(|| {
                        anyhow::anyhow!("idempotency key {key} conflicted but has no job")
                    })?;
            Ok(accepted(job_id, doc_id, &queue, true))
        }
        Err(e) => {
            discard(state, &blob_key).await;
            Err(e)
        }
    }
}

/// A batch id from the query or the form; a malformed one names no batch.
fn parse_batch(s: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(s.trim()).map_err(|_| ApiError::NotFound("batch"))
}

/// A short text field (an id), read without buffering more than 100 bytes.
async fn small_text(mut field: axum::extract::multipart::Field<'_>) -> ApiResult<String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > 100 {
            return Err(ApiError::bad_request(
                "invalid_batch_id",
                "`batch_id` is a batch's id, not more than 100 bytes",
            ));
        }
    }
    String::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("invalid_batch_id", "`batch_id` is not text"))
}

async fn abort<T>(writer: BlobWriter, err: ApiError) -> ApiResult<T> {
    writer.abort().await;
    Err(err)
}
