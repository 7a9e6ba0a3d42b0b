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
    routing::post,
    Json, Router,
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use app::dto::UploadAccepted;

use crate::{
    auth::CurrentUser,
    blob::{self, BlobWriter},
    error::{ApiError, ApiResult},
    jobs::repo,
    state::AppState,
    upload::{self, NewDocument, Sniffer},
};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/documents", post(upload_document))
}

fn accepted(job_id: Uuid, document_id: Uuid, queue: &str, replayed: bool) -> Response {
    let status_url = format!("/api/jobs/{job_id}");
    let body = UploadAccepted {
        job_id: job_id.to_string(),
        document_id: document_id.to_string(),
        state: "pending".into(),
        queue: queue.into(),
        events_url: format!("/api/jobs/{job_id}/events"),
        status_url: status_url.clone(),
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
    let key = v
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= 255)
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

/// Counts every upload by outcome (`accepted`, `replayed` or the error code).
async fn upload_document(
    State(state): State<AppState>,
    user: Result<CurrentUser, ApiError>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
    let result = match user {
        Ok(user) => accept_upload(&state, user, headers, multipart).await,
        Err(e) => Err(e),
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
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
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
    // One count serves the plan's quota (exact, when there is one) and the
    // fair share of the backlog (cached for a second otherwise).
    let mine = match user.max_unfinished_jobs {
        Some(_) => repo::tenant_unfinished(&mut conn, user.tenant_id).await?,
        None => state.tenant_backlog.get(&mut conn, user.tenant_id).await?,
    };
    if let Some(limit) = user.max_unfinished_jobs {
        if mine >= i64::from(limit) {
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

    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => {
                return Err(ApiError::bad_request(
                    "missing_file",
                    "no multipart field named `file` was sent",
                ));
            }
            Err(e) => return Err(multipart_error(e).with_limit(max)),
        };
        if field.name() != Some("file") {
            continue;
        }
        let filename = field
            .file_name()
            .ok_or_else(|| {
                ApiError::bad_request("invalid_filename", "the `file` field needs a filename")
            })?
            .to_string();
        upload::validate_filename(&filename)
            .map_err(|m| ApiError::bad_request("invalid_filename", m))?;
        return receive(state, &user, key.as_deref(), &filename, field).await;
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

/// Streams the file field to the blob store and records it; on any failure
/// the blob is removed, so nothing is left half-written.
async fn receive(
    state: &AppState,
    user: &CurrentUser,
    key: Option<&str>,
    filename: &str,
    mut field: axum::extract::multipart::Field<'_>,
) -> ApiResult<Response> {
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
    let kind = match sniffer.finish(filename) {
        Ok(k) => k,
        Err(m) => return abort(writer, ApiError::UnsupportedMediaType(m)).await,
    };
    // The web process never parses a document: a PDF's pages are counted
    // by the parse step, which hands a long one over to `slow`.
    let pages = upload::count_pages(kind, size);
    writer.finish().await?;

    let tier = upload::pick_tier(user.plan, pages, state.config.slow_pages);
    let sha = hasher.finalize();
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
        let job = upload::insert(&mut tx, &doc).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(job)
    }
    .await;
    match result {
        Ok(Some(event)) => {
            let job_id = event.job_id;
            state.events.send(event);
            tracing::info!(%job_id, %document_id, queue = %tier, size, pages, "upload accepted");
            Ok(accepted(job_id, document_id, tier.as_str(), false))
        }
        Ok(None) => {
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
            if let Err(del) = state.blobs.delete(&blob_key).await {
                tracing::error!(error = format!("{del:#}"), %blob_key, "could not remove the blob of a failed upload");
            }
            Err(e.into())
        }
    }
}

async fn abort(writer: BlobWriter, err: ApiError) -> ApiResult<Response> {
    writer.abort().await;
    Err(err)
}
