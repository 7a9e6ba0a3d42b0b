//! The REST API under `/api` and its OpenAPI 3.1 document, built together:
//! each noun's `router()` registers its handlers with `routes!`, which
//! reads their `#[utoipa::path]` (method, path, parameters, bodies,
//! answers), so the document cannot leave out a route the router has, nor
//! describe one it does not. `GET /api/openapi.json` serves it to anyone.
//! Its top-level `webhooks` describe what docflow sends to the endpoints an
//! admin registers ([`Webhooks`]).

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::header,
    response::IntoResponse,
    routing::get,
    Router,
};
use utoipa::{
    openapi::{
        encoding::Encoding,
        header::Header,
        path::{HttpMethod, OperationBuilder, Parameter, ParameterBuilder, ParameterIn, PathItem},
        request_body::RequestBodyBuilder,
        response::{Response, ResponseBuilder},
        schema::{ObjectBuilder, Schema, Type},
        security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
        Content, OpenApi as Document, Ref, RefOr, Required,
    },
    Modify, OpenApi, ToSchema,
};
use utoipa_axum::router::OpenApiRouter;

use super::{admin, auth, batches, documents, events, jobs, search, webhooks};
use crate::{
    platform::error::ErrorBody,
    state::AppState,
    webhooks::{
        deliver::{MAX_DELAY, SNIPPET, TIMEOUT},
        signature::TOLERANCE_SECS,
        EVENTS,
    },
};

/// Where the document is served.
pub const PATH: &str = "/api/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "docflow",
        description = "Upload documents, follow their processing jobs (JSON or server-sent \
                       events), search their text, and administer the queues. Errors answer \
                       `{\"error\":{\"code\",\"message\"}}` (`ErrorBody`)."
    ),
    paths(openapi_json),
    components(schemas(ErrorBody, app::dto::LiveJobEvent, WebhookJobEvent, WebhookBatchEvent)),
    modifiers(&Security),
    tags(
        (name = "auth", description = "Log in and out (session cookie); API clients send a bearer token instead"),
        (name = "documents", description = "Uploads"),
        (name = "jobs", description = "Processing jobs and their live events"),
        (name = "notifications", description = "The caller's inbox"),
        (name = "search", description = "Search the tenant's documents"),
        (name = "admin", description = "Operations: reads for admins and viewers, actions for admins only (members get 403, viewers 403 on actions)"),
        (name = "batches", description = "Folders of uploads handed over as one unit, done when all their jobs have ended"),
        (name = "webhooks", description = "Signed event deliveries to the organisation's endpoints: admins register, viewers read"),
        (name = "meta", description = "This document"),
    )
)]
struct ApiDoc;

/// `components.securitySchemes`: a bearer token or the login session.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer <token>`: an API token"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "docflow_session",
                "The session cookie `POST /api/login` sets (`__Host-docflow_session` over https)",
            ))),
        );
    }
}

/// The REST API's routes, the document's bytes kept for `GET /api/openapi.json`.
/// `max_upload_bytes` is `DOCFLOW_MAX_UPLOAD_BYTES`: the upload route's body
/// limit, and the largest file the document allows.
pub fn api(max_upload_bytes: u64) -> (Router<AppState>, Document) {
    let body_limit =
        usize::try_from(max_upload_bytes + super::MULTIPART_OVERHEAD).unwrap_or(usize::MAX);
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(auth::router())
        .merge(documents::router().layer(DefaultBodyLimit::max(body_limit)))
        .merge(jobs::router())
        .merge(search::router())
        .merge(admin::router())
        .merge(events::router())
        .merge(batches::router())
        .merge(webhooks::router())
        .split_for_parts();
    doc.info.title = "docflow".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    // What `routes!` collected needs these; `ApiDoc`'s own modifiers ran
    // before the routes were merged in.
    Constraints { max_upload_bytes }.modify(&mut doc);
    CommonAnswers.modify(&mut doc);
    Webhooks.modify(&mut doc);
    let json = Bytes::from(serde_json::to_vec(&doc).expect("the OpenAPI document serializes"));
    // `openapi_json` is in `ApiDoc::paths`; it needs the finished document, so
    // it is routed here rather than with `routes!`.
    let served = Router::new()
        .route(PATH, get(openapi_json))
        .with_state(Arc::new(json));
    (router.merge(served), doc)
}

/// The OpenAPI document of the REST API, as `GET /api/openapi.json` serves
/// it under this `DOCFLOW_MAX_UPLOAD_BYTES`.
pub fn document(max_upload_bytes: u64) -> Document {
    api(max_upload_bytes).1
}

/// Constraints that come from configuration or from a list the handler
/// checks, written into the document from the same source so that the two
/// cannot drift: the size of an upload (`DOCFLOW_MAX_UPLOAD_BYTES`) and the
/// names of the dashboard's series (`sampler::SERIES`).
struct Constraints {
    max_upload_bytes: u64,
}

impl Modify for Constraints {
    fn modify(&self, openapi: &mut Document) {
        let max = usize::try_from(self.max_upload_bytes).unwrap_or(usize::MAX);
        let form = openapi
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut("UploadForm"));
        if let Some(RefOr::T(Schema::Object(form))) = form {
            if let Some(RefOr::T(Schema::Object(file))) = form.properties.get_mut("file") {
                file.min_length = Some(1);
                file.max_length = Some(max);
                file.description = Some(format!(
                    "The document (PDF, plain text, Markdown or HTML) with its filename: \
                     1 to {max} bytes (`DOCFLOW_MAX_UPLOAD_BYTES`)"
                ));
            }
        }
        // What the sniffer accepts (by content: the part's own Content-Type is not trusted).
        let upload = openapi
            .paths
            .paths
            .get_mut("/api/documents")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
            .and_then(|body| body.content.get_mut("multipart/form-data"));
        if let Some(upload) = upload {
            let mut file = Encoding::default();
            file.content_type = Some(ACCEPTED_TYPES.into());
            upload.encoding.insert("file".into(), file);
        }
        let series = openapi
            .paths
            .paths
            .get_mut("/api/admin/series")
            .and_then(|item| item.get.as_mut())
            .and_then(|op| op.parameters.as_mut())
            .and_then(|ps| ps.iter_mut().find(|p| p.name == "metric"));
        if let Some(Parameter {
            schema: Some(RefOr::T(Schema::Object(metric))),
            ..
        }) = series
        {
            metric.enum_values = Some(
                crate::ops::sampler::SERIES
                    .iter()
                    .map(|&m| m.into())
                    .collect(),
            );
        }
    }
}

/// The kinds of file an upload may be, as the sniffer tells them apart
/// (`upload::Sniffer`); anything else is a 415.
const ACCEPTED_TYPES: &str =
    "application/pdf, text/plain, text/csv, text/tab-separated-values, text/markdown, text/html, \
     application/vnd.openxmlformats-officedocument.wordprocessingml.document, \
     application/vnd.openxmlformats-officedocument.presentationml.presentation, \
     application/vnd.oasis.opendocument.text, application/vnd.oasis.opendocument.presentation, \
     application/epub+zip, application/vnd.openxmlformats-officedocument.spreadsheetml.sheet, \
     application/vnd.oasis.opendocument.spreadsheet, image/png, image/jpeg, image/tiff, message/rfc822, \
     application/rtf";

/// Answers that every operation of a kind can give, whatever its handler
/// does, added where the handler's annotation left them out:
/// - 401 to every operation that needs a login (the `CurrentUser` extractor);
/// - 403 `cross_origin` to every state-changing one
///   ([`super::hardening::same_origin`] runs before any handler), and 403
///   `forbidden` to every action but the caller's own session and inbox (a
///   viewer's role reads only);
/// - 400 to every operation with query parameters or a body (a value of the
///   wrong type, or a NUL character, which PostgreSQL cannot store);
/// - 503 to every operation but this document's (the session store, the
///   token lookup and the handlers need PostgreSQL);
/// - `Retry-After` on every 429 and 503.
struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, openapi: &mut Document) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                (false, item.get.as_mut()),
                (false, item.head.as_mut()),
                (false, item.options.as_mut()),
                (true, item.post.as_mut()),
                (true, item.put.as_mut()),
                (true, item.patch.as_mut()),
                (true, item.delete.as_mut()),
            ];
            for (unsafe_method, op) in operations {
                let Some(op) = op else { continue };
                let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
                let has_input = op.request_body.is_some()
                    || op.parameters.as_ref().is_some_and(|ps| {
                        ps.iter()
                            .any(|p| matches!(p.parameter_in, ParameterIn::Query))
                    });
                let answers = &mut op.responses.responses;
                if has_input {
                    add_answer(answers, "400", BAD_INPUT, Some("invalid_text"));
                }
                if secured {
                    add_answer(
                        answers,
                        "401",
                        "Not logged in: no session, or an unknown, expired or revoked token",
                        None,
                    );
                }
                if unsafe_method {
                    add_answer(answers, "403", CROSS_ORIGIN, Some("another site"));
                }
                // Every action but a caller's own session and inbox.
                if unsafe_method
                    && secured
                    && path != "/api/logout"
                    && !path.starts_with("/api/notifications")
                {
                    add_answer(answers, "403", READ_ONLY, Some("viewer"));
                }
                if path != PATH {
                    add_answer(
                        answers,
                        "503",
                        "The database is unreachable; see `Retry-After`",
                        None,
                    );
                }
                for status in ["429", "503"] {
                    if let Some(RefOr::T(answer)) = answers.get_mut(status) {
                        answer
                            .headers
                            .entry("Retry-After".into())
                            .or_insert_with(|| {
                                let mut h = Header::new(
                                    ObjectBuilder::new()
                                        .schema_type(Type::Integer)
                                        .minimum(Some(1)),
                                );
                                h.description = Some("Seconds to wait before trying again".into());
                                h
                            });
                    }
                }
            }
        }
    }
}

/// What every action answers a viewer.
const READ_ONLY: &str = "`forbidden`: the caller is a viewer, whose role reads only";
/// What every state-changing operation answers a browser request from another site.
const CROSS_ORIGIN: &str = "`cross_origin`: a browser request from another site";
/// What every operation with input answers a value it cannot take.
const BAD_INPUT: &str = "`invalid_query` or `invalid_body`: a value of the wrong type; \
                         `invalid_text`: a NUL character";

/// Adds the error answer `status` saying `description`; to an answer the
/// handler documents already, adds `description` unless it says `marker`.
fn add_answer(
    answers: &mut BTreeMap<String, RefOr<Response>>,
    status: &str,
    description: &str,
    marker: Option<&str>,
) {
    match answers.get_mut(status) {
        Some(RefOr::T(answer)) => {
            if marker.is_some_and(|m| !answer.description.contains(m)) {
                answer.description = format!("{}; or {description}", answer.description);
            }
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            let answer = ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                )
                .build();
            answers.insert(status.into(), RefOr::T(answer));
        }
    }
}

// The webhook bodies are for the OpenAPI document only: the deliverer
// renders them (`crate::webhooks::deliver::render`). Their doc comments are
// the schemas' descriptions.

/// The body of a `job.done`, `job.failed`, `job.cancelled` or
/// `document.deleted` delivery.
#[derive(ToSchema)]
#[allow(dead_code)]
struct WebhookJobEvent {
    /// The event, as `Docflow-Event-Id` also says: the same on every retry
    /// and redelivery, so a receiver can drop one it has seen.
    id: uuid::Uuid,
    #[serde(rename = "type")]
    #[schema(inline)]
    kind: JobEventType,
    /// When the change happened.
    created_at: chrono::DateTime<chrono::Utc>,
    /// The job as `GET /api/jobs/{id}` answers it, in the state the event
    /// announces; for `document.deleted`, the deleted document's job.
    data: app::dto::JobDto,
}

/// What happened to the job.
#[derive(ToSchema)]
#[allow(dead_code)]
enum JobEventType {
    #[serde(rename = "job.done")]
    Done,
    #[serde(rename = "job.failed")]
    Failed,
    #[serde(rename = "job.cancelled")]
    Cancelled,
    #[serde(rename = "document.deleted")]
    DocumentDeleted,
}

/// The body of a `batch.done` delivery.
#[derive(ToSchema)]
#[allow(dead_code)]
struct WebhookBatchEvent {
    /// The event, as `Docflow-Event-Id` also says: the same on every retry
    /// and redelivery, so a receiver can drop one it has seen.
    id: uuid::Uuid,
    #[serde(rename = "type")]
    #[schema(inline)]
    kind: BatchEventType,
    /// When the last job of the closed batch ended.
    created_at: chrono::DateTime<chrono::Utc>,
    /// The batch as `GET /api/batches/{id}` answers it: `state` `done`, or
    /// `cancelled` when it was cancelled.
    data: app::dto::BatchDto,
}

/// A closed batch's jobs have all ended.
#[derive(ToSchema)]
#[allow(dead_code)]
enum BatchEventType {
    #[serde(rename = "batch.done")]
    Done,
}

/// Top-level `webhooks` (OpenAPI 3.1): for each event an endpoint can
/// subscribe to ([`EVENTS`]), the `POST` docflow sends it, with its body,
/// its headers and what acknowledges it. utoipa's `OpenApi` has no
/// `webhooks` field; its extensions are flattened into the document's top
/// level, so the entry is kept there under its own name.
struct Webhooks;

impl Modify for Webhooks {
    fn modify(&self, openapi: &mut Document) {
        let mut webhooks = serde_json::Map::new();
        for event in EVENTS {
            let (summary, body) = match event {
                "job.done" => ("A job finished: its document is searchable", "WebhookJobEvent"),
                "job.failed" => (
                    "A job failed for good (a permanent error, or its retries ran out): it is in the dead-letter list",
                    "WebhookJobEvent",
                ),
                "job.cancelled" => ("A job was cancelled", "WebhookJobEvent"),
                "batch.done" => (
                    "A closed batch's jobs have all ended (`data.state` `done`, or `cancelled`)",
                    "WebhookBatchEvent",
                ),
                "document.deleted" => (
                    "A document was deleted: `data` is its job, with `document_deleted` true",
                    "WebhookJobEvent",
                ),
                other => unreachable!("webhook event `{other}` has no description"),
            };
            let operation = OperationBuilder::new()
                .tag("webhooks")
                .operation_id(Some(event.replace('.', "_")))
                .summary(Some(summary))
                .description(Some(DELIVERY))
                .parameter(header_param(
                    "Docflow-Event-Id",
                    "The body's `id`: the same on every retry and redelivery",
                ))
                .parameter(header_param(
                    "Docflow-Event-Type",
                    &format!("The body's `type`: `{event}`"),
                ))
                .parameter(header_param("Docflow-Signature", &signature_rule()))
                .request_body(Some(
                    RequestBodyBuilder::new()
                        .required(Some(Required::True))
                        .content(
                            "application/json",
                            Content::new(Some(Ref::from_schema_name(body))),
                        )
                        .build(),
                ))
                .response(
                    "2XX",
                    ResponseBuilder::new().description(format!(
                        "Any 2xx acknowledges the delivery; the first {SNIPPET} bytes of the \
                         answer show in the endpoint's deliveries"
                    )),
                )
                .response(
                    "default",
                    ResponseBuilder::new().description(format!(
                        "Anything else, a redirect (not followed), or no answer within {} s: \
                         retried after a delay of `DOCFLOW_WEBHOOK_BACKOFF` (10 s by default), \
                         doubling, jittered, up to {} s, until `DOCFLOW_WEBHOOK_RETRY_FOR` (a day \
                         by default) has passed; an endpoint failing that long is disabled",
                        TIMEOUT.as_secs(),
                        MAX_DELAY.as_secs()
                    )),
                )
                .build();
            let item = serde_json::to_value(PathItem::new(HttpMethod::Post, operation))
                .expect("a webhook's path item serializes");
            webhooks.insert(event.to_string(), item);
        }
        openapi
            .extensions
            .get_or_insert_with(Default::default)
            .insert("webhooks".into(), webhooks.into());
    }
}

/// What every webhook operation says of a delivery.
const DELIVERY: &str = "docflow `POST`s this to every enabled endpoint of the organisation \
                        that subscribes to the event (`POST /api/webhooks`), at least once: a \
                        receiver drops a `Docflow-Event-Id` it has seen. Verify \
                        `Docflow-Signature` over the raw body before parsing it.";

/// The rule `Docflow-Signature` follows ([`crate::webhooks::signature`]).
fn signature_rule() -> String {
    format!(
        "`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, \"<t>.<raw body>\")>`, keyed by the \
         endpoint's `secret` (its UTF-8 bytes, `whsec_` included). A receiver recomputes the \
         HMAC over the raw body, compares in constant time (`signature_mismatch` when no `v1` \
         matches), refuses a `t` more than {TOLERANCE_SECS} s from its own clock \
         (`signature_expired`: a replay) and a header without `t` or `v1` \
         (`signature_malformed`)"
    )
}

/// A required string header of a webhook delivery.
fn header_param(name: &str, description: &str) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(Required::True)
        .description(Some(description))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "This document, generated from the handlers",
         content_type = "application/json", body = Object),
    )
)]
async fn openapi_json(State(json): State<Arc<Bytes>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::clone(&json),
    )
}
